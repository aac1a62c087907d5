"""Options of format("mergetree"): parsing and validation of read and write options on the driver.

Spark hands options over with lower-cased keys and string values. Everything is checked here, before
any task runs, so a typo fails the job at once with an InvalidOptionError naming the option and the
values it accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_mergetree.errors import InvalidOptionError
from spark_mergetree.spark.adapter import TXN_OPTION, TxnContext
from spark_mergetree.storage.location import local_path
from spark_mergetree.storage.object_store import (
    CLOUD_NAMES,
    OPTION_PREFIXES,
    STORAGE_OPTION_KEYS,
    check_storage_options,
    is_object_url,
    parse_object_url,
)

# Uncompressed bytes one input partition should cover (Spark's spark.sql.files.maxPartitionBytes
# default); granule ranges are grouped up to that many rows of the columns read.
DEFAULT_TARGET_BYTES = 128 << 20
# What opening one part costs an input partition, in bytes of rows read (as Spark's
# spark.sql.files.openCostInBytes, measured: opening and reading a part's files costs a read task
# about as much as decoding and handing over ~100 KiB of rows): small parts share partitions.
OPEN_COST_BYTES = 256 << 10
# Rows a write task buffers before staging parts: bounds task memory while keeping parts large.
DEFAULT_STAGE_ROWS = 4 << 20

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

# Endpoint and credentials of a table in object storage, prefixed by its cloud (`s3.endpoint`,
# `s3.access_key_id`, `gcs.endpoint`, `gcs.credentials_file`, `azure.account_key`, ...): they win
# over the environment's (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_*, profiles, roles).
# Options that only name the table, and the transaction; shared by reads and writes.
_LOCATION_OPTIONS = {"path", "catalog", "create_statement", "coordinator", TXN_OPTION} | {
    OPTION_PREFIXES[cloud] + key for cloud, keys in STORAGE_OPTION_KEYS.items() for key in keys}

# `useProjections` (Spark lower-cases option keys): "false" never reads through a normal projection,
# as ClickHouse's optimize_use_projections = 0.
USE_PROJECTIONS = "useprojections"
READ_OPTIONS = _LOCATION_OPTIONS | {"columns", "where", "target_rows", "pushdown", "snapshot", "final", USE_PROJECTIONS}

# Options that shape a table when the first write creates it.
CREATE_OPTIONS = {"order_by", "partition_by", "primary_key", "index_granularity", "codec", "engine", "projections"}
WRITE_OPTIONS = _LOCATION_OPTIONS | CREATE_OPTIONS | {"partition_overwrite_mode", "merge_schema", "stage_rows"}
# Any other MergeTree setting of a new table is given as `setting.<name>`.
SETTING_PREFIX = "setting."


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidOptionError(f"option {key!r} must be true or false, got {raw!r}")


def parse_int(options: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidOptionError(f"option {key!r} must be >= {minimum}, got {value}")
    return value


def parse_columns(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    names = [name.strip().strip("`") for name in raw.split(",")]
    if not all(names):
        raise InvalidOptionError(f"option 'columns' must be a comma-separated list of column names, got {raw!r}")
    return names


def _reject_unknown(options: Mapping[str, str], known: set[str], what: str, allow_settings: bool = False) -> None:
    unknown = sorted(
        key for key in options
        if key not in known and not (allow_settings and key.startswith(SETTING_PREFIX))
    )
    if unknown:
        extra = f", or {SETTING_PREFIX}<merge tree setting>" if allow_settings else ""
        raise InvalidOptionError(
            f"unknown {what} option(s) {unknown} for format('mergetree'); valid: {sorted(known)}{extra}"
        )


def _location(options: Mapping[str, str]) -> tuple[str, str | None]:
    """The table directory (or, with a catalog, the table name) and the catalog root, both local:
    a URL other than file:// is refused here, on the driver, before anything is written."""
    path = options.get("path")
    if not path:
        raise InvalidOptionError(
            "format('mergetree') needs a table: load(<directory>) / save(<directory>), or option 'catalog' "
            "with load('<database>.<table>')"
        )
    catalog = options.get("catalog") or None
    if catalog is not None:
        return path, str(local_path(catalog))
    if is_object_url(path):
        return parse_object_url(path).url, None
    return str(local_path(path)), None


def storage_options(options: Mapping[str, str], path: str) -> tuple[tuple[str, str], ...]:
    """The storage options of the table's cloud (`s3.*`, `gcs.*`, `azure.*`), checked, as sorted
    (name, value) pairs without their prefix (picklable, hashable). Another cloud's options are
    refused, naming them and the table's URL."""
    cloud = parse_object_url(path).scheme if is_object_url(path) else None
    found: dict[str, str] = {}
    for scheme, prefix in OPTION_PREFIXES.items():
        given = {key[len(prefix):]: value for key, value in options.items() if key.startswith(prefix)}
        if not given:
            continue
        if cloud is not None and scheme != cloud:
            raise InvalidOptionError(f"options {sorted(prefix + k for k in given)} are for {CLOUD_NAMES[scheme]}, "
                                     f"but the table {path} is in {CLOUD_NAMES[cloud]}: use "
                                     f"{OPTION_PREFIXES[cloud]}* options")
        try:
            checked = check_storage_options(given, scheme)
        except InvalidOptionError as error:
            raise InvalidOptionError(f"options {sorted(prefix + k for k in given)}: {error}") from None
        if scheme == cloud:
            found = checked
    return tuple(sorted(found.items()))


