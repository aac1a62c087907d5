"""format/states_bits_maps.py against chdb: the states it builds from groups of rows, and the states
it combines, must be ClickHouse's bytes (`<f>State` over the same rows in the same order, and
`<f>MergeState` over a column of states in order, states of no rows among them).

Each case fills a chdb MergeTree table with random values (edge values, ties, runs of consecutive
values) in groups of rows, reads its part back with this package's reader (so the arguments are in
the Arrow form the builders get), and compares every function's states per group, then the
combination of chdb's states of sub-groups."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.part_reader import PartReader
from spark_mergetree.format.states_bits_maps import builder
from spark_mergetree.format.types import AggregateFunction, parse_type, to_arrow
from spark_mergetree.storage.part_store import PartStore
from spark_mergetree.storage.policy import StoragePolicy
from tests.format.chdb_util import active_part_dirs, close_session, open_session
from tests.format.test_states_simple import _values

ROWS = 400


@pytest.fixture(scope="module")
def ch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    sess = open_session(tmp_path_factory.mktemp("states_bits_maps"))
    yield sess
    close_session()


def _groups(rng: random.Random, rows: int, largest: int) -> tuple[list[int], list[int]]:
    """A group and a sub-group number per row (groups of 1 to `largest` rows, sub-groups within them)."""
    groups: list[int] = []
    subs: list[int] = []
    g = 0
    while len(groups) < rows:
        size = rng.choice([1, 2, 3, rng.randint(1, largest)])
        sub = 0
        for k in range(size):
            if k and rng.random() < min(0.3, 20 / largest):
                sub += 1
            groups.append(g)
            subs.append(sub)
        g += 1
    return groups[:rows], subs[:rows]


_table_number = 0


def _fill(ch: object, seed: int, columns: dict[str, tuple[str, list[str]]], rows: int = ROWS, largest: int = 60,
          grouping: tuple[list[int], list[int]] | None = None) -> tuple[str, pa.Table, np.ndarray]:
    """A chdb table of `rows` rows: i (order), g and sub (group, sub-group) and `columns` (type, one
    SQL literal per row); our reader's Arrow table of it, and the start of each group."""
    global _table_number
    _table_number += 1
    table = f"t{_table_number}"
    groups, subs = grouping or _groups(random.Random(seed), rows, largest)
    body = ", ".join(f"`{name}` {type_text}" for name, (type_text, _) in columns.items())
    ch.query(f"CREATE TABLE {table} (i UInt32, g UInt32, sub UInt32, {body}) ENGINE = MergeTree ORDER BY i "  # type: ignore[attr-defined]
             "SETTINGS min_bytes_for_wide_part = 0")
    selects = [f"arrayElement([{', '.join(map(str, groups))}], number + 1)",
               f"arrayElement([{', '.join(map(str, subs))}], number + 1)"]
    for type_text, literals in columns.values():
        selects.append(f"arrayElement(CAST([{', '.join(literals)}] AS Array({type_text})), number + 1)")
    ch.query(f"INSERT INTO {table} SELECT toUInt32(number), {', '.join(selects)} FROM numbers({rows}) "
             "SETTINGS max_query_size = 100000000")  # type: ignore[attr-defined]
    [part] = active_part_dirs(ch, table)  # type: ignore[arg-type]
    read = PartReader(PartStore(StoragePolicy.single(part.parent)), part.name, str(part)).read()
    g = np.asarray(read.column("g"))
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]).astype(np.int64)
    return table, read, starts


def _hex_rows(ch: object, sql: str) -> list[list[str]]:
    text = ch.query(sql + " SETTINGS max_threads = 1, optimize_aggregation_in_order = 0", "TSV").bytes().decode()  # type: ignore[attr-defined]
    return [line.split("\t") for line in text.splitlines()]


