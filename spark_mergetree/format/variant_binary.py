# mypy: allow-untyped-defs
"""Spark's Variant binary encoding ↔ JSON text, a whole column at a time (no pyspark here).

A variant is two byte strings (the Variant spec, as Spark and PySpark 4.x write it):

* metadata: a header byte (version 1, bit 4 "keys sorted", bits 6-7 the offset width - 1), the
  dictionary size, size + 1 offsets, then the object keys' UTF-8 bytes;
* value: a header byte whose low 2 bits are the basic type — 0 a primitive (its type id in the upper
  6 bits: null, true, false, INT1/2/4/8, DOUBLE, DECIMAL4/8/16 with a scale byte, DATE, TIMESTAMP(_NTZ),
  FLOAT, BINARY, LONG_STR with a 4-byte length, UUID), 1 a short string (length ≤ 63 in the upper
  bits), 2 an object (field count, field ids into the dictionary, offsets, then the fields' values),
  3 an array (element count, offsets, then the elements).

`json_to_variant` encodes JSON texts exactly as PySpark's `VariantUtils.parse_json` does (byte for
byte): keys numbered in order of first appearance in the document, an unsorted dictionary with the
narrowest offsets, object fields listed in key order with their values in document order, integers
in the narrowest of INT1/2/4/8, numbers with a fraction and no exponent as DECIMAL4/8/16 (precision
and scale ≤ 38), everything else a DOUBLE, strings short up to 63 bytes. One numba pass writes every
row; DOUBLE and DECIMAL16 bytes are left as placeholders and filled in afterwards from the numbers'
text by Arrow's casts (correctly rounded, as Python's `float()`).

`variant_to_json` prints variants as PySpark's `VariantUtils.to_json` does (with this project's
float rule: a FLOAT by its shortest float32 digits, NaN and ±Infinity as `null`): keys in the
object's stored order, strings as `json.dumps` escapes them (ASCII only), decimals as `str(Decimal)`.
Doubles and floats get their shortest digits from Arrow's cast and Python's layout from a kernel.

Rows either function does not handle come back flagged (`fallback`), for the caller's per-row path:
for the encoder, text that is not JSON `json.loads` reads the same way (NaN, Infinity, invalid
text: the per-row path raises its error), lone surrogates, a key twice in one object, nesting deeper
than 256, values over 16 MiB; for the decoder, DECIMAL16, DATE, TIMESTAMP(_NTZ), BINARY, UUID and
anything malformed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_mergetree.format.compiled import lazy_njit
from spark_mergetree.format.json_tokens import hex_digits
from spark_mergetree.format.values import string_buffers

__all__ = ["json_to_variant", "variant_to_json", "EMPTY_METADATA"]

EMPTY_METADATA = b"\x01\x00\x00"
_MAX_DEPTH = 256
_SIZE_LIMIT = 16 * 1024 * 1024 - 64
# Patch kinds: a DOUBLE's 8 bytes, a DECIMAL16's 16.
_PATCH_DOUBLE, _PATCH_DECIMAL16 = 0, 1


# ---------------------------------------------------------------------------------------------
# JSON text → variant


@lazy_njit
def _ws(data, i, end):  # pragma: no cover - compiled
    while i < end:
        c = data[i]
        if c == 32 or c == 9 or c == 10 or c == 13:
            i += 1
        else:
            break
    return i


@lazy_njit
def _put_le(buf, at, value, width):  # pragma: no cover - compiled
    for k in range(width):
        buf[at + k] = (value >> (8 * k)) & 0xFF


@lazy_njit
def _int_size(value):  # pragma: no cover - compiled
    if value <= 0xFF:
        return 1
    if value <= 0xFFFF:
        return 2
    return 3


@lazy_njit
def _utf8(buf, at, cp):  # pragma: no cover - compiled
    if cp < 0x80:
        buf[at] = cp
        return at + 1
    if cp < 0x800:
        buf[at] = 0xC0 | (cp >> 6)
        buf[at + 1] = 0x80 | (cp & 0x3F)
        return at + 2
    if cp < 0x10000:
        buf[at] = 0xE0 | (cp >> 12)
        buf[at + 1] = 0x80 | ((cp >> 6) & 0x3F)
        buf[at + 2] = 0x80 | (cp & 0x3F)
        return at + 3
    buf[at] = 0xF0 | (cp >> 18)
    buf[at + 1] = 0x80 | ((cp >> 12) & 0x3F)
    buf[at + 2] = 0x80 | ((cp >> 6) & 0x3F)
    buf[at + 3] = 0x80 | (cp & 0x3F)
    return at + 4


@lazy_njit
def _unescape(data, i, end, buf, at):  # pragma: no cover - compiled
    """The JSON string whose opening quote is before `i`, unescaped into buf[at:]; (index after the
    closing quote, end in buf), or (-1, 0) where json.loads would refuse it or give a lone surrogate."""
    while i < end:
        c = data[i]
        if c == 34:
            return i + 1, at
        if c < 32:
            return -1, 0
        if c != 92:
            buf[at] = c
            at += 1
            i += 1
            continue
        if i + 1 >= end:
            return -1, 0
        e = data[i + 1]
        i += 2
        if e == 34 or e == 92 or e == 47:
            buf[at] = e
        elif e == 98:
            buf[at] = 8
        elif e == 102:
            buf[at] = 12
        elif e == 110:
            buf[at] = 10
        elif e == 114:
            buf[at] = 13
        elif e == 116:
            buf[at] = 9
        elif e == 117:
            cp = hex_digits(data, i, end)
            if cp < 0:
                return -1, 0
            i += 4
            if 0xD800 <= cp <= 0xDBFF:
                if i + 6 > end or data[i] != 92 or data[i + 1] != 117:
                    return -1, 0
                low = hex_digits(data, i + 2, end)
                if low < 0xDC00 or low > 0xDFFF:
                    return -1, 0
                i += 6
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
            elif 0xDC00 <= cp <= 0xDFFF:
                return -1, 0
            at = _utf8(buf, at, cp)
            continue
        else:
            return -1, 0
        at += 1
    return -1, 0


@lazy_njit
def _shift_right(buf, start, stop, by):  # pragma: no cover - compiled
    for k in range(stop - 1, start - 1, -1):
        buf[k + by] = buf[k]


@lazy_njit
def _key_less(keys, key_start, key_len, a, b):  # pragma: no cover - compiled
    la = key_len[a]
    lb = key_len[b]
    sa = key_start[a]
    sb = key_start[b]
    n = la if la < lb else lb
    for k in range(n):
        x = keys[sa + k]
        y = keys[sb + k]
        if x != y:
            return x < y
    return la < lb


@lazy_njit
def _sort_fields(ids, offs, base, n, keys, key_start, key_len):  # pragma: no cover - compiled
    """Sort fields [base, base+n) by their keys (bytes, unsigned: Python's str order for UTF-8)."""
    if n <= 16:
        for a in range(base + 1, base + n):
            fid = ids[a]
            fo = offs[a]
            b = a - 1
            while b >= base and _key_less(keys, key_start, key_len, fid, ids[b]):
                ids[b + 1] = ids[b]
                offs[b + 1] = offs[b]
                b -= 1
            ids[b + 1] = fid
            offs[b + 1] = fo
        return
    src_i = ids[base:base + n].copy()
    src_o = offs[base:base + n].copy()
    dst_i = np.empty(n, np.int64)
    dst_o = np.empty(n, np.int64)
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a = lo
            b = mid
            k = lo
            while a < mid and b < hi:
                if _key_less(keys, key_start, key_len, src_i[b], src_i[a]):
                    dst_i[k] = src_i[b]
                    dst_o[k] = src_o[b]
                    b += 1
                else:
                    dst_i[k] = src_i[a]
                    dst_o[k] = src_o[a]
                    a += 1
                k += 1
            while a < mid:
                dst_i[k] = src_i[a]
                dst_o[k] = src_o[a]
                a += 1
                k += 1
            while b < hi:
                dst_i[k] = src_i[b]
                dst_o[k] = src_o[b]
                b += 1
                k += 1
            lo = hi
        src_i, dst_i = dst_i, src_i
        src_o, dst_o = dst_o, src_o
        width *= 2
    ids[base:base + n] = src_i
    offs[base:base + n] = src_o


@lazy_njit
def _encode(data, offsets, valid, max_len):  # pragma: no cover - compiled
    rows = len(offsets) - 1
    total = offsets[rows] - offsets[0]
    out = np.empty(3 * total + 16 * rows + 64, np.uint8)
    out_off = np.zeros(rows + 1, np.int64)
    meta = np.empty(2 * total + 16 * rows + 64, np.uint8)
    meta_off = np.zeros(rows + 1, np.int64)
    fallback = np.zeros(rows, np.bool_)
    side = np.empty(total + 1, np.uint8)
    side_off = np.zeros(total + 2, np.int64)
    patch_pos = np.empty(total + 1, np.int64)
    patch_kind = np.empty(total + 1, np.int8)
    patch_row = np.empty(total + 1, np.int64)
    max_keys = max_len // 3 + 2
    keys = np.empty(max_len + 1, np.uint8)
    key_start = np.empty(max_keys, np.int64)
    key_len = np.empty(max_keys, np.int64)
    key_slot = np.empty(max_keys, np.int64)
    cap = 64
    while cap < 2 * max_keys:
        cap *= 2
    table = np.zeros(cap, np.int64)
    mask = cap - 1
    f_ids = np.empty(max_len // 2 + 2, np.int64)
    f_offs = np.empty(max_len // 2 + 2, np.int64)
    s_kind = np.empty(_MAX_DEPTH, np.int64)
    s_start = np.empty(_MAX_DEPTH, np.int64)
    s_base = np.empty(_MAX_DEPTH, np.int64)
    s_patch = np.empty(_MAX_DEPTH, np.int64)
    o = 0
    mo = 0
    npatch = 0
    nside = 0
    for row in range(rows):
        out_off[row] = o
        meta_off[row] = mo
        if not valid[row]:
            meta[mo] = 1
            meta[mo + 1] = 0
            meta[mo + 2] = 0
            mo += 3
            out_off[row + 1] = o
            meta_off[row + 1] = mo
            continue
        row_o = o
        row_patch = npatch
        row_side = nside
        i = offsets[row]
        end = offsets[row + 1]
        depth = 0
        nf = 0
        nkeys = 0
        kb = 0
        ok = True
        expect_key = False
        while True:
            # ---- one value, or an object's key then its value
            i = _ws(data, i, end)
            if i >= end:
                ok = False
                break
            if expect_key:
                expect_key = False
                if data[i] != 34:
                    ok = False
                    break
                ni, kend = _unescape(data, i + 1, end, keys, kb)
                if ni < 0:
                    ok = False
                    break
                i = ni
                h = 1469598103934665603
                for k in range(kb, kend):
                    h = (h ^ keys[k]) * 1099511628211
                slot = h & mask
                kid = -1
                while table[slot] != 0:
                    cand = table[slot] - 1
                    if key_len[cand] == kend - kb:
                        same = True
                        cs = key_start[cand]
                        for k in range(kend - kb):
                            if keys[cs + k] != keys[kb + k]:
                                same = False
                                break
                        if same:
                            kid = cand
                            break
                    slot = (slot + 1) & mask
                if kid < 0:
                    kid = nkeys
                    table[slot] = kid + 1
                    key_slot[kid] = slot
                    key_start[kid] = kb
                    key_len[kid] = kend - kb
                    kb = kend
                    nkeys += 1
                f_ids[nf] = kid
                f_offs[nf] = o - s_start[depth - 1]
                nf += 1
                i = _ws(data, i, end)
                if i >= end or data[i] != 58:
                    ok = False
                    break
                i = _ws(data, i + 1, end)
                if i >= end:
                    ok = False
                    break
            c = data[i]
            done = True  # a complete value was written
            if c == 123 or c == 91:
                if depth == _MAX_DEPTH:
                    ok = False
                    break
                s_kind[depth] = 2 if c == 123 else 3
                s_start[depth] = o
                s_base[depth] = nf
                s_patch[depth] = npatch
                depth += 1
                i = _ws(data, i + 1, end)
                if not (i < end and data[i] == (125 if c == 123 else 93)):  # (empty: closed below)
                    done = False
                    if c == 123:
                        expect_key = True
                    else:
                        f_ids[nf] = -1
                        f_offs[nf] = 0
                        nf += 1
            elif c == 34:
                ni, send = _unescape(data, i + 1, end, out, o + 1)
                if ni < 0:
                    ok = False
                    break
                i = ni
                length = send - o - 1
                if length <= 63:
                    out[o] = (length << 2) | 1
                    o = send
                else:
                    _shift_right(out, o + 1, send, 4)
                    out[o] = 64
                    _put_le(out, o + 1, length, 4)
                    o = send + 4
            elif c == 116 or c == 102 or c == 110:
                if c == 116 and i + 4 <= end and data[i + 1] == 114 and data[i + 2] == 117 and data[i + 3] == 101:
                    out[o] = 4
                    i += 4
                elif (c == 102 and i + 5 <= end and data[i + 1] == 97 and data[i + 2] == 108
                      and data[i + 3] == 115 and data[i + 4] == 101):
                    out[o] = 8
                    i += 5
                elif c == 110 and i + 4 <= end and data[i + 1] == 117 and data[i + 2] == 108 and data[i + 3] == 108:
                    out[o] = 0
                    i += 4
                else:
                    ok = False
                    break
                o += 1
            elif c == 45 or (48 <= c <= 57):
                start = i
                neg = c == 45
                if neg:
                    i += 1
                if i >= end or not (48 <= data[i] <= 57):
                    ok = False
                    break
                int_start = i
                if data[i] == 48:
                    i += 1
                else:
                    while i < end and 48 <= data[i] <= 57:
                        i += 1
                int_end = i
                frac_start = i
                frac_end = i
                has_exp = False
                if i < end and data[i] == 46:
                    i += 1
                    frac_start = i
                    while i < end and 48 <= data[i] <= 57:
                        i += 1
                    frac_end = i
                    if frac_end == frac_start:
                        ok = False
                        break
                if i < end and (data[i] == 101 or data[i] == 69):
                    i += 1
                    if i < end and (data[i] == 43 or data[i] == 45):
                        i += 1
                    e0 = i
                    while i < end and 48 <= data[i] <= 57:
                        i += 1
                    if i == e0:
                        ok = False
                        break
                    has_exp = True
                n_int = int_end - int_start
                scale = frac_end - frac_start
                kind = -1  # -1 written here; else a patch kind
                if has_exp:
                    kind = _PATCH_DOUBLE
                elif scale == 0 and n_int <= 19:
                    v = 0
                    fits = True
                    if n_int <= 18:
                        for k in range(int_start, int_end):
                            v = v * 10 + (data[k] - 48)
                        if neg:
                            v = -v
                    else:
                        for k in range(int_start, int_end - 1):
                            v = v * 10 + (data[k] - 48)
                        last = data[int_end - 1] - 48
                        limit = 8 if neg else 7
                        if v > 922337203685477580 or (v == 922337203685477580 and last > limit):
                            fits = False
                        elif neg:
                            v = -v * 10 - last
                        else:
                            v = v * 10 + last
                    if fits:
                        if -128 <= v <= 127:
                            out[o] = 12
                            _put_le(out, o + 1, v, 1)
                            o += 2
                        elif -32768 <= v <= 32767:
                            out[o] = 16
                            _put_le(out, o + 1, v, 2)
                            o += 3
                        elif -2147483648 <= v <= 2147483647:
                            out[o] = 20
                            _put_le(out, o + 1, v, 4)
                            o += 5
                        else:
                            out[o] = 24
                            _put_le(out, o + 1, v, 8)
                            o += 9
                    else:
                        kind = _PATCH_DECIMAL16
                elif scale == 0 and n_int <= 38:
                    kind = _PATCH_DECIMAL16
                elif scale == 0:
                    kind = _PATCH_DOUBLE
                else:
                    # A fraction, no exponent: a decimal of the digits' precision (leading zeros
                    # dropped) and scale when both are at most 38, else a double.
                    first = -1
                    for k in range(int_start, frac_end):
                        if k != int_end and data[k] != 48 and data[k] != 46:
                            first = k
                            break
                    if first < 0:
                        precision = 1
                    elif first < int_end:
                        precision = (int_end - first) + scale
                    else:
                        precision = frac_end - first
                    if precision > 38 or scale > 38:
                        kind = _PATCH_DOUBLE
                    elif precision <= 18 and scale <= 18:
                        v = 0
                        for k in range(int_start, int_end):
                            v = v * 10 + (data[k] - 48)
                        for k in range(frac_start, frac_end):
                            v = v * 10 + (data[k] - 48)
                        if neg:
                            v = -v
                        if precision <= 9 and scale <= 9:
                            out[o] = 32
                            out[o + 1] = scale
                            _put_le(out, o + 2, v, 4)
                            o += 6
                        else:
                            out[o] = 36
                            out[o + 1] = scale
                            _put_le(out, o + 2, v, 8)
                            o += 10
                    else:
                        kind = _PATCH_DECIMAL16
                if kind >= 0:
                    # The number's text into `side`: a double's as written, a DECIMAL16's digits
                    # (sign, no point) for Arrow's casts to fill the placeholder with.
                    s0 = nside
                    if kind == _PATCH_DOUBLE:
                        for k in range(start, i):
                            side[nside] = data[k]
                            nside += 1
                        out[o] = 28
                        patch_pos[npatch] = o + 1
                        o += 9
                    else:
                        if neg:
                            side[nside] = 45
                            nside += 1
                        if not (n_int == 1 and data[int_start] == 48):
                            for k in range(int_start, int_end):
                                side[nside] = data[k]
                                nside += 1
                        for k in range(frac_start, frac_end):
                            side[nside] = data[k]
                            nside += 1
                        out[o] = 40
                        out[o + 1] = scale
                        patch_pos[npatch] = o + 2
                        o += 18
                    side_off[npatch] = s0
                    side_off[npatch + 1] = nside
                    patch_kind[npatch] = kind
                    patch_row[npatch] = row
                    npatch += 1
            else:
                ok = False
                break
            if not done:
                continue
            # ---- a value is complete: close containers / move to the next member
            nxt = False
            while True:
                if depth == 0:
                    break
                i = _ws(data, i, end)
                if i >= end:
                    ok = False
                    break
                c = data[i]
                d = depth - 1
                close = (c == 125 and s_kind[d] == 2) or (c == 93 and s_kind[d] == 3)
                if not close and c != 44:
                    ok = False
                    break
                if c == 44:
                    i += 1
                    if s_kind[d] == 2:
                        expect_key = True
                    else:
                        f_ids[nf] = -1
                        f_offs[nf] = o - s_start[d]
                        nf += 1
                    nxt = True
                    break
                i += 1
                # close container d
                start = s_start[d]
                base = s_base[d]
                n = nf - base
                size = o - start
                large = n > 255
                size_bytes = 4 if large else 1
                off_size = _int_size(size)
                if s_kind[d] == 2:
                    _sort_fields(f_ids, f_offs, base, n, keys, key_start, key_len)
                    max_id = 0
                    for k in range(base, base + n):
                        if f_ids[k] > max_id:
                            max_id = f_ids[k]
                        if k > base and f_ids[k] == f_ids[k - 1]:
                            ok = False
                    if not ok:
                        break
                    id_size = _int_size(max_id)
                    header = 1 + size_bytes + n * id_size + (n + 1) * off_size
                    _shift_right(out, start, o, header)
                    out[start] = ((1 if large else 0) << 6) | ((id_size - 1) << 4) | ((off_size - 1) << 2) | 2
                    _put_le(out, start + 1, n, size_bytes)
                    at = start + 1 + size_bytes
                    for k in range(base, base + n):
                        _put_le(out, at, f_ids[k], id_size)
                        at += id_size
                    for k in range(base, base + n):
                        _put_le(out, at, f_offs[k], off_size)
                        at += off_size
                    _put_le(out, at, size, off_size)
                else:
                    header = 1 + size_bytes + (n + 1) * off_size
                    _shift_right(out, start, o, header)
                    out[start] = ((1 if large else 0) << 4) | ((off_size - 1) << 2) | 3
                    _put_le(out, start + 1, n, size_bytes)
                    at = start + 1 + size_bytes
                    for k in range(base, base + n):
                        _put_le(out, at, f_offs[k], off_size)
                        at += off_size
                    _put_le(out, at, size, off_size)
                for k in range(s_patch[d], npatch):
                    patch_pos[k] += header
                o += header
                nf = base
                depth -= 1
                if o - row_o > _SIZE_LIMIT:
                    ok = False
                    break
            if not ok or nxt:
                if not ok:
                    break
                continue
            # depth 0: the document must end here
            if _ws(data, i, end) != end:
                ok = False
            break
        # forget this row's keys
        for k in range(nkeys):
            table[key_slot[k]] = 0
        if ok and (o - row_o > _SIZE_LIMIT or kb > _SIZE_LIMIT):
            ok = False
        if not ok:
            fallback[row] = True
            o = row_o
            npatch = row_patch
            nside = row_side
            meta[mo] = 1
            meta[mo + 1] = 0
            meta[mo + 2] = 0
            mo += 3
        else:
            width = _int_size(max(kb, nkeys))
            meta[mo] = 1 | ((width - 1) << 6)
            _put_le(meta, mo + 1, nkeys, width)
            at = mo + 1 + width
            for k in range(nkeys):
                _put_le(meta, at, key_start[k], width)
                at += width
            _put_le(meta, at, kb, width)
            at += width
            for k in range(kb):
                meta[at + k] = keys[k]
            mo = at + kb
        out_off[row + 1] = o
        meta_off[row + 1] = mo
    return (out[:o], out_off, meta[:mo], meta_off, fallback, side[:nside], side_off[:npatch + 1],
            patch_pos[:npatch], patch_kind[:npatch], patch_row[:npatch])


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    if len(data) >= 2**31:
        return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                     [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]
                                     ).cast(pa.binary())
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def json_to_variant(texts: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """JSON texts → (values, metadata, fallback): binary arrays of each row's variant as PySpark's
    `parse_json` encodes it (a NULL text: an empty value, the empty metadata), and a bool per row
    set where the row was left to the caller (its value empty)."""
    n = len(texts)
    if pa.types.is_large_string(texts.type):
        texts = texts.cast(pa.string())
    try:
        texts.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        empty = np.zeros(n, np.int64)
        return (_binary(np.zeros(0, np.uint8), np.zeros(n + 1, np.int64)),
                pa.array([EMPTY_METADATA] * n, pa.binary()), empty == 0)
    offsets, data = string_buffers(texts)
    valid = np.asarray(texts.is_valid(), dtype=bool)
    lengths = np.diff(offsets)
    max_len = int(lengths.max()) if n else 0
    (out, out_off, meta, meta_off, fallback, side, side_off, patch_pos, patch_kind,
     patch_row) = _encode(np.ascontiguousarray(data, np.uint8), offsets - offsets[0] if n else offsets, valid, max_len)
    if len(patch_pos):
        numbers = pa.Array.from_buffers(pa.string(), len(patch_pos),
                                        [None, pa.py_buffer(side_off.astype(np.int32)), pa.py_buffer(side)])
        for kind, arrow_type, width in ((_PATCH_DOUBLE, pa.float64(), 8), (_PATCH_DECIMAL16, pa.decimal128(38, 0), 16)):
            mine = patch_kind == kind
            if not mine.any():
                continue
            try:
                cast = numbers.filter(pa.array(mine)).cast(arrow_type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                fallback[np.unique(patch_row[mine])] = True
                continue
            raw = np.frombuffer(cast.buffers()[1], np.uint8)[cast.offset * width:(cast.offset + len(cast)) * width]
            out[patch_pos[mine][:, None] + np.arange(width)[None, :]] = raw.reshape(-1, width)
    return _binary(out, out_off), _binary(meta, meta_off), fallback


# ---------------------------------------------------------------------------------------------
# variant → JSON text


@lazy_njit
def _rd(buf, at, width):  # pragma: no cover - compiled
    v = 0
    for k in range(width):
        v |= np.int64(buf[at + k]) << (8 * k)
    return v


@lazy_njit
def _emit(out, o, emit, byte):  # pragma: no cover - compiled
    if emit:
        out[o] = byte
    return o + 1


@lazy_njit
def _emit_hex4(out, o, emit, cp):  # pragma: no cover - compiled
    o = _emit(out, o, emit, 92)
    o = _emit(out, o, emit, 117)
    for shift in (12, 8, 4, 0):
        d = (cp >> shift) & 15
        o = _emit(out, o, emit, 48 + d if d < 10 else 87 + d)
    return o


@lazy_njit
def _emit_string(src, start, stop, out, o, emit):  # pragma: no cover - compiled
    """UTF-8 bytes src[start:stop] as `json.dumps` prints a str (ASCII only); -1 for invalid UTF-8."""
    o = _emit(out, o, emit, 34)
    i = start
    while i < stop:
        c = np.int64(src[i])
        if c < 0x80:
            i += 1
            if c == 34 or c == 92:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, c)
            elif 0x20 <= c < 0x7F:
                o = _emit(out, o, emit, c)
            elif c == 10:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, 110)
            elif c == 13:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, 114)
            elif c == 9:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, 116)
            elif c == 8:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, 98)
            elif c == 12:
                o = _emit(out, o, emit, 92)
                o = _emit(out, o, emit, 102)
            else:
                o = _emit_hex4(out, o, emit, c)
            continue
        if 0xC2 <= c <= 0xDF:
            n = 1
            cp = c & 0x1F
            lo = 0x80
            hi = 0xBF
        elif 0xE0 <= c <= 0xEF:
            n = 2
            cp = c & 0x0F
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c <= 0xF4:
            n = 3
            cp = c & 0x07
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return -1
        if i + n >= stop:
            return -1
        for k in range(1, n + 1):
            b = np.int64(src[i + k])
            if k == 1:
                if b < lo or b > hi:
                    return -1
            elif b < 0x80 or b > 0xBF:
                return -1
            cp = (cp << 6) | (b & 0x3F)
        i += n + 1
        if cp >= 0x10000:
            cp -= 0x10000
            o = _emit_hex4(out, o, emit, 0xD800 + (cp >> 10))
            o = _emit_hex4(out, o, emit, 0xDC00 + (cp & 0x3FF))
        else:
            o = _emit_hex4(out, o, emit, cp)
    return _emit(out, o, emit, 34)


