"""CREATE TABLE / ATTACH TABLE statements of MergeTree tables: parsing and formatting.

Metadata files hold a table's ATTACH statement, which ClickHouse reads back when it starts, so
`format_attach` writes the layout ClickHouse writes itself (4-space indented column list, one clause
per line, `SETTINGS index_granularity = 8192` always present). Parsing runs on sqlglot's ClickHouse
tokenizer and keeps every type, default and key expression as the text the statement had (with
whitespace normalised), so nothing is lost or rewritten between reading and writing a definition.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token, TokenType

from spark_mergetree.errors import ExpressionError, InvalidOptionError, UnsupportedError
from spark_mergetree.expressions.functions import type_info
from spark_mergetree.expressions.predicate import (
    Column,
    Func,
    bind,
    check_syntax,
    columns_of,
    parse_expression,
    syntax_error_message,
)
from spark_mergetree.format.aggregate_states import created_version
from spark_mergetree.format.compression_codecs import parse_codec, parse_column_codec
from spark_mergetree.format.types import Array, Tuple, parse_type

SUPPORTED_ENGINES = ("MergeTree", "ReplacingMergeTree", "SummingMergeTree", "AggregatingMergeTree",
                     "CollapsingMergeTree", "VersionedCollapsingMergeTree")
DEFAULT_INDEX_GRANULARITY = "8192"

# ClickHouse MergeTree settings a new table's statement may carry, each as (kind, smallest value).
# These shape the parts this package writes and reads:
UNDERSTOOD_SETTINGS: dict[str, tuple[str, int]] = {
    "index_granularity": ("uint", 1),
    "allow_nullable_key": ("bool", 0),  # needed (as in ClickHouse) for a key over a Nullable column
    "index_granularity_bytes": ("uint", 0),  # 0: fixed granules; else at least 1024 (ClickHouse's minimum)
    "min_bytes_for_wide_part": ("uint", 0),
    "min_rows_for_wide_part": ("uint", 0),
    "min_level_for_wide_part": ("uint", 0),
    "min_compress_block_size": ("uint", 0),  # 0: the default block sizes
    "max_compress_block_size": ("uint", 0),
    # These steer background merges (engine/merge.py) and the back-pressure on inserts
    # (engine/background.py), here as in ClickHouse:
    "max_bytes_to_merge_at_max_space_in_pool": ("uint", 0),
    "min_age_to_force_merge_seconds": ("uint", 0),
    "parts_to_delay_insert": ("uint", 0),
    "parts_to_throw_insert": ("uint", 0),
    "max_delay_to_insert": ("uint", 0),
    "merge_selecting_sleep_ms": ("uint", 0),
    # What merges of a table whose engine combines rows do to its projections (engine/merge.py);
    # with the default 'throw' ClickHouse refuses projections on such tables.
    "deduplicate_merge_projection_mode": ("choice", 0),
}
# The values a setting of kind "choice" takes, as ClickHouse spells them.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "deduplicate_merge_projection_mode": ("ignore", "throw", "drop", "rebuild"),
}
# These only steer ClickHouse's own background work and inserts on the same table (merges, TTL,
# throttling); they are written into the statement and have no effect on what this package does.
CLICKHOUSE_ONLY_SETTINGS: dict[str, tuple[str, int]] = {
    "merge_max_block_size": ("uint", 1),
    "max_bytes_to_merge_at_min_space_in_pool": ("uint", 0),
    "min_age_to_force_merge_on_partition_only": ("bool", 0),
    "merge_with_ttl_timeout": ("int", 0),
    "merge_with_recompression_ttl_timeout": ("int", 0),
    "ttl_only_drop_parts": ("bool", 0),
    "max_number_of_merges_with_ttl_in_pool": ("uint", 0),
    "enable_vertical_merge_algorithm": ("uint", 0),
    "vertical_merge_algorithm_min_rows_to_activate": ("uint", 0),
    "inactive_parts_to_delay_insert": ("uint", 0),
    "inactive_parts_to_throw_insert": ("uint", 0),
    "max_parts_in_total": ("uint", 0),
    "max_suspicious_broken_parts": ("uint", 0),
    "non_replicated_deduplication_window": ("uint", 0),
    "lock_acquire_timeout_for_background_operations": ("uint", 0),
    "max_concurrent_queries": ("uint", 0),
    "min_marks_to_honor_max_concurrent_queries": ("uint", 0),
    "max_partitions_to_read": ("int", -1),
    "default_compression_codec": ("codec", 0),  # what ClickHouse compresses its own parts with
}
_MIN_INDEX_GRANULARITY_BYTES = 1024

_DEFAULT_KINDS = ("DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL")
_COLUMN_CLAUSES = frozenset({*_DEFAULT_KINDS, "COMMENT", "CODEC", "TTL", "STATISTICS", "SETTINGS", "NULL", "NOT", "PRIMARY"})
_TABLE_ELEMENT_WORDS = ("INDEX", "PROJECTION", "CONSTRAINT")
_PLAIN_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE_SETTING = re.compile(r"^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false)$", re.ASCII)


@dataclass(frozen=True)
class ColumnDefinition:
    """One column of a CREATE statement; expressions are kept as SQL text."""

    name: str
    type: str
    default_kind: str | None = None  # DEFAULT, MATERIALIZED, ALIAS or EPHEMERAL
    default_expression: str | None = None
    comment: str | None = None  # the comment's value, unquoted
    codec: str | None = None  # what is inside CODEC(...), e.g. 'Delta(1), ZSTD(1)'
    ttl: str | None = None
    extra: str | None = None  # STATISTICS(...) / SETTINGS(...) clauses, verbatim

    @property
    def is_stored(self) -> bool:
        """Whether parts hold this column (ALIAS and EPHEMERAL columns are never written)."""
        return self.default_kind not in ("ALIAS", "EPHEMERAL")


@dataclass(frozen=True)
class TableDefinition:
    """A MergeTree table as a CREATE/ATTACH statement describes it."""

    database: str | None
    name: str
    uuid: str | None
    columns: tuple[ColumnDefinition, ...]
    engine: str = "MergeTree"
    engine_args: tuple[str, ...] = ()  # the engine's parameters, e.g. ('ver',) of ReplacingMergeTree(ver)
    order_by: tuple[str, ...] = ()
    primary_key: tuple[str, ...] = ()  # equals order_by unless PRIMARY KEY was given
    partition_by: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)  # string values unquoted
    sample_by: str | None = None
    ttl: str | None = None
    comment: str | None = None
    indexes: tuple[str, ...] = ()  # INDEX / PROJECTION / CONSTRAINT elements, verbatim
    explicit_primary_key: bool = False  # whether the statement had a PRIMARY KEY clause
    # The key clauses as written ('(id)' stays '(id)'); used when they still spell order_by/primary_key.
    order_by_text: str | None = field(default=None, compare=False)
    primary_key_text: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "order_by", tuple(self.order_by))
        object.__setattr__(self, "indexes", tuple(self.indexes))
        object.__setattr__(self, "engine_args", tuple(self.engine_args))
        if not self.explicit_primary_key and not self.primary_key:
            object.__setattr__(self, "primary_key", self.order_by)
        object.__setattr__(self, "primary_key", tuple(self.primary_key))

    @property
    def schema(self) -> dict[str, str]:
        """Column name → ClickHouse type string, for every column."""
        return {column.name: column.type for column in self.columns}

    @property
    def stored_schema(self) -> dict[str, str]:
        """Column name → type for the columns parts hold, in table order."""
        return {column.name: column.type for column in self.columns if column.is_stored}

    @property
    def index_granularity(self) -> int:
        return int(self.settings.get("index_granularity", DEFAULT_INDEX_GRANULARITY))

    def column(self, name: str) -> ColumnDefinition:
        for column in self.columns:
            if column.name == name:
                return column
        raise ExpressionError(f"{_table_label(self.name)} has no column {name!r}; columns: {', '.join(self.schema)}")


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


_LEADING_ATTACH = re.compile(r"^(\s*)ATTACH\b", re.I)


def _tokenize(text: str) -> list[Token]:
    # sqlglot reads ATTACH as an opaque command; CREATE has the same length, so offsets stay valid.
    text = _LEADING_ATTACH.sub(lambda match: match.group(1) + "CREATE", text, count=1)
    try:
        return list(ClickHouse().tokenize(text))
    except SqlglotError as error:
        raise ExpressionError(syntax_error_message(text, error)) from None


def _word(token: Token) -> str | None:
    """The keyword-ish spelling of a token, or None for quoted identifiers and strings."""
    if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return None
    # sqlglot folds some phrases ('ORDER BY', 'PRIMARY KEY') into one token.
    return " ".join(token.text.upper().split())


def _first_word(token: Token) -> str | None:
    word = _word(token)
    return word.split(" ", 1)[0] if word else None


def _phrase_length(tokens: list[Token], index: int, words: tuple[str, ...]) -> int:
    """How many tokens from `index` spell `words` (0 when they do not)."""
    wanted = list(words)
    used = 0
    while wanted and index + used < len(tokens):
        word = _word(tokens[index + used])
        if word is None:
            return 0
        parts = word.split(" ")
        if parts != wanted[: len(parts)]:
            return 0
        wanted = wanted[len(parts):]
        used += 1
    return used if not wanted else 0


def _identifier(token: Token, what: str) -> str:
    if token.token_type == TokenType.STRING or not (_PLAIN_IDENTIFIER.match(token.text) or token.token_type == TokenType.IDENTIFIER):
        raise ExpressionError(f"expected {what}, got {token.text!r} at offset {token.start}")
    return token.text


def _matching_paren(tokens: list[Token], open_index: int) -> int:
    depth = 0
    for index in range(open_index, len(tokens)):
        kind = tokens[index].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
            if depth == 0:
                return index
    raise ExpressionError(f"unbalanced parenthesis opened at offset {tokens[open_index].start}")


def _split_top_level(tokens: list[Token], begin: int, end: int) -> list[tuple[int, int]]:
    """Split tokens[begin:end] at commas outside parentheses."""
    pieces, depth, start = [], 0, begin
    for index in range(begin, end):
        kind = tokens[index].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif kind == TokenType.COMMA and depth == 0:
            pieces.append((start, index))
            start = index + 1
    if start < end:
        pieces.append((start, end))
    return pieces


def _span_text(text: str, tokens: list[Token], begin: int, end: int) -> str:
    """Source text of tokens[begin:end] with whitespace normalised the way ClickHouse prints lists."""
    out: list[str] = []
    for index in range(begin, end):
        token = tokens[index]
        piece = text[token.start : token.end + 1]
        if token.token_type == TokenType.IDENTIFIER and _PLAIN_IDENTIFIER.match(token.text):
            piece = token.text  # ClickHouse prints quoted names bare when they need no quotes
        if index > begin:
            previous = tokens[index - 1]
            gap = text[previous.end + 1 : token.start]
            space = bool(gap.strip() == "" and gap) or previous.token_type == TokenType.COMMA
            space = space or TokenType.EQ in (previous.token_type, token.token_type)
            if previous.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET) or token.token_type in (
                TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.COMMA,
            ):
                space = False
            if gap.strip():  # a comment sat between the tokens
                space = True
            if space:
                out.append(" ")
        out.append(piece)
    return "".join(out)


def split_call(text: str) -> tuple[str, tuple[tuple[str, ...], ...]] | None:
    """A function call's name and its parenthesised lists, each as its elements' texts:
    `quantiles(0.5, 0.9)(x)` gives ('quantiles', (('0.5', '0.9'), ('x',))); None when `text` is not
    a call (a name followed only by parenthesised lists)."""
    tokens = _tokenize(text)
    if len(tokens) < 3 or tokens[0].token_type == TokenType.STRING or not _PLAIN_IDENTIFIER.match(tokens[0].text):
        return None
    lists = []
    index = 1
    while index < len(tokens):
        if tokens[index].token_type != TokenType.L_PAREN:
            return None
        close = _matching_paren(tokens, index)
        lists.append(tuple(_span_text(text, tokens, a, b) for a, b in _split_top_level(tokens, index + 1, close)))
        index = close + 1
    return (tokens[0].text, tuple(lists)) if lists else None


def _key_elements(text: str, tokens: list[Token], begin: int, end: int) -> tuple[str, ...]:
    """ORDER BY / PRIMARY KEY element texts: `(a, b)` and `tuple(a, b)` list their elements."""
    if begin >= end:
        return ()
    first = tokens[begin]
    if first.token_type == TokenType.L_PAREN and _matching_paren(tokens, begin) == end - 1:
        inner = (begin + 1, end - 1)
    elif (_word(first) == "TUPLE" and end - begin >= 3 and tokens[begin + 1].token_type == TokenType.L_PAREN
          and _matching_paren(tokens, begin + 1) == end - 1):
        inner = (begin + 2, end - 1)
    else:
        return (_span_text(text, tokens, begin, end),)
    return tuple(_span_text(text, tokens, a, b) for a, b in _split_top_level(tokens, *inner))


@dataclass(frozen=True)
class Projection:
    """A `PROJECTION name (SELECT ... [GROUP BY ...] [ORDER BY ...])` element of a CREATE statement.

    A normal projection selects columns (`*` for all stored ones) and stores them sorted by its
    ORDER BY; an aggregate projection (GROUP BY, or aggregate functions in the select list) stores
    one row per group with the aggregates' states."""

    name: str
    select: tuple[str, ...]  # the select list as written ('*' for all columns)
    group_by: tuple[str, ...]
    order_by: tuple[str, ...]
    text: str
    index_type: str = ""  # `PROJECTION p INDEX expr TYPE basic`: 'basic' (a SELECT _part_offset ORDER BY expr)

    @property
    def is_aggregate(self) -> bool:
        return bool(self.group_by) or any(not _PLAIN_IDENTIFIER.match(e.strip("`")) and e != "*" for e in self.select)

    @property
    def selected(self) -> tuple[str, ...]:
        """The column names a normal projection's select list names ('*' stays '*')."""
        return tuple(e if e == "*" else e.strip("`") for e in self.select)

    @property
    def stores_offsets(self) -> bool:
        """Whether the projection selects `_part_offset`: its part then holds each row's offset in the
        parent part as a column `_parent_part_offset` (UInt64, after the others)."""
        return PART_OFFSET in self.selected

    def columns(self, stored: Sequence[str]) -> list[str]:
        """The stored columns a normal projection holds, in table order (as its part lists them): the
        selected ones and those its ORDER BY reads (ClickHouse stores those too)."""
        if "*" in self.select:
            return list(stored)
        wanted = set(self.selected)
        for element in self.order_by:
            wanted |= columns_of(parse_expression(element))
        return [name for name in stored if name in wanted]


