"""Column codecs as ClickHouse writes them: chains, Delta, DoubleDelta, Gorilla, T64, FPC, GCD,
LZ4HC, ZSTD levels (negative ones too) and NONE, in Wide and Compact parts.

chdb writes one table per codec family (every column a codec clause on a type it applies to, data
mixing runs, random values, extremes, NULLs and arrays, over several granules and blocks); we read
exactly what its SELECT returns. Malformed payloads raise CorruptPartError naming the block;
encrypted and hardware codecs raise UnsupportedError naming the codec.
"""

from __future__ import annotations

import shutil
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_mergetree import MergeTreeTable
from spark_mergetree.errors import CorruptPartError, InvalidOptionError, UnsupportedError
from spark_mergetree.format import codecs
from spark_mergetree.format.cityhash import cityhash128
from spark_mergetree.format.compression import decompress_all
from tests.format.chdb_util import active_part_dirs, close_session, open_session

ROWS = 10000
WIDE = "min_bytes_for_wide_part = 0, min_rows_for_wide_part = 0, index_granularity = 1024"
COMPACT = "min_bytes_for_wide_part = 1000000000, min_rows_for_wide_part = 1000000000, index_granularity = 1024"
ENUM8 = "Enum8('a' = 1, 'b' = 2, 'c' = -3)"
ENUM16 = "Enum16('a' = 1, 'b' = 1000, 'c' = -3000)"
# table → columns (type, codec clause); every column is c<i>.
FAMILIES: dict[str, list[tuple[str, str]]] = {
    "delta": [("Int8", "Delta"), ("UInt16", "Delta(2)"), ("Int32", "Delta, ZSTD"), ("Int64", "Delta(8), LZ4"),
              ("Int64", "Delta(1), LZ4"), ("Date", "Delta"), ("DateTime", "Delta, LZ4"), ("Float64", "Delta, ZSTD"),
              ("Nullable(Int32)", "Delta, ZSTD"), ("Array(UInt16)", "Delta, LZ4")],
    "double_delta": [("Int8", "DoubleDelta"), ("UInt16", "DoubleDelta, LZ4"), ("Int32", "DoubleDelta"),
                     ("UInt64", "DoubleDelta, ZSTD"), ("Int64", "DoubleDelta"), ("DateTime64(3)", "DoubleDelta, LZ4"),
                     ("Date32", "DoubleDelta"), ("Nullable(Int64)", "DoubleDelta, LZ4"), ("Decimal(18, 4)", "DoubleDelta")],
    "gorilla": [("Float32", "Gorilla"), ("Float64", "Gorilla"), ("Float64", "Gorilla, ZSTD"), ("Int64", "Gorilla"),
                ("UInt8", "Gorilla"), ("Int16", "Gorilla"), ("Int64", "Gorilla(2)"), ("Nullable(Float32)", "Gorilla, LZ4"),
                ("Array(Float64)", "Gorilla")],
    "t64": [("UInt8", "T64"), ("UInt16", "T64, LZ4"), ("UInt32", "T64"), ("UInt64", "T64, ZSTD"), ("Int8", "T64"),
            ("Int16", "T64('bit')"), ("Int32", "T64"), ("Int64", "T64('bit'), ZSTD"), ("Date", "T64"), ("Date32", "T64"),
            ("DateTime", "T64"), ("DateTime64(3)", "T64, LZ4"), (ENUM8, "T64"), (ENUM16, "T64"),
            ("Decimal(9, 2)", "T64"), ("Decimal(18, 2)", "T64, ZSTD"), ("Nullable(UInt32)", "T64, ZSTD"),
            ("Array(Int64)", "T64")],
    "fpc": [("Float32", "FPC"), ("Float64", "FPC"), ("Float64", "FPC(1)"), ("Float64", "FPC(28)"),
            ("Float32", "FPC(5, 4)"), ("Float64", "FPC(12), ZSTD"), ("Nullable(Float64)", "FPC"),
            ("Array(Float32)", "FPC, LZ4")],
    "gcd": [("UInt8", "GCD, LZ4"), ("Int16", "GCD"), ("UInt32", "GCD, ZSTD"), ("Int64", "GCD, LZ4"), ("Int128", "GCD"),
            ("UInt256", "GCD, ZSTD"), ("Decimal(9, 2)", "GCD"), ("Decimal(38, 4)", "GCD, LZ4"), ("Decimal(76, 10)", "GCD"),
            ("Date", "GCD"), ("DateTime64(6)", "GCD, ZSTD")],
    "chains": [("Int64", "Delta, T64, LZ4"), ("UInt32", "Delta, GCD, ZSTD"), ("Int64", "DoubleDelta, T64"),
               ("Float64", "Gorilla, LZ4HC"), ("String", "LZ4HC(5)"), ("String", "LZ4HC"), ("String", "ZSTD(-3)"),
               ("String", "ZSTD(22)"), ("UInt64", "NONE"), ("Int64", "ZSTD(3, 24)"), ("LowCardinality(String)", "ZSTD(5)"),
               ("Int64", "Delta(4), DoubleDelta, Gorilla, LZ4"), ("Nullable(String)", "LZ4HC(12)")],
}
_WIDE_INTS = {"Int128", "UInt128", "Int256", "UInt256"}


