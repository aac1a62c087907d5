"""The compiled scanner that finds where each aggregate state of a column ends.

ClickHouse writes the states of an AggregateFunction column back to back with no length, so the
only way to split them is to walk each state's bytes as its function wrote them. A layout
(format/aggregate_states.py builds them, one per function and argument types) is a short program
of steps, (op, a, b) rows of an int64 array, that this interpreter runs once per state:

    SKIP a            a bytes
    VARUINT           a LEB128 number
    STRING            a varuint length, then that many bytes
    COUNTED a         a varuint n, then n items of a bytes
    FLAG a            a byte; when it is zero the next a steps are skipped
    SIZED_I32         an Int32 little-endian size, then that many bytes when it is positive
    LOOP a            a varuint n, then the next a steps n times (loops do not nest)
    KIND a b          a byte that must lie in a..b, remembered for WHEN
    WHEN v a          when the remembered byte is not v, the next a steps are skipped
    RESERVOIR         a UInt64 capacity and a UInt64 count: the smaller is remembered for PENDING
    PENDING a         the remembered number of items of a bytes
    U16_COUNTED a     a UInt16 n, then n items of a bytes
    U64_COUNTED a     a UInt64 n, then n items of a bytes
    TIMING_LARGE a b  a UInt64 count, then either a fixed block of b bytes (when 2 * count exceeds a)
                      or (UInt16 index, UInt64 count) pairs up to the UInt16 index 30000

A whole column is scanned in one call; nothing runs per row in Python.
"""

from __future__ import annotations

import numpy as np

from spark_mergetree.format.compiled import lazy_njit

__all__ = ["SKIP", "VARUINT", "STRING", "COUNTED", "FLAG", "SIZED_I32", "LOOP", "KIND", "WHEN", "RESERVOIR",
           "PENDING", "U16_COUNTED", "U64_COUNTED", "TIMING_LARGE", "SCAN_OK", "SCAN_CUT", "SCAN_BAD_KIND", "scan_states"]

(SKIP, VARUINT, STRING, COUNTED, FLAG, SIZED_I32, LOOP, KIND, WHEN, RESERVOIR, PENDING, U16_COUNTED,
 U64_COUNTED, TIMING_LARGE) = range(14)
# Outcomes: every state read; a state runs past the end of the bytes; a representation byte is unknown.
SCAN_OK, SCAN_CUT, SCAN_BAD_KIND = 0, 1, 2
# The index that ends the sparse form of quantileTiming's large histogram.
_TIMING_END = 30000


def scan_states(buf: np.ndarray, start: int, n: int, program: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """Lengths of the `n` states from buf[start] (uint8) laid out by `program`, the outcome (SCAN_*),
    and, when it is not SCAN_OK, the row and byte offset where it went wrong."""
    lengths, outcome, row, offset = _scan(buf, start, n, program)
    return lengths, int(outcome), int(row), int(offset)


@lazy_njit
def _scan(buf: np.ndarray, start: int, n: int, program: np.ndarray) -> tuple[np.ndarray, int, int, int]:  # pragma: no cover
    lengths = np.zeros(n, np.int64)
    size = buf.shape[0]
    steps = program.shape[0]
    pos = start
    for i in range(n):
        begin = pos
        pc = 0
        kind = -1
        pending = np.int64(0)
        loop_start = loop_end = remaining = -1
        while True:
            # The end of a loop body goes back to its start until the loop has run its count.
            while loop_end >= 0 and pc >= loop_end:
                remaining -= 1
                if remaining > 0:
                    pc = loop_start
                else:
                    pc = loop_end
                    loop_end = -1
            if pc >= steps:
                break
            op = program[pc, 0]
            a = program[pc, 1]
            pc += 1
            count = np.int64(0)
            if op == SKIP:
                pos += a
            elif op == SIZED_I32:
                if pos + 4 > size:
                    return lengths, SCAN_CUT, i, begin
                signed = np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8) | (np.int64(buf[pos + 2]) << 16) \
                    | (np.int64(buf[pos + 3]) << 24)
                pos += 4
                if signed < 2 ** 31:  # a negative size is a state without a value
                    if signed > size - pos:
                        return lengths, SCAN_CUT, i, begin
                    pos += signed
            elif op == FLAG or op == KIND:
                if pos >= size:
                    return lengths, SCAN_CUT, i, begin
                byte = np.int64(buf[pos])
                pos += 1
                if op == FLAG:
                    if byte == 0:
                        pc += a
                elif byte < a or byte > program[pc - 1, 2]:
                    return lengths, SCAN_BAD_KIND, i, pos - 1
                else:
                    kind = byte
            elif op == WHEN:
                if kind != a:
                    pc += program[pc - 1, 2]
            elif op == U16_COUNTED:
                if pos + 2 > size:
                    return lengths, SCAN_CUT, i, begin
                count = np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8)
                pos += 2
                pos += count * a
            elif op == U64_COUNTED or op == RESERVOIR or op == TIMING_LARGE:
                if pos + 8 > size:
                    return lengths, SCAN_CUT, i, begin
                for k in range(8):
                    count |= np.int64(buf[pos + k]) << (8 * k)
                pos += 8
                if op == RESERVOIR:  # the capacity was read: the number of values seen follows
                    if pos + 8 > size:
                        return lengths, SCAN_CUT, i, begin
                    total = np.int64(0)
                    for k in range(8):
                        total |= np.int64(buf[pos + k]) << (8 * k)
                    pos += 8
                    pending = count if 0 <= count <= total else total
                    if pending < 0 or pending > size:
                        return lengths, SCAN_CUT, i, begin
                elif op == U64_COUNTED:
                    if count < 0 or count > size:
                        return lengths, SCAN_CUT, i, begin
                    pos += count * a
                elif count * 2 > a or count < 0:
                    pos += program[pc - 1, 2]
                else:
                    while True:
                        if pos + 2 > size:
                            return lengths, SCAN_CUT, i, begin
                        index = np.int64(buf[pos]) | (np.int64(buf[pos + 1]) << 8)
                        pos += 2
                        if index == _TIMING_END:
                            break
                        pos += 8
            elif op == PENDING:
                pos += pending * a
            else:  # a varuint, alone or as a count
                value = np.int64(0)
                shift = 0
                while True:
                    if pos >= size or shift > 63:
                        return lengths, SCAN_CUT, i, begin
                    b = buf[pos]
                    pos += 1
                    value |= np.int64(b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
                if op != VARUINT and (value < 0 or value > size - pos):
                    return lengths, SCAN_CUT, i, begin
                if op == STRING:
                    pos += value
                elif op == COUNTED:
                    pos += value * a
                elif op == LOOP:
                    if value == 0:
                        pc += a
                    else:
                        loop_start = pc
                        loop_end = pc + a
                        remaining = value
            if pos > size:
                return lengths, SCAN_CUT, i, begin
        lengths[i] = pos - begin
    return lengths, SCAN_OK, n, pos
