"""Data-skipping index files of a part (format_spec/skip_indexes.md): where an index's bytes live
and what one index granule holds.

ClickHouse 26.9 keeps every skip index of a part in one archive, `skp_idx.packed`; older versions
(and parts written with the archive disabled) keep `skp_idx_<name>.idx` (`.idx2` for minmax
version 2) and its marks `skp_idx_<name>.cmrk2`/`.mrk2`. Either way an index's data is a stream
of compressed blocks; decompressed, it is one index granule after another, an index granule
covering GRANULARITY consecutive data granules. This module decodes those granules; deciding what a
predicate needs from them is `expressions/skip_index.py`.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.errors import CorruptPartError
from spark_mergetree.format.compression import decompress_all
from spark_mergetree.format.row_binary import deserialize_rows, read_varuint
from spark_mergetree.format.types import DataType, LowCardinality, Nullable, parse_type
from spark_mergetree.format.values import fixed_width, is_string

__all__ = [
    "PACKED_FILE",
    "INDEX_PREFIX",
    "SkipIndexData",
    "parse_packed_archive",
    "index_stream",
    "minmax_granules",
    "set_granules",
    "bloom_granules",
    "text_bloom_granules",
    "bloom_filter_parameters",
    "bloom_value_hash",
    "BLOOM_SEEDS",
    "hash128_to_64",
    "bloom_positions",
    "bits_set",
    "text_bloom_contains",
]

PACKED_FILE = "skp_idx.packed"
INDEX_PREFIX = "skp_idx_"
_PACKED_VERSION = 1
_U64 = struct.Struct("<Q")
_ENTRY = struct.Struct("<QQQ")
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SkipIndexData:
    """One index's decompressed granule stream, and the format version its file name says."""

    version: int
    stream: bytes


def parse_packed_archive(data: bytes | memoryview, path: str) -> dict[str, tuple[int, int]]:
    """`skp_idx.packed`: file name → (offset, size) of its bytes inside the archive."""
    view = memoryview(data).cast("B")
    if len(view) < 9 or view[0] != _PACKED_VERSION:
        raise CorruptPartError(f"{path}: not a version {_PACKED_VERSION} archive of skip index files")
    (count,) = _U64.unpack_from(view, 1)
    pos, files = 9, {}
    for number in range(count):
        length, pos = read_varuint(view, pos, f"{path}: entry {number} of the archive's header")
        name = bytes(view[pos:pos + length]).decode("utf-8", "replace")
        pos += length
        if pos + _ENTRY.size > len(view):
            raise CorruptPartError(f"{path}: entry {name!r} runs past the end of the archive's header")
        offset, size, _uncompressed = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        if offset + size > len(view):
            raise CorruptPartError(f"{path}: {name!r} at byte {offset} ({size} bytes) lies past the archive's end")
        files[name] = (offset, size)
    return files


def index_stream(name: str, files: set[str], read: Callable[[str], bytes], location: str) -> SkipIndexData | None:
    """The decompressed data of skip index `name` of a part (None when the part has none: it was
    written before the index was added, and ClickHouse reads all its granules too).

    `files` are the part's file names and `read(file)` a whole (checksum-verified) file's bytes."""
    candidates = [(2, f"{INDEX_PREFIX}{name}.idx2"), (1, f"{INDEX_PREFIX}{name}.idx")]
    if PACKED_FILE in files:
        archive = read(PACKED_FILE)
        entries = parse_packed_archive(archive, f"{location}/{PACKED_FILE}")
        for version, file in candidates:
            if file in entries:
                offset, size = entries[file]
                where = f"{location}/{PACKED_FILE}:{file}"
                return SkipIndexData(version, bytes(decompress_all(memoryview(archive)[offset:offset + size], where)))
    for version, file in candidates:
        if file in files:
            return SkipIndexData(version, bytes(decompress_all(read(file), f"{location}/{file}")))
    return None