@lazy_njit
def _emit_word(out, o, emit, word):  # pragma: no cover - compiled
    """null (0), true (1), false (2)."""
    if word == 0:
        o = _emit(out, o, emit, 110)
        o = _emit(out, o, emit, 117)
        o = _emit(out, o, emit, 108)
        return _emit(out, o, emit, 108)
    if word == 1:
        o = _emit(out, o, emit, 116)
        o = _emit(out, o, emit, 114)
        o = _emit(out, o, emit, 117)
        return _emit(out, o, emit, 101)
    o = _emit(out, o, emit, 102)
    o = _emit(out, o, emit, 97)
    o = _emit(out, o, emit, 108)
    o = _emit(out, o, emit, 115)
    return _emit(out, o, emit, 101)


@lazy_njit
def _emit_digits(out, o, emit, magnitude, digits):  # pragma: no cover - compiled
    """The decimal digits of magnitude ≥ 0 (at least one), into `digits` then out; (o, count)."""
    n = 0
    while True:
        digits[n] = 48 + magnitude % 10
        magnitude //= 10
        n += 1
        if magnitude == 0:
            break
    for k in range(n - 1, -1, -1):
        o = _emit(out, o, emit, digits[k])
    return o, n


@lazy_njit
def _emit_int(out, o, emit, v, digits):  # pragma: no cover - compiled
    if v < 0:
        o = _emit(out, o, emit, 45)
        if v == -9223372036854775807 - 1:
            o, _ = _emit_digits(out, o, emit, 922337203685477580, digits)
            return _emit(out, o, emit, 56)
        v = -v
    o, _ = _emit_digits(out, o, emit, v, digits)
    return o


