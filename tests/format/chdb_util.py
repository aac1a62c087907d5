"""Test helpers: ClickHouse tables made by chdb in a temporary directory, their part directories,
and the worked examples of format_spec/ (fenced blocks that tests compare with real files)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from chdb import session as chdb_session

SPEC_DIR = Path(__file__).resolve().parents[2] / "format_spec"

_TABLE_NAME = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?([`\"\w.]+)", re.IGNORECASE)


_open_session: chdb_session.Session | None = None


def close_session() -> None:
    """Close the session the last make_chdb_table call opened (a no-op if none is open)."""
    global _open_session
    if _open_session is not None:
        try:
            _open_session.close()
        finally:
            _open_session = None


def session_at(root: Path | str | None) -> chdb_session.Session:
    """The one chdb session of this process, on ``root`` (in memory if None). chdb runs one embedded
    server per process, so a session on another path needs the old one closed: every test opens its
    sessions here, and the session an earlier test left open is closed first."""
    global _open_session
    close_session()
    sess = chdb_session.Session(str(root)) if root is not None else chdb_session.Session()
    _open_session = sess
    return sess


def connect_at(root: Path | str):
    """A DB-API connection to chdb on ``root``, after closing the session an earlier test left open
    (the same one-server-per-process rule as session_at). The caller closes it."""
    import chdb

    close_session()
    return chdb.connect(f"file:{root}")


def open_session(tmp_path: Path | str, setup: Iterable[str] = ()) -> chdb_session.Session:
    """A fresh chdb session on ``<tmp_path>/chdb`` (tables made there before stay), after running
    the ``setup`` statements. Only one session is open at a time: the previous one is closed."""
    root = Path(tmp_path) / "chdb"
    root.mkdir(parents=True, exist_ok=True)
    sess = session_at(root)
    for statement in setup:
        sess.query(statement)
    return sess


def make_chdb_table(
    tmp_path: Path | str,
    create_sql: str,
    inserts: Iterable[str] = (),
    setup: Iterable[str] = (),
) -> tuple[chdb_session.Session, Path]:
    """Run CREATE TABLE and the INSERT statements in a fresh chdb session under ``tmp_path``
    (after the ``setup`` statements, e.g. ``SET allow_suspicious_codecs = 1``).

    Returns the session and the table's data directory (``<tmp_path>/chdb/store/xxx/<uuid>/``).
    Call again with the same ``tmp_path`` and another CREATE to get more tables in the same session
    (the previous session is closed and reopened on the same path, so earlier tables stay). Only one
    session is open at a time: creating a table elsewhere closes the previous session.
    """
    sess = open_session(tmp_path, setup)
    sess.query(create_sql)
    for statement in inserts:
        sess.query(statement)
    match = _TABLE_NAME.search(create_sql)
    if match is None:
        raise ValueError(f"cannot find the table name in {create_sql!r}")
    qualified = match.group(1).replace("`", "").replace('"', "")
    database, _, table = qualified.rpartition(".")
    database_sql = f"'{database}'" if database else "currentDatabase()"
    paths = sess.query(
        f"SELECT arrayJoin(data_paths) FROM system.tables WHERE database = {database_sql} AND name = '{table}'",
        "TabSeparatedRaw",
    ).bytes().decode().split()
    if len(paths) != 1:
        raise ValueError(f"table {qualified!r} has data paths {paths!r}, expected exactly one")
    return sess, Path(paths[0])


def part_dirs(table_data_dir: Path | str) -> list[Path]:
    """Part directories of a table directory, sorted by name (skips detached/ and tmp_* directories).

    Outdated parts a merge left behind are included until ClickHouse removes them; use
    :func:`active_part_dirs` for the active set.
    """
    root = Path(table_data_dir)
    return sorted(
        entry
        for entry in root.iterdir()
        if entry.is_dir() and entry.name != "detached" and not entry.name.startswith(("tmp", "delete_tmp"))
        and (entry / "checksums.txt").exists()
    )


def spec_block(spec_file: str, info: str) -> str:
    """The text of the fenced block opened by ```<info> in format_spec/<spec_file>."""
    text = (SPEC_DIR / spec_file).read_text()
    match = re.search(r"^```" + re.escape(info) + r"\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise ValueError(f"format_spec/{spec_file} has no ```{info} block")
    return match.group(1)


def spec_hex(spec_file: str, label: str) -> bytes:
    """The bytes of a ```hex <label> example block in format_spec/<spec_file>."""
    return bytes.fromhex(spec_block(spec_file, f"hex {label}").replace("\n", " "))


def active_part_dirs(session: chdb_session.Session, table: str) -> list[Path]:
    """Directories of the active parts of ``table`` (outdated parts left by merges excluded)."""
    paths = session.query(
        f"SELECT path FROM system.parts WHERE table = '{table}' AND active ORDER BY name",
        "TabSeparatedRaw",
    ).bytes().decode().split()
    return [Path(path) for path in paths]


def attach_and_check(session: chdb_session.Session, table: str, parts: Iterable[Path]) -> None:
    """Copy part directories into ``table``'s detached/ folder, ATTACH PART each, and assert that
    CHECK TABLE passes."""
    import shutil

    target = Path(session.query(f"SELECT data_paths[1] FROM system.tables WHERE name = '{table}'",
                                "TabSeparatedRaw").bytes().decode().strip())
    for part in parts:
        shutil.copytree(part, target / "detached" / part.name)
        session.query(f"ALTER TABLE {table} ATTACH PART '{part.name}'")
    check = session.query(f"CHECK TABLE {table}", "TabSeparatedRaw").bytes().decode().split()
    assert check and "0" not in check and "1" in check, check


def paired_part_dirs(table_data_dir: Path | str, ours: object) -> list[tuple[Path, Path]]:
    """(ClickHouse's part, our part of the same name) for every part: both tables must have the same
    part names (`ours` is a MergeTreeTable)."""
    theirs = part_dirs(table_data_dir)
    mine = sorted(ours.path / p.name for p in ours.parts())  # type: ignore[attr-defined]
    assert [p.name for p in theirs] == [p.name for p in mine]
    return list(zip(theirs, mine, strict=True))
