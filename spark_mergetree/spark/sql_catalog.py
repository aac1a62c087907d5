"""What the Spark SQL catalog plugin (jvm/src/.../MergeTreeCatalog.java) asks Python: tables by
name over an Atomic catalog root, their properties, and DDL.

Why this route: the JVM plugin must stay small and everything that needs the engine runs here.
The plugin reaches Python the way Spark reaches the `mergetree` source anyway: it makes a
`PythonDataSourceV2` for the short name `mergetree` and calls `inferSchema` with the options
`catalog` (the root), `path` (`db.table`, where one is named) and CALL_OPTION (what to do). Spark
runs the source's `schema()` in one of its own Python workers (with the session's interpreter,
environment and Python path, on classic sessions and on a Spark Connect server alike);
`MergeTreeDataSource.schema()` hands such a call to `answer()` here, whose result goes back as the
name of the only field of the returned schema (JSON text). Nothing new has to be started, found or
configured, and a `load` costs one Python round trip, as `load(path)` does: the data source
instance Spark pickles after `schema()` has the call option removed, so Spark reads through it as
through `option("catalog", root).load("db.table")`.

The calls (CALL_OPTION value → arguments in ARGS_OPTION, JSON):
  load            → {"schema": Spark schema JSON (ClickHouse types as column comments), "properties"};
                    args {"snapshot"} (VERSION AS OF) checks that the commit has happened
  history         → the table's commits, oldest first (spark/table_history.py)
  namespaces      → database names
  tables          → {"database"} → table names
  create_namespace / drop_namespace → {"database"}
  create          → {"schema", "properties"}: a table from Spark's CREATE TABLE (or CTAS, saveAsTable)
  drop / rename ({"to"}) / add_columns ({"schema"})
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spark_mergetree.errors import InvalidOptionError, TableNotFoundError, UnsupportedError

CALL_OPTION = "mergetree_sql_call"
ARGS_OPTION = "mergetree_sql_args"

# Table properties a CREATE TABLE takes, as ClickHouse spells its clauses (spaces or underscores,
# any case): ORDER BY, PARTITION BY, PRIMARY KEY, ENGINE. Every other property is a MergeTree
# setting by its ClickHouse name (index_granularity, ...), checked by the engine's list.
STRUCTURE = {"order_by", "partition_by", "primary_key", "engine"}
# Properties Spark itself adds to every CREATE TABLE (ignored or checked here).
SPARK_RESERVED = {"provider", "owner", "comment", "external", "is_managed_location", "location"}
PROVIDER = "mergetree"
# What DESCRIBE TABLE EXTENDED shows besides the structure (read-only).
STATISTICS = ("parts", "rows", "bytes")


def is_call(options: Mapping[str, str]) -> bool:
    return CALL_OPTION in options


def answer(options: Any) -> Any:
    """The result of the call in `options` as a one-field Spark schema (see the module docstring).
    The call options are removed from `options` (the data source instance Spark keeps)."""
    from pyspark.sql.types import StringType, StructField, StructType

    call = str(options.pop(CALL_OPTION)).strip().lower()
    args = json.loads(options.pop(ARGS_OPTION, None) or "{}")
    root = options.get("catalog")
    if not root:
        raise InvalidOptionError("the mergetree SQL catalog needs its root: set spark.sql.catalog.<name>.root")
    handler = _CALLS.get(call)
    if handler is None:
        raise InvalidOptionError(f"unknown mergetree catalog call {call!r}")
    result = handler(str(root), options.get("path"), args)
    if call == "load" and is_path(options.get("path")):
        options.pop("catalog")  # the source instance Spark keeps reads by path, as load(path) does
    if call == "load" and args.get("snapshot") is not None:
        # VERSION AS OF: the source instance Spark keeps for the scan reads at that snapshot
        options["snapshot"] = str(int(args["snapshot"]))
    return StructType([StructField(json.dumps(result), StringType())])


def _catalog(root: str) -> Any:
    from spark_mergetree.catalog.catalog import Catalog
    from spark_mergetree.storage.location import local_path

    return Catalog(local_path(root))


def is_path(name: str | None) -> bool:
    """A path table's name (Delta's ``mergetree.`/data/events` ``): a directory or an object URL."""
    return bool(name) and (str(name).startswith("/") or "://" in str(name))


def _ref(root: str, name: str | None) -> Any:
    from spark_mergetree.spark import adapter

    if not name:
        raise InvalidOptionError("a mergetree catalog call on a table needs its name")
    if is_path(name):  # a table by its directory, outside the root: as format("mergetree").load(path)
        ref = adapter.resolve(str(name), None, None, None)
        adapter.open_table(ref)  # TableNotFoundError when there is none
        return ref
    ref = adapter.resolve(name, str(_catalog(root).root), None, None)
    if not ref.path:
        raise TableNotFoundError(f"table {name} does not exist in the catalog at {root}")
    return ref


def _load(root: str, name: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
    from pyspark.sql.types import StructField, StructType

    from spark_mergetree.spark import adapter
    from spark_mergetree.spark.types import spark_schema

    ref = _ref(root, name)
    table = adapter.open_table(ref)
    if args.get("snapshot") is not None:  # VERSION AS OF: a commit that has happened
        adapter.check_snapshot(ref, int(args["snapshot"]))
    schema = spark_schema(adapter.table_schema(ref))
    types = {column.name: column.type for column in table.definition.columns}
    # ClickHouse's type of each column is its comment: DESCRIBE shows it next to Spark's type.
    described = StructType([
        StructField(field.name, field.dataType, field.nullable,
                    {**(field.metadata or {}), "comment": types.get(field.name, "")})
        for field in schema.fields])
    return {"schema": described.json(), "properties": properties(table)}


def properties(table: Any) -> dict[str, str]:
    """A table's structure and statistics as Spark table properties (DESCRIBE TABLE EXTENDED)."""
    from spark_mergetree.expressions.ddl import engine_text

    definition = table.definition
    found = {"provider": PROVIDER, "engine": engine_text(definition),
             "order_by": ", ".join(definition.order_by) or "tuple()"}
    if definition.explicit_primary_key:
        found["primary_key"] = ", ".join(definition.primary_key)
    if definition.partition_by:
        found["partition_by"] = definition.partition_by
    for name, value in definition.settings.items():
        found[name] = str(value)
    parts = table.parts()
    found["parts"] = str(len(parts))
    found["rows"] = str(sum(part.rows for part in parts))
    found["bytes"] = str(sum(part.bytes_on_disk for part in parts))
    if table.uuid:
        found["uuid"] = str(table.uuid)
    return found


