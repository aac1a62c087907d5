"""Writes the data-skipping indexes of a part (format_spec/skip_indexes.md): for each declared index,
`skp_idx_<name>.idx2` (minmax) or `skp_idx_<name>.idx` (set, bloom_filter, ngrambf_v1, tokenbf_v1)
and its marks `skp_idx_<name>.mrk2` (in a Compact part `.cmrk4`: the same marks compressed), the bytes
ClickHouse writes for the same rows and granules with `packed_skip_index_max_bytes = 0` (ClickHouse reads both that layout and its `skp_idx.packed` archive).

An index granule covers `granularity` consecutive data granules. Its data is a compressed stream
(the table's default codec, blocks cut as for a column), one mark (compressed offset, offset in the
block, 1) per index granule, no final mark. What one granule holds:

- minmax: each column's min then max, in its type's binary form (a Nullable column's max is NULL when
  the granule holds a NULL; its min is the least value that is not NULL, NULL when all are).
- set(N): the distinct values (tuples) in order of first appearance as a UInt64 count and each
  column's values in its bulk binary form; a count of 0 when the granule holds more than N.
- bloom_filter: VarUInt rows (the most distinct value hashes of one column), then per column a filter
  of ceil(bits_per_row * rows / 8) bytes with each distinct hash set under k seeds.
- ngrambf_v1 / tokenbf_v1: per column a filter of the declared size, every n-gram / token of every
  value added with two seeded CityHash64s.

An index whose column types we cannot build it for is not written: the part then has no such index
(as a part written before the index was added), and ClickHouse and we read all of its granules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mergetree.format.checksums import FileChecksum
from spark_mergetree.format.cityhash import file_hash
from spark_mergetree.format.compression import CompressedStreamWriter
from spark_mergetree.format.compression_codecs import Codec
from spark_mergetree.format.granularity import granule_offsets
from spark_mergetree.format.marks import write_wide_marks
from spark_mergetree.format.row_binary import interleave_chunks, value_chunks
from spark_mergetree.format.skip_index import (
    BLOOM_SEEDS,
    INDEX_PREFIX,
    bloom_filter_parameters,
    hash128_to_64,
)
from spark_mergetree.format.types import (
    Array,
    DataType,
    DateTime,
    DateTime64,
    Decimal,
    Enum,
    FixedString,
    LowCardinality,
    Nullable,
    Primitive,
    parse_type,
)
from spark_mergetree.format.values import (
    combine,
    default_scalar,
    encode_varuints,
    fixed_storage,
    list_parts,
    string_buffers,
)

__all__ = ["IndexSpec", "SkipIndexBuilder", "index_buildable", "skip_index_builders", "skip_indexes_from_columns",
           "value_hashes", "int_hash64"]

_MASK64 = (1 << 64) - 1
_INT_TYPES = {"UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64", "Date", "Date32",
              "DateTime", "DateTime64", "Enum8", "Enum16"}
# Types of single values (what minmax and set indexes hold).
_SCALAR = (Primitive, FixedString, DateTime, DateTime64, Decimal, Enum)


@dataclass(frozen=True)
class IndexSpec:
    """One skip index to write: its name, type, columns (plain columns only), arguments and
    granularity (data granules per index granule)."""

    name: str
    type: str
    columns: tuple[str, ...]
    arguments: tuple[float, ...]
    granularity: int

    @property
    def built_from_rows(self) -> bool:
        """Whether an index granule needs the rows of all its columns at once (set and bloom_filter
        over several columns: a granule's distinct tuples, every filter's size); the other indexes
        are built from each column on its own. A writer gives such columns side by side."""
        return len(self.columns) > 1 and self.type not in ("minmax", "ngrambf_v1", "tokenbf_v1")


def columns_built_together(specs: Sequence[IndexSpec]) -> set[str]:
    """The columns of the indexes that need them side by side (`IndexSpec.built_from_rows`)."""
    return {column for spec in specs if spec.built_from_rows for column in spec.columns}


def _base(dt: DataType) -> DataType:
    while isinstance(dt, (Nullable, LowCardinality)):
        dt = dt.inner
    return dt


def _base_name(dt: DataType) -> str:
    name = _base(dt).to_clickhouse()
    return name.split("(")[0] if name.startswith(("DateTime(", "DateTime64(", "Enum8(", "Enum16(")) else name


def index_buildable(spec: IndexSpec, types: Sequence[str]) -> bool:
    """Whether we write `spec` for columns of these ClickHouse types."""
    if not spec.columns or len(types) != len(spec.columns) or spec.granularity < 1:
        return False
    dts = [parse_type(t) for t in types]
    if spec.type == "minmax":
        return all(isinstance(_base(dt), _SCALAR) for dt in dts)
    if spec.type == "set":
        return all(isinstance(_base(dt), _SCALAR) for dt in dts)
    if spec.type == "bloom_filter":
        dts = [dt.inner if isinstance(dt, Array) and not isinstance(dt.inner, Nullable) else dt for dt in dts]
        return all(isinstance(_base(dt), _SCALAR) and (_base_name(dt) in _INT_TYPES
                   or _base_name(dt) in ("Float32", "Float64", "String") or _base_name(dt).startswith("FixedString("))
                   for dt in dts)
    if spec.type in ("ngrambf_v1", "tokenbf_v1"):
        return all(not isinstance(dt, Nullable) and (_base_name(dt) == "String" or isinstance(_base(dt), FixedString))
                   for dt in dts)
    return False


def _index_granules(granule_rows: np.ndarray, granularity: int) -> np.ndarray:
    """Row bounds of the index granules (count + 1 offsets)."""
    starts = granule_offsets(granule_rows)
    picks = np.arange(0, len(granule_rows), granularity)
    return np.append(starts[picks], starts[-1]).astype(np.int64)


def _granule_of_rows(bounds: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))


def _plain_values(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    values = combine(arr)
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    return values


# --- minmax ----------------------------------------------------------------------------------------

def _minmax(dts: Sequence[DataType], columns: Sequence[pa.Array], bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    parts = []
    for dt, values in zip(dts, columns, strict=True):
        lows, highs = [], []
        for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            piece = values.slice(begin, end - begin)
            found = pc.min_max(piece)
            lows.append(found["min"].as_py())
            highs.append(None if piece.null_count else found["max"].as_py())
        parts.append(value_chunks(dt, pa.array(lows, type=values.type)))
        parts.append(value_chunks(dt, pa.array(highs, type=values.type)))
    return interleave_chunks(parts)


# --- set(N) ----------------------------------------------------------------------------------------

def _set(spec: IndexSpec, dts: Sequence[DataType], columns: Sequence[pa.Array],
         bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count = len(bounds) - 1
    granule = _granule_of_rows(bounds)
    names = [f"c{i}" for i in range(len(columns))]
    table = pa.table({"g": granule, "r": np.arange(len(granule), dtype=np.int64),
                      **{n: c for n, c in zip(names, columns, strict=True)}})
    first = np.sort(table.group_by(["g", *names], use_threads=False).aggregate([("r", "min")])
                    .column("r_min").to_numpy())
    sizes = np.bincount(granule[first], minlength=count)
    limit = int(spec.arguments[0]) if spec.arguments else 0
    if limit:
        over = sizes > limit
        first = first[~over[granule[first]]]
        sizes = np.where(over, 0, sizes)
    value_bounds = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=value_bounds[1:])
    parts = [(sizes.astype("<u8").view(np.uint8), np.arange(count + 1, dtype=np.int64) * 8)]
    picks = pa.array(first)
    for dt, values in zip(dts, columns, strict=True):
        kept = values.take(picks)
        if isinstance(dt, LowCardinality):
            parts.append(_low_cardinality_sets(dt, kept, value_bounds))
            continue
        if isinstance(dt, Nullable):  # the null map, then the values (a NULL as its type's default)
            nulls = np.asarray(kept.is_null(), np.uint8) if kept.null_count else np.zeros(len(kept), np.uint8)
            parts.append((nulls, value_bounds))
            dt = dt.inner
            if kept.null_count:
                kept = kept.fill_null(default_scalar(dt, kept.type))
        data, offsets = value_chunks(dt, kept)
        parts.append((data, offsets[value_bounds]))
    return interleave_chunks(parts)


_LC_KEYS_VERSION = 1  # LowCardinality's bulk state prefix: keys serialization version
_LC_FLAGS = (1 << 9) | (1 << 10)  # HasAdditionalKeys | NeedUpdateDictionary, over the index width code


def _low_cardinality_sets(dt: LowCardinality, values: pa.Array, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each granule's values of a LowCardinality column in its single-stream bulk form: the keys
    version, the index type, the granule's dictionary (for LowCardinality(Nullable): a NULL slot, then
    the default, then the other values in order of appearance) and each value's index into it. A
    loop over index granules."""
    inner = dt.inner
    nullable = isinstance(inner, Nullable)
    base = inner.inner if isinstance(inner, Nullable) else inner
    arrow_type = values.type.value_type if pa.types.is_dictionary(values.type) else values.type
    default = default_scalar(base, arrow_type)
    pieces: list[bytes] = []
    for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if begin == end:
            pieces.append(b"")
            continue
        granule = values.slice(begin, end - begin)
        plain = granule.fill_null(default) if granule.null_count else granule
        is_default = np.asarray(pc.equal(plain, default).fill_null(False), bool)
        is_null = np.asarray(granule.is_null(), bool)
        others = ~is_default & ~is_null
        reserved = 2 if nullable else 1
        other_values = plain.filter(pa.array(others))
        distinct = pc.unique(other_values)  # in order of first appearance
        keys = pa.concat_arrays([pa.array([default] * reserved, arrow_type), distinct])
        indices = np.where(is_null, 0, reserved - 1)
        indices[others] = reserved + np.asarray(pc.index_in(other_values, value_set=distinct), np.int64)
        code, width = next((c, w) for c, w in enumerate((1, 2, 4, 8)) if len(keys) <= 1 << (8 * w))
        key_bytes, _ = value_chunks(base, keys)
        pieces.append(np.array([_LC_KEYS_VERSION, _LC_FLAGS | code, len(keys)], "<u8").tobytes() + key_bytes.tobytes()
                      + np.array([len(granule)], "<u8").tobytes() + indices.astype(f"<u{width}").tobytes())
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    return np.frombuffer(b"".join(pieces), np.uint8), offsets