def _scalar_sql(type_text: str, n: str) -> str:
    """Values of one type over row number `n`: runs, random values, extremes, specials."""
    regimes = (f"{n} < 3000, intDiv({n}, 3) * 5, {n} < 6000, cityHash64({n}), {n} % 7 = 0, -1, "
               f"{n} % 7 = 1, 9223372036854775807, 12345")
    if type_text == "UInt256":
        # Arrow's decimal256 holds 76 digits: UInt256 values from 10^76 up are not read (types.md).
        return f"to{type_text}(multiIf({regimes.replace('-1', '1')}))"
    if type_text.startswith(("Int", "UInt")):
        return f"to{type_text}(multiIf({regimes}))"
    if type_text.startswith("Float"):
        specials = (f"multiIf({n} < 3000, {n} * 0.25, {n} < 6000, sin({n}) * 1000, {n} % 5 = 0, nan, {n} % 5 = 1, -0., "
                    f"{n} % 5 = 2, inf, {n} % 5 = 3, 1e300, {n} / 7)")
        return f"to{type_text}({specials})"
    if type_text == "Date":
        return f"toDate('2020-01-01') + multiIf({n} < 3000, intDiv({n}, 10), cityHash64({n}) % 20000)"
    if type_text == "Date32":
        return f"toDate32('1950-01-01') + multiIf({n} < 3000, intDiv({n}, 10), cityHash64({n}) % 60000)"
    if type_text == "DateTime":
        return f"toDateTime(1600000000 + multiIf({n} < 3000, {n} * 60, cityHash64({n}) % 100000000), 'UTC')"
    if type_text.startswith("DateTime64"):
        scale = int(type_text[len("DateTime64("):-1])
        return (f"fromUnixTimestamp64Milli(toInt64(1600000000000 + multiIf({n} < 3000, {n} * 1000, "
                f"cityHash64({n}) % 100000000000)))::{type_text}" if scale == 3 else
                f"fromUnixTimestamp64Micro(toInt64(1600000000000000 + multiIf({n} < 3000, {n} * 1000, "
                f"cityHash64({n}) % 100000000000000)))")
    if type_text.startswith("Decimal"):
        precision, scale = (int(x) for x in type_text[len("Decimal("):-1].split(","))
        return (f"toDecimal{ {9: 32, 18: 64, 38: 128, 76: 256}[precision] }(multiIf({n} < 3000, intDiv({n}, 3) * 5, "
                f"{n} % 7 = 0, -1, cityHash64({n}) % 100000000) / 100, {scale})")
    if type_text.startswith("Enum"):
        return f"CAST(multiIf({n} % 3 = 0, 'a', {n} % 3 = 1, 'b', 'c') AS {type_text})"
    if type_text == "String":
        return f"concat('s', toString(multiIf({n} < 3000, {n}, cityHash64({n}) % 1000)))"
    raise AssertionError(type_text)