def _check(ch: object, seed: int, columns: dict[str, tuple[str, list[str]]],
           calls: list[tuple[str, tuple[str, ...]]], rows: int = ROWS, largest: int = 60,
           grouping: tuple[list[int], list[int]] | None = None, stored: bool = False) -> str:
    """Each call (function, argument columns): our states of each group equal chdb's, and our
    combination of chdb's states of sub-groups equals chdb's merge of them. Returns the table's name
    (the states of call k are in table `<name>_states<k>`). `stored`: the states combined are the
    bytes of the states' part, not chdb's `hex` of them (which reads and writes each state again,
    which for the -Map combinator reorders its keys)."""
    table, read, starts = _fill(ch, seed, columns, rows, largest, grouping)
    n = read.num_rows
    for number, (function, argument_columns) in enumerate(calls):
        arg_types = ", ".join(columns[c][0] for c in argument_columns)
        created = ch.query(f"SELECT toTypeName({function}State({', '.join(f'`{c}`' for c in argument_columns)})) "  # type: ignore[attr-defined]
                           f"FROM {table}", "TSVRaw").bytes().decode().strip()
        dt = parse_type(created)
        assert isinstance(dt, AggregateFunction)
        built = builder(dt)
        assert built is not None, dt.to_clickhouse()
        sql_args = ", ".join(f"`{c}`" for c in argument_columns)
        expected = [r[1] for r in _hex_rows(ch, f"SELECT g, hex({function}State({sql_args})) FROM {table} GROUP BY g ORDER BY g")]
        ours = built.states(dt, [read.column(c).combine_chunks() for c in argument_columns], starts, n)
        assert [s.hex().upper() for s in ours.to_pylist()] == expected, f"{function}({arg_types})"

        state_table = f"{table}_states{number}"
        ch.query(f"CREATE TABLE {state_table} (g UInt32, sub UInt32, st {dt.to_clickhouse()}) ENGINE = MergeTree "  # type: ignore[attr-defined]
                 f"ORDER BY (g, sub) AS SELECT g, sub + 1, {function}State({sql_args}) FROM {table} GROUP BY g, sub")
        no_rows = ", ".join(f"CAST([] AS Array({columns[c][0]}))" for c in argument_columns)
        ch.query(f"INSERT INTO {state_table} SELECT g, if(g % 2, 0, 1000), arrayReduce('{function}State', "  # type: ignore[attr-defined]
                 f"{no_rows}) FROM (SELECT DISTINCT g FROM {table} WHERE g % 3 = 0 UNION ALL SELECT 100000)")
        ch.query(f"OPTIMIZE TABLE {state_table} FINAL")  # type: ignore[attr-defined]
        parts = _hex_rows(ch, f"SELECT g, hex(st) FROM {state_table} ORDER BY g, sub")
        merged = [r[1] for r in _hex_rows(ch, f"SELECT g, hex({function}MergeState(st)) "
                                               f"FROM {state_table} GROUP BY g ORDER BY g")]
        state_groups = np.array([int(r[0]) for r in parts])
        state_starts = np.flatnonzero(np.r_[True, state_groups[1:] != state_groups[:-1]]).astype(np.int64)
        column = pa.array([bytes.fromhex(r[1]) for r in parts], pa.binary())
        if stored:
            [part] = active_part_dirs(ch, state_table)  # type: ignore[arg-type]
            stored_states = PartReader(PartStore(StoragePolicy.single(part.parent)), part.name, str(part)).read()
            assert np.array_equal(np.asarray(stored_states.column("g")), state_groups)
            column = stored_states.column("st").combine_chunks()
        combined = built.combine(dt, column, state_starts)
        assert [s.hex().upper() for s in combined.to_pylist()] == merged, f"{function}({arg_types}) combined"
    return table


def _scalars(seed: int, type_text: str) -> list[str]:
    return _values(random.Random(seed), type_text)


def _rising(seed: int, type_text: str) -> list[str]:
    """Values that mostly rise (with resets, repeats and edge values): a counter's series."""
    rng = random.Random(seed)
    pool = _values(rng, type_text)
    out = []
    level = 0
    for k in range(ROWS):
        level = 0 if rng.random() < 0.05 else level + rng.choice([0, 1, 2, 5])
        out.append(pool[k] if rng.random() < 0.2 else f"'{level}'")
    return out


_BIT_TYPES = ["Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64", "Int128", "UInt128", "Bool"]


@pytest.mark.parametrize("type_text", _BIT_TYPES)
def test_bitwise(ch: object, type_text: str) -> None:
    columns = {"x": (type_text, _scalars(_BIT_TYPES.index(type_text), type_text))}
    _check(ch, 1, columns, [(f, ("x",)) for f in ("groupBitAnd", "groupBitOr", "groupBitXor")])


