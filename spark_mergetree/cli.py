"""The `mergetree` command line (also `python -m spark_mergetree`), built on click.

Table commands take a table directory (ours, or a ClickHouse data directory with
`--create-statement`): `parts`, `head`, `check`, `optimize`, `explain`, `cleanup`, `clone`; and
`merge-daemon`, background merges of tables and catalogs as a service.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pyarrow as pa
from tqdm import tqdm

from spark_mergetree.engine import background
from spark_mergetree.engine.table import MergeTreeTable
from spark_mergetree.errors import MergeTreeError
from spark_mergetree.jvm import JAR_PATH, extension_jar, submit_confs, submit_line
from spark_mergetree.storage.location import local_path
from spark_mergetree.storage.object_store import is_object_url, parse_object_url

if TYPE_CHECKING:
    from spark_mergetree.catalog import Catalog


def _open(path: str, create_statement: str | None) -> MergeTreeTable:
    statement = None
    if create_statement:
        candidate = Path(create_statement)
        statement = candidate.read_text() if candidate.is_file() else create_statement
    return MergeTreeTable.open(path, statement)


class _LocalDirectory(click.ParamType):
    """A directory given as a local path or a file:// URL, or (for an existing table) an object-store
    URL (s3://, gs://, abfss://); other URLs (hdfs://, ...) are refused."""

    name = "directory"

    def __init__(self, exists: bool) -> None:
        self.exists = exists

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if self.exists and is_object_url(value):
            return parse_object_url(value).url  # a table in object storage: checked when opened
        path = local_path(value)
        if self.exists and not path.is_dir():
            self.fail(f"directory {value!r} does not exist", param, ctx)
        return str(path)


_table_argument = click.argument("table_dir", type=_LocalDirectory(exists=True))
_statement_option = click.option(
    "--create-statement", "-s", default=None,
    help="CREATE/ATTACH TABLE text, or a file holding it (for ClickHouse table directories).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spark-mergetree")
def main() -> None:
    """Inspect and maintain MergeTree tables (byte-compatible with ClickHouse)."""


@main.command("clickhouse-ddl")
@_table_argument
@click.option("--name", default="default.events", show_default=True, help="The table name in ClickHouse.")
@click.option("--with-credentials", is_flag=True,
              help="Write the access key and secret into the statement (else the server's environment's are used).")
def clickhouse_ddl(table_dir: str, name: str, with_credentials: bool) -> None:
    """Print the ATTACH TABLE statement a ClickHouse server runs to read the table in place."""
    click.echo(MergeTreeTable.open(table_dir).clickhouse_ddl(name, credentials=with_credentials), nl=False)


@main.command()
@_table_argument
@_statement_option
def parts(table_dir: str, create_statement: str | None) -> None:
    """List the visible parts (like system.parts)."""
    table = _open(table_dir, create_statement)
    rows = table.parts()
    click.echo(f"{'part':32} {'rows':>12} {'granules':>9} {'bytes':>14}")
    for p in rows:
        click.echo(f"{p.name:32} {p.rows:12,} {p.granules:9,} {p.bytes_on_disk:14,}")
    click.echo(f"{len(rows)} parts, {sum(p.rows for p in rows):,} rows")


@main.command()
@_table_argument
@_statement_option
@click.option("-n", "--rows", default=10, show_default=True, help="How many rows to show.")
@click.option("--where", default=None, help="A predicate, e.g. \"id BETWEEN 1 AND 9\".")
@click.option("--columns", default=None, help="Comma-separated columns to show.")
def head(table_dir: str, create_statement: str | None, rows: int, where: str | None, columns: str | None) -> None:
    """Show the first rows (in part order)."""
    table = _open(table_dir, create_statement)
    names = [c.strip() for c in columns.split(",")] if columns else None
    pieces = []
    shown = 0
    for batch in table.to_batches(names, where):
        piece = batch.slice(0, rows - shown)
        if piece.num_rows:
            pieces.append(piece)
        shown += piece.num_rows
        if shown >= rows:
            break
    schema = table.schema if names is None else pa.schema([table.schema.field(name) for name in names])
    for line in text_table(schema.names, [row for piece in pieces for row in piece.to_pylist()]):
        click.echo(line)
    click.echo(f"({shown} row{'' if shown == 1 else 's'})")


def text_table(names: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Rows as an aligned text table: a header, a rule, one line per row; numbers right-aligned,
    NULL for None, long values cut to 60 characters."""
    cells = [[_cell(row[name]) for name in names] for row in rows]
    numeric = [bool(rows) and all(isinstance(row[name], (int, float)) or row[name] is None for row in rows)
               for name in names]
    widths = [max([len(name)] + [len(line[i]) for line in cells]) for i, name in enumerate(names)]

    def line(values: list[str]) -> str:
        return "  ".join(value.rjust(width) if right else value.ljust(width)
                         for value, width, right in zip(values, widths, numeric, strict=True)).rstrip()

    return [line(list(names)), "  ".join("-" * width for width in widths)] + [line(values) for values in cells]


def _cell(value: Any) -> str:
    text = "NULL" if value is None else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= 60 else text[:59] + "…"


@main.command()
@_table_argument
@_statement_option
def check(table_dir: str, create_statement: str | None) -> None:
    """Re-hash every file of every visible part against checksums.txt (like CHECK TABLE)."""
    table = _open(table_dir, create_statement)
    with tqdm(total=len(table.visible_parts()[1]), unit="part", desc="check", file=sys.stderr) as bar:
        report = table.check(on_part=lambda _name: bar.update(1))
    click.echo(str(report))
    sys.exit(1 if report.problems else 0)


@main.command()
@_table_argument
@_statement_option
@click.option("--final", is_flag=True, help="Merge every partition down to one part.")
def optimize(table_dir: str, create_statement: str | None, final: bool) -> None:
    """Merge parts (like OPTIMIZE TABLE [FINAL])."""
    table = _open(table_dir, create_statement)
    created = table.optimize(final=final, progress=None)  # a bar with its total on a terminal only
    for name in created:
        click.echo(f"merged into {name}")
    if not created:
        click.echo("nothing to merge")


@main.command()
@_table_argument
@_statement_option
@click.argument("where", required=False)
def explain(table_dir: str, create_statement: str | None, where: str | None) -> None:
    """Show which parts and granules a read with WHERE would touch."""
    click.echo(str(_open(table_dir, create_statement).explain(where)))


@main.command()
@_table_argument
def cleanup(table_dir: str) -> None:
    """Delete parts no snapshot needs; finish or roll back interrupted transactions."""
    removed = MergeTreeTable.open(table_dir).cleanup()
    click.echo(f"removed {len(removed)} old parts" + (": " + ", ".join(removed) if removed else ""))


@main.command()
@_table_argument
@_statement_option
@click.argument("destination")
def clone(table_dir: str, create_statement: str | None, destination: str) -> None:
    """Copy a table into a new directory (or object-store prefix) as a new table with an id of its
    own: its current rows, hard-linked on one file system, copied on the server in object storage.
    (A directory copied with `cp -a` becomes a new table only on its first write.)"""
    copy = _open(table_dir, create_statement).clone(destination)
    click.echo(f"cloned {table_dir} into {copy.path}")


@main.command()
@_table_argument
def scrub(table_dir: str) -> None:
    """Verify every part of the table where it lies: every stripe unit and parity block on its
    disks, every object against its part's checksums.txt in object storage."""
    report = MergeTreeTable.open(table_dir).scrub(progress=True)
    click.echo(str(report))
    sys.exit(0 if report.ok else 1)


@main.command()
@_table_argument
@click.argument("disk")
def rebuild(table_dir: str, disk: str) -> None:
    """Restore the replaced (empty) DISK of a raid1/raid5/raid6 volume from the other disks."""
    report = MergeTreeTable.open(table_dir).rebuild(disk, progress=True)
    click.echo(f"rebuilt disk {report.disk}: {report.parts_rebuilt} parts, {report.bytes_written:,} bytes")


@main.command("export-part")
@_table_argument
@click.argument("part")
@click.argument("destination", type=_LocalDirectory(exists=False))
def export_part(table_dir: str, part: str, destination: str) -> None:
    """Write PART as a plain ClickHouse part directory DESTINATION (for ATTACH PART)."""
    path = MergeTreeTable.open(table_dir).export_part(part, destination)
    click.echo(f"exported {part} to {path}")


@main.command()
@click.option("--coordinator", "-c", default=None,
              help="Coordinator URL (file:///dir or zk://host:port/path); default: the process default.")
@click.option("--limit", default=50, show_default=True)
def transactions(coordinator: str | None, limit: int) -> None:
    """List running and recent transactions (like system.transactions)."""
    from spark_mergetree.txn import coordinator_from_url, default_coordinator

    coord = coordinator_from_url(coordinator) if coordinator else default_coordinator()
    click.echo(f"{'tid':>10} {'state':10} {'csn':>10} {'snapshot':>10}  tables")
    for record in coord.list_transactions(limit):
        csn = "-" if record.csn is None else record.csn
        snapshot = "-" if record.snapshot is None else record.snapshot
        click.echo(f"{record.tid:>10} {record.state.value:10} {csn:>10} {snapshot:>10}  {', '.join(record.tables)}")


@main.command("merge-daemon")
@click.argument("table_dirs", nargs=-1, type=_LocalDirectory(exists=True))
@click.option("--catalog-root", "catalog_root", default=None, type=_LocalDirectory(exists=True),
              help="Also merge every table of this catalog (listed again each round).")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds to sleep when no table has anything to merge.")
@click.option("--cleanup-every", default=0.0, show_default=True, type=click.FloatRange(min=0.0),
              help="Also run cleanup on each table every this many seconds (0: never).")
def merge_daemon(table_dirs: tuple[str, ...], catalog_root: str | None, interval: float, cleanup_every: float) -> None:
    """Merge tables in the background until SIGTERM/SIGINT (ClickHouse's background merges, as a
    service). Prints one line per merge; several daemons (and writers' own background merges) may
    work on one table at once: each merge is a transaction and only one merger of a part wins."""

    if not table_dirs and catalog_root is None:
        raise click.UsageError("give table directories and/or --catalog-root")
    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    tables: dict[str, MergeTreeTable] = {}
    last_cleanup = time.monotonic()
    click.echo(f"merge-daemon: started (pid {os.getpid()})", err=True)
    while not stop.is_set():
        for label, table in _daemon_tables(table_dirs, catalog_root, tables):
            if stop.is_set():
                break
            try:
                background.merge_until_settled(table, stop, on_merge=_progress_line(label, table))
                if cleanup_every and time.monotonic() - last_cleanup >= cleanup_every:
                    table.cleanup()
            except Exception as error:  # noqa: BLE001 - one table's trouble must not stop the service
                click.echo(f"{label}: merge failed (the table is unchanged): {error!r}", err=True)
        if cleanup_every and time.monotonic() - last_cleanup >= cleanup_every:
            last_cleanup = time.monotonic()
        stop.wait(interval)
    click.echo("merge-daemon: stopped", err=True)


def _progress_line(label: str, table: MergeTreeTable) -> Callable[[str, float], None]:
    def report(name: str, seconds: float) -> None:
        click.echo(f"{label}: merged {name} ({table.reader(name).rows} rows, "
                   f"{table.part_bytes(name) / 1e6:.1f} MB) in {seconds:.2f} s", nl=True)
        sys.stdout.flush()

    return report


def _daemon_tables(table_dirs: tuple[str, ...], catalog_root: str | None,
                   opened: dict[str, MergeTreeTable]) -> list[tuple[str, MergeTreeTable]]:
    """(label, table) of the daemon's tables this round; handles are kept across rounds."""
    out = []
    for path in table_dirs:
        if path not in opened:
            opened[path] = MergeTreeTable.open(path)
        out.append((path, opened[path]))
    if catalog_root is not None:
        from spark_mergetree.catalog import Catalog

        cat = Catalog(catalog_root)
        for database in cat.databases():
            for name in cat.tables(database):
                label = f"{database}.{name}"
                try:
                    info = cat.table_info(label)
                    key = str(info.data_path)
                    if key not in opened:
                        opened[key] = MergeTreeTable.open(info.data_path, create_statement=info.statement)
                    out.append((label, opened[key]))
                except MergeTreeError:
                    continue  # dropped or renamed since listing: the next round sees it as it is now
    return out


# ----------------------------------------------------------------------------- catalog


@main.group()
@click.option("--root", "-r", required=True, type=_LocalDirectory(exists=False),
              help="Catalog root (laid out as a ClickHouse server's path).")
@click.pass_context
def catalog(ctx: click.Context, root: str) -> None:
    """Databases and tables of an Atomic catalog, and DDL on them."""
    from spark_mergetree.catalog import Catalog

    ctx.obj = Catalog(root)


def _when(epoch_seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_seconds))


@catalog.command("databases")
@click.pass_obj
def catalog_databases(cat: Catalog) -> None:
    """List databases."""
    for name in cat.databases():
        click.echo(name)


@catalog.command("tables")
@click.argument("database")
@click.pass_obj
def catalog_tables(cat: Catalog, database: str) -> None:
    """List the tables of DATABASE (with their UUIDs), detached and dropped ones marked."""
    for name in cat.tables(database):
        click.echo(f"{database}.{name}\t{cat.table_uuid(f'{database}.{name}')}")
    for name in cat.detached_tables(database):
        click.echo(f"{database}.{name}\t(detached)")
    for dropped in cat.dropped_tables():
        if dropped.database == database:
            click.echo(f"{database}.{dropped.name}\t(dropped, data deleted after {_when(dropped.due_time)})")


@catalog.command("create-database")
@click.argument("database")
@click.option("--if-not-exists", is_flag=True)
@click.pass_obj
def catalog_create_database(cat: Catalog, database: str, if_not_exists: bool) -> None:
    """CREATE DATABASE (ENGINE = Atomic)."""
    click.echo(cat.create_database(database, if_not_exists=if_not_exists))


@catalog.command("drop-database")
@click.argument("database")
@click.pass_obj
def catalog_drop_database(cat: Catalog, database: str) -> None:
    """DROP DATABASE: its tables are dropped (data deleted after the delay)."""
    cat.drop_database(database)


@catalog.command("create-table")
@click.argument("name")
@click.option("--column", "-c", "columns", multiple=True, required=True, help='"name Type", repeatable.')
@click.option("--order-by", required=True)
@click.option("--partition-by", default=None)
@click.option("--primary-key", default=None)
@click.option("--if-not-exists", is_flag=True)
@click.pass_obj
def catalog_create_table(cat: Catalog, name: str, columns: tuple[str, ...], order_by: str, partition_by: str | None,
                         primary_key: str | None, if_not_exists: bool) -> None:
    """CREATE TABLE db.t (columns) ORDER BY ... [PARTITION BY ...]."""
    schema = []
    for column in columns:
        column_name, _, type_text = column.strip().partition(" ")
        if not type_text:
            raise click.BadParameter(f"{column!r}: expected \"name Type\"", param_hint="--column")
        schema.append((column_name, type_text.strip()))
    cat.create_table(name, schema, order_by, partition_by, primary_key, if_not_exists=if_not_exists)
    click.echo(f"{name}\t{cat.table_uuid(name)}")


@catalog.command("rename")
@click.argument("old")
@click.argument("new")
@click.pass_obj
def catalog_rename(cat: Catalog, old: str, new: str) -> None:
    """RENAME TABLE old TO new (also across databases); never overwrites."""
    cat.rename_table(old, new)


@catalog.command("exchange")
@click.argument("first")
@click.argument("second")
@click.pass_obj
def catalog_exchange(cat: Catalog, first: str, second: str) -> None:
    """EXCHANGE TABLES first AND second, atomically."""
    cat.exchange_tables(first, second)


@catalog.command("drop")
@click.argument("name")
@click.option("--sync", is_flag=True, help="Delete the data now (once no reader holds it).")
@click.pass_obj
def catalog_drop(cat: Catalog, name: str, sync: bool) -> None:
    """DROP TABLE: metadata moves to metadata_dropped/, data is deleted after the delay."""
    dropped = cat.drop_table(name, sync=sync)
    if dropped is not None:
        state = "data deleted" if dropped.data_removed else f"data deleted after {_when(dropped.due_time)}"
        click.echo(f"dropped {name} ({dropped.uuid}): {state}")


@catalog.command("undrop")
@click.argument("name")
@click.pass_obj
def catalog_undrop(cat: Catalog, name: str) -> None:
    """UNDROP TABLE within the drop delay."""
    cat.undrop_table(name)


@catalog.command("detach")
@click.argument("name")
@click.pass_obj
def catalog_detach(cat: Catalog, name: str) -> None:
    """DETACH TABLE (permanently, as ClickHouse's DETACH ... PERMANENTLY)."""
    cat.detach_table(name)


@catalog.command("attach")
@click.argument("name")
@click.pass_obj
def catalog_attach(cat: Catalog, name: str) -> None:
    """ATTACH TABLE a detached table."""
    cat.attach_table(name)


@main.command("spark-submit-args")
@click.option("--spark-defaults", is_flag=True,
              help="Print spark-defaults.conf lines (also a Databricks cluster's Spark config) instead.")
def spark_submit_args(spark_defaults: bool) -> None:
    """Print, in one line, the spark-submit arguments that load the session extension (column
    pruning, Spark's filters pruning): `spark-submit $(mergetree spark-submit-args) job.py`."""
    jar = extension_jar()
    if jar is None:
        raise click.ClickException(f"{JAR_PATH} is not built: run scripts/build-jvm in the source checkout, "
                                   "or install a wheel built with it")
    if spark_defaults:
        click.echo("\n".join(f"{key} {value}" for key, value in submit_confs(jar).items()))
    else:
        click.echo(submit_line(jar))


def run() -> None:
    """Entry point that turns our errors into one clear line and exit code 2."""
    try:
        main(standalone_mode=False)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except MergeTreeError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
