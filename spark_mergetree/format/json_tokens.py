"""A JSON column's text → its objects' leaf members as flat arrays, in one compiled pass.

`tokenize` reads the UTF-8 bytes of every row once (a numba kernel) and validates each document as
`json.loads` with json_infer's hooks reads it: JSON whitespace only, strict strings (no raw control
characters, the escapes JSON has), JSON's number grammar, `true`/`false`/`null` (`NaN`, `Infinity`
refused), one object per row and nothing after it. Every member of an object outside arrays (not
NULL) becomes a *record*: its row, a 64-bit FNV-1a hash of its dotted path (built incrementally:
the parent's hash, `.`, the key's bytes), its kind, its value's byte span, and — for strings and
numbers — its text: strings unescaped, numbers as written, into one buffer in record order.
Integers are read exactly in the kernel (their magnitude, and whether they are an Int64, a UInt64 or
beyond 64 bits). Arrays are validated and kept whole (their span). Members holding objects are
records too: the parents from which a leaf's path is rebuilt.

Paths are interned by hash (numpy `unique`, in order of first appearance) and every leaf's path is
then compared byte by byte with its path's first one, so a hash collision cannot merge two paths;
a path twice in one document is found on the way. Whatever this does not read — a document
`json.loads` refuses, a key with an escape, a lone surrogate, a path twice in a row, deep nesting,
a collision — makes `tokenize` give None: the caller then reads the column as before, which refuses
what is invalid with its usual error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.values import string_buffers

__all__ = ["Tokens", "tokenize", "path_hash", "STRING", "INT", "FLOAT", "TRUE", "FALSE", "ARRAY", "INT64", "UINT64", "BEYOND_64"]

# Record kinds (a NULL member makes no record).
STRING, INT, FLOAT, TRUE, FALSE, ARRAY, OBJECT = range(7)
# An integer's class (INT records' flags): what json_infer types it as.
INT64, UINT64, BEYOND_64 = range(3)
# A string's flags: all its (unescaped) bytes are printable ASCII; it holds an ASCII digit.
PRINTABLE, DIGIT = 1, 2

# Record fields.
_ROW, _HASH, _KIND, _RAW_START, _RAW_END, _TEXT_START, _TEXT_END, _PARENT, _KEY_START, _KEY_END, _INT, _FLAGS = \
    range(12)
_FIELDS = 12
_MAX_DEPTH = 256  # deeper documents take the per-row reader (json.loads refuses ~1000 levels)
_MAX_DIGITS = 4000  # Python refuses integers of more than 4300 digits (sys.int_info)
_FNV_BASIS, _FNV_PRIME = 14695981039346656037, 1099511628211


@dataclass
class Tokens:
    """The leaf members of a column's objects (members holding neither an object nor NULL), in row
    order and document order within a row."""

    rows: np.ndarray  # int64: the row holding it
    path_codes: np.ndarray  # int64: index into `paths`
    paths: list[str]  # dotted paths in order of first appearance
    kinds: np.ndarray  # int8: STRING, INT, FLOAT, TRUE, FALSE or ARRAY
    texts: pa.Array  # string per leaf: a string's value, a number's text, else empty
    ints: np.ndarray  # int64: an INT's value (two's complement bits of a UInt64)
    flags: np.ndarray  # int64: an INT's class; a STRING's PRINTABLE | DIGIT bits
    raw: tuple[np.ndarray, np.ndarray]  # each value's byte span in `source` (start, end)
    source: np.ndarray  # the column's bytes
    dotted_keys: bool  # whether a key holds a `.` (its path's `.`s are not all nesting)
    objects: np.ndarray  # int64: the path hash (`path_hash`) of every member holding an object

    def without_paths(self, dropped: np.ndarray) -> Tokens:
        """The leaves of the paths not `dropped` (a bool per path), codes renumbered in the same order."""
        keep = ~dropped[self.path_codes]
        codes = np.cumsum(~dropped) - 1
        return Tokens(self.rows[keep], codes[self.path_codes[keep]], [p for p, d in zip(self.paths, dropped) if not d],
                      self.kinds[keep], self.texts.filter(pa.array(keep)), self.ints[keep], self.flags[keep],
                      (self.raw[0][keep], self.raw[1][keep]), self.source, self.dotted_keys, self.objects)


def tokenize(texts: pa.Array) -> Tokens | None:
    """The leaf members of every row's object (a NULL row has none); None where the column holds
    something this reader leaves to `json.loads` (see the module's docstring)."""
    offsets, data = string_buffers(texts)
    valid = np.asarray(texts.is_valid(), dtype=bool)
    status, records, count, text_bytes, dotted = _scan(data, offsets, valid)
    if status:
        return None
    records = records[:, :count]
    leaf = records[_KIND] != OBJECT
    leaves = np.flatnonzero(leaf)
    codes, first = _intern(records[_HASH, leaves])
    representative = leaves[first]
    if not _paths_agree(records, data, leaves, codes, representative):
        return None  # a hash collision, or a path twice in one document
    paths = [_path_of(records, data, int(r)) for r in representative]
    text_offsets = np.append(records[_TEXT_START, leaves], records[_TEXT_END, leaves[-1]] if len(leaves) else 0)
    large = text_offsets[-1] >= 2**31
    text_array = pa.Array.from_buffers(
        pa.large_string() if large else pa.string(), len(leaves),
        [None, pa.py_buffer(text_offsets if large else text_offsets.astype(np.int32)), pa.py_buffer(text_bytes)])
    return Tokens(records[_ROW, leaves], codes, paths, records[_KIND, leaves].astype(np.int8), text_array,
                  records[_INT, leaves], records[_FLAGS, leaves], (records[_RAW_START, leaves], records[_RAW_END, leaves]),
                  data, bool(dotted), records[_HASH, ~leaf])


def path_hash(path: str) -> int:
    """The hash `tokenize` gives a member whose dotted path is `path` (however its keys nest), as
    the int64 its records hold."""
    h = _FNV_BASIS
    for byte in path.encode("utf-8"):
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


@lazy_njit
def _intern(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each hash's code, codes numbered in order of first appearance, and each code's first index
    (an open-addressing table, doubled as it fills)."""
    size = 1024
    slots = np.full(size, -1, np.int64)  # code in the slot, -1: empty
    first = np.empty(max(16, len(hashes)), np.int64)
    codes = np.empty(len(hashes), np.int64)
    count = 0
    for i in range(len(hashes)):
        h = hashes[i]
        at = h & (size - 1)
        while slots[at] >= 0 and hashes[first[slots[at]]] != h:
            at = (at + 1) & (size - 1)
        if slots[at] >= 0:
            codes[i] = slots[at]
            continue
        slots[at] = count
        first[count] = i
        codes[i] = count
        count += 1
        if count * 2 > size:
            size *= 2
            slots = np.full(size, -1, np.int64)
            for c in range(count):
                at = hashes[first[c]] & (size - 1)
                while slots[at] >= 0:
                    at = (at + 1) & (size - 1)
                slots[at] = c
    return codes, first[:count]


def _path_of(records: np.ndarray, data: np.ndarray, record: int) -> str:
    keys = []
    while record >= 0:
        keys.append(data[records[_KEY_START, record]:records[_KEY_END, record]].tobytes().decode("utf-8"))
        record = int(records[_PARENT, record])
    return ".".join(reversed(keys))


@lazy_njit
def _paths_agree(records: np.ndarray, data: np.ndarray, leaves: np.ndarray, codes: np.ndarray,
                 representative: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether every leaf's dotted path has the bytes of its code's first leaf's path, and no row
    holds a path twice."""
    last_row = np.full(len(representative), -1, np.int64)
    for i in range(len(leaves)):
        code = codes[i]
        row = records[_ROW, leaves[i]]
        if last_row[code] == row:
            return False
        last_row[code] = row
        a = leaves[i]
        b = representative[code]
        if a == b:
            continue
        if _same_keys(records, data, a, b):
            continue
        at_a = records[_KEY_END, a]
        at_b = records[_KEY_END, b]
        while True:  # both paths' bytes from their ends (keys nested otherwise: `a.b` and `a` {`b`})
            byte_a, a, at_a = _byte_before(records, data, a, at_a)
            byte_b, b, at_b = _byte_before(records, data, b, at_b)
            if byte_a != byte_b:
                return False
            if byte_a < 0:
                break
    return True


@lazy_njit
def _same_keys(records: np.ndarray, data: np.ndarray, a: int, b: int) -> bool:  # pragma: no cover - compiled
    """Whether two records' paths have the same keys, level by level (the usual case: then their
    paths are the same; else they may still be, nested otherwise)."""
    while a >= 0 and b >= 0:
        start_a, start_b = records[_KEY_START, a], records[_KEY_START, b]
        length = records[_KEY_END, a] - start_a
        if length != records[_KEY_END, b] - start_b:
            return False
        for k in range(length):
            if data[start_a + k] != data[start_b + k]:
                return False
        a, b = records[_PARENT, a], records[_PARENT, b]
    return a < 0 and b < 0


@lazy_njit
def _byte_before(records: np.ndarray, data: np.ndarray, record: int, at: int) -> tuple[int, int, int]:  # pragma: no cover
    """The byte of a record's dotted path before position `at` of its key — its key's, else `.` and
    then its parent's key's — as (byte or -1 at the path's start, record, position)."""
    if at > records[_KEY_START, record]:
        return np.int64(data[at - 1]), record, at - 1
    parent = records[_PARENT, record]
    if parent < 0:
        return -1, record, at
    return 46, parent, records[_KEY_END, parent]


@lazy_njit
def _whitespace(data: np.ndarray, pos: int, end: int) -> int:  # pragma: no cover - compiled
    while pos < end:
        b = data[pos]
        if b != 32 and b != 9 and b != 10 and b != 13:
            break
        pos += 1
    return pos


@lazy_njit
def hex_digits(data: np.ndarray, pos: int, end: int) -> int:  # pragma: no cover - compiled
    """The 4 hex digits at `pos` as a number, -1 when they are not."""
    if pos + 4 > end:
        return -1
    value = 0
    for k in range(4):
        b = data[pos + k]
        if 48 <= b <= 57:
            d = b - 48
        elif 97 <= b <= 102:
            d = b - 87
        elif 65 <= b <= 70:
            d = b - 55
        else:
            return -1
        value = value * 16 + d
    return value


@lazy_njit
def _string(data: np.ndarray, pos: int, end: int, out: np.ndarray, at: int) -> tuple[int, int, int]:  # pragma: no cover
    """The string whose opening quote is at `pos`, unescaped into `out` from `at` (when `at` >= 0):
    (position after its closing quote or -1 when invalid or unread here, end in `out`, flags)."""
    pos += 1
    flags = PRINTABLE
    while True:
        if pos >= end:
            return -1, at, 0
        b = data[pos]
        if b == 34:
            return pos + 1, at, flags
        if b < 32:
            return -1, at, 0
        if b != 92:
            if b >= 127:
                flags &= ~PRINTABLE
            elif 48 <= b <= 57:
                flags |= DIGIT
            if at >= 0:
                out[at] = b
                at += 1
            pos += 1
            continue
        if pos + 1 >= end:
            return -1, at, 0
        e = data[pos + 1]
        pos += 2
        code = -1
        if e == 34 or e == 92 or e == 47:
            code = e
        elif e == 98:
            code = 8
        elif e == 102:
            code = 12
        elif e == 110:
            code = 10
        elif e == 114:
            code = 13
        elif e == 116:
            code = 9
        elif e == 117:
            code = hex_digits(data, pos, end)
            if code < 0:
                return -1, at, 0
            pos += 4
            if 0xDC00 <= code <= 0xDFFF:
                return -1, at, 0  # a lone low surrogate: left to json.loads
            if 0xD800 <= code <= 0xDBFF:
                if pos + 6 > end or data[pos] != 92 or data[pos + 1] != 117:
                    return -1, at, 0
                low = hex_digits(data, pos + 2, end)
                if not 0xDC00 <= low <= 0xDFFF:
                    return -1, at, 0
                pos += 6
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
        else:
            return -1, at, 0
        if code < 32 or code >= 127:
            flags &= ~PRINTABLE
        elif 48 <= code <= 57:
            flags |= DIGIT
        if at < 0:
            continue
        if code < 0x80:
            out[at] = code
            at += 1
        elif code < 0x800:
            out[at] = 0xC0 | (code >> 6)
            out[at + 1] = 0x80 | (code & 0x3F)
            at += 2
        elif code < 0x10000:
            out[at] = 0xE0 | (code >> 12)
            out[at + 1] = 0x80 | ((code >> 6) & 0x3F)
            out[at + 2] = 0x80 | (code & 0x3F)
            at += 3
        else:
            out[at] = 0xF0 | (code >> 18)
            out[at + 1] = 0x80 | ((code >> 12) & 0x3F)
            out[at + 2] = 0x80 | ((code >> 6) & 0x3F)
            out[at + 3] = 0x80 | (code & 0x3F)
            at += 4


@lazy_njit
def _number(data: np.ndarray, pos: int, end: int) -> tuple[int, bool, int, int]:  # pragma: no cover - compiled
    """The number at `pos` by JSON's grammar (as json's scanner reads it: a `.` or exponent without
    digits is not part of it): (its end or -1, whether a float, an integer's value bits, its class)."""
    start = pos
    negative = data[pos] == 45
    if negative:
        pos += 1
    if pos >= end or not 48 <= data[pos] <= 57:
        return -1, False, 0, 0
    magnitude = np.uint64(0)
    beyond = False
    limit = np.uint64(1844674407370955161)  # (2**64 - 1) // 10
    if data[pos] == 48:
        pos += 1
    else:
        while pos < end and 48 <= data[pos] <= 57:
            digit = np.uint64(data[pos] - 48)
            if magnitude > limit or (magnitude == limit and digit > np.uint64(5)):
                beyond = True
            magnitude = magnitude * np.uint64(10) + digit
            pos += 1
    is_float = False
    if pos + 1 < end and data[pos] == 46 and 48 <= data[pos + 1] <= 57:
        is_float = True
        pos += 2
        while pos < end and 48 <= data[pos] <= 57:
            pos += 1
    if pos < end and (data[pos] == 101 or data[pos] == 69):
        e = pos + 1
        if e < end and (data[e] == 43 or data[e] == 45):
            e += 1
        if e < end and 48 <= data[e] <= 57:
            is_float = True
            pos = e
            while pos < end and 48 <= data[pos] <= 57:
                pos += 1
    if is_float:
        return pos, True, 0, 0
    if pos - start > _MAX_DIGITS:
        return -1, False, 0, 0
    if beyond:
        return pos, False, 0, BEYOND_64
    if negative:
        if magnitude > np.uint64(9223372036854775808):
            return pos, False, 0, BEYOND_64
        return pos, False, -np.int64(magnitude), INT64
    if magnitude > np.uint64(9223372036854775807):
        return pos, False, np.int64(magnitude), UINT64
    return pos, False, np.int64(magnitude), INT64


@lazy_njit
def _grown(records: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    bigger = np.empty((records.shape[0], records.shape[1] * 2), np.int64)
    bigger[:, :records.shape[1]] = records
    return bigger


@lazy_njit
def _scan(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray
          ) -> tuple[int, np.ndarray, int, np.ndarray, bool]:  # pragma: no cover - compiled
    """(0 or 1 where a row is not read here, the records, their count, the text buffer, whether a
    key holds a `.`)."""
    # (a record per 32 bytes of text at first, doubled as needed: a dense document has one per ~20)
    records = np.empty((_FIELDS, max(16, len(data) // 32)), np.int64)  # a row per field
    out = np.empty(len(data), np.uint8)
    count = 0
    at = 0
    dotted = False
    # Per open container: an object (1) or array (0); the record holding it (-1: the row's
    # object, or not recorded: inside an array); its path's hash followed by `.`.
    is_object = np.zeros(_MAX_DEPTH, np.bool_)
    holder = np.zeros(_MAX_DEPTH, np.int64)
    prefix = np.zeros(_MAX_DEPTH, np.uint64)
    recorded = np.zeros(_MAX_DEPTH, np.bool_)
    prime = np.uint64(_FNV_PRIME)
    for row in range(len(offsets) - 1):
        if not valid[row]:
            continue
        pos = _whitespace(data, offsets[row], offsets[row + 1])
        end = offsets[row + 1]
        if pos >= end or data[pos] != 123:
            return 1, records, count, out, False
        depth = 0
        is_object[0] = True
        holder[0] = -1
        prefix[0] = np.uint64(_FNV_BASIS)
        recorded[0] = True
        pos += 1
        member = np.uint64(0)
        key_start = key_end = 0
        expect = 0  # 0: a key or `}`; 1: a key; 2: a value; 3: `,` or a close; 4: a value or `]`
        while depth >= 0:
            pos = _whitespace(data, pos, end)
            if pos >= end:
                return 1, records, count, out, False
            b = data[pos]
            if expect == 0 or expect == 1:
                if b == 125 and expect == 0:
                    expect = 3
                else:
                    if b != 34:
                        return 1, records, count, out, False
                    key_start = pos + 1
                    pos, _, flags = _string(data, pos, end, out, -1)
                    if pos < 0:
                        return 1, records, count, out, False
                    key_end = pos - 1
                    for k in range(key_start, key_end):
                        if data[k] == 92:
                            return 1, records, count, out, False  # a key with an escape: left to json.loads
                    pos = _whitespace(data, pos, end)
                    if pos >= end or data[pos] != 58:
                        return 1, records, count, out, False
                    pos += 1
                    if recorded[depth]:
                        member = prefix[depth]
                        for k in range(key_start, key_end):
                            member = (member ^ np.uint64(data[k])) * prime
                            dotted |= data[k] == 46
                    expect = 2
                    continue
            if expect == 3:
                if b == 44:
                    expect = 1 if is_object[depth] else 2
                    pos += 1
                    continue
                if b != (125 if is_object[depth] else 93):
                    return 1, records, count, out, False
                pos += 1
                if not is_object[depth] and holder[depth] >= 0:
                    records[_RAW_END, holder[depth]] = pos
                depth -= 1
                continue
            if expect == 4 and b == 93:
                expect = 3
                continue
            # A value: a member's (recorded when its object is) or an array's item.
            record = -1
            if is_object[depth] and recorded[depth]:
                if count == records.shape[1]:
                    records = _grown(records)
                record = count
                count += 1
                records[_ROW, record] = row
                records[_HASH, record] = np.int64(member)
                records[_RAW_START, record] = pos
                records[_TEXT_START, record] = at
                records[_PARENT, record] = holder[depth]
                records[_KEY_START, record] = key_start
                records[_KEY_END, record] = key_end
                records[_INT, record] = 0
                records[_FLAGS, record] = 0
            kind = -1
            if b == 123 or b == 91:
                if depth + 1 >= _MAX_DEPTH:
                    return 1, records, count, out, False
                depth += 1
                is_object[depth] = b == 123
                holder[depth] = record
                recorded[depth] = record >= 0 and b == 123
                prefix[depth] = (member ^ np.uint64(46)) * prime
                kind = OBJECT if b == 123 else ARRAY
                pos += 1
                expect = 0 if b == 123 else 4
            elif b == 34:
                pos, written, flags = _string(data, pos, end, out, at if record >= 0 else -1)
                if pos < 0:
                    return 1, records, count, out, False
                kind = STRING
                if record >= 0:
                    at = written
                    records[_FLAGS, record] = flags
                expect = 3
            elif b == 45 or 48 <= b <= 57:
                start = pos
                pos, is_float, value, cls = _number(data, pos, end)
                if pos < 0:
                    return 1, records, count, out, False
                kind = FLOAT if is_float else INT
                if record >= 0:
                    out[at:at + pos - start] = data[start:pos]
                    at += pos - start
                    records[_INT, record] = value
                    records[_FLAGS, record] = cls
                expect = 3
            elif b == 116 and pos + 4 <= end and data[pos + 1] == 114 and data[pos + 2] == 117 and data[pos + 3] == 101:
                kind = TRUE
                pos += 4
                expect = 3
            elif b == 102 and pos + 5 <= end and data[pos + 1] == 97 and data[pos + 2] == 108 \
                    and data[pos + 3] == 115 and data[pos + 4] == 101:
                kind = FALSE
                pos += 5
                expect = 3
            elif b == 110 and pos + 4 <= end and data[pos + 1] == 117 and data[pos + 2] == 108 and data[pos + 3] == 108:
                pos += 4
                expect = 3
                if record >= 0:
                    count -= 1  # a NULL member makes no record
                    record = -1
            else:
                return 1, records, count, out, False
            if record >= 0:
                records[_KIND, record] = kind
                records[_RAW_END, record] = pos
                records[_TEXT_END, record] = at
        if _whitespace(data, pos, end) != end:
            return 1, records, count, out, False
    return 0, records, count, out[:at], dotted