# --- bloom_filter ----------------------------------------------------------------------------------

def int_hash64(x: np.ndarray) -> np.ndarray:
    """ClickHouse's intHash64 (the murmur finalizer), on uint64."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(33))
        x = x * np.uint64(0xFF51AFD7ED558CCD)
        x = x ^ (x >> np.uint64(33))
        x = x * np.uint64(0xC4CEB9FE1A85EC53)
        return x ^ (x >> np.uint64(33))


def value_hashes(dt: DataType, values: pa.Array) -> np.ndarray:
    """The 64-bit hash a bloom_filter index files each value under (a NULL as its type's default):
    CityHash64 of a string's bytes, intHash64 of a number's, as ClickHouse's `cityHash64(x)` of
    one argument gives them too."""
    if isinstance(dt, Nullable):
        inner = dt.inner
        if values.null_count:
            values = values.fill_null(default_scalar(_base(inner), values.type))
        return value_hashes(inner, values)
    if isinstance(dt, LowCardinality):
        return value_hashes(dt.inner, values)
    name = _base_name(dt)
    if name == "String":
        from spark_mergetree.format.skip_index_compiled import string_hashes

        offsets, data = string_buffers(values)
        return string_hashes(data, offsets)
    if name.startswith("FixedString("):
        from spark_mergetree.format.skip_index_compiled import string_hashes

        raw = fixed_storage(dt, values, "index")
        width = raw.dtype.itemsize if raw.ndim == 1 else raw.shape[1]
        return string_hashes(np.frombuffer(raw.tobytes(), np.uint8), np.arange(len(values) + 1, dtype=np.int64) * width)
    if name in ("Float32", "Float64"):
        floats = np.asarray(values.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False), np.float64)
        return int_hash64(floats.view(np.uint64))
    raw = np.ascontiguousarray(fixed_storage(dt, values, "index"))
    unsigned = raw.view(f"<u{raw.dtype.itemsize}")
    return int_hash64(unsigned.astype(np.uint64))


def _bloom(spec: IndexSpec, dts: Sequence[DataType], columns: Sequence[pa.Array], bounds: np.ndarray,
           granule_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    count = len(bounds) - 1
    bits_per_row, hashes = bloom_filter_parameters(spec.arguments[0] if spec.arguments else 0.025)
    distinct = []
    for dt, values in zip(dts, columns, strict=True):
        value_bounds, extra = bounds, [np.zeros(0, np.uint64)] * count
        if isinstance(dt, Array):  # the elements' hashes; a data granule of empty arrays adds hash 0
            lengths, child = list_parts(values)
            element_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
            value_hash = value_hashes(dt.inner, child)
            value_bounds = element_offsets[bounds]
            elements = np.diff(element_offsets[granule_offsets(granule_rows)])
            empty = np.zeros(count, bool)
            empty[np.flatnonzero(elements == 0) // spec.granularity] = True
            extra = [np.zeros(1 if e else 0, np.uint64) for e in empty.tolist()]
        else:
            value_hash = value_hashes(dt, values)
        # Each granule's distinct hashes (a loop over index granules, each np.unique vectorised).
        unique = [np.unique(np.concatenate((value_hash[begin:end], more))) for begin, end, more
                  in zip(value_bounds[:-1].tolist(), value_bounds[1:].tolist(), extra, strict=True)]
        counts = np.array([len(u) for u in unique], np.int64)
        distinct.append((np.repeat(np.arange(count, dtype=np.int64), counts), np.concatenate(unique)))
    rows = np.max([np.bincount(g, minlength=count) for g, _ in distinct], axis=0).astype(np.int64)
    sizes = (bits_per_row * rows + 7) // 8
    starts = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    parts = [encode_varuints(rows.astype(np.uint64))]
    seeds = np.array(BLOOM_SEEDS[:hashes], np.uint64)
    for g, h in distinct:
        bits = np.zeros(int(starts[-1]) * 8, bool)
        for seed in seeds:
            position = hash128_to_64(h, np.full(len(h), seed, np.uint64)) % (sizes[g] * 8).astype(np.uint64)
            bits[starts[g] * 8 + position.astype(np.int64)] = True
        buffer = np.packbits(bits, bitorder="little")
        parts.append((buffer, starts))
    return interleave_chunks(parts)


# --- ngrambf_v1 / tokenbf_v1 -----------------------------------------------------------------------

def _text(spec: IndexSpec, dts: Sequence[DataType], columns: Sequence[pa.Array],
          bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from spark_mergetree.format.skip_index_compiled import text_filters

    count = len(bounds) - 1
    size, hashes, seed = (int(a) for a in spec.arguments[-3:])
    ngram = int(spec.arguments[0]) if spec.type == "ngrambf_v1" else 0
    filters = np.zeros((count, len(columns), size), np.uint8)
    granule = _granule_of_rows(bounds)
    for position, (dt, values) in enumerate(zip(dts, columns, strict=True)):
        if isinstance(_base(dt), FixedString):  # every value's N bytes, zero padding included
            raw = np.ascontiguousarray(fixed_storage(_base(dt), values, "index"))
            data = np.frombuffer(raw.tobytes(), np.uint8)
            offsets = np.arange(len(values) + 1, dtype=np.int64) * (len(data) // max(len(values), 1))
        else:
            offsets, data = string_buffers(values)
        text_filters(filters, position, data, offsets, granule, ngram, hashes, seed)
    return filters.reshape(-1), np.arange(count + 1, dtype=np.int64) * len(columns) * size


# --- files -----------------------------------------------------------------------------------------

def _index_bytes(spec: IndexSpec, dts: Sequence[DataType], columns: Sequence[pa.Array],
                 granule_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The uncompressed bytes of the index granules over these data granules, and their offsets."""
    bounds = _index_granules(granule_rows, spec.granularity)
    if spec.type == "minmax":
        return _minmax(dts, columns, bounds)
    if spec.type == "set":
        return _set(spec, dts, columns, bounds)
    if spec.type == "bloom_filter":
        return _bloom(spec, dts, columns, bounds, granule_rows)
    return _text(spec, dts, columns, bounds)


def _joined(chunks: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Chunked byte arrays of consecutive entries as one."""
    if len(chunks) == 1:
        return chunks[0]
    data = np.concatenate([np.asarray(d, np.uint8) for d, _ in chunks]) if chunks else np.zeros(0, np.uint8)
    offsets, base = [np.zeros(1, np.int64)], 0
    for d, o in chunks:
        offsets.append(np.asarray(o[1:], np.int64) + base)
        base += len(d)
    return data, np.concatenate(offsets)


class SkipIndexBuilder:
    """One skip index of a part, built as the part's columns arrive in runs of whole data granules
    (each column in order, any number of calls). Memory holds what an index granule needs, not the part:

    - an index of one column compresses each index granule as soon as its rows are in;
    - minmax, ngrambf_v1 and tokenbf_v1 over several columns hold each column's uncompressed index
      bytes (they are laid side by side in each granule) until the last column is in;
    - set and bloom_filter over several columns (`IndexSpec.built_from_rows`) build each index
      granule once every column's rows of it are in, holding the rows that came ahead of the
      slowest column (writers give these columns side by side, so that stays a block)."""

    def __init__(self, spec: IndexSpec, types: Sequence[str], granule_rows: np.ndarray, codec: Codec,
                 min_block: int, max_block: int) -> None:
        self.spec = spec
        self.dts = [parse_type(t) for t in types]
        self.granule_rows = np.asarray(granule_rows, np.int64)
        self.starts = granule_offsets(self.granule_rows)
        self.index_granules = -(-len(self.granule_rows) // spec.granularity)
        self.writer = CompressedStreamWriter(codec, min_block, max_block)
        self._held: dict[str, list[pa.Array]] = {c: [] for c in spec.columns}  # rows not yet indexed
        self._end: dict[str, int] = dict.fromkeys(spec.columns, 0)  # data granules arrived per column
        self._done: dict[str, int] = dict.fromkeys(spec.columns, 0)  # index granules built per column
        self._pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in spec.columns}

    def add(self, column: str, values: pa.Array | pa.ChunkedArray, end_granule: int) -> None:
        """The next rows of `column`, up to data granule `end_granule` (exclusive)."""
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        self._held[column].extend(chunk for chunk in chunks if len(chunk))
        self._end[column] = end_granule
        together = self.spec.built_from_rows
        columns = list(self.spec.columns) if together else [column]
        end = min(self._end[c] for c in columns)
        granularity = self.spec.granularity
        ready = self.index_granules if end >= len(self.granule_rows) else end // granularity
        done = self._done[column]
        if ready <= done:
            return
        first, last = done * granularity, min(ready * granularity, len(self.granule_rows))
        rows = int(self.starts[last] - self.starts[first])
        taken = [self._take(c, rows) for c in columns]
        piece = _index_bytes(self.spec, [self.dts[self.spec.columns.index(c)] for c in columns], taken,
                             self.granule_rows[first:last])
        for c in columns:
            self._done[c] = ready
        if len(columns) == len(self.spec.columns):
            self.writer.append_granules(np.ascontiguousarray(piece[0], np.uint8).data, np.asarray(piece[1], np.int64))
        else:
            self._pieces[column].append(piece)

    def _take(self, column: str, rows: int) -> pa.Array:
        """The first `rows` held rows of `column` (no longer held)."""
        held = self._held[column]
        values = pa.chunked_array(held, held[0].type) if held else pa.chunked_array([], pa.null())
        self._held[column] = list(values.slice(rows).chunks)
        return _plain_values(values.slice(0, rows))

    def finish(self, files: dict[str, bytes | memoryview], checksums: dict[str, FileChecksum],
               compact: bool = False) -> None:
        """Write the index's data and marks files (and the data file's checksum). `compact`: the
        part is Compact, whose index marks ClickHouse looks for under the part's marks extension."""
        spec = self.spec
        if len(spec.columns) > 1 and not spec.built_from_rows:
            data, offsets = interleave_chunks([_joined(self._pieces[c]) for c in spec.columns])
            self.writer.append_granules(np.ascontiguousarray(data, np.uint8).data, np.asarray(offsets, np.int64))
        self.writer.finish()
        body = self.writer.getvalue()
        name = f"{INDEX_PREFIX}{spec.name}.{'idx2' if spec.type == 'minmax' else 'idx'}"
        files[name] = body
        checksums[name] = FileChecksum(len(body), file_hash(body), True, self.writer.uncompressed_size,
                                       self.writer.uncompressed_hash)
        marks = np.empty((self.index_granules, 3), np.uint64)
        marks[:, :2] = self.writer.marks
        marks[:, 2] = 1
        if compact:  # the same marks, compressed, as `skp_idx_<name>.cmrk4` (a Compact part's `data.cmrk4`)
            files[f"{INDEX_PREFIX}{spec.name}.cmrk4"] = write_wide_marks(marks, compressed=True)
        else:
            files[f"{INDEX_PREFIX}{spec.name}.mrk2"] = write_wide_marks(marks)


def skip_index_builders(specs: Sequence[IndexSpec], type_of: dict[str, str], granule_rows: np.ndarray,
                        codec: Codec, min_block: int, max_block: int) -> list[SkipIndexBuilder]:
    """A builder for every index of `specs` we can build for these columns (none for a part of no rows)."""
    if not len(granule_rows) or not int(np.sum(granule_rows)):
        return []
    builders = []
    for spec in specs:
        types = [type_of.get(c, "") for c in spec.columns]
        if all(types) and index_buildable(spec, types):
            builders.append(SkipIndexBuilder(spec, types, granule_rows, codec, min_block, max_block))
    return builders


def skip_indexes_from_columns(specs: Sequence[IndexSpec], type_of: dict[str, str], granule_rows: np.ndarray,
                              column_of: Callable[[str], pa.Array | pa.ChunkedArray], codec: Codec,
                              min_block: int, max_block: int) -> list[SkipIndexBuilder]:
    """The builders of `skip_index_builders`, given every column whole (ready to finish)."""
    builders = skip_index_builders(specs, type_of, granule_rows, codec, min_block, max_block)
    for builder in builders:
        for column in builder.spec.columns:
            builder.add(column, column_of(column), len(granule_rows))
    return builders