@lazy_njit
def _emit_decimal(out, o, emit, unscaled, scale, digits):  # pragma: no cover - compiled
    """`str(Decimal(unscaled) * Decimal(10) ** -scale)` (|unscaled| < 10**18)."""
    if unscaled < 0:
        o = _emit(out, o, emit, 45)
        unscaled = -unscaled
    n = 0
    m = unscaled
    while True:
        digits[n] = 48 + m % 10
        m //= 10
        n += 1
        if m == 0:
            break
    left = n - scale  # digits left of the point
    if left > -6:
        if scale == 0:
            for k in range(n - 1, -1, -1):
                o = _emit(out, o, emit, digits[k])
        elif left <= 0:
            o = _emit(out, o, emit, 48)
            o = _emit(out, o, emit, 46)
            for _ in range(-left):
                o = _emit(out, o, emit, 48)
            for k in range(n - 1, -1, -1):
                o = _emit(out, o, emit, digits[k])
        else:
            for k in range(n - 1, -1, -1):
                if n - 1 - k == left:
                    o = _emit(out, o, emit, 46)
                o = _emit(out, o, emit, digits[k])
        return o
    o = _emit(out, o, emit, digits[n - 1])
    if n > 1:
        o = _emit(out, o, emit, 46)
        for k in range(n - 2, -1, -1):
            o = _emit(out, o, emit, digits[k])
    o = _emit(out, o, emit, 69)
    o = _emit(out, o, emit, 45)
    o, _ = _emit_digits(out, o, emit, -(left - 1), digits)
    return o