def minmax_granules(data: SkipIndexData, types: Sequence[str], count: int, where: str) -> list[tuple[pa.Array, pa.Array]]:
    """(min per index granule, max per index granule) of each index column. Version 2 writes each
    value in its type's binary form (NULL where the granule holds a NULL: unknown bounds); version 1
    writes a Nullable column's pair behind one 'is NULL' byte."""
    dts = [parse_type(t) for t in types]
    if data.version == 2 or not any(isinstance(dt, Nullable) for dt in dts):
        row_types = [dt for dt in dts for _ in (0, 1)]
        try:
            arrays = deserialize_rows(row_types, data.stream, count)
        except CorruptPartError as error:
            raise CorruptPartError(f"{where}: does not hold {count} minmax granules of {', '.join(types)}: {error}") from None
        return [(arrays[2 * i], arrays[2 * i + 1]) for i in range(len(dts))]
    # Version 1 with a Nullable column: rare (written before 2022); granules of unknown bounds.
    return [(pa.nulls(count, pa.int64()), pa.nulls(count, pa.int64())) for _ in dts]


def _plain_width(dt: DataType) -> int | None:
    """Bytes of one value in the bulk binary form of a set granule (-1: a String), None if unsupported."""
    if is_string(dt):
        return -1
    try:
        return fixed_width(dt)
    except Exception:
        return None


def set_granules(data: SkipIndexData, types: Sequence[str], count: int, where: str) -> list[list[pa.Array] | None]:
    """The values of each index granule of a set(N) index (one array per index column), or None for a
    granule that holds more than N distinct values (written as 0 rows: every value may be there).

    A granule is a UInt64 row count, then each column's values in its bulk binary form (for plain
    types the same bytes as row-binary values of that column; a Nullable column's null map, one byte
    per value, comes before its values, a NULL's value being its type's default)."""
    dts = [parse_type(t) for t in types]
    low_cardinality = [isinstance(dt, LowCardinality) for dt in dts]
    dts = [dt.inner if isinstance(dt, LowCardinality) else dt for dt in dts]
    nullable = [isinstance(dt, Nullable) for dt in dts]
    dts = [dt.inner if isinstance(dt, Nullable) else dt for dt in dts]
    widths = [_plain_width(dt) for dt in dts]
    if any(width is None for width in widths):
        raise CorruptPartError(f"{where}: set index of types {', '.join(types)} is not decoded")
    view = memoryview(data.stream)
    buf = np.frombuffer(data.stream, np.uint8)
    pos = 0
    out: list[list[pa.Array] | None] = []
    for granule in range(count):
        if pos + 8 > len(view):
            raise CorruptPartError(f"{where}: set granule {granule} of {count} runs past the end ({len(view)} bytes)")
        (rows,) = _U64.unpack_from(view, pos)
        pos += 8
        if rows == 0:
            out.append(None)
            continue
        columns = []
        for dt, width, has_nulls, dictionary in zip(dts, widths, nullable, low_cardinality, strict=True):
            assert width is not None
            if dictionary:
                column, pos = _low_cardinality_values(dt, width, has_nulls, view, buf, pos, rows,
                                                      f"{where}: set granule {granule}")
                columns.append(column)
                continue
            nulls = None
            if has_nulls:
                if pos + rows > len(view):
                    raise CorruptPartError(f"{where}: set granule {granule} ({rows} values) runs past the end")
                nulls = buf[pos:pos + rows] != 0
                pos += rows
            if width >= 0:
                end = pos + rows * width
            else:
                end = _strings_end(buf, pos, rows)
            if end < 0 or end > len(view):
                raise CorruptPartError(f"{where}: set granule {granule} ({rows} values) runs past the end")
            (column,) = deserialize_rows([dt], view[pos:end], rows)
            if nulls is not None and nulls.any():
                column = pc.if_else(pa.array(nulls), pa.scalar(None, column.type), column)
            columns.append(column)
            pos = end
        out.append(columns)
    if pos != len(view):
        raise CorruptPartError(f"{where}: {len(view) - pos} bytes left after {count} set granules")
    return out


