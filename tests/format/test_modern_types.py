"""Types added for ClickHouse 26.x tables, checked against chdb: their Arrow mapping is the one
ClickHouse exports, and what writing accepts converts values as ClickHouse converts them.

Reading and writing parts of these types (Wide and Compact, attached by ClickHouse with CHECK TABLE)
runs with every other type through `COLUMNS` in tests/format/test_serialization.py and
tests/format/test_part_interop.py.
"""

from __future__ import annotations

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