@lazy_njit
def _decode(vdata, voff, mdata, moff, valid, emit, out, out_off, fallback, doubles, double_kind,
            double_row, dtext, dtext_off):  # pragma: no cover - compiled
    """One walk over every variant: emit=False finds each row's text length without its floats'
    digits (the floats' values into doubles/double_kind, rows it cannot print into fallback);
    emit=True writes the text (floats' text from dtext) into out at out_off."""
    rows = len(voff) - 1
    digits = np.empty(24, np.uint8)
    s_pos = np.empty(512, np.int64)
    s_n = np.empty(512, np.int64)
    s_i = np.empty(512, np.int64)
    s_obj = np.empty(512, np.bool_)
    s_ids = np.empty(512, np.int64)
    s_offs = np.empty(512, np.int64)
    s_data = np.empty(512, np.int64)
    s_idw = np.empty(512, np.int64)
    s_offw = np.empty(512, np.int64)
    nd = 0
    lengths = np.zeros(rows, np.int64)
    for row in range(rows):
        if not valid[row] or fallback[row]:
            continue
        o = out_off[row] if emit else 0
        row_nd = nd
        vs = voff[row]
        ve = voff[row + 1]
        ms = moff[row]
        me = moff[row + 1]
        ok = True
        mw = 1
        dict_size = 0
        strings = 0
        # the dictionary
        if me - ms < 1 or (mdata[ms] & 15) != 1:
            ok = False
        else:
            mw = ((mdata[ms] >> 6) & 3) + 1
            if ms + 1 + mw > me:
                ok = False
            else:
                dict_size = _rd(mdata, ms + 1, mw)
                strings = ms + 1 + mw + (dict_size + 1) * mw
                if strings > me:
                    ok = False
        depth = 0
        p = vs
        while ok:
            # ---- print the value at p (containers are pushed)
            if p >= ve:
                ok = False
                break
            h = np.int64(vdata[p])
            basic = h & 3
            ti = h >> 2
            if basic == 1:
                if p + 1 + ti > ve:
                    ok = False
                    break
                o = _emit_string(vdata, p + 1, p + 1 + ti, out, o, emit)
                if o < 0:
                    ok = False
                    break
            elif basic == 2 or basic == 3:
                large = ((ti >> 4) & 1) if basic == 2 else ((ti >> 2) & 1)
                size_w = 4 if large else 1
                idw = ((ti >> 2) & 3) + 1 if basic == 2 else 0
                offw = (ti & 3) + 1
                if p + 1 + size_w > ve or depth == 512:
                    ok = False
                    break
                n = _rd(vdata, p + 1, size_w)
                ids = p + 1 + size_w
                offs = ids + n * idw
                data_start = offs + (n + 1) * offw
                if data_start > ve:
                    ok = False
                    break
                s_pos[depth] = p
                s_n[depth] = n
                s_i[depth] = 0
                s_obj[depth] = basic == 2
                s_ids[depth] = ids
                s_offs[depth] = offs
                s_data[depth] = data_start
                s_idw[depth] = idw
                s_offw[depth] = offw
                depth += 1
                o = _emit(out, o, emit, 123 if basic == 2 else 91)
            else:
                if ti <= 2:
                    o = _emit_word(out, o, emit, ti)
                elif 3 <= ti <= 6:
                    width = 1 << (ti - 3)
                    if p + 1 + width > ve:
                        ok = False
                        break
                    v = _rd(vdata, p + 1, width)
                    if width < 8 and v >= (np.int64(1) << (8 * width - 1)):
                        v -= np.int64(1) << (8 * width)
                    o = _emit_int(out, o, emit, v, digits)
                elif ti == 7 or ti == 14:
                    width = 8 if ti == 7 else 4
                    if p + 1 + width > ve:
                        ok = False
                        break
                    if emit:
                        for k in range(dtext_off[nd], dtext_off[nd + 1]):
                            out[o] = dtext[k]
                            o += 1
                    else:
                        if ti == 7:
                            doubles[nd] = vdata[p + 1:p + 9].copy().view(np.float64)[0]
                        else:
                            doubles[nd] = vdata[p + 1:p + 5].copy().view(np.float32)[0]
                        double_kind[nd] = 0 if ti == 7 else 1
                        double_row[nd] = row
                    nd += 1
                elif ti == 8 or ti == 9:
                    width = 4 if ti == 8 else 8
                    if p + 2 + width > ve:
                        ok = False
                        break
                    scale = np.int64(vdata[p + 1])
                    v = _rd(vdata, p + 2, width)
                    if width == 4 and v >= 2147483648:
                        v -= 4294967296
                    bound = 1000000000 if width == 4 else 1000000000000000000
                    if v >= bound or v <= -bound or scale > (9 if width == 4 else 18):
                        ok = False
                        break
                    o = _emit_decimal(out, o, emit, v, scale, digits)
                elif ti == 16:
                    if p + 5 > ve:
                        ok = False
                        break
                    length = _rd(vdata, p + 1, 4)
                    if p + 5 + length > ve:
                        ok = False
                        break
                    o = _emit_string(vdata, p + 5, p + 5 + length, out, o, emit)
                    if o < 0:
                        ok = False
                        break
                else:  # DECIMAL16, DATE, TIMESTAMP(_NTZ), BINARY, UUID, ...: the per-row path
                    ok = False
                    break
            # ---- next member, closing finished containers
            while ok and depth > 0:
                d = depth - 1
                i = s_i[d]
                if i == s_n[d]:
                    o = _emit(out, o, emit, 125 if s_obj[d] else 93)
                    depth -= 1
                    continue
                if i > 0:
                    o = _emit(out, o, emit, 44)
                s_i[d] = i + 1
                offw = s_offw[d]
                p = s_data[d] + _rd(vdata, s_offs[d] + i * offw, offw)
                if s_obj[d]:
                    idw = s_idw[d]
                    kid = _rd(vdata, s_ids[d] + i * idw, idw)
                    if kid >= dict_size:
                        ok = False
                        break
                    k0 = strings + _rd(mdata, ms + 1 + mw + kid * mw, mw)
                    k1 = strings + _rd(mdata, ms + 1 + mw + (kid + 1) * mw, mw)
                    if k1 > me or k0 > k1:
                        ok = False
                        break
                    o = _emit_string(mdata, k0, k1, out, o, emit)
                    if o < 0:
                        ok = False
                        break
                    o = _emit(out, o, emit, 58)
                break
            if depth == 0:
                break
        if not ok:
            fallback[row] = True
            nd = row_nd
            continue
        lengths[row] = o - (out_off[row] if emit else 0)
    return lengths, nd