_DELTA_TYPES = ["Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64", "UInt64", "Int128", "UInt128",
                "Float32", "Float64"]


@pytest.mark.parametrize("type_text", _DELTA_TYPES)
def test_delta_sum(ch: object, type_text: str) -> None:
    """deltaSum over rows in order, and merges by first and last values (rises, resets, equal ends)."""
    seed = 100 + _DELTA_TYPES.index(type_text)
    columns = {"x": (type_text, _rising(seed, type_text)), "r": (type_text, _scalars(seed, type_text))}
    _check(ch, seed, columns, [("deltaSum", ("x",)), ("deltaSum", ("r",))])


_POINT_PAIRS = [("Float64", "Float64"), ("Int32", "Float32"), ("UInt8", "Int64"), ("Int128", "UInt128"),
                ("Bool", "UInt64"), ("Float32", "Int8")]


@pytest.mark.parametrize("pair", _POINT_PAIRS)
def test_bounding_ratio(ch: object, pair: tuple[str, str]) -> None:
    seed = 200 + _POINT_PAIRS.index(pair)
    columns = {"x": (pair[0], _scalars(seed, pair[0])), "y": (pair[1], _scalars(seed + 50, pair[1]))}
    _check(ch, seed, columns, [("boundingRatio", ("x", "y")), ("boundingRatio", ("y", "x"))])


_REGRESSION_PAIRS = [("Float64", "Float64"), ("Int32", "Float32"), ("UInt64", "Int8"), ("Int128", "UInt128"),
                     ("Decimal(9, 2)", "Float64"), ("Decimal(38, 10)", "Decimal(18, 4)"), ("Bool", "UInt16")]


@pytest.mark.parametrize("pair", _REGRESSION_PAIRS)
def test_simple_linear_regression(ch: object, pair: tuple[str, str]) -> None:
    seed = 300 + _REGRESSION_PAIRS.index(pair)
    columns = {"x": (pair[0], _scalars(seed, pair[0])), "y": (pair[1], _scalars(seed + 50, pair[1]))}
    _check(ch, seed, columns, [("simpleLinearRegression", ("x", "y"))])


@pytest.mark.parametrize("text", ["groupBitOr, Int128", "deltaSum, Float32", "boundingRatio, Int8, Float64",
                                  "simpleLinearRegression, Decimal(9, 2), Int8", "sumMap, Map(String, Float64)",
                                  "maxMap, Map(Int16, UInt8)"])
def test_no_groups(text: str) -> None:
    """No rows: no states, and no states to combine."""
    dt = parse_type(f"AggregateFunction({text})")
    assert isinstance(dt, AggregateFunction)
    built = builder(dt)
    assert built is not None
    no_rows = [pa.array([], to_arrow(a)) for a in dt.arguments]
    assert len(built.states(dt, no_rows, np.zeros(0, np.int64), 0)) == 0
    assert len(built.combine(dt, pa.array([], pa.binary()), np.zeros(0, np.int64))) == 0


def _key_pool(rng: random.Random, type_text: str) -> list[str]:
    """A few keys of a type (so that they repeat across rows), edge values among them."""
    pool = _values(rng, type_text)[:12]
    if type_text.startswith("Float"):
        pool += ["'nan'", "'-nan'", "'0'", "'-0'", "'inf'"]
    return pool


def _arrays(rng: random.Random, pool: list[str], lengths: list[int], type_text: str) -> list[str]:
    return [f"CAST([{', '.join(rng.choice(pool) for _ in range(k))}] AS Array({type_text}))" for k in lengths]


def _map_columns(seed: int, key_type: str, value_types: list[str]) -> dict[str, tuple[str, list[str]]]:
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 2, 3, rng.randint(0, 8)]) for _ in range(ROWS)]
    keys = _key_pool(rng, key_type)
    columns = {"k": (f"Array({key_type})", _arrays(rng, keys, lengths, key_type))}
    for number, value_type in enumerate(value_types):
        values = _values(rng, value_type)
        columns[f"v{number}"] = (f"Array({value_type})", _arrays(rng, values, lengths, value_type))
    return columns