@dataclass(frozen=True)
class ReadOptions:
    path: str
    catalog: str | None = None
    create_statement: str | None = None
    coordinator: str | None = None
    columns: list[str] | None = None
    where: str | None = None
    target_rows: int | None = None
    pushdown: bool = True
    snapshot: int | None = None
    transaction: TxnContext | None = None
    storage: tuple[tuple[str, str], ...] = ()
    final: bool = False  # read as SELECT ... FINAL: the table engine's merge applied across parts
    use_projections: bool = True  # a filter on a projection's key may read its granules (engine plan_read)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        options = {key.lower(): value for key, value in options.items()}
        _reject_unknown(options, READ_OPTIONS, "read")
        path, catalog = _location(options)
        where = options.get("where")
        if where is not None and not where.strip():
            raise InvalidOptionError("option 'where' is empty; leave it out to read every row")
        return cls(
            path=path,
            catalog=catalog,
            create_statement=options.get("create_statement") or None,
            coordinator=options.get("coordinator") or None,
            columns=parse_columns(options.get("columns")),
            where=where,
            target_rows=parse_int(options, "target_rows", None, minimum=1),
            pushdown=parse_bool(options, "pushdown", True),
            snapshot=parse_int(options, "snapshot", None),
            transaction=_transaction(options, "snapshot"),
            storage=storage_options(options, path),
            final=parse_bool(options, "final", False),
            use_projections=parse_bool(options, USE_PROJECTIONS, True),
        )


@dataclass(frozen=True)
class WriteOptions:
    path: str
    catalog: str | None = None
    create_statement: str | None = None
    coordinator: str | None = None
    order_by: str | None = None
    partition_by: str | None = None
    primary_key: str | None = None
    engine: str | None = None  # e.g. "ReplacingMergeTree(version)"; None: MergeTree
    # PROJECTION declarations of a new table, e.g. ("p (SELECT * ORDER BY v)",); the option separates them by ';'
    projections: tuple[str, ...] = ()
    settings: dict[str, str] = field(default_factory=dict)
    partition_overwrite_mode: str = "static"  # "dynamic": replace only the partitions written
    merge_schema: bool = False
    stage_rows: int = DEFAULT_STAGE_ROWS
    transaction: TxnContext | None = None
    storage: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str], overwrite: bool) -> WriteOptions:
        options = {key.lower(): value for key, value in options.items()}
        _reject_unknown(options, WRITE_OPTIONS, "write", allow_settings=True)
        path, catalog = _location(options)
        mode = str(options.get("partition_overwrite_mode", "static")).strip().lower()
        if mode not in ("static", "dynamic"):
            raise InvalidOptionError(
                f"option 'partition_overwrite_mode' must be 'static' or 'dynamic', got {options['partition_overwrite_mode']!r}"
            )
        if mode == "dynamic" and not overwrite:
            raise InvalidOptionError(
                "option 'partition_overwrite_mode'='dynamic' needs mode('overwrite'); with mode('append') "
                "nothing is replaced"
            )
        settings: dict[str, str] = {}
        granularity = parse_int(options, "index_granularity", None, minimum=1)
        if granularity is not None:
            settings["index_granularity"] = str(granularity)
        codec = options.get("codec")
        if codec is not None:
            settings["codec"] = _check_codec(codec)
        for key, value in options.items():
            if key.startswith(SETTING_PREFIX):
                name = key[len(SETTING_PREFIX):]
                if not name.isidentifier():
                    raise InvalidOptionError(f"option {key!r} does not name a MergeTree setting")
                settings[name] = value
        for key in ("order_by", "partition_by", "primary_key", "engine", "projections"):
            if key in options and not str(options[key]).strip():
                raise InvalidOptionError(f"option {key!r} is empty")
        projections = tuple(p.strip() for p in str(options.get("projections", "")).split(";") if p.strip())
        return cls(
            path=path,
            catalog=catalog,
            create_statement=options.get("create_statement") or None,
            coordinator=options.get("coordinator") or None,
            order_by=options.get("order_by"),
            partition_by=options.get("partition_by"),
            primary_key=options.get("primary_key"),
            engine=options.get("engine"),
            projections=projections,
            settings=settings,
            partition_overwrite_mode=mode,
            merge_schema=parse_bool(options, "merge_schema", False),
            stage_rows=parse_int(options, "stage_rows", DEFAULT_STAGE_ROWS, minimum=1) or DEFAULT_STAGE_ROWS,
            transaction=_transaction(options),
            storage=storage_options(options, path),
        )


def _transaction(options: Mapping[str, str], excludes: str | None = None) -> TxnContext | None:
    txn = TxnContext.parse(options.get(TXN_OPTION))
    if txn is not None and excludes is not None and options.get(excludes) is not None:
        raise InvalidOptionError(f"options {TXN_OPTION!r} and {excludes!r} exclude each other: a transaction "
                                 "reads its own snapshot")
    return txn


def _check_codec(raw: str) -> str:
    # Imported here: the codecs pull in numpy, lz4 and zstandard, and every planning process of a
    # first query (PySpark starts a new one per step) imports this module.
    from spark_mergetree.format.compression_codecs import parse_codec

    try:
        return parse_codec(raw).setting
    except InvalidOptionError as error:
        raise InvalidOptionError(f"option 'codec': {error}") from None
