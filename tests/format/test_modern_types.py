"""Types added for ClickHouse 26.x tables, checked against chdb: their Arrow mapping is the one
ClickHouse exports, and what writing accepts converts values as ClickHouse converts them.

Reading and writing parts of these types (Wide and Compact, attached by ClickHouse with CHECK TABLE)
runs with every other type through `COLUMNS` in tests/format/test_serialization.py and
tests/format/test_part_interop.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from spark_mergetree.errors import SchemaMismatchError
from spark_mergetree.format.conform import conform_array
from spark_mergetree.format.types import parse_type, to_arrow
from tests.format.chdb_util import close_session, open_session
from tests.format.test_serialization import _chdb_arrow

# Types whose Arrow mapping is ClickHouse's own Arrow export.
CLICKHOUSE_ARROW = ["IPv4", "IPv6", "Nullable(IPv4)", "Array(IPv6)"]


@pytest.fixture(scope="module")
def chdb(tmp_path_factory):
    yield open_session(tmp_path_factory.mktemp("modern"))
    close_session()


@pytest.mark.parametrize("type_text", CLICKHOUSE_ARROW)
def test_arrow_type_is_what_clickhouse_exports(chdb, type_text):
    exported = _chdb_arrow(chdb, f"SELECT CAST(defaultValueOfTypeName('{type_text}') AS {type_text}) AS x")
    assert to_arrow(parse_type(type_text)) == exported.schema.field("x").type


IPV4_TEXTS = ["0.0.0.0", "1.2.3.4", "255.255.255.255", "10.0.0.1", "192.168.001.010"]
BAD_IPV4_TEXTS = ["256.1.1.1", "1.2.3", "1.2.3.4.5", "a.b.c.d", "", " 1.2.3.4"]


def test_ipv4_text_is_read_as_clickhouse_reads_it(chdb):
    listed = ", ".join(f"'{t}'" for t in IPV4_TEXTS)
    expected = _chdb_arrow(chdb, f"SELECT toIPv4(arrayJoin([{listed}])) AS x").column("x").to_pylist()
    got = conform_array(pa.array(IPV4_TEXTS + [None]), parse_type("Nullable(IPv4)"), "ip")
    assert got.to_pylist() == expected + [None]


@pytest.mark.parametrize("text", BAD_IPV4_TEXTS)
def test_text_clickhouse_refuses_as_ipv4_is_refused(chdb, text):
    refused = _chdb_arrow(chdb, f"SELECT toIPv4OrNull('{text}') IS NULL AS x").column("x").to_pylist()
    assert refused == [True]
    with pytest.raises(SchemaMismatchError, match="column 'ip'"):
        conform_array(pa.array([text]), parse_type("IPv4"), "ip")


def test_ipv4_numbers_out_of_range_are_refused():
    with pytest.raises(SchemaMismatchError, match="outside IPv4's range"):
        conform_array(pa.array([2**32], pa.int64()), parse_type("IPv4"), "ip")


def test_ipv6_takes_sixteen_bytes_in_network_order(chdb):
    addresses = ["::1", "2001:db8::ff00:42:8329", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
    listed = ", ".join(f"'{a}'" for a in addresses)
    exported = _chdb_arrow(chdb, f"SELECT toIPv6(arrayJoin([{listed}])) AS x").column("x").combine_chunks()
    as_binary = exported.cast(pa.binary())
    assert conform_array(as_binary, parse_type("IPv6"), "ip").to_pylist() == exported.to_pylist()
    with pytest.raises(SchemaMismatchError, match="is not 16 bytes"):
        conform_array(pa.array([b"\x01" * 15]), parse_type("IPv6"), "ip")


BFLOAT16_INPUTS = [0.0, -0.0, 1.0, 1.00390625, 1.005859375, 1.0078125, -2.5, 3.4e38, -3.38e38, 1e-40, 1e-45,
                   0.1, 1 / 3, 65504.0, 123456.789]


def test_bfloat16_values_are_converted_as_clickhouse_converts_them(chdb):
    listed = ", ".join(repr(v) for v in BFLOAT16_INPUTS)
    expected = _chdb_arrow(chdb, f"SELECT reinterpretAsUInt16(toBFloat16(arrayJoin([{listed}]))) AS x")
    got = conform_array(pa.array(BFLOAT16_INPUTS, pa.float64()), parse_type("BFloat16"), "bf")
    bits = (np.asarray(got).view(np.uint32) >> 16).tolist()
    assert bits == expected.column("x").to_pylist()
    integers = [0, 1, 255, 257, 65535, 16777217, -1000001]
    listed = ", ".join(str(v) for v in integers)
    expected = _chdb_arrow(chdb, f"SELECT reinterpretAsUInt16(toBFloat16(arrayJoin([{listed}]::Array(Int64)))) AS x")
    got = conform_array(pa.array(integers, pa.int64()), parse_type("BFloat16"), "bf")
    assert (np.asarray(got).view(np.uint32) >> 16).tolist() == expected.column("x").to_pylist()


def test_bfloat16_takes_clickhouses_arrow_bytes(chdb):
    exported = _chdb_arrow(chdb, "SELECT toBFloat16(arrayJoin([1.5, -0.25, 1e30])) AS x, toFloat32(x) AS f")
    got = conform_array(exported.column("x").combine_chunks(), parse_type("BFloat16"), "bf")
    assert got.to_pylist() == exported.column("f").to_pylist()
    with pytest.raises(SchemaMismatchError, match="outside BFloat16's range"):
        conform_array(pa.array([1e39]), parse_type("BFloat16"), "bf")