_MAP_CASES = [("UInt8", ["UInt8"]), ("Int32", ["Int64", "Float32"]), ("String", ["UInt64"]),
              ("Float64", ["Float64", "Int8"]), ("Float32", ["UInt16"]), ("Date", ["Bool"]), ("DateTime('UTC')", ["Int16"]),
              ("DateTime64(3, 'UTC')", ["UInt32"]), ("Int64", ["Float64"]), ("UInt64", ["Int32"]), ("Date32", ["Float64"]),
              ("Bool", ["UInt8"])]


@pytest.mark.parametrize("case", _MAP_CASES, ids=lambda case: f"{case[0]}-{'-'.join(case[1])}")
def test_maps_of_arrays(ch: object, case: tuple[str, list[str]]) -> None:
    """sumMap, minMap, maxMap of a key array and value arrays (the versioned state)."""
    key_type, value_types = case
    seed = 400 + _MAP_CASES.index(case)
    columns = _map_columns(seed, key_type, value_types)
    arguments = ("k", *(f"v{i}" for i in range(len(value_types))))
    _check(ch, seed, columns, [(f, arguments) for f in ("sumMap", "minMap", "maxMap")])


def _map_literals(seed: int, key_type: str, value_type: str, distinct: int) -> list[str]:
    """A Map per row (0 to 8 entries, keys from a pool of `distinct`, a key repeated within a map
    at times, empty maps among them)."""
    rng = random.Random(seed)
    values = _values(rng, value_type)
    if key_type == "String":
        keys = [repr("k" * rng.choice([0, 1, 3, 6, 8, 12, 20, 40, 70, 130, 200]) + str(k)) for k in range(distinct)]
        keys[0] = "''"
    else:
        keys = [str(k) for k in rng.sample(range(-distinct if key_type.startswith("Int") else 0, 3 * distinct), distinct)]
    out = []
    for _ in range(ROWS):
        entries = [f"CAST({rng.choice(keys)} AS {key_type}), {rng.choice(values)}" for _ in range(rng.choice([0, 1, 2, 3, rng.randint(0, 8)]))]
        out.append(f"map({', '.join(entries)})" if entries else "map()")
    return out


_MAP_FORM_CASES = [("String", "UInt64", 40), ("String", "Float64", 400), ("UInt16", "UInt8", 30), ("Int8", "Int32", 200),
                   ("Int64", "Float32", 600), ("UInt64", "Int64", 50), ("Date", "Float64", 300), ("DateTime('UTC')", "Int16", 20),
                   ("UInt8", "Bool", 250), ("Int32", "UInt32", 1000)]


@pytest.mark.parametrize("case", _MAP_FORM_CASES, ids=lambda case: f"{case[0]}-{case[1]}-{case[2]}")
def test_maps_of_a_map(ch: object, case: tuple[str, str, int]) -> None:
    """sumMap, minMap and maxMap of a Map (the -Map combinator over sum, min, max): keys in the order
    of ClickHouse's std::unordered_map, in small groups and in large ones whose table grows, and
    merged as ClickHouse merges them."""
    key_type, value_type, distinct = case
    seed = 500 + _MAP_FORM_CASES.index(case)
    columns = {"m": (f"Map({key_type}, {value_type})", _map_literals(seed, key_type, value_type, distinct))}
    _check(ch, seed, columns, [(f, ("m",)) for f in ("sumMap", "minMap", "maxMap")], largest=200, stored=True)


def test_map_form_is_not_sorted(ch: object) -> None:
    """The Map form's keys are not sorted: ClickHouse writes them in its hash table's order."""
    dt = parse_type("AggregateFunction(sumMap, Map(UInt8, UInt8))")
    assert isinstance(dt, AggregateFunction)
    built = builder(dt)
    assert built is not None
    rows = pa.array([[(2, 1)], [(0, 1)], [(1, 1)], [(255, 1)], [(3, 1)]], pa.map_(pa.uint8(), pa.uint8()))
    ours = built.states(dt, [rows], np.zeros(1, np.int64), 5).to_pylist()[0]
    state = ch.query("SELECT hex(sumMapState(m)) FROM (SELECT arrayJoin([map(toUInt8(2), toUInt8(1)), "  # type: ignore[attr-defined]
                     "map(0, 1), map(1, 1), map(255, 1), map(3, 1)]) AS m)", "TSVRaw").bytes().decode().strip()
    assert ours.hex().upper() == state
    keys = [ours[1 + 9 * k] for k in range(5)]
    assert sorted(keys) == [0, 1, 2, 3, 255] and keys != sorted(keys)