@lazy_njit
def _relayout(data, offsets, mode):  # pragma: no cover - compiled
    """Arrow's shortest digits of each float → Python's layout: mode 0 as `repr(float)` (positional
    for decimal exponents -4..15), 1 positional, 2 scientific, 3 `null`."""
    n = len(offsets) - 1
    out = np.empty(len(data) + 32 * n + 8, np.uint8)
    out_off = np.zeros(n + 1, np.int64)
    digs = np.empty(64, np.uint8)
    tmp = np.empty(4, np.uint8)
    o = 0
    for r in range(n):
        i = offsets[r]
        end = offsets[r + 1]
        if mode[r] == 3:
            out[o] = 110
            out[o + 1] = 117
            out[o + 2] = 108
            out[o + 3] = 108
            o += 4
            out_off[r + 1] = o
            continue
        if data[i] == 45:
            out[o] = 45
            o += 1
            i += 1
        nd = 0
        point = -1
        exp = 0
        while i < end:
            c = data[i]
            if c == 46:
                point = nd
            elif c == 101 or c == 69:
                i += 1
                sign = 1
                if data[i] == 45:
                    sign = -1
                    i += 1
                elif data[i] == 43:
                    i += 1
                while i < end:
                    exp = exp * 10 + (data[i] - 48)
                    i += 1
                exp *= sign
                break
            else:
                digs[nd] = c
                nd += 1
            i += 1
        if point < 0:
            point = nd
        # strip leading zeros (moving the point), then trailing zeros
        lead = 0
        while lead < nd and digs[lead] == 48:
            lead += 1
        if lead == nd:
            out[o] = 48
            out[o + 1] = 46
            out[o + 2] = 48
            o += 3
            out_off[r + 1] = o
            continue
        decpt = point - lead + exp  # value = 0.D × 10**decpt
        first = lead
        last = nd
        while digs[last - 1] == 48:
            last -= 1
        count = last - first
        exp10 = decpt - 1
        positional = mode[r] == 1 or (mode[r] == 0 and -4 <= exp10 < 16)
        if positional:
            if decpt <= 0:
                out[o] = 48
                out[o + 1] = 46
                o += 2
                for _ in range(-decpt):
                    out[o] = 48
                    o += 1
                for k in range(first, last):
                    out[o] = digs[k]
                    o += 1
            elif decpt >= count:
                for k in range(first, last):
                    out[o] = digs[k]
                    o += 1
                for _ in range(decpt - count):
                    out[o] = 48
                    o += 1
                out[o] = 46
                out[o + 1] = 48
                o += 2
            else:
                for k in range(first, first + decpt):
                    out[o] = digs[k]
                    o += 1
                out[o] = 46
                o += 1
                for k in range(first + decpt, last):
                    out[o] = digs[k]
                    o += 1
        else:
            out[o] = digs[first]
            o += 1
            if count > 1:
                out[o] = 46
                o += 1
                for k in range(first + 1, last):
                    out[o] = digs[k]
                    o += 1
            out[o] = 101
            out[o + 1] = 45 if exp10 < 0 else 43
            o += 2
            e = exp10 if exp10 >= 0 else -exp10
            if e < 10:
                out[o] = 48
                o += 1
            t = 0
            while True:
                tmp[t] = 48 + e % 10
                e //= 10
                t += 1
                if e == 0:
                    break
            for k in range(t - 1, -1, -1):
                out[o] = tmp[k]
                o += 1
        out_off[r + 1] = o
    return out[:o], out_off