# The virtual column a projection selects to store offsets into its parent part.
PART_OFFSET = "_part_offset"


def parse_projection(text: str) -> Projection | None:
    """The projection a table element declares (None for INDEX and CONSTRAINT elements). Raises
    ExpressionError naming the element when it does not parse."""
    tokens = _tokenize(text)
    if not tokens or _word(tokens[0]) != "PROJECTION":
        return None
    if len(tokens) > 4 and _word(tokens[2]) == "INDEX":
        # `PROJECTION p INDEX expr TYPE basic`: ClickHouse's shorthand for (SELECT _part_offset ORDER BY expr).
        kinds = [i for i in range(3, len(tokens)) if _word(tokens[i]) == "TYPE"]
        if not kinds or kinds[-1] == 3:
            raise ExpressionError(f"projection {text!r}: expected PROJECTION name INDEX expression TYPE kind")
        name = _identifier(tokens[1], "a projection name")
        index_type = _span_text(text, tokens, kinds[-1] + 1, len(tokens))
        return Projection(name, (PART_OFFSET,), (), _key_elements(text, tokens, 3, kinds[-1]), text, index_type)
    if len(tokens) < 4 or tokens[2].token_type != TokenType.L_PAREN or _word(tokens[3]) != "SELECT" \
            or _matching_paren(tokens, 2) != len(tokens) - 1:
        raise ExpressionError(f"projection {text!r}: expected PROJECTION name (SELECT ... [GROUP BY ...] [ORDER BY ...])")
    name = _identifier(tokens[1], "a projection name")
    clauses: dict[str, tuple[int, int]] = {}
    start, clause, depth = 4, "SELECT", 0
    for index in range(4, len(tokens) - 1):
        kind = tokens[index].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0 and _word(tokens[index]) in ("GROUP BY", "ORDER BY", "WHERE", "HAVING", "LIMIT"):
            clauses[clause] = (start, index)
            clause, start = _word(tokens[index]) or "", index + 1
    clauses[clause] = (start, len(tokens) - 1)
    unknown = sorted(set(clauses) - {"SELECT", "GROUP BY", "ORDER BY"})
    if unknown:
        raise UnsupportedError(f"projection {name!r}: {', '.join(unknown)} in a projection is not supported")

    def elements(clause: str) -> tuple[str, ...]:
        if clause not in clauses:
            return ()
        begin, end = clauses[clause]
        pieces = _split_top_level(tokens, begin, end)
        if clause != "SELECT" and len(pieces) == 1:  # `(a, b)` and `tuple(a, b)` list their elements
            return _key_elements(text, tokens, begin, end)
        return tuple(_span_text(text, tokens, a, b) for a, b in pieces)

    return Projection(name, elements("SELECT"), elements("GROUP BY"), elements("ORDER BY"), text)