def _low_cardinality_values(dt: DataType, width: int, nullable: bool, view: memoryview, buf: np.ndarray, pos: int,
                            rows: int, where: str) -> tuple[pa.Array, int]:
    """`rows` values of a LowCardinality column in its single-stream bulk form (keys version, index
    type, dictionary, indexes; for LowCardinality(Nullable) index 0 is NULL), and the end offset."""
    if pos + 24 > len(view):
        raise CorruptPartError(f"{where}: LowCardinality values run past the end")
    _version, flags, keys = struct.unpack_from("<QQQ", view, pos)
    pos += 24
    end = pos + keys * width if width >= 0 else _strings_end(buf, pos, keys)
    if end < 0 or end + 8 > len(view) or flags & 0xFF > 3:
        raise CorruptPartError(f"{where}: LowCardinality dictionary of {keys} keys runs past the end")
    (dictionary,) = deserialize_rows([dt], view[pos:end], keys)
    (count,) = _U64.unpack_from(view, end)
    index_width = 1 << (flags & 0xFF)
    pos = end + 8
    if count != rows or pos + rows * index_width > len(view):
        raise CorruptPartError(f"{where}: {count} LowCardinality indexes where {rows} values were expected")
    indexes = np.frombuffer(view[pos:pos + rows * index_width], f"<u{index_width}").astype(np.int64)
    if len(indexes) and int(indexes.max()) >= keys:
        raise CorruptPartError(f"{where}: LowCardinality index {int(indexes.max())} of a dictionary of {keys} keys")
    values = dictionary.take(pa.array(indexes))
    if nullable and (indexes == 0).any():
        values = pc.if_else(pa.array(indexes == 0), pa.scalar(None, values.type), values)
    return values, pos + rows * index_width


def _strings_end(buf: np.ndarray, pos: int, rows: int) -> int:
    """End offset of `rows` varint-length-prefixed strings starting at `pos` (-1 past the end)."""
    try:
        for _ in range(rows):
            length, pos = read_varuint(buf, pos, "set index strings")
            pos += length
    except CorruptPartError:
        return -1
    return pos


# ---------------------------------------------------------------------------------------------
# bloom_filter: one filter per index column per granule, sized by the granule's rows.
# ---------------------------------------------------------------------------------------------

# The seeds of the k hash functions of a bloom_filter index (ClickHouse's BloomFilterHash).
BLOOM_SEEDS = (13635471485423070496, 10336109063487487899, 17779957404565211594, 8988612159822229247,
                4954614162757618085, 12980113590177089081, 9263883436177860930, 3656772712723269762,
                10362091744962961274, 7582936617938287249, 15033938188484401405, 18286745649494826751,
                6852245486148412312, 8886056245089344681, 10151472371158292780)