def _float_texts(values: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each float's text as `to_json` prints it: a DOUBLE as `repr(float)`, a FLOAT as
    `str(numpy.float32)`, NaN and ±Infinity as `null`."""
    single = kinds == 1
    texts64 = pa.array(values[~single], pa.float64()).cast(pa.string())
    texts32 = pa.array(values[single].astype(np.float32), pa.float32()).cast(pa.string())
    order = np.concatenate([np.flatnonzero(~single), np.flatnonzero(single)])
    texts = pa.concat_arrays([texts64, texts32]).take(pa.array(np.argsort(order, kind="stable")))
    magnitude = np.abs(values)
    mode = np.where(single, np.where((magnitude == 0) | ((magnitude >= 1e-4) & (magnitude < 1e6)), 1, 2), 0)
    mode = np.where(np.isfinite(values), mode, 3).astype(np.int64)
    offsets, data = string_buffers(texts)
    return _relayout(np.ascontiguousarray(data), offsets, mode)


def variant_to_json(values: pa.Array, metadata: pa.Array, valid: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Variants (value and metadata binaries; `valid` False: NULL) → (JSON texts, fallback): each
    text as PySpark's `to_json` prints it, NULL for a NULL variant and for rows left to the caller
    (`fallback` set)."""
    n = len(values)
    voff, vdata = string_buffers(values)
    moff, mdata = string_buffers(metadata)
    valid = np.asarray(valid, dtype=bool)
    fallback = np.zeros(n, np.bool_)
    doubles = np.empty(len(vdata) // 5 + 1, np.float64)
    kinds = np.empty(len(vdata) // 5 + 1, np.int8)
    vdata = np.ascontiguousarray(vdata, np.uint8)
    mdata = np.ascontiguousarray(mdata, np.uint8)
    rows_of = np.empty(len(vdata) // 5 + 1, np.int64)
    none = np.zeros(1, np.uint8)
    no_offsets = np.zeros(1, np.int64)
    lengths, nd = _decode(vdata, voff, mdata, moff, valid, False, none, no_offsets, fallback, doubles, kinds, rows_of,
                          none, no_offsets)
    dtext, dtext_off = _float_texts(doubles[:nd], kinds[:nd]) if nd else (none, no_offsets)
    if nd:  # each row's floats' text joins its length
        lengths = lengths + np.bincount(rows_of[:nd], weights=np.diff(dtext_off), minlength=n).astype(np.int64)
    out_off = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=out_off[1:])
    out = np.empty(int(out_off[-1]) + 1, np.uint8)
    _decode(vdata, voff, mdata, moff, valid, True, out, out_off, fallback, doubles, kinds, rows_of, dtext, dtext_off)
    texts = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(out_off.astype(np.int32)),
                                                   pa.py_buffer(out[:int(out_off[-1])])])
    nulls = ~valid | fallback
    if nulls.any():
        texts = pa.Array.from_buffers(pa.string(), n, [pa.array(~nulls).buffers()[1], texts.buffers()[1],
                                                       texts.buffers()[2]], null_count=int(nulls.sum()))
    return texts, fallback