def test_refused_map_forms(ch: object) -> None:
    """Key types ClickHouse's -Map combinator refuses have no layout, and are not built."""
    for key_type in ("Float64", "Float32", "Date32", "DateTime64(3)"):
        with pytest.raises(Exception, match="not supported by combinator Map"):
            ch.query(f"SELECT sumMapState(CAST(map(), 'Map({key_type}, UInt8)'))")  # type: ignore[attr-defined]
        dt = parse_type(f"AggregateFunction(sumMap, Map({key_type}, UInt8))")
        assert isinstance(dt, AggregateFunction)
        assert builder(dt) is None
    dt = parse_type("AggregateFunction(1, sumMapWithOverflow, Array(UInt8), Array(UInt8))")
    assert isinstance(dt, AggregateFunction)
    assert builder(dt) is None


def test_map_sizes_must_match() -> None:
    dt = parse_type("AggregateFunction(1, sumMap, Array(UInt8), Array(UInt8))")
    assert isinstance(dt, AggregateFunction)
    built = builder(dt)
    assert built is not None
    with pytest.raises(SchemaMismatchError, match="sizes"):
        built.states(dt, [pa.array([[1, 2]], pa.list_(pa.uint8())), pa.array([[1]], pa.list_(pa.uint8()))],
                     np.zeros(1, np.int64), 1)


def _bitmap_values(rng: random.Random, type_text: str, rows: int) -> list[str]:
    """Values for groupBitmap: dense ranges (runs), pairs of neighbours (as many values as runs
    take bytes: the tie between an array and runs), values spread over the type's range (many
    containers), edge values, negative values."""
    bits = int(type_text.lstrip("UInt"))
    signed = type_text.startswith("Int")
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    out = []
    for _ in range(rows):
        mode = rng.random()
        if mode < 0.3:
            value = rng.randint(0, min(high, 300))
        elif mode < 0.6:
            value = min(high, 4 * rng.randint(0, 100) + rng.randint(0, 1))
        elif mode < 0.7:
            value = rng.choice([low, high, 0, -1 if signed else 1, 65535 if high >= 65535 else high, 65536 if high > 65536 else low])
        elif mode < 0.8 and high > 70000:
            value = rng.choice([65536, 131072, 1 << 32 if high > 1 << 33 else 65536 * 3]) + rng.randint(0, 40)
        else:
            value = rng.randint(low, high)
        out.append(f"'{value}'")
    return out


_BITMAP_TYPES = ["UInt8", "Int8", "UInt16", "Int16", "UInt32", "Int32", "UInt64", "Int64"]


@pytest.mark.parametrize("type_text", _BITMAP_TYPES)
def test_group_bitmap(ch: object, type_text: str) -> None:
    """Small sets (insertion order), their growth into bitmaps, containers as arrays and runs."""
    seed = 600 + _BITMAP_TYPES.index(type_text)
    columns = {"x": (type_text, _bitmap_values(random.Random(seed), type_text, 2000))}
    _check(ch, seed, columns, [("groupBitmap", ("x",))], rows=2000, largest=300)