def _value_sql(type_text: str, n: str = "number") -> str:
    if type_text.startswith("Nullable("):
        # The type's default under each NULL, as our writer stores it (ClickHouse keeps whatever was there).
        inner = type_text[len("Nullable("):-1]
        zero = f"defaultValueOfTypeName('{inner}')"
        return f"if({n} % 5 = 0, NULL, if({n} % 5 = 0, {zero}, {_scalar_sql(inner, n)}))"
    if type_text.startswith("Array("):
        return f"arrayMap(i -> {_scalar_sql(type_text[len('Array('):-1], '(number + i)')}, range({n} % 4))"
    if type_text.startswith("LowCardinality("):
        return _scalar_sql(type_text[len("LowCardinality("):-1], n)
    return _scalar_sql(type_text, n)


def _select_sql(type_text: str, column: str) -> str:
    """What chdb returns for a column, in a form both sides compare exactly (wide integers as text,
    dates and times as their stored integers)."""
    if type_text in _WIDE_INTS or type_text.startswith("Enum"):
        return f"toString({column})"
    if type_text.startswith("DateTime64"):
        return f"reinterpretAsInt64({column})"
    if type_text.startswith(("Date", "DateTime")):
        return f"toInt64({column})"
    return column


def _ours(array: pa.ChunkedArray, type_text: str) -> list:
    if pa.types.is_date32(array.type):
        array = pc.cast(array, pa.int32())
    if pa.types.is_temporal(array.type) or pa.types.is_int32(array.type):
        array = pc.cast(array, pa.int64())
    return _normalise(array.to_pylist(), type_text)


def _normalise(value, type_text: str):
    """Python values of both sides made comparable bit for bit (floats by their bits: NaN, -0.0)."""
    if isinstance(value, list):
        return [_normalise(v, type_text) for v in value]
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, bytes):
        return value.decode()
    if type_text in _WIDE_INTS and value is not None:
        return str(value)
    return value


@pytest.fixture(scope="module")
def chdb_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("codecs")


@pytest.fixture(scope="module")
def corpus(chdb_root):
    """(family, layout) → (data directory, statement, {column: expected values}, column types)."""
    tmp = chdb_root
    made = {}
    sess = open_session(tmp, ["SET allow_suspicious_codecs = 1"])
    for family, columns in FAMILIES.items():
        for layout, settings in (("wide", WIDE), ("compact", COMPACT)):
            name = f"{family}_{layout}"
            definition = ", ".join(f"c{i} {t} CODEC({codec})" for i, (t, codec) in enumerate(columns))
            values = ", ".join(_value_sql(t) for t, _ in columns)
            sess.query(f"CREATE TABLE {name} (k UInt32, {definition}) ENGINE = MergeTree ORDER BY k SETTINGS {settings}")
            sess.query(f"INSERT INTO {name} SELECT number, {values} FROM numbers({ROWS})")
            (part,) = active_part_dirs(sess, name)
            data_dir = part.parent
            assert ("data.bin" in {p.name for p in part.iterdir()}) == (layout == "compact")
            statement = sess.query(f"SHOW CREATE TABLE {name}", "TabSeparatedRaw").bytes().decode()
            selected = ", ".join(_select_sql(t, f"c{i}") for i, (t, _) in enumerate(columns))
            table = pa.ipc.open_file(pa.py_buffer(sess.query(f"SELECT {selected} FROM {name} ORDER BY k", "Arrow")
                                                  .bytes())).read_all()
            expected = {f"c{i}": _normalise(table.column(i).to_pylist(), t) for i, (t, _) in enumerate(columns)}
            made[(family, layout)] = (data_dir, statement, expected, {f"c{i}": t for i, (t, _) in enumerate(columns)})
    close_session()
    return made