def _parse_column(text: str, tokens: list[Token], begin: int, end: int) -> ColumnDefinition:
    name = _identifier(tokens[begin], "a column name")
    index = begin + 1
    depth = 0
    type_end = index
    while type_end < end:
        kind = tokens[type_end].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and _first_word(tokens[type_end]) in _COLUMN_CLAUSES:
            break
        type_end += 1
    if type_end == index:
        raise UnsupportedError(f"column {name!r} has no type (offset {tokens[begin].start}); give every column a type")
    type_text = _span_text(text, tokens, index, type_end)
    # Clauses: each runs from its keyword to the next clause keyword at depth 0.
    starts: list[int] = []
    depth = 0
    for position in range(type_end, end):
        kind = tokens[position].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and _first_word(tokens[position]) in _COLUMN_CLAUSES:
            word = _first_word(tokens[position])
            if word in ("NULL", "NOT"):
                # NULL / NOT NULL modify the type only right after it; later they belong to an expression.
                modifier_zone = all(_first_word(tokens[p]) in ("NULL", "NOT") for p in range(type_end, position))
                if not modifier_zone or (word == "NULL" and position > type_end and _word(tokens[position - 1]) == "NOT"):
                    continue
            starts.append(position)
    values: dict[str, object] = {}
    extra: list[str] = []
    for number, start in enumerate(starts):
        stop = starts[number + 1] if number + 1 < len(starts) else end
        keyword = _first_word(tokens[start])
        body = _span_text(text, tokens, start + 1, stop)
        if keyword in _DEFAULT_KINDS:
            values["default_kind"] = keyword
            values["default_expression"] = body or None
        elif keyword == "COMMENT":
            if stop - start != 2 or tokens[start + 1].token_type != TokenType.STRING:
                raise ExpressionError(f"column {name!r}: COMMENT needs one string (offset {tokens[start].start})")
            values["comment"] = tokens[start + 1].text
        elif keyword == "CODEC":
            if tokens[start + 1].token_type != TokenType.L_PAREN or _matching_paren(tokens, start + 1) != stop - 1:
                raise ExpressionError(f"column {name!r}: CODEC needs a parenthesised list (offset {tokens[start].start})")
            values["codec"] = _span_text(text, tokens, start + 2, stop - 1)
        elif keyword == "TTL":
            values["ttl"] = body
        elif keyword == "NULL":
            type_text = f"Nullable({type_text})"
        elif keyword == "NOT":
            pass  # NOT NULL is what a non-Nullable type means anyway
        else:
            extra.append(_span_text(text, tokens, start, stop))
    return ColumnDefinition(name, type_text, extra=" ".join(extra) or None, **values)  # type: ignore[arg-type]