@pytest.mark.parametrize("type_text", ["UInt32", "Int64", "Int32"])
def test_group_bitmap_container_history(ch: object, type_text: str) -> None:
    """Which form a container is written in depends on how it was made when runs take exactly as
    many bytes as an array: made by adds it stays an array, made by or-ing runs in it stays runs.
    Sub-groups here are bitmaps (33 values in a far container make them large) and small sets whose
    values near 0 form such ties when merged."""
    rng = random.Random(800 + len(type_text))
    groups: list[int] = []
    subs: list[int] = []
    values: list[str] = []
    far = 65536 * 7
    for g in range(80):
        # Half the groups: a run of L values in one sub-group (written as runs), then L - 3 single
        # values in others, so that the group holds 2r + 1 values in r runs.
        targeted = g % 2 == 0
        length = rng.choice([4, 5, 6])
        for sub in range(rng.randint(1, 5) if not targeted else length - 2):
            near: list[int] = []
            if targeted:
                near = list(range(10, 10 + length)) if sub == 0 else [20 + 3 * rng.randint(0, 12)]
            else:
                for _ in range(rng.randint(1, 3)):
                    start = rng.randint(0, 30)
                    near += range(start, start + rng.choice([1, 1, 2, 3, 5]))
            chosen = sorted(set(near)) + ([far + 2 * k for k in range(33)] if sub == 0 or rng.random() < 0.6 else [])
            rng.shuffle(chosen)
            for value in chosen:
                groups.append(g)
                subs.append(sub)
                values.append(f"'{value}'")
    table = _check(ch, 800, {"x": (type_text, values)}, [("groupBitmap", ("x",))], rows=len(values),
                   grouping=(groups, subs))
    # The case is one: some groups' merged states are not the states of their rows.
    differing = ch.query(f"SELECT countIf(a != b) FROM (SELECT g, hex(groupBitmapState(x)) AS a FROM {table} GROUP BY g) AS r "  # type: ignore[attr-defined]
                         f"JOIN (SELECT g, hex(groupBitmapMergeState(st)) AS b FROM {table}_states0 GROUP BY g) AS m USING g",
                         "TSVRaw").bytes().decode()
    assert int(differing) > 0


@pytest.mark.parametrize("type_text", ["UInt32", "Int64"])
def test_group_bitmap_bitsets(ch: object, type_text: str) -> None:
    """Containers of more than 4096 values: bitsets, or runs where runs are smaller."""
    rng = random.Random(700 + len(type_text))
    rows = 30000
    values = []
    for number in range(rows):
        mode = number // 5000
        value = [rng.randint(0, 65535), number, 2 * number, rng.randint(0, 9000) * 7, 70000 + number, rng.randint(0, 200000)][mode]
        values.append(f"'{value}'")
    _check(ch, 700, {"x": (type_text, values)}, [("groupBitmap", ("x",))], rows=rows, largest=12000)


_PROJECTION = ("s, groupBitAnd(k), groupBitOr(k), groupBitXor(id), groupBitmap(k), groupBitmap(id), deltaSum(v), "
               "deltaSum(k), boundingRatio(id, v), simpleLinearRegression(v, k), groupBitmapIf(k, k > 3), "
               "sumMap(ks, vs), minMap(ks, vs), maxMap(ks, vs)")
_CREATE = ("CREATE TABLE t (id UInt64, k UInt32, v Float64, s String, ks Array(UInt16), vs Array(Float64), "
           f"PROJECTION p (SELECT {_PROJECTION} GROUP BY s)) ENGINE = MergeTree ORDER BY id "
           "SETTINGS index_granularity = 64, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0")
_ROWS = ("SELECT number + {offset} AS id, toUInt32((number * 7919) % 3000) AS k, ((number * 13) % 101) / 3 AS v, "
         "toString(number % 3) AS s, arrayMap(j -> toUInt16((number + j * 17) % 40), range(number % 4)) AS ks, "
         "arrayMap(j -> (number + j) / 7, range(number % 4)) AS vs FROM numbers({rows})")


def _projection_files(part: object) -> dict[str, bytes]:
    directory = part / "p.proj"  # type: ignore[operator]
    return {f.name: f.read_bytes() for f in sorted(directory.iterdir()) if f.suffix in (".bin", ".idx") or f.name == "columns.txt"}


