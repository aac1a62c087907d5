"""Every error spark_mergetree raises derives from MergeTreeError.

Each subclass also derives from the built-in exception a caller would naturally catch
(ValueError for bad input, OSError for storage trouble), so generic handlers keep working.
Messages name what is wrong: the option, the file, the byte offset, the column.
"""

from __future__ import annotations


class MergeTreeError(Exception):
    """Base of all spark_mergetree errors."""


class CorruptPartError(MergeTreeError, OSError):
    """A part's bytes are not what its checksums, marks or headers say (names file and offset)."""


class FormatError(MergeTreeError, ValueError):
    """A file or value does not follow the part format (unsupported type, bad header, ...)."""


class UnsupportedError(MergeTreeError, NotImplementedError):
    """The input is valid ClickHouse but not something this version can read or write."""


class SchemaMismatchError(MergeTreeError, ValueError):
    """Data or a table definition does not match the table's schema (names the columns)."""


class InvalidOptionError(MergeTreeError, ValueError):
    """An option, setting or argument has a bad value (names it and lists what is valid)."""


class ExpressionError(MergeTreeError, ValueError):
    """A predicate, key or partition expression cannot be parsed or evaluated."""


class TableNotFoundError(MergeTreeError, LookupError):
    """No table (or database) at the given path or name."""


class TableExistsError(MergeTreeError, FileExistsError):
    """A table (or database) already exists where one is being created."""


class TransactionError(MergeTreeError, RuntimeError):
    """A transaction cannot proceed (already finished, coordinator unreachable, ...)."""


class SerializationError(TransactionError):
    """A transaction lost a conflict: another committed first on the same parts."""


class AlreadyCommittedError(TransactionError):
    """A commit recording an application version (a streaming query's micro-batch) was refused
    because the table's log already holds that version or a later one: the batch was committed
    before (a replay after a crash), so nothing was written again."""


class TooManyPartsError(MergeTreeError, RuntimeError):
    """An insert was refused: a partition has `parts_to_throw_insert` active parts or more (merges
    are slower than inserts); names the partition and the counts. Nothing was written."""


class StorageError(MergeTreeError, OSError):
    """A disk, volume or RAID layout cannot serve the request (names part and disks)."""