_TABLE_CLAUSES = {
    ("ENGINE",): "engine",
    ("PARTITION", "BY"): "partition_by",
    ("PRIMARY", "KEY"): "primary_key",
    ("ORDER", "BY"): "order_by",
    ("SAMPLE", "BY"): "sample_by",
    ("TTL",): "ttl",
    ("SETTINGS",): "settings",
    ("COMMENT",): "comment",
    ("AS",): "as",
}


def with_created_versions(definition: TableDefinition) -> TableDefinition:
    """The definition with the state versions ClickHouse's CREATE gives AggregateFunction types that
    name none (format/aggregate_states.py `created_version`)."""
    columns = []
    for column in definition.columns:
        if "AggregateFunction" in column.type:
            data_type = parse_type(column.type)
            versioned = created_version(data_type)
            if versioned is not data_type:
                column = replace(column, type=versioned.to_clickhouse())
        columns.append(column)
    return replace(definition, columns=tuple(columns))


def flatten_nested(definition: TableDefinition) -> TableDefinition:
    """The definition as ClickHouse's CREATE makes it by default (`flatten_nested = 1`): each
    top-level `n Nested(a T, b U)` column becomes the columns `n.a Array(T)` and `n.b Array(U)`,
    which is what its parts store. (With `flatten_nested = 0` the parts store one `n` column.)"""
    columns: list[ColumnDefinition] = []
    for column in definition.columns:
        data_type = parse_type(column.type) if "Nested" in column.type else None
        if (isinstance(data_type, Array) and isinstance(data_type.inner, Tuple) and data_type.inner.names
                and (data_type.custom_name or "").startswith("Nested")):
            columns += [replace(column, name=f"{column.name}.{name}", type=f"Array({element.to_clickhouse()})")
                        for name, element in zip(data_type.inner.names, data_type.inner.elements, strict=True)]
        else:
            columns.append(column)
    return replace(definition, columns=tuple(columns))