@pytest.mark.parametrize("layout", ["wide", "compact"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_codec_columns_read_as_clickhouse_returns_them(corpus, family, layout):
    data_dir, statement, expected, types = corpus[(family, layout)]
    table = MergeTreeTable.open(data_dir, create_statement=statement)
    out = table.to_arrow().sort_by("k")
    for column, values in expected.items():
        assert _ours(out[column], types[column]) == values, (family, layout, column, types[column])
    # A filtered read decodes granules from the middle of blocks.
    middle = table.to_arrow(where="k >= 3500 AND k < 3600").sort_by("k")
    for column, values in expected.items():
        assert _ours(middle[column], types[column]) == values[3500:3600], (family, column)
    assert table.check().ok


# ---------------------------------------------------------------------------------------------- damage


def _block(method: int, payload: bytes, decompressed_size: int) -> bytes:
    body = struct.pack("<BII", method, 9 + len(payload), decompressed_size) + payload
    return cityhash128(body) + body


@pytest.mark.parametrize(("method", "payload", "size", "error"), [
    # Delta of 8-byte values announcing 16 bytes but holding 8.
    (0x92, bytes((8, 0)) + bytes(8), 16, r"Delta payload holds 8 value bytes, the block 16"),
    (0x92, bytes((3, 0)) + bytes(9), 9, r"value width 3 in the codec header"),
    # DoubleDelta: 3 values announced by the block, 2 by the payload.
    (0x94, bytes((4, 0)) + struct.pack("<I", 2) + bytes(8), 12, r"DoubleDelta payload holds 2 values, the block 3"),
    # DoubleDelta: 40 values but no bit stream after the first two.
    (0x94, bytes((1, 0)) + struct.pack("<I", 40) + bytes(2), 40, r"bit stream ends after 2 of 40 values"),
    (0x95, bytes((8, 0)) + struct.pack("<I", 3) + bytes(8) + b"\xc0", 24, r"Gorilla bit stream has an impossible window"),
    (0x93, bytes((0x05,)) + bytes(16), 8, r"T64 type code 5 is not one ClickHouse writes"),
    (0x93, bytes((0x03,)) + struct.pack("<QQ", 0, 255) + bytes(10), 8, r"T64 payload holds 10 bytes for 2 values of 8 bits"),
    # An FPC pair header announcing two residuals of 8 bytes, followed by 3 bytes.
    (0x98, bytes((8, 12)) + bytes(4), 16, r"FPC payload ends inside a pair"),
    (0x98, bytes((8, 0)), 16, r"FPC header says float width 8 and level 0"),
    (0x9A, bytes((4, 0)) + struct.pack("<I", 3) + bytes(4), 8, r"GCD payload holds 4 value bytes, the block 8"),
    # A chain whose inner stage announces another codec than the chain lists.
    (0x91, bytes((1, 0x92)) + struct.pack("<BII", 0x82, 9, 0), 0, r"stage 1 of the codec chain should be Delta"),
])
def test_malformed_payloads_name_the_block(tmp_path, method, payload, size, error):
    data = _block(method, payload, size)
    with pytest.raises(CorruptPartError, match=rf"x\.bin: \w+ block at byte offset 0.*{error}"):
        decompress_all(data, "x.bin")


@pytest.mark.parametrize(("method", "named"), [
    (0x96, "codec AES_128_GCM_SIV"), (0x97, "codec AES_256_GCM_SIV"), (0x99, "codec DeflateQpl"),
    (0x9B, "codec ZSTD_QPL"), (0x9C, "codec SZ3"), (0xA7, "unknown compression method 0xa7"),
])
def test_encrypted_and_hardware_codecs_are_unsupported_by_name(method, named):
    with pytest.raises(UnsupportedError, match=rf"x\.bin: block at byte offset 0 is compressed with {named}"):
        decompress_all(_block(method, bytes(12), 4), "x.bin")
    chain = bytes((2, 0x92, method)) + bytes(12)
    with pytest.raises(UnsupportedError, match=r"codec chain CODEC\(Delta, "):
        decompress_all(_block(0x91, chain, 4), "x.bin")


def test_corpus_covers_every_codec(corpus):
    """Every method byte ClickHouse writes for MergeTree columns appears in the corpus files."""
    seen: set[int] = set()
    for data_dir, _, _, _ in corpus.values():
        for file in Path(data_dir).rglob("*.bin"):
            data = file.read_bytes()
            offset = 0
            while offset < len(data):
                method, size = data[offset + 16], struct.unpack_from("<I", data, offset + 17)[0]
                seen.add(method)
                if method == 0x91:
                    seen.update(data[offset + 26 : offset + 26 + data[offset + 25]])
                offset += 16 + size
    assert {0x02, 0x82, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x98, 0x9A} <= seen


# ---------------------------------------------------------------------------------------------- encoders

_ENCODERS = {
    0x92: lambda data, payload: codecs.delta_encode(data, payload[0]),
    0x94: lambda data, payload: codecs.double_delta_encode(data, payload[0]),
    0x95: lambda data, payload: codecs.gorilla_encode(data, payload[0]),
    0x93: lambda data, payload: codecs.t64_encode(data, payload[0] & 0x7F, bool(payload[0] & 0x80)),
    0x98: lambda data, payload: codecs.fpc_encode(data, payload[0], payload[1]),
}
# GCD divides signed values as signed (ClickHouse 26.x): the encoder needs the column's signedness.
_SIGNED_TYPES = ("Int", "Decimal", "Date32", "DateTime64", "Nullable(Int", "Array(Int")


def _stages(method: int, payload: bytes, size: int):
    """(method, payload, decompressed bytes) of a block and, for a chain, of every stage in it."""
    if method != 0x91:
        yield method, payload, bytes(decompress_all(_block(method, payload, size), "x.bin"))
        return
    count = payload[0]
    inner = payload[1 + count :]
    for _ in range(count):
        inner_method, compressed, decompressed = struct.unpack_from("<BII", inner)
        data = bytes(decompress_all(_block(inner_method, inner[9:compressed], decompressed), "x.bin"))
        yield inner_method, inner[9:compressed], data
        inner = data


def test_encoders_reproduce_every_block_clickhouse_wrote(corpus):
    """Each transform payload in the corpus, decoded and encoded again with the parameters its
    header records (and for GCD the column's signedness), is byte-identical to ClickHouse's."""
    checked: dict[int, int] = {}
    for data_dir, _, _, types in corpus.values():
        for file in sorted(Path(data_dir).rglob("*.bin")):
            column = file.name.split(".")[0]
            # Compact data.bin mixes columns: GCD blocks are checked in Wide parts.
            signed = types[column].startswith(_SIGNED_TYPES) if column in types else None
            data = file.read_bytes()
            offset = 0
            while offset < len(data):
                method, compressed, decompressed = struct.unpack_from("<BII", data, offset + 16)
                payload = data[offset + 25 : offset + 16 + compressed]
                for stage_method, stage_payload, plain in _stages(method, payload, decompressed):
                    if stage_method == 0x9A and signed is not None:
                        encoded = codecs.gcd_encode(plain, stage_payload[0], signed)
                    elif stage_method in _ENCODERS:
                        encoded = _ENCODERS[stage_method](plain, stage_payload)
                    else:
                        continue
                    assert encoded == stage_payload, (file, offset, stage_method)
                    checked[stage_method] = checked.get(stage_method, 0) + 1
                offset += 16 + compressed
    assert set(checked) == {*_ENCODERS, 0x9A}, checked


# ---------------------------------------------------------------------------------------------- our parts


def _bins(part: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(part.iterdir()) if f.name.endswith(".bin")}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_our_parts_equal_clickhouses_and_clickhouse_checks_them(corpus, chdb_root, tmp_path, family):
    """The same rows written by us into a table with the same CODEC clauses: every column file is
    byte-identical to ClickHouse's; a merge keeps the codecs; ClickHouse attaches both parts,
    CHECK TABLE says 1 and SELECT returns the rows."""
    data_dir, statement, expected, types = corpus[(family, "wide")]
    rows = MergeTreeTable.open(data_dir, create_statement=statement).to_arrow().sort_by("k")
    (theirs,) = [p for p in Path(data_dir).iterdir() if p.name.startswith("all_")]
    single, merged = tmp_path / "single", tmp_path / "merged"
    single.mkdir()
    merged.mkdir()
    ours = MergeTreeTable.open(single, create_statement=statement)
    ours.insert(rows)
    (part,) = [single / p.name for p in ours.parts()]
    assert _bins(part) == _bins(theirs)
    two = MergeTreeTable.open(merged, create_statement=statement)
    two.insert(rows.slice(0, ROWS // 3))
    two.insert(rows.slice(ROWS // 3))
    (result,) = two.optimize(final=True)
    for name, data in _bins(merged / result).items():
        assert data[16] == _bins(theirs)[name][16], (name, "the merged part keeps the column's codec")
    definition = ", ".join(f"c{i} {t} CODEC({codec})" for i, (t, codec) in enumerate(FAMILIES[family]))
    sess = open_session(chdb_root, ["SET allow_suspicious_codecs = 1"])
    try:
        for label, source in (("single", part), ("merged", merged / result)):
            name = f"{family}_{label}"
            sess.query(f"CREATE TABLE {name} (k UInt32, {definition}) ENGINE = MergeTree ORDER BY k SETTINGS {WIDE}")
            target = Path(sess.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{name}'",
                                     "TabSeparatedRaw").bytes().decode().strip())
            shutil.copytree(source, target / "detached" / source.name)
            sess.query(f"ALTER TABLE {name} ATTACH PART '{source.name}'")
            checked = sess.query(f"CHECK TABLE {name} SETTINGS check_query_single_value_result = 1",
                                 "TabSeparatedRaw").bytes().decode().strip()
            assert checked == "1", (name, checked)
            selected = ", ".join(_select_sql(t, f"c{i}") for i, (t, _) in enumerate(FAMILIES[family]))
            table = pa.ipc.open_file(pa.py_buffer(sess.query(f"SELECT {selected} FROM {name} ORDER BY k", "Arrow")
                                                  .bytes())).read_all()
            for i, (t, _) in enumerate(FAMILIES[family]):
                assert _normalise(table.column(i).to_pylist(), t) == expected[f"c{i}"], (name, i, t)
    finally:
        close_session()


# ---------------------------------------------------------------------------------------------- create()

REFUSED_AT_CREATE = [  # (type, codec clause, error raised by create(), what its message names)
    ("String", "Delta, LZ4", InvalidOptionError, r"codec Delta does not apply to String"),
    ("Float64", "T64, LZ4", InvalidOptionError, r"codec T64 does not apply to Float64"),
    ("Int64", "FPC, ZSTD", InvalidOptionError, r"codec FPC does not apply to Int64"),
    ("Float64", "GCD, LZ4", InvalidOptionError, r"codec GCD does not apply to Float64"),
    ("Int64", "Delta", InvalidOptionError, r"does not compress anything"),
    ("Int64", "GCD", InvalidOptionError, r"does not compress anything"),
    ("Int64", "LZ4, Delta", InvalidOptionError, r"a generic codec \(LZ4, LZ4HC, ZSTD\) can only come last"),
    ("Int64", "NONE, LZ4", InvalidOptionError, r"NONE along with other codecs"),
    ("Int64", "Gorilla", InvalidOptionError, r"floating-point time series codecs \(Gorilla, FPC\) on Int64"),
    ("Float64", "Delta, Gorilla", InvalidOptionError, r"a delta before them makes no sense"),
    ("Int64", "Delta(3), LZ4", InvalidOptionError, r"bad arguments to Delta"),
    ("Int64", "Brotli", InvalidOptionError, r"unknown compression codec 'Brotli'"),
    ("Int64", "ZSTD(23)", InvalidOptionError, r"ZSTD level must be between"),
]


@pytest.mark.parametrize(("type_text", "clause", "error", "named"), REFUSED_AT_CREATE)
def test_create_refuses_codecs_clickhouse_refuses(chdb_root, tmp_path, type_text, clause, error, named):
    with pytest.raises(error, match=rf"column 'x': .*{named}"):
        MergeTreeTable.create(tmp_path / "t", [("k", "UInt64"), ("x", f"{type_text} CODEC({clause})")], order_by="k")
    assert not (tmp_path / "t").exists()
    # ClickHouse's CREATE refuses the same column.
    sess = open_session(chdb_root)
    try:
        with pytest.raises(Exception):  # noqa: B017 - chdb raises its own error type
            sess.query(f"CREATE TABLE refused (k UInt64, x {type_text} CODEC({clause})) ENGINE = MergeTree ORDER BY k")
    finally:
        close_session()


@pytest.mark.parametrize(("clause", "named"), [
    ("AES_128_GCM_SIV", "AES_128_GCM_SIV .* is an encryption codec"),
    ("Delta, AES_256_GCM_SIV", "AES_256_GCM_SIV .* is an encryption codec"),
    ("ZSTD_QAT", "ZSTD_QAT .* is a hardware codec"), ("DEFLATE_QPL", "DEFLATE_QPL .* is a hardware codec"),
])
def test_encrypted_and_hardware_codecs_are_refused_by_name(tmp_path, clause, named):
    with pytest.raises(UnsupportedError, match=rf"column 'x': codec {named} .*: this version neither writes nor reads it"):
        MergeTreeTable.create(tmp_path / "t", [("k", "UInt64"), ("x", f"Int64 CODEC({clause})")], order_by="k")
    assert not (tmp_path / "t").exists()


def test_create_writes_the_codec_clauses_and_merges_keep_them(tmp_path):
    columns = [("k", "UInt64"), ("a", "Int64 CODEC(Delta, ZSTD(-3))"), ("b", "Float64 CODEC(Gorilla, LZ4HC(5))"),
               ("c", "Nullable(UInt32) CODEC(T64, LZ4)"), ("d", "Array(Float32) CODEC(FPC(5), ZSTD)"),
               ("e", "DateTime64(3) CODEC(DoubleDelta)"), ("f", "Decimal(18, 2) CODEC(GCD, ZSTD(3, 24))")]
    # Wide parts (min_bytes_for_wide_part = 0): each column's blocks in a file of its own.
    table = MergeTreeTable.create(tmp_path / "t", columns, order_by="k",
                                  settings={"auto_merge": False, "min_bytes_for_wide_part": 0})
    # DoubleDelta's width argument is accepted and, as in ClickHouse, the column's width is used.
    dd = MergeTreeTable.create(tmp_path / "dd", [("k", "UInt64"), ("x", "Int32 CODEC(DoubleDelta(8), LZ4)")],
                               order_by="k", settings={"min_bytes_for_wide_part": 0})
    (written,) = dd.insert(pa.table({"k": pa.array([1, 2, 3], pa.uint64()), "x": pa.array([5, 7, 9], pa.int32())}))
    block = (dd.path / written / "x.bin").read_bytes()
    method, compressed, decompressed = struct.unpack_from("<BII", block, 16)
    stages = list(_stages(method, block[25 : 16 + compressed], decompressed))
    assert [(m, payload[0]) for m, payload, _ in stages if m == 0x94] == [(0x94, 4)]
    keys = list(range(5000))
    rows = pa.table({
        "k": pa.array(keys, pa.uint64()), "a": pa.array([k * 7 for k in keys], pa.int64()),
        "b": pa.array([k / 3 for k in keys]), "c": pa.array([None if k % 4 == 0 else k % 500 for k in keys], pa.uint32()),
        "d": pa.array([[k / 2, -k] for k in keys], pa.list_(pa.float32())),
        "e": pa.array([1_600_000_000_000 + k * 1000 for k in keys], pa.timestamp("ms")),
        "f": pa.array([Decimal(k * 5) / 100 for k in keys], pa.decimal128(18, 2)),
    })
    table.insert(rows.slice(0, 2000))
    table.insert(rows.slice(2000))
    (merged,) = table.optimize(final=True)
    assert table.to_arrow().sort_by("k").equals(rows.cast(table.schema))
    statement = (table.path / "_mergetree" / "table.sql").read_text()
    for name, type_text in columns[1:]:
        assert f"`{name}` {type_text}" in statement
    methods = {f.name: f.read_bytes()[16] for f in (table.path / merged).iterdir() if f.name.endswith(".bin")}
    chains = {f.name: f.read_bytes()[26:26 + f.read_bytes()[25]] for f in (table.path / merged).iterdir()
              if f.name.endswith(".bin") and f.read_bytes()[16] == 0x91}
    assert methods == {"k.bin": 0x82, "a.bin": 0x91, "b.bin": 0x91, "c.bin": 0x91, "c.null.bin": 0x82, "d.bin": 0x91,
                       "d.size0.bin": 0x90, "e.bin": 0x94, "f.bin": 0x91}
    assert chains == {"a.bin": bytes([0x92, 0x90]), "b.bin": bytes([0x95, 0x82]), "c.bin": bytes([0x93, 0x82]),
                      "d.bin": bytes([0x98, 0x90]), "f.bin": bytes([0x9A, 0x90])}
    assert table.check().ok