# False-positive rate of k hash functions at b bits per row (rows: b, columns: k), as ClickHouse
# tabulates it to choose (b, k) for a bloom_filter(fpr) index.
_FPR_TABLE = (
    (1.0,),
    (1.0, 1.0),
    (1.0, 0.393, 0.400),
    (1.0, 0.283, 0.237, 0.253),
    (1.0, 0.221, 0.155, 0.147, 0.160),
    (1.0, 0.181, 0.109, 0.092, 0.092, 0.101),
    (1.0, 0.154, 0.0804, 0.0609, 0.0561, 0.0578, 0.0638),
    (1.0, 0.133, 0.0618, 0.0423, 0.0359, 0.0347, 0.0364),
    (1.0, 0.118, 0.0489, 0.0306, 0.024, 0.0217, 0.0216, 0.0229),
    (1.0, 0.105, 0.0397, 0.0228, 0.0166, 0.0141, 0.0133, 0.0135, 0.0145),
    (1.0, 0.0952, 0.0329, 0.0174, 0.0118, 0.00943, 0.00844, 0.00819, 0.00846),
    (1.0, 0.0869, 0.0276, 0.0136, 0.00864, 0.0065, 0.00552, 0.00513, 0.00509),
    (1.0, 0.08, 0.0236, 0.0108, 0.00646, 0.00459, 0.00371, 0.00329, 0.00314),
    (1.0, 0.074, 0.0203, 0.00875, 0.00492, 0.00332, 0.00255, 0.00217, 0.00199, 0.00194),
    (1.0, 0.0689, 0.0177, 0.00718, 0.00381, 0.00244, 0.00179, 0.00146, 0.00129, 0.00121, 0.0012),
    (1.0, 0.0645, 0.0156, 0.00596, 0.003, 0.00183, 0.00128, 0.001, 0.000852, 0.000775, 0.000744),
    (1.0, 0.0606, 0.0138, 0.005, 0.00239, 0.00139, 0.000935, 0.000702, 0.000574, 0.000505, 0.00047, 0.000459),
    (1.0, 0.0571, 0.0123, 0.00423, 0.00193, 0.00107, 0.000692, 0.000499, 0.000394, 0.000335, 0.000302,
     0.000287, 0.000284),
    (1.0, 0.054, 0.0111, 0.00362, 0.00158, 0.000839, 0.000519, 0.00036, 0.000275, 0.000226, 0.000198,
     0.000183, 0.000176),
    (1.0, 0.0513, 0.00998, 0.00312, 0.0013, 0.000663, 0.000394, 0.000264, 0.000194, 0.000155, 0.000132,
     0.000118, 0.000111, 0.000109),
    (1.0, 0.0488, 0.00906, 0.0027, 0.00108, 0.00053, 0.000303, 0.000196, 0.00014, 0.000108, 8.89e-05,
     7.77e-05, 7.12e-05, 6.79e-05, 6.71e-05),
)
_FEWEST_HASHES_AT = (0, 0, 1, 2, 3, 3, 4, 5, 6, 6, 7, 8, 8, 9, 10, 10, 11, 12, 12, 13, 14)


def bloom_filter_parameters(fpr: float) -> tuple[int, int]:
    """(bits per row, hash functions) of a bloom_filter(fpr) index: the fewest bits per row whose
    best number of hash functions reaches `fpr`, then the fewest hash functions that still do."""
    if fpr >= 0.283:
        return 2, 2
    for bits in range(1, 20):
        best = _FEWEST_HASHES_AT[bits]
        if _FPR_TABLE[bits][best] <= fpr:
            for hashes in range(best, 0, -1):
                if _FPR_TABLE[bits][hashes] > fpr:
                    return bits, hashes + 1
    return 19, _FEWEST_HASHES_AT[19]


def bloom_granules(data: SkipIndexData, columns: int, count: int, bits_per_row: int,
                   where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all filter bytes, start of each (granule, column) filter, its size in bytes), arrays of shape
    (count, columns): a granule is its row count (VarUInt), then one filter of ceil(bits * rows / 8)
    bytes per index column."""
    buf = np.frombuffer(data.stream, np.uint8)
    starts = np.zeros((count, columns), np.int64)
    sizes = np.zeros((count, columns), np.int64)
    pos = 0
    for granule in range(count):
        rows, pos = read_varuint(buf, pos, f"{where}: bloom filter granule {granule} of {count}")
        size = (bits_per_row * rows + 7) // 8
        for column in range(columns):
            starts[granule, column], sizes[granule, column] = pos, size
            pos += size
    if pos != len(buf):
        raise CorruptPartError(f"{where}: {len(buf) - pos} bytes left after {count} bloom filter granules")
    return buf, starts, sizes


def _int_hash64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _MASK64
    return x ^ (x >> 33)


def hash128_to_64(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """CityHash's Hash128to64 of (low, high) pairs, uint64 arithmetic wrapping."""
    mul = np.uint64(0x9DDFEA08EB382D69)
    with np.errstate(over="ignore"):
        a = (low ^ high) * mul
        a ^= a >> np.uint64(47)
        b = (high ^ a) * mul
        b ^= b >> np.uint64(47)
        return b * mul