def parse_create(text: str) -> TableDefinition:
    """Read a `CREATE TABLE` or `ATTACH TABLE` statement of a MergeTree table."""
    tokens = _tokenize(text)
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    position = 0

    def expect_word(*words: str) -> str:
        nonlocal position
        if position >= len(tokens) or _word(tokens[position]) not in words:
            got = tokens[position].text if position < len(tokens) else "end of statement"
            raise ExpressionError(f"expected {' or '.join(words)}, got {got!r} in statement {text[:80]!r}")
        position += 1
        return _word(tokens[position - 1]) or ""

    def peek_word(offset: int = 0) -> str | None:
        index = position + offset
        return _word(tokens[index]) if index < len(tokens) else None

    if not tokens:
        raise ExpressionError("empty statement")
    expect_word("CREATE")
    if peek_word() == "OR" and peek_word(1) == "REPLACE":
        position += 2
    if peek_word() in ("VIEW", "MATERIALIZED", "DICTIONARY", "DATABASE", "TEMPORARY", "LIVE", "WINDOW", "FUNCTION"):
        raise UnsupportedError(f"only CREATE TABLE statements are supported, got {peek_word()} in {text[:80]!r}")
    expect_word("TABLE")
    if peek_word() == "IF" and peek_word(1) == "NOT" and peek_word(2) == "EXISTS":
        position += 3
    if position >= len(tokens):
        raise ExpressionError("statement ends before the table name")
    database: str | None = None
    name = _identifier(tokens[position], "a table name")
    position += 1
    if position < len(tokens) and tokens[position].token_type == TokenType.DOT:
        database, name = name, _identifier(tokens[position + 1], "a table name")
        position += 2
    table_uuid: str | None = None
    if peek_word() == "UUID":
        position += 1
        if position >= len(tokens) or tokens[position].token_type != TokenType.STRING:
            raise ExpressionError("UUID must be followed by a quoted UUID")
        table_uuid = tokens[position].text
        position += 1
    if peek_word() == "ON" and peek_word(1) == "CLUSTER":
        raise UnsupportedError("ON CLUSTER is not supported")
    if position >= len(tokens) or tokens[position].token_type != TokenType.L_PAREN:
        raise UnsupportedError(f"{_table_label(name)}: the statement needs an explicit column list (CREATE ... AS is not supported)")
    close = _matching_paren(tokens, position)
    columns: list[ColumnDefinition] = []
    indexes: list[str] = []
    for begin, end in _split_top_level(tokens, position + 1, close):
        word = _first_word(tokens[begin])
        if word in _TABLE_ELEMENT_WORDS or word == "PRIMARY":
            if word == "PRIMARY":
                raise UnsupportedError(f"{_table_label(name)}: PRIMARY KEY inside the column list is not supported; put it after ENGINE")
            indexes.append(_span_text(text, tokens, begin, end))
        else:
            columns.append(_parse_column(text, tokens, begin, end))
    if not columns:
        raise ExpressionError(f"{_table_label(name)} has no columns")
    seen: set[str] = set()
    for column in columns:
        if column.name in seen:
            raise ExpressionError(f"{_table_label(name)}: column {column.name!r} is defined twice")
        seen.add(column.name)

    clause_starts: list[tuple[int, int, str]] = []  # (keyword start, body start, clause)
    index, depth = close + 1, 0
    while index < len(tokens):
        kind = tokens[index].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0:
            for words, clause in _TABLE_CLAUSES.items():
                length = _phrase_length(tokens, index, words)
                if length:
                    clause_starts.append((index, index + length, clause))
                    index += length - 1
                    break
        index += 1
    if clause_starts and clause_starts[0][0] != close + 1:
        stray = tokens[close + 1]
        raise ExpressionError(f"{_table_label(name)}: unexpected {stray.text!r} at offset {stray.start}")
    bodies: dict[str, tuple[int, int]] = {}
    for number, (_keyword_start, body_start, clause) in enumerate(clause_starts):
        stop = clause_starts[number + 1][0] if number + 1 < len(clause_starts) else len(tokens)
        if clause in bodies:
            raise ExpressionError(f"{_table_label(name)}: {clause.replace('_', ' ').upper()} given twice")
        bodies[clause] = (body_start, stop)
    if "as" in bodies:
        raise UnsupportedError(f"{_table_label(name)}: CREATE TABLE ... AS is not supported")
    if "engine" not in bodies:
        raise ExpressionError(f"{_table_label(name)}: the statement has no ENGINE clause")

    engine_begin, engine_end = bodies["engine"]
    if engine_begin < engine_end and tokens[engine_begin].token_type == TokenType.EQ:
        engine_begin += 1
    if engine_begin >= engine_end:
        raise ExpressionError(f"{_table_label(name)}: ENGINE names no engine")
    engine = tokens[engine_begin].text
    if engine not in SUPPORTED_ENGINES:
        raise UnsupportedError(f"{_table_label(name)}: engine {engine} is not supported (supported: {', '.join(SUPPORTED_ENGINES)})")
    engine_args: tuple[str, ...] = ()
    if engine_end - engine_begin > 1:
        if (tokens[engine_begin + 1].token_type != TokenType.L_PAREN
                or _matching_paren(tokens, engine_begin + 1) != engine_end - 1):
            raise ExpressionError(f"{_table_label(name)}: cannot read ENGINE = {_span_text(text, tokens, engine_begin, engine_end)}")
        engine_args = tuple(_span_text(text, tokens, begin, end)
                            for begin, end in _split_top_level(tokens, engine_begin + 2, engine_end - 1))
        if engine == "MergeTree" and engine_args:
            raise UnsupportedError(f"{_table_label(name)}: {engine} with engine arguments (the old syntax) is not supported")

    def body_text(clause: str) -> str | None:
        if clause not in bodies:
            return None
        begin, end = bodies[clause]
        return _span_text(text, tokens, begin, end) or None

    order_by = _key_elements(text, tokens, *bodies["order_by"]) if "order_by" in bodies else ()
    explicit_primary_key = "primary_key" in bodies
    primary_key = _key_elements(text, tokens, *bodies["primary_key"]) if explicit_primary_key else order_by
    if "order_by" not in bodies and not explicit_primary_key:
        raise ExpressionError(f"{_table_label(name)}: a MergeTree table needs ORDER BY (use ORDER BY tuple() for none)")
    if not order_by and explicit_primary_key:
        order_by = primary_key
    if tuple(order_by[: len(primary_key)]) != tuple(primary_key):
        raise ExpressionError(f"{_table_label(name)}: PRIMARY KEY ({', '.join(primary_key)}) must be a prefix of "
                              f"ORDER BY ({', '.join(order_by)})")

    settings: dict[str, str] = {}
    if "settings" in bodies:
        for begin, end in _split_top_level(tokens, *bodies["settings"]):
            if end - begin < 3 or tokens[begin + 1].token_type != TokenType.EQ:
                raise ExpressionError(f"{_table_label(name)}: bad setting {_span_text(text, tokens, begin, end)!r}; expected name = value")
            key = tokens[begin].text
            value_token = tokens[begin + 2]
            settings[key] = value_token.text if end - begin == 3 and value_token.token_type == TokenType.STRING else _span_text(
                text, tokens, begin + 2, end)
    comment = None
    if "comment" in bodies:
        begin, end = bodies["comment"]
        if end - begin != 1 or tokens[begin].token_type != TokenType.STRING:
            raise ExpressionError(f"{_table_label(name)}: COMMENT needs one string")
        comment = tokens[begin].text

    partition_by = body_text("partition_by")
    if partition_by is not None and re.fullmatch(r"tuple\(\s*\)", partition_by):
        partition_by = None
    definition = TableDefinition(
        database=database, name=name, uuid=table_uuid, columns=tuple(columns), engine=engine,
        engine_args=engine_args,
        order_by=tuple(order_by), primary_key=tuple(primary_key), partition_by=partition_by, settings=settings,
        sample_by=body_text("sample_by"), ttl=body_text("ttl"), comment=comment, indexes=tuple(indexes),
        explicit_primary_key=explicit_primary_key,
        order_by_text=body_text("order_by"), primary_key_text=body_text("primary_key"),
    )
    _check_key_columns(definition)
    return definition


