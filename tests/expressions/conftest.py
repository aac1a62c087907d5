"""A chdb (ClickHouse 26.9) session per test module, for checking expressions against the real thing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chdb import session as chdb_session

from tests.format import chdb_util


class ClickHouse:
    """One embedded ClickHouse on a directory; it can be stopped and started again on the same files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.session: chdb_session.Session | None = None
        self.start()

    def start(self) -> None:
        self.session = chdb_util.session_at(self.root)

    def stop(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def query(self, sql: str) -> str:
        assert self.session is not None, "ClickHouse is stopped"
        return self.session.query(sql, "TabSeparatedRaw").bytes().decode()

    def rows(self, sql: str) -> list[list[str]]:
        return [line.split("\t") for line in self.query(sql).splitlines()]

    def table_dir(self, database: str, table: str) -> Path:
        uuid = self.query(f"SELECT uuid FROM system.tables WHERE database = '{database}' AND name = '{table}'").strip()
        return next(self.root.glob(f"store/*/{uuid}"))

    def metadata_file(self, database: str, table: str) -> Path:
        return self.root / "metadata" / database / f"{table}.sql"


@pytest.fixture(scope="module")
def clickhouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouse]:
    server = ClickHouse(tmp_path_factory.mktemp("clickhouse"))
    server.query("CREATE DATABASE IF NOT EXISTS db ENGINE = Atomic")
    try:
        yield server
    finally:
        server.stop()
