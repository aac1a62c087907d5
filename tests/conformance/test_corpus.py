"""The conformance corpus both ways (see tests/conformance/corpus.py for the tables).

(a) for every case, MergeTreeTable reads the part directories chdb wrote and returns exactly what
    ClickHouse's SELECT returns (ordered by the key);
(b) we write the same rows into a table of the same definition (the statement ClickHouse shows),
    ClickHouse ATTACHes our parts, CHECK TABLE returns 1, the parts are of the kind the table's
    settings choose (Wide or Compact) and SELECT returns what we wrote. In partitioned cases the
    parts ClickHouse attaches include one our merge made of the two inserts' rows.
Types we refuse raise UnsupportedError both ways; Variant, Dynamic and JSON (both ways, merges too;
inside Array, Map keys and values, Tuple and, for JSON, Variant) are covered by
tests/format/test_variant_dynamic_json.py.
"""

from __future__ import annotations

import math
import shutil

import pyarrow as pa
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.engine.merge import merge_parts
from spark_mergetree.errors import UnsupportedError
from spark_mergetree.expressions.ddl import parse_create
from spark_mergetree.format.checksums import Checksums
from spark_mergetree.format.part_info import PartInfo
from tests.budget import exhaustive
from tests.conformance import corpus
from tests.format.chdb_util import close_session
from tests.format.test_modern_types import _days
from tests.format.test_part_interop import _normalized_rows