def _check_key_columns(definition: TableDefinition) -> None:
    known = definition.schema
    for what, expressions in (("ORDER BY", definition.order_by), ("PARTITION BY", (definition.partition_by,))):
        for expression in expressions:
            if expression is None:
                continue
            for column in sorted(columns_of(parse_expression(expression))):
                if column not in known:
                    raise ExpressionError(
                        f"{_table_label(definition.name)}: {what} {expression!r} uses unknown column {column!r}; "
                        f"columns: {', '.join(known)}"
                    )


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def quote_identifier(name: str) -> str:
    """A name as ClickHouse prints it in DDL: bare when plain, else in backquotes."""
    if _PLAIN_IDENTIFIER.match(name):
        return name
    return _backquote(name)


def _backquote(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _key_text(elements: tuple[str, ...], as_written: str | None = None) -> str:
    if as_written is not None:
        tokens = _tokenize(as_written)
        if _key_elements(as_written, tokens, 0, len(tokens)) == tuple(elements):
            return as_written
    if not elements:
        return "tuple()"
    if len(elements) == 1:
        return elements[0]
    return "(" + ", ".join(elements) + ")"


def _column_text(column: ColumnDefinition) -> str:
    parts = [_backquote(column.name), column.type]
    if column.default_kind:
        parts.append(column.default_kind)
        if column.default_expression:
            parts.append(column.default_expression)
    if column.comment is not None:
        parts.append("COMMENT " + quote_string(column.comment))
    if column.codec:
        parts.append(f"CODEC({column.codec})")
    if column.extra:
        parts.append(column.extra)
    if column.ttl:
        parts.append("TTL " + column.ttl)
    return " ".join(parts)


def _setting_text(key: str, value: str) -> str:
    return f"{key} = {value if _BARE_SETTING.match(value) else quote_string(value)}"


def engine_text(defn: TableDefinition) -> str:
    """The ENGINE clause's body: `ReplacingMergeTree(ver)`, `MergeTree`."""
    return defn.engine + (f"({', '.join(defn.engine_args)})" if defn.engine_args else "")


def _body(defn: TableDefinition) -> str:
    if defn.engine not in SUPPORTED_ENGINES:
        raise UnsupportedError(f"engine {defn.engine} is not supported (supported: {', '.join(SUPPORTED_ENGINES)})")
    elements = [_column_text(column) for column in defn.columns] + list(defn.indexes)
    lines = ["("]
    lines += ["    " + element + ("," if number + 1 < len(elements) else "") for number, element in enumerate(elements)]
    lines += [")", f"ENGINE = {engine_text(defn)}"]
    if defn.partition_by:
        lines.append(f"PARTITION BY {defn.partition_by}")
    if defn.explicit_primary_key or tuple(defn.primary_key) != tuple(defn.order_by):
        lines.append(f"PRIMARY KEY {_key_text(defn.primary_key, defn.primary_key_text)}")
    lines.append(f"ORDER BY {_key_text(defn.order_by, defn.order_by_text)}")
    if defn.sample_by:
        lines.append(f"SAMPLE BY {defn.sample_by}")
    if defn.ttl:
        lines.append(f"TTL {defn.ttl}")
    settings = dict(defn.settings)
    settings.setdefault("index_granularity", DEFAULT_INDEX_GRANULARITY)
    lines.append("SETTINGS " + ", ".join(_setting_text(key, value) for key, value in settings.items()))
    if defn.comment is not None:
        lines.append("COMMENT " + quote_string(defn.comment))
    return "\n".join(lines)


def format_attach(defn: TableDefinition) -> str:
    """The ATTACH statement ClickHouse keeps in a table's metadata file (`ATTACH TABLE _ UUID '…'` in Atomic databases)."""
    head = f"ATTACH TABLE _ UUID {quote_string(defn.uuid)}" if defn.uuid else f"ATTACH TABLE {quote_identifier(defn.name)}"
    return head + "\n" + _body(defn) + "\n"


def format_create(defn: TableDefinition, *, with_uuid: bool = False, if_not_exists: bool = False) -> str:
    """A CREATE TABLE statement, as SHOW CREATE TABLE prints it (optionally with the UUID)."""
    name = quote_identifier(defn.name)
    if defn.database:
        name = f"{quote_identifier(defn.database)}.{name}"
    head = "CREATE TABLE " + ("IF NOT EXISTS " if if_not_exists else "") + name
    if with_uuid and defn.uuid:
        head += f" UUID {quote_string(defn.uuid)}"
    return head + "\n" + _body(defn)


def _table_label(name: str | None) -> str:
    """How messages name a table: `_` is the placeholder name of statements made from options and of
    Atomic metadata files (`ATTACH TABLE _ UUID ...`), which is no name to show a user."""
    return "the table" if name in (None, "", "_") else f"table {name!r}"


def key_clause(key: str | Sequence[str] | None, what: str) -> str | None:
    """A key clause's text from a column, an expression, "(a, b)", or a list of those (None: absent)."""
    if key is None:
        return None
    if isinstance(key, str):
        text = key.strip()
        if not text:
            raise ExpressionError(f"{what} is an empty string; use tuple() for no key")
        check_syntax(text, what)
        return text
    parts = [str(item).strip() for item in key]
    if any(not part for part in parts):
        raise ExpressionError(f"{what} {list(key)!r} contains an empty expression")
    for part in parts:
        check_syntax(part, what)
    if not parts:
        return "tuple()"
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def known_settings_text() -> str:
    """The ClickHouse settings a new table may have, for error messages."""
    return (f"understood: {', '.join(UNDERSTOOD_SETTINGS)}; used by ClickHouse only: "
            f"{', '.join(CLICKHOUSE_ONLY_SETTINGS)}")


def check_settings(settings: Mapping[str, object]) -> dict[str, str]:
    """ClickHouse settings of a new table, checked by name and value and rendered as the statement
    writes them; a name or value ClickHouse would refuse (and with it, on start, the whole database)
    is refused here, before anything is written."""
    out: dict[str, str] = {}
    for key, value in settings.items():
        name = str(key)
        rule = UNDERSTOOD_SETTINGS.get(name) or CLICKHOUSE_ONLY_SETTINGS.get(name)
        if rule is None:
            close = difflib.get_close_matches(name, [*UNDERSTOOD_SETTINGS, *CLICKHOUSE_ONLY_SETTINGS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidOptionError(f"unknown MergeTree setting {name!r}{hint}; {known_settings_text()}")
        kind, minimum = rule
        if kind == "codec":
            out[name] = parse_codec(str(value)).setting  # only codecs this package also reads
            continue
        if kind == "choice":
            if str(value) not in SETTING_CHOICES[name]:
                raise InvalidOptionError(f"setting {name!r} must be one of {', '.join(SETTING_CHOICES[name])}, "
                                         f"got {value!r}")
            out[name] = str(value)
            continue
        if kind == "bool":
            text = str(value).strip().lower()
            if isinstance(value, bool) or text in ("0", "1", "true", "false"):
                out[name] = "1" if value is True or text in ("1", "true") else "0"
                continue
            raise InvalidOptionError(f"setting {name!r} must be true or false (1 or 0), got {value!r}")
        try:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
        except ValueError:
            raise InvalidOptionError(f"setting {name!r} must be an integer, got {value!r}") from None
        if number < minimum:
            raise InvalidOptionError(f"setting {name!r} must be at least {minimum}, got {number}")
        if number >= 1 << (64 if kind == "uint" else 63):
            raise InvalidOptionError(f"setting {name!r} must be below {1 << (64 if kind == 'uint' else 63)}, got {number}")
        if name == "index_granularity_bytes" and 0 < number < _MIN_INDEX_GRANULARITY_BYTES:
            raise InvalidOptionError(f"setting 'index_granularity_bytes' must be 0 (fixed granules) or at least "
                                     f"{_MIN_INDEX_GRANULARITY_BYTES}, got {number}")
        out[name] = str(number)
    return out


# Characters ClickHouse writes escaped inside `names` (in metadata files and columns.txt).
_ESCAPED_IN_NAMES = re.compile(r"[\x00\b\f\n\r\t]")


def _check_column_names(names: Sequence[object]) -> None:
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidOptionError(f"column name {name!r} is not allowed: a column needs a non-empty name")
        if _ESCAPED_IN_NAMES.search(name):
            raise InvalidOptionError(f"column name {name!r} is not supported: it holds a control character "
                                     "(NUL, backspace, form feed, newline, carriage return or tab)")
    duplicates = sorted({name for name in names if names.count(name) > 1})  # type: ignore[type-var]
    if duplicates:
        raise InvalidOptionError(f"schema has duplicate columns {duplicates}")


def key_column_names(names: Sequence[str], order_by: str | Sequence[str] | None,
                     partition_by: str | Sequence[str] | None = None,
                     primary_key: str | Sequence[str] | None = None) -> set[str]:
    """The columns (of `names`) that a new table's keys read: ClickHouse wants them non-Nullable."""
    found: set[str] = set()
    for key, what in ((order_by, "order_by"), (partition_by, "partition_by"), (primary_key, "primary_key")):
        text = key_clause(key, what)
        if text:
            found |= columns_of(parse_expression(text))
    return found & set(names)


def build_definition(
    columns: Sequence[tuple[str, str]],
    order_by: str | Sequence[str] | None,
    partition_by: str | Sequence[str] | None = None,
    primary_key: str | Sequence[str] | None = None,
    settings: Mapping[str, object] | None = None,
    uuid: str | None = None,
    engine: str | None = None,
) -> TableDefinition:
    """A new MergeTree table's definition from columns, keys and settings: written out as a CREATE
    statement and parsed back, so keys are read (and checked) exactly as in any statement."""
    if not columns:
        raise InvalidOptionError("a table needs at least one column")
    _check_column_names([name for name, _ in columns])
    if engine is not None:
        _check_engine_text(engine)
    order_text = key_clause(order_by, "order_by") or "tuple()"
    lines = ["CREATE TABLE _ (" + ", ".join(f"{_backquote(n)} {t}" for n, t in columns) + ")",
             f"ENGINE = {engine or 'MergeTree'}"]
    partition_text = key_clause(partition_by, "partition_by")
    if partition_text:
        lines.append(f"PARTITION BY {partition_text}")
    primary_text = key_clause(primary_key, "primary_key")
    if primary_text:
        lines.append(f"PRIMARY KEY {primary_text}")
    lines.append(f"ORDER BY {order_text}")
    if settings:
        rendered = check_settings(settings)
        lines.append("SETTINGS " + ", ".join(_setting_text(k, v) for k, v in rendered.items()))
    definition = with_created_versions(parse_create("\n".join(lines)))
    _check_nullable_keys(definition)
    _check_codecs(definition)
    return replace(definition, uuid=uuid) if uuid else definition


def _check_engine_text(engine: str) -> None:
    """`engine` must be one engine with its parameters (`ReplacingMergeTree(ver)`), nothing more."""
    tokens = _tokenize(engine)
    whole = bool(tokens) and tokens[0].text in SUPPORTED_ENGINES and (
        len(tokens) == 1 or (tokens[1].token_type == TokenType.L_PAREN
                             and _matching_paren(tokens, 1) == len(tokens) - 1))
    if not whole:
        raise InvalidOptionError(f"engine {engine!r} is not an engine of the MergeTree family with its parameters "
                                 f"(e.g. 'ReplacingMergeTree(version)'; engines: {', '.join(SUPPORTED_ENGINES)})")


def _check_codecs(definition: TableDefinition) -> None:
    """A new table's column CODEC(...) clauses are checked as ClickHouse's CREATE checks them."""
    for column in definition.columns:
        if column.codec:
            try:
                parse_column_codec(column.codec, parse_type(column.type), check=True)
            except (InvalidOptionError, UnsupportedError) as error:
                raise type(error)(f"column {column.name!r}: {error}") from None


def _check_nullable_keys(definition: TableDefinition) -> None:
    """ClickHouse refuses a key over a Nullable column unless the table allows it: so do we."""
    if definition.settings.get("allow_nullable_key") == "1":
        return
    schema = definition.schema
    for clause, elements in (("ORDER BY", definition.order_by), ("PARTITION BY", (definition.partition_by,))):
        for text in elements:
            if text is None:
                continue
            expr = bind(parse_expression(text), schema)
            typed = expr.type if isinstance(expr, (Column, Func)) else None
            nullable = type_info(typed).nullable if typed else any(
                type_info(schema[name]).nullable for name in columns_of(expr))
            if nullable:
                raise InvalidOptionError(
                    f"{clause} {text!r} is over a Nullable column: make the column non-Nullable, or set "
                    "allow_nullable_key = 1 as ClickHouse requires")
