"""`spark.readStream.format("mergetree").load(path)`: the rows each commit of a table inserted, once.

Offsets are commit sequence numbers (`{"csn": N}`): a micro-batch from offset S to offset E holds
the rows of the parts that the table's commits with S < csn ≤ E inserted (engine/commit_feed.py
decides which parts a commit inserted). Each part is read as the commit that added it left it: at
that commit's snapshot, with the lightweight UPDATEs visible there, and with its own `_row_exists`
mask; a later change to its rows is a commit of its own (below).

* Where a stream starts: with no option, the first micro-batch is the whole table at its last commit
  (offset -1 stands for "before the table": that batch reads the snapshot at E, in one piece,
  whatever the admission limits), then every commit after it. `startingSnapshot=N` starts after
  snapshot N (the commits with csn > N); `startingSnapshot=latest` after the last commit.
* Merges, OPTIMIZE and TTL merges add parts that replace parts already fed: they feed no row.
  Cleanup deletes only parts removed at or below the log's floor; a stream whose offset is below
  the floor fails naming it (engine/commit_feed.HistoryGoneError) instead of missing rows.
* A commit that changes rows already fed (DELETE, UPDATE, an overwrite, any mutation) fails the
  stream with an error naming its csn, after the commits before it were fed; with
  `skipChangeCommits=true` such commits are passed over whole (as Delta's option does: rows a
  change commit also inserted are not fed either).
* Admission control (`maxRowsPerTrigger`, `maxPartsPerTrigger`) admits whole commits, at least one
  per micro-batch: a commit bigger than the limit is one micro-batch. It needs PySpark 4.2+
  (`latestOffset(start, limit)`, `getDefaultReadLimit`, `SupportsTriggerAvailableNow`); PySpark
  4.0 and 4.1 call `latestOffset()` with no start and no limit, so the options are refused there by
  name, and `Trigger.AvailableNow` runs through Spark's own wrapper (one micro-batch up to the
  offset it saw at the start).

The offset a batch ends at is never past the coordinator's current timestamp, and a commit gets
its csn and becomes visible in one step at the coordinator: no commit can later appear below an
offset already handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from spark_mergetree.engine.commit_feed import TableCommit, commits_after, last_commit, part_rows
from spark_mergetree.errors import InvalidOptionError, TransactionError, UnsupportedError
from spark_mergetree.spark import adapter
from spark_mergetree.spark.adapter import TableRef
from spark_mergetree.spark.options import parse_bool, parse_int

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxFiles,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # PySpark 4.0 / 4.1
    ADMISSION_CONTROL = False

# Options only a stream reads (lower case, as Spark hands them over).
STARTING_SNAPSHOT = "startingsnapshot"
MAX_ROWS = "maxrowspertrigger"
MAX_PARTS = "maxpartspertrigger"
SKIP_CHANGES = "skipchangecommits"
STREAM_OPTIONS = {STARTING_SNAPSHOT, MAX_ROWS, MAX_PARTS, SKIP_CHANGES}
_BATCH_ONLY = {"snapshot": "give startingSnapshot to say where a stream starts",
               "transaction": "a stream reads every commit as it comes, outside any transaction",
               "final": "FINAL merges rows across parts, which a stream of inserted rows never holds together"}
BEFORE_TABLE = -1  # the initial offset without startingSnapshot: the first batch is the whole table


def without_stream_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` without the stream reader's own (the DataSource's schema() parses the rest)."""
    return {key: value for key, value in options.items() if str(key).lower() not in STREAM_OPTIONS}


def refuse_stream_options(options: Mapping[str, Any]) -> None:
    """A batch read given a stream reader's option is told so, not silently ignored."""
    given = sorted(str(key) for key in options if str(key).lower() in STREAM_OPTIONS)
    if given:
        raise InvalidOptionError(f"option(s) {given} apply to spark.readStream.format('mergetree') only; "
                                 "a batch read takes option 'snapshot'")


@dataclass(frozen=True)
class StreamOptions:
    starting: int | str | None  # a csn, "latest", or None (the whole table first)
    max_rows: int | None
    max_parts: int | None
    skip_changes: bool

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        given = {str(key).lower(): value for key, value in options.items()}
        for key, why in _BATCH_ONLY.items():
            if key in given:
                raise InvalidOptionError(f"option {key!r} cannot be given to readStream.format('mergetree'): {why}")
        raw = given.get(STARTING_SNAPSHOT)
        starting: int | str | None = None
        if raw is not None and str(raw).strip().lower() == "latest":
            starting = "latest"
        elif raw is not None:
            starting = parse_int(given, STARTING_SNAPSHOT, None, minimum=0)
        opts = cls(starting, parse_int(given, MAX_ROWS, None, minimum=1), parse_int(given, MAX_PARTS, None, minimum=1),
                   parse_bool(given, SKIP_CHANGES, False))
        if (opts.max_rows or opts.max_parts) and not ADMISSION_CONTROL:
            from pyspark import __version__

            raise UnsupportedError(
                f"options maxRowsPerTrigger / maxPartsPerTrigger need PySpark 4.2 or later: PySpark {__version__} "
                "asks a Python stream reader for its latest offset with no start and no read limit "
                "(latestOffset(), no getDefaultReadLimit), so a source cannot admit data in steps")
        return opts


# What the batch source (spark/source.py) lends a stream reader: a reader of read tasks, and a
# function making input partitions of (batch reader, read tasks, the PartSets they cover).
PlanPartitions = Callable[[Any, list[Any], "adapter.PartSets"], list[InputPartition]]