def bloom_value_hash(value: object, type_text: str) -> int | None:
    """The 64-bit hash a bloom_filter index files `value` (of the index column's type) under, or None
    for a type whose hashing is not reproduced (then the index is not used)."""
    from clickhouse_cityhash.cityhash import CityHash64

    dt = parse_type(type_text)
    while isinstance(dt, Nullable):
        dt = dt.inner
    name = dt.to_clickhouse()
    if is_string(dt) or name.startswith("FixedString("):
        if isinstance(value, str):
            raw = value.encode()
        elif isinstance(value, (bytes, bytearray)):
            raw = bytes(value)
        else:
            return None
        if name.startswith("FixedString("):
            raw = raw.ljust(fixed_width(dt), b"\0")
        return int(CityHash64(raw))
    widths = {"UInt8": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8, "Int8": 1, "Int16": 2, "Int32": 4, "Int64": 8,
              "Date": 2, "Date32": 4, "DateTime": 4}
    if name in widths or name.startswith("DateTime("):
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                return None
            value = int(value.timestamp())
        elif isinstance(value, datetime.date):
            value = (value - datetime.date(1970, 1, 1)).days
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        width = widths.get(name, 4)
        return _int_hash64(value & ((1 << (8 * width)) - 1))
    if name in ("Float32", "Float64") and isinstance(value, (int, float)):
        (bits,) = struct.unpack("<Q", struct.pack("<d", float(value)))
        return _int_hash64(bits)
    return None


def bloom_positions(value_hash: int, hashes: int, filter_bits: np.ndarray) -> np.ndarray:
    """Bit positions (one row per hash function) of a hashed value in filters of `filter_bits` bits."""
    seeds = np.array(BLOOM_SEEDS[:hashes], np.uint64)
    mixed = hash128_to_64(np.full(hashes, value_hash, np.uint64), seeds)
    bits = np.maximum(filter_bits.astype(np.uint64), np.uint64(1))
    return (mixed[:, None] % bits[None, :]).astype(np.int64)


def bits_set(buf: np.ndarray, starts: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Whether bit `positions` (per filter) of filters starting at byte `starts` are set."""
    byte = buf[starts[None, :] + positions // 8] if len(buf) else np.zeros(positions.shape, np.uint8)
    return ((byte >> (positions % 8).astype(np.uint8)) & 1).astype(bool)


# ---------------------------------------------------------------------------------------------
# ngrambf_v1 / tokenbf_v1: one filter of a fixed size per index column per granule.
# ---------------------------------------------------------------------------------------------

_SEED_GEN_A = 845897321
_SEED_GEN_B = 217728422


def text_bloom_granules(data: SkipIndexData, columns: int, count: int, size: int, where: str) -> np.ndarray:
    """The filters of an ngrambf_v1/tokenbf_v1 index: bytes of shape (count, columns, size)."""
    expected = count * columns * size
    if len(data.stream) != expected:
        raise CorruptPartError(f"{where}: {len(data.stream)} bytes, not {count} granules of {columns} filters "
                               f"of {size} bytes")
    return np.frombuffer(data.stream, np.uint8).reshape(count, columns, size)


def text_bloom_contains(filters: np.ndarray, token: bytes, hashes: int, seed: int) -> np.ndarray:
    """Per filter (rows of `filters`, each `size` bytes): whether `token` may have been added."""
    from clickhouse_cityhash.cityhash import CityHash64WithSeed

    size = filters.shape[-1]
    hash1 = int(CityHash64WithSeed(token, seed & _MASK64))
    hash2 = int(CityHash64WithSeed(token, (_SEED_GEN_A * seed + _SEED_GEN_B) & _MASK64))
    result = np.ones(filters.shape[0], dtype=bool)
    for i in range(hashes):
        position = ((hash1 + i * hash2 + i * i) & _MASK64) % (8 * size)
        result &= ((filters[:, position // 8] >> (position % 8)) & 1).astype(bool)
    return result