def test_projection_of_these_functions(tmp_path: object) -> None:
    """A table's aggregate projection of these functions: our inserted and merged parts hold
    ClickHouse's bytes, and ClickHouse answers from them what it answers from its own."""
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.expressions.ddl import parse_create
    from tests.format.chdb_util import attach_and_check, make_chdb_table, paired_part_dirs

    sess, data_dir = make_chdb_table(tmp_path, _CREATE)
    sess.query("SYSTEM STOP MERGES t")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})  # type: ignore[operator]
    ours.write_directory()
    for offset, rows in ((0, 900), (900, 500)):
        rows_sql = _ROWS.format(offset=offset, rows=rows)
        sess.query("INSERT INTO t " + rows_sql)
        ours.insert(pa.ipc.open_file(pa.py_buffer(sess.query(rows_sql, "Arrow").bytes())).read_all())
    for theirs, mine in paired_part_dirs(data_dir, ours):
        assert _projection_files(mine) == _projection_files(theirs), mine.name
    ours.optimize(final=True)
    (part,) = ours.parts()
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    assert _projection_files(ours.path / part.name) == _projection_files(data_dir / part.name)
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [ours.path / part.name])
    query = f"SELECT {_PROJECTION} FROM {{}} GROUP BY s ORDER BY s SETTINGS force_optimize_projection = 1"
    answer = sess.query(query.format("merged"), "TSV").bytes()
    assert answer == sess.query(query.format("t"), "TSV").bytes() and answer.count(b"\n") == 3
    close_session()


_MAP_PROJECTION = "s, sumMap(m), minMap(m), maxMap(n), sumMap(n)"
_MAP_CREATE = ("CREATE TABLE t (id UInt64, s String, m Map(String, UInt64), n Map(UInt16, Float64), "
               f"PROJECTION p (SELECT {_MAP_PROJECTION} GROUP BY s)) ENGINE = MergeTree ORDER BY id "
               "SETTINGS index_granularity = 64, min_bytes_for_wide_part = 0, compress_marks = 0, compress_primary_key = 0")
_MAP_ROWS = ("SELECT number + {offset} AS id, toString(number % {groups} + {first}) AS s, "
             "map(toString(number % 37), number, repeat('k', number % 90), number % 5, toString(number % 11), 7) AS m, "
             "mapFromArrays(arrayMap(j -> toUInt16((number + j * 13) % 300), range(number % 5)), "
             "arrayMap(j -> (number + j) / 7, range(number % 5))) AS n FROM numbers({rows})")


def test_projection_of_maps(tmp_path: object) -> None:
    """An aggregate projection of sumMap, minMap and maxMap of Map columns (each state's keys in
    ClickHouse's hash table order): our inserted and merged parts hold ClickHouse's bytes, and
    ClickHouse answers from them what it answers from its own."""
    from spark_mergetree import MergeTreeTable
    from spark_mergetree.expressions.ddl import parse_create
    from tests.format.chdb_util import attach_and_check, make_chdb_table, paired_part_dirs

    sess, data_dir = make_chdb_table(tmp_path, _MAP_CREATE)
    sess.query("SYSTEM STOP MERGES t")
    statement = sess.query("SHOW CREATE TABLE t", "TabSeparatedRaw").bytes().decode()
    ours = MergeTreeTable.new(tmp_path / "ours", parse_create(statement), {"auto_merge": False})  # type: ignore[operator]
    ours.write_directory()
    for offset, rows, groups, first in ((0, 900, 3, 0), (900, 700, 2, 1)):  # group '0' merged from one state
        rows_sql = _MAP_ROWS.format(offset=offset, rows=rows, groups=groups, first=first)
        sess.query("INSERT INTO t " + rows_sql)
        ours.insert(pa.ipc.open_file(pa.py_buffer(sess.query(rows_sql, "Arrow").bytes())).read_all())
    for theirs, mine in paired_part_dirs(data_dir, ours):
        assert _projection_files(mine) == _projection_files(theirs), mine.name
    ours.optimize(final=True)
    (part,) = ours.parts()
    sess.query("SYSTEM START MERGES t")
    sess.query("OPTIMIZE TABLE t FINAL")
    assert _projection_files(ours.path / part.name) == _projection_files(data_dir / part.name)
    sess.query("CREATE TABLE merged AS t")
    attach_and_check(sess, "merged", [ours.path / part.name])
    query = f"SELECT {_MAP_PROJECTION} FROM {{}} GROUP BY s ORDER BY s SETTINGS force_optimize_projection = 1"
    answer = sess.query(query.format("merged"), "TSV").bytes()
    assert answer == sess.query(query.format("t"), "TSV").bytes() and answer.count(b"\n") == 3
    close_session()