def _history(root: str, name: str | None, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    from spark_mergetree.spark import adapter
    from spark_mergetree.spark.table_history import history

    return history(adapter.open_table(_ref(root, name)))


def _namespaces(root: str, name: str | None, args: Mapping[str, Any]) -> list[str]:
    return list(_catalog(root).databases())


def _tables(root: str, name: str | None, args: Mapping[str, Any]) -> list[str]:
    catalog = _catalog(root)
    database = str(args["database"])
    if database not in catalog.databases():
        raise TableNotFoundError(f"database {database} does not exist in the catalog at {root}")
    return list(catalog.tables(database))


def _create_namespace(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    _catalog(root).create_database(str(args["database"]))
    return True


def _drop_namespace(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    catalog = _catalog(root)
    database = str(args["database"])
    if catalog.tables(database) and not args.get("cascade"):
        raise InvalidOptionError(f"database {database} is not empty: DROP NAMESPACE ... CASCADE drops its tables too")
    catalog.drop_database(database)
    return True


def table_options(given: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(structure: order_by/partition_by/primary_key/engine, MergeTree settings) from CREATE TABLE's
    properties and OPTIONS, names as ClickHouse writes them; an unknown name is refused, by name,
    before anything is written."""
    from spark_mergetree.engine.metadata import split_settings

    structure: dict[str, str] = {}
    settings: dict[str, str] = {}
    for raw_key, value in given.items():
        key = raw_key[len("option."):] if raw_key.startswith("option.") else raw_key
        normal = "_".join(key.strip().lower().split())
        if normal in SPARK_RESERVED or normal == "path":
            if normal == "provider" and str(value).strip().lower() not in (PROVIDER, "parquet"):
                raise UnsupportedError(f"the mergetree catalog holds mergetree tables only: USING {value} is not one; "
                                       "write USING mergetree (or leave USING out)")
            if normal == "location":
                raise UnsupportedError("the mergetree catalog places its tables itself (as ClickHouse's Atomic "
                                       "database does): leave LOCATION out")
            continue
        if normal in STATISTICS or normal == "uuid":
            raise InvalidOptionError(f"table property {key!r} is read-only (DESCRIBE TABLE EXTENDED shows it)")
        if not str(value).strip():
            raise InvalidOptionError(f"table property {key!r} is empty")
        if normal in STRUCTURE:
            structure[normal] = str(value)
            continue
        settings[normal] = str(value)
    try:
        split_settings(settings)
    except InvalidOptionError as error:
        raise InvalidOptionError(f"table property: {error}; or one of {sorted(STRUCTURE)}") from None
    return structure, settings


def _create(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    from pyspark.sql.types import StructType

    from spark_mergetree.spark import adapter
    from spark_mergetree.spark.types import clickhouse_columns, key_columns

    if not name:
        raise InvalidOptionError("CREATE TABLE needs a <database>.<table> name")
    _no_path(name, "CREATE TABLE", "write the directory with df.write.format('mergetree').save(path)")
    schema = StructType.fromJson(json.loads(args["schema"]))
    structure, settings = table_options(args.get("properties") or {})
    order, partition, primary, engine = (structure.get(key) for key in ("order_by", "partition_by", "primary_key",
                                                                         "engine"))
    non_nullable = key_columns(order, partition, primary) & set(schema.fieldNames())
    columns = clickhouse_columns(schema, non_nullable)
    adapter.new_table_schema(columns, order, partition, primary, settings, engine=engine)  # checks, writes nothing
    catalog = _catalog(root)
    database, _, table = name.partition(".")
    if database not in catalog.databases():
        raise TableNotFoundError(f"database {database} does not exist in the catalog at {root}: "
                                 f"CREATE NAMESPACE first")
    catalog.define_table(name, columns, order or "tuple()", partition, primary, settings or None, engine=engine)
    return True


def _stage_create(root: str, name: str | None, args: Mapping[str, Any]) -> dict[str, str]:
    """CREATE TABLE ... AS SELECT and saveAsTable: everything is checked here, nothing is written;
    the answer is the write options under which the query's write job creates the table (the
    catalog route of `option("catalog", root).save("db.table")`), with the options of the write
    itself (`df.write.option("order_by", ...)`) winning over nothing: both may not disagree."""
    from pyspark.sql.types import StructType

    from spark_mergetree.spark import adapter
    from spark_mergetree.spark.options import SETTING_PREFIX
    from spark_mergetree.spark.types import clickhouse_columns, key_columns

    if not name:
        raise InvalidOptionError("CREATE TABLE needs a <database>.<table> name")
    _no_path(name, "CREATE TABLE", "write the directory with df.write.format('mergetree').save(path)")
    database = name.partition(".")[0]
    if database not in _catalog(root).databases():
        raise TableNotFoundError(f"database {database} does not exist in the catalog at {root}: CREATE NAMESPACE first")
    schema = StructType.fromJson(json.loads(args["schema"]))
    structure, settings = table_options(args.get("properties") or {})
    order, partition, primary, engine = (structure.get(key) for key in ("order_by", "partition_by", "primary_key",
                                                                         "engine"))
    if order or partition or primary or engine or settings:
        non_nullable = key_columns(order, partition, primary) & set(schema.fieldNames())
        adapter.new_table_schema(clickhouse_columns(schema, non_nullable), order, partition, primary, settings,
                                 engine=engine)
    return {**structure, **{SETTING_PREFIX + key: value for key, value in settings.items()}}


def _no_path(name: str | None, statement: str, instead: str) -> None:
    """DDL names catalog tables: on a path table it is refused before anything is written."""
    if is_path(name):
        raise UnsupportedError(f"{statement} on a path table ({name}) is not supported: {instead}")


def _drop(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    _no_path(name, "DROP TABLE", "delete the directory, or use a catalog table")
    return _catalog(root).drop_table(str(name), if_exists=True) is not None


def _rename(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    _no_path(name, "ALTER TABLE ... RENAME TO", "move the directory")
    _catalog(root).rename_table(str(name), str(args["to"]))
    return True


def _add_columns(root: str, name: str | None, args: Mapping[str, Any]) -> bool:
    from pyspark.sql.types import StructType

    from spark_mergetree.catalog.alter import add_columns
    from spark_mergetree.spark.types import clickhouse_columns

    _no_path(name, "ALTER TABLE ... ADD COLUMNS", "write with option merge_schema=true")
    schema = StructType.fromJson(json.loads(args["schema"]))
    _ref(root, name)
    add_columns(_catalog(root).layout, str(name), clickhouse_columns(schema, set()))
    return True


def _no_open_transaction(args: Mapping[str, Any], statement: str, function: str) -> None:
    """SQL DML runs in one of Spark's Python processes, which cannot work in a transaction the
    user's process owns: inside `with transaction(spark)` it is refused before anything changes."""
    from spark_mergetree.spark import adapter

    if args.get("transaction") and adapter.session_txn_owned_here(str(args["transaction"])) is not None:
        raise UnsupportedError(
            f"{statement} in SQL cannot join the open spark_mergetree.transaction(spark) block: call "
            f"spark_mergetree.{function} inside the block instead (it joins the transaction), or run the "
            "statement outside it")


def _mutate(root: str, name: str | None, assignments: dict[str, Any] | None, where: str) -> list[str]:
    """DELETE / UPDATE: the engine steps of spark_mergetree.delete/update (spark/mutations.py), with
    each part's new version staged here instead of in a Spark task."""
    from spark_mergetree.spark import adapter

    ref = _ref(root, name)
    job = adapter.plan_mutation(ref, assignments, where, None)
    try:
        staged = {part: adapter.stage_mutation(ref, assignments, where, part, part in job.candidates, job.tag)
                  for part in job.parts}
        if not any(rewritten for _, rewritten in staged.values()):
            return []
        # As the distributed path hands them over: a part's staged version's name, as its task returned it.
        versions: dict[str, Any] = {part: new for part, (new, _) in staged.items()}
        return adapter.commit_mutation(ref, job, assignments, where, versions)
    finally:
        adapter.end_mutation(ref, job)


def _delete(root: str, name: str | None, args: Mapping[str, Any]) -> list[str]:
    _no_open_transaction(args, "DELETE FROM", "delete(spark, table, where, catalog=root)")
    if args.get("where") is None:  # every row: as TRUNCATE, one overwrite with no rows
        import pyarrow as pa

        from spark_mergetree.spark import adapter

        table = adapter.open_table(_ref(root, name))
        return list(table.overwrite(pa.Table.from_batches([], schema=table.schema)) or [])
    return _mutate(root, name, None, str(args["where"]))


def _update(root: str, name: str | None, args: Mapping[str, Any]) -> list[str]:
    _no_open_transaction(args, "UPDATE", "update(spark, table, set, where, catalog=root)")
    if args.get("where") is None:
        raise InvalidOptionError("UPDATE of a mergetree table needs a WHERE condition, as ClickHouse's ALTER TABLE "
                                 "... UPDATE does")
    return _mutate(root, name, dict(args["set"]), str(args["where"]))


def _optimize(root: str, name: str | None, args: Mapping[str, Any]) -> list[str]:
    """OPTIMIZE [WHERE] [FINAL]: the engine steps of spark_mergetree.optimize (spark/optimize.py),
    each group merged here instead of in a Spark task."""
    from spark_mergetree.spark import adapter

    _no_open_transaction(args, "OPTIMIZE", "optimize(spark, table, catalog=root)")
    ref = _ref(root, name)
    where = args.get("where")
    if where is not None:
        adapter.check_where(ref, where)

    def run_job(job: adapter.MergeJob) -> list[tuple[str, str, int, int]]:
        merged = [adapter.stage_merge(ref, group, job.tag, job.names[number]) for number, group in enumerate(job.groups)]
        return [(part.name, part.partition_id, part.rows, part.bytes) for part in merged]

    return adapter.optimize(ref, where, bool(args.get("final")), None, run_job)


_CALLS = {"load": _load, "namespaces": _namespaces, "tables": _tables, "create_namespace": _create_namespace,
          "drop_namespace": _drop_namespace, "create": _create, "stage_create": _stage_create, "drop": _drop, "rename": _rename,
          "add_columns": _add_columns, "history": _history, "delete": _delete, "update": _update, "optimize": _optimize}