class MergeTreeStreamReader(DataSourceStreamReader):
    """Offsets `{"csn": N}`; one instance lives in the query's planning process on the driver (its
    AvailableNow target is kept there) and is pickled to the tasks that read. A micro-batch is read
    as a batch read of chosen parts: `batch_reader` (spark/source.py's MergeTreeReader, made with
    the stream's columns, `where` and `target_rows`) reads the partitions `plan_partitions` makes."""

    def __init__(self, ref: TableRef, stream: StreamOptions, batch_reader: Any,
                 plan_partitions: PlanPartitions) -> None:
        self.ref = ref
        self.stream = stream
        self.batch_reader = batch_reader
        self.plan_partitions = plan_partitions
        self.target: int | None = None  # Trigger.AvailableNow: no offset beyond the one at the start

    # ---- offsets (driver) ----------------------------------------------------------------------

    def _table(self) -> Any:
        return adapter.open_table(self.ref)

    def _upto(self) -> int:
        latest = self._table().coordinator.current_timestamp()
        return latest if self.target is None else min(latest, self.target)

    def initialOffset(self) -> dict:  # noqa: N802 - the API's name
        starting = self.stream.starting
        if starting is None:
            return {"csn": BEFORE_TABLE}
        latest = self._table().coordinator.current_timestamp()
        if starting == "latest":
            return {"csn": latest}
        assert isinstance(starting, int)
        if starting > latest:
            raise InvalidOptionError(f"option 'startingSnapshot'={starting} is beyond the latest commit sequence "
                                     f"number of {self.ref.describe()}'s coordinator, {latest}")
        commits_after(self._table(), starting, starting)  # refused if cleanup took commits after it
        return {"csn": starting}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - the API's name
        self.target = self._table().coordinator.current_timestamp()

    def getDefaultReadLimit(self) -> Any:  # noqa: N802 - the API's name
        if self.stream.max_rows is not None:
            return ReadMaxRows(self.stream.max_rows)
        if self.stream.max_parts is not None:
            return ReadMaxFiles(self.stream.max_parts)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802 - the API's name
        """The end of the next micro-batch. PySpark 4.0/4.1 give neither `start` nor `limit`: every
        commit there is (a change commit then fails the batch, in `partitions`)."""
        table = self._table()
        upto = self._upto()
        begin = _csn(start) if start is not None else None
        if begin is None or begin == BEFORE_TABLE:
            last = last_commit(table, upto)
            return {"csn": BEFORE_TABLE if last is None else last}
        commits = commits_after(table, begin, upto)
        limited = ADMISSION_CONTROL and limit is not None and not isinstance(limit, ReadAllAvailable)
        end, rows, parts = begin, 0, 0
        for commit in commits:
            if commit.changes_rows and not self.stream.skip_changes:
                if end == begin:
                    raise self._change_error(commit)
                break  # feed the commits before it first; the next batch fails on it
            if limited and end != begin:
                more_parts = len(commit.inserted)
                more_rows = part_rows(table, commit.inserted) if self.stream.max_rows is not None else 0
                if ((self.stream.max_rows is not None and rows + more_rows > self.stream.max_rows)
                        or (self.stream.max_parts is not None and parts + more_parts > self.stream.max_parts)):
                    break
            if limited:
                parts += len(commit.inserted)
                rows += part_rows(table, commit.inserted) if self.stream.max_rows is not None else 0
            end = commit.csn
        return {"csn": end}

    def _change_error(self, commit: TableCommit) -> TransactionError:
        return TransactionError(
            f"readStream.format('mergetree') of {self.ref.describe()}: the commit at csn {commit.csn} changes rows "
            f"the stream may have fed already: {commit.change}. Set option skipChangeCommits=true to pass over such "
            f"commits (their rows are not fed), or start a new stream (new checkpoint) with "
            f"startingSnapshot={commit.csn}")

    # ---- planning (driver) ---------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = _csn(start), _csn(end)
        if stop <= begin:
            return []
        table = self._table()
        units: list[tuple[int, list[str]]] = []
        if begin == BEFORE_TABLE:
            _, visible = table.visible_parts(snapshot=stop)
            units.append((stop, sorted(visible)))
        else:
            for commit in commits_after(table, begin, stop):
                if commit.changes_rows:
                    if not self.stream.skip_changes:
                        raise self._change_error(commit)
                    continue
                if commit.inserted:
                    units.append((commit.csn, list(commit.inserted)))
        reader = self.batch_reader
        tasks: list[Any] = []
        names: set[str] = set()
        for csn, parts in units:
            # Each commit's parts are planned at its own snapshot (the UPDATEs applied then); the
            # tasks carry what they apply, so one plan of all units reads each part as of its commit.
            sets = adapter.PartSets(csn, frozenset(parts), frozenset(parts), time_travel=True)
            tasks.extend(adapter.plan(self.ref, reader.columns, reader.where, reader.target_rows, sets).tasks)
            names.update(parts)
        if not tasks:
            return []
        every = adapter.PartSets(stop, frozenset(names), frozenset(names), time_travel=True)
        return self.plan_partitions(reader, tasks, every)

    # ---- reading (tasks) -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.batch_reader.read(partition)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: parts a batch read stay until cleanup, whose floor guards them


def _csn(offset: Mapping[str, Any]) -> int:
    try:
        return int(offset["csn"])
    except (KeyError, TypeError, ValueError):
        raise InvalidOptionError(f"offset {offset!r} of a mergetree stream has no commit sequence number "
                                 "('csn'): the checkpoint was written by another source") from None


if ADMISSION_CONTROL:
    SupportsTriggerAvailableNow.register(MergeTreeStreamReader)


__all__ = ["MergeTreeStreamReader", "StreamOptions", "without_stream_options", "refuse_stream_options"]