# Every feature, both ways; the default run takes two of each feature's four part kind ×
# partitioning combinations (a fixed pair, rotating between features, so every combination is
# covered by many features); `pytest --exhaustive` takes all four.
CASES = [case for position, case in enumerate(corpus.cases()) if exhaustive() or (position // 4 + position) % 2 == 0]
REFUSED_CASES = corpus.cases(corpus.REFUSED)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    yield corpus.generate(root, CASES + REFUSED_CASES)
    close_session()


def _ours(made: corpus.Corpus, case: corpus.Case) -> tuple[MergeTreeTable, pa.Table]:
    table = made.made[case.id]
    opened = MergeTreeTable.open(table.data_dir, create_statement=table.statement)
    return opened, opened.to_arrow().sort_by("id")


def _as_clickhouse_exports(table: pa.Table, case: corpus.Case, types: dict[str, str]) -> list[dict]:
    """Our rows in the form `case.select_sql()` gives them."""
    states = case.state_columns
    table = table.select([n for n in table.column_names if n not in states] + states)
    rows = _normalized_rows(_days(table), types)
    return _comparable([{k: v.hex().upper() if k in states else v for k, v in row.items()} for row in rows])


def _comparable(value):
    """Rows with NaNs replaced by a marker, so that equal tables compare equal."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def _selected(table: pa.Table) -> list[dict]:
    return _comparable(_days(table).to_pylist())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_we_read_what_clickhouse_selects(made, case):
    table = made.made[case.id]
    assert table.part_types == [case.kind]
    _, ours = _ours(made, case)
    assert ours.column_names == [name for name, _ in table.types.items()]
    assert _as_clickhouse_exports(ours, case, table.types) == _selected(table.expected)


@pytest.mark.parametrize("case", [c for c in CASES if c.feature == "packed"], ids=lambda c: c.id)
def test_packed_parts_are_read_and_checked(made, case, tmp_path):
    """Packed part storage: every part chdb made is one `data.packed`; we read it (above) and CHECK
    finds every file inside it intact."""
    table = made.made[case.id]
    assert all(sorted(p.name for p in part.iterdir()) == ["data.packed"] for part in table.parts)
    copy = tmp_path / "copy"
    shutil.copytree(table.data_dir, copy)
    opened = MergeTreeTable.open(copy, create_statement=table.statement)
    report = opened.check()
    assert report.ok and report.parts_checked == len(table.parts), report


@pytest.mark.parametrize("case", [c for c in CASES if c.feature == "projection"], ids=lambda c: c.id)
def test_parts_with_projections_are_checked_and_merged(made, case, tmp_path):
    """Parts with projections: we read their base columns (above); CHECK covers the `<name>.proj`
    directories; a merge builds the projections (normal, aggregate of sums and of uniq, quantile and
    argMax states, offsets) again, and ClickHouse checks
    the merged part and answers from its projections what it answers from its own parts."""
    table = made.made[case.id]
    assert all({"by_k.proj", "ordered.proj"} <= {p.name for p in part.iterdir()} for part in table.parts)
    copy = tmp_path / "copy"
    shutil.copytree(table.data_dir, copy)
    damaged_copy = tmp_path / "damaged"
    shutil.copytree(table.data_dir, damaged_copy)
    opened = MergeTreeTable.open(copy, create_statement=table.statement)
    report = opened.check()
    assert report.ok and report.parts_checked == len(table.parts), report
    victim = damaged_copy / table.parts[0].name / "ordered.proj" / ("k.bin" if case.kind == "Wide" else "data.bin")
    victim.write_bytes(victim.read_bytes()[:-1] + bytes([victim.read_bytes()[-1] ^ 1]))
    damaged = MergeTreeTable.open(damaged_copy, create_statement=table.statement).check()
    assert not damaged.ok and f"ordered.proj/{victim.name}" in str(damaged)
    first = PartInfo.parse(table.parts[0].name).partition_id
    readers = [opened.reader(p.name) for p in table.parts if PartInfo.parse(p.name).partition_id == first]
    files = merge_parts(readers, opened.metadata)
    assert {"by_k.proj", "ordered.proj"} <= set(Checksums.parse(files.files["checksums.txt"]).files)
    infos = [PartInfo.parse(r.part) for r in readers]
    name = f"{first}_{min(i.min_block for i in infos)}_{max(i.max_block for i in infos)}_{max(i.level for i in infos) + 1}"
    sess = made.session
    target = f"merged_{case.table}"
    sess.query(case.create_sql(target))
    part_dir = corpus.data_dir_of(sess, target) / "detached" / name
    for file_name, data in files.files.items():
        (part_dir / file_name).parent.mkdir(parents=True, exist_ok=True)
        (part_dir / file_name).write_bytes(bytes(data))
    sess.query(f"ALTER TABLE {target} ATTACH PART '{name}'")
    for part in table.parts:  # the other partitions' parts, as ClickHouse wrote them
        if PartInfo.parse(part.name).partition_id != first:
            shutil.copytree(part, part_dir.parent / part.name)
            sess.query(f"ALTER TABLE {target} ATTACH PART '{part.name}'")
    check = corpus.query_text(sess, f"CHECK TABLE {target} SETTINGS check_query_single_value_result = 1").split()
    assert check == ["1"]
    for query in ("SELECT k, round(sum(v), 6) FROM {} GROUP BY k ORDER BY k",
                  "SELECT k % 4, uniq(v), uniqExact(k), quantile(0.5)(v), countIf(v > 10), argMax(id, v) FROM {} "
                  "GROUP BY k % 4 ORDER BY k % 4"):
        query += " SETTINGS force_optimize_projection = 1"
        assert corpus.query_text(sess, query.format(target)) == corpus.query_text(sess, query.format(case.table))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_clickhouse_attaches_what_we_write(made, case, tmp_path):
    table = made.made[case.id]
    _, rows = _ours(made, case)
    definition = parse_create(table.statement)
    ours = MergeTreeTable.new(tmp_path / "ours", definition, {"auto_merge": False})
    ours.write_directory()
    half = rows.num_rows // 2
    ours.insert(rows.slice(0, half))
    ours.insert(rows.slice(half))
    if case.partitioned:
        # Partition 1 gets rows of both inserts: our merge of them is what ClickHouse attaches.
        assert ours.optimize(final=True)
    sess = made.session
    target = f"back_{case.table}"
    sess.query(case.create_sql(target))
    target_dir = corpus.data_dir_of(sess, target)
    for part in ours.parts():
        shutil.copytree(ours.path / part.name, target_dir / "detached" / part.name)
        sess.query(f"ALTER TABLE {target} ATTACH PART '{part.name}'")
    kinds = corpus.query_text(sess, f"SELECT DISTINCT part_type FROM system.parts WHERE database = currentDatabase() "
                                    f"AND table = '{target}' AND active").split()
    assert kinds == [case.kind]
    check = corpus.query_text(sess, f"CHECK TABLE {target} SETTINGS check_query_single_value_result = 1").split()
    assert check == ["1"]
    got = corpus.query_arrow(sess, case.select_sql(target))
    assert _selected(got) == _selected(table.expected)


@pytest.mark.parametrize("case", REFUSED_CASES, ids=[c.id for c in REFUSED_CASES])
def test_refused_types_raise_unsupported(made, case, tmp_path):
    """Reading ClickHouse's table and creating one of ours both raise UnsupportedError naming the type."""
    table = made.made[case.id]
    with pytest.raises(UnsupportedError, match=case.feature):
        MergeTreeTable.open(table.data_dir, create_statement=table.statement).to_arrow()
    with pytest.raises(UnsupportedError, match=case.feature):
        MergeTreeTable.new(tmp_path / "ours", parse_create(table.statement), {"auto_merge": False}).write_directory()
