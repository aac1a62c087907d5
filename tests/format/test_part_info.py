"""Part names: parsing, printing, ordering, containment and merged names, checked against chdb."""

from __future__ import annotations

import re

import pytest

from spark_mergetree.errors import FormatError, InvalidOptionError
from spark_mergetree.format.part_info import PartInfo
from tests.format.chdb_util import SPEC_DIR, active_part_dirs, make_chdb_table, part_dirs


def _spec_rows():
    text = (SPEC_DIR / "part_names.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
    assert len(rows) >= 5
    return rows


@pytest.mark.parametrize("row", _spec_rows())
def test_spec_examples(row):
    name, partition, *numbers = row
    info = PartInfo.parse(name)
    assert info == PartInfo(partition, *map(int, numbers))
    assert info.name == name == str(info)


@pytest.mark.parametrize("name", ["all_1_1", "all_2_1_0", "all_a_1_0", "all_1_1_-1", "_1_1_0", "a_b_1_1_0", "", "all_1_1_0_", "all_1_1_0_1_2", "al l_1_1_0", "all_99999999999999999999_1_0"])
def test_bad_names(name):
    with pytest.raises(FormatError, match="part name"):
        PartInfo.parse(name)


def test_bad_fields():
    with pytest.raises(InvalidOptionError, match="min_block"):
        PartInfo("all", 3, 2, 0)
    with pytest.raises(InvalidOptionError, match="partition id"):
        PartInfo("a_b", 1, 1, 0)
    with pytest.raises(InvalidOptionError, match="level"):
        PartInfo("all", 1, 1, -1)


def test_relations():
    merged = PartInfo.parse("all_1_3_1")
    first, second, third = (PartInfo.parse(f"all_{n}_{n}_0") for n in (1, 2, 3))
    assert merged.contains(first) and merged.contains(third) and merged.contains(merged)
    assert not first.contains(merged)
    assert not PartInfo.parse("all_1_3_0").contains(PartInfo.parse("all_2_2_1"))
    assert not PartInfo.parse("p1_1_3_1").contains(PartInfo.parse("p2_2_2_0"))
    assert PartInfo.parse("all_1_3_1_5").contains(PartInfo.parse("all_2_2_0_4"))
    assert not PartInfo.parse("all_1_3_1_3").contains(PartInfo.parse("all_2_2_0_4"))
    assert first.is_disjoint(second) and not merged.is_disjoint(second)
    assert PartInfo.parse("p1_1_3_1").is_disjoint(PartInfo.parse("p2_2_2_0"))
    assert sorted([third, merged, second, first]) == [first, merged, second, third]
    assert PartInfo.merged([third, first, second]) == merged
    assert PartInfo.merged([PartInfo.parse("all_1_3_1"), PartInfo.parse("all_4_4_0_7")]).name == "all_1_4_2_7"
    with pytest.raises(InvalidOptionError, match="different partitions"):
        PartInfo.merged([PartInfo.parse("a_1_1_0"), PartInfo.parse("b_2_2_0")])
    with pytest.raises(InvalidOptionError, match="overlapping"):
        PartInfo.merged([merged, second])
    with pytest.raises(InvalidOptionError, match="empty"):
        PartInfo.merged([])


def test_names_clickhouse_writes(tmp_path):
    session, table_dir = make_chdb_table(
        tmp_path,
        "CREATE TABLE t (d Date, x Int32, s String) ENGINE = MergeTree PARTITION BY (toYYYYMM(d), x) ORDER BY d",
        [
            "INSERT INTO t VALUES ('2024-01-15', -5, 'a')",
            "INSERT INTO t VALUES ('2024-01-20', -5, 'b')",
            "INSERT INTO t VALUES ('2024-02-01', 3, 'c')",
        ],
    )
    names = [path.name for path in part_dirs(table_dir)]
    infos = [PartInfo.parse(name) for name in names]
    assert [info.name for info in infos] == names
    assert {info.partition_id for info in infos} == {"202401--5", "202402-3"}
    session.query("OPTIMIZE TABLE t PARTITION ID '202401--5' FINAL")
    active = {PartInfo.parse(path.name) for path in active_part_dirs(session, "t")}
    january = sorted(info for info in infos if info.partition_id == "202401--5")
    assert PartInfo.merged(january) in active
    assert all(any(part.contains(info) for part in active) for info in infos)

    session, table_dir = make_chdb_table(
        tmp_path,
        "CREATE TABLE h (s String, v UInt8) ENGINE = MergeTree PARTITION BY s ORDER BY tuple()",
        ["INSERT INTO h VALUES ('x', 1)"],
    )
    (hashed,) = [PartInfo.parse(path.name) for path in part_dirs(table_dir)]
    assert re.fullmatch(r"[0-9a-f]{32}", hashed.partition_id)
    session.query("ALTER TABLE h UPDATE v = 2 WHERE 1 SETTINGS mutations_sync = 1")
    (mutated,) = [PartInfo.parse(path.name) for path in active_part_dirs(session, "h")]
    assert mutated.mutation > 0 and mutated.contains(hashed) and mutated.name.endswith(f"_{mutated.mutation}")
