"""ClickHouse data types: type text (as in columns.txt) ↔ immutable `DataType` trees ↔ Arrow types.

The Arrow mapping is the one every reader and writer of this package uses; format_spec/types.md
documents it. Types are parsed by a small tokenizer + recursive-descent parser, and printed back in
the canonical spelling ClickHouse writes into columns.txt.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pyarrow as pa

from spark_mergetree.errors import FormatError, SchemaMismatchError, UnsupportedError

__all__ = [
    "DataType", "AggregateFunction", "Primitive", "FixedString", "DateTime", "DateTime64", "Time", "Time64", "Decimal", "Enum",
    "Nullable", "Array", "Map", "Tuple", "LowCardinality", "Variant", "VARIANT_NULL", "Dynamic", "Json",
    "parse_type", "parse_column_type", "to_arrow", "to_arrow_field", "from_arrow", "is_nullable", "datetime64_arrow_unit", "time_ticks",
    "TIME_MAX_SECONDS",
    "PRIMITIVE_NAMES", "DEFAULT_TIMEZONE",
]


@dataclass(frozen=True)
class DataType:
    """Base of every ClickHouse type node.

    `custom_name` is the name of a type ClickHouse stores as another one (DataTypeCustomName): the
    geo types (`Point` is a `Tuple(Float64, Float64)`, `Ring` an `Array(Point)`, ...) and
    `SimpleAggregateFunction(f, T)` (stored as T). The node is the stored type; only its text differs.
    """

    custom_name: str | None = field(default=None, kw_only=True)

    def to_clickhouse(self) -> str:
        return self.custom_name if self.custom_name is not None else self._spelling()

    def _spelling(self) -> str:
        raise NotImplementedError

    @property
    def family(self) -> str:
        """The type's name without its parameters, as ClickHouse's getFamilyName: `DateTime64`,
        `Decimal` (also for Decimal32(S)...), `Enum8`, `Nullable`, `UInt8`."""
        return type(self).__name__

    def __str__(self) -> str:
        return self.to_clickhouse()


# Byte width on disk of fixed-width primitives (String is variable: None).
PRIMITIVE_WIDTHS: dict[str, int | None] = {
    "UInt8": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8, "UInt128": 16, "UInt256": 32,
    "Int8": 1, "Int16": 2, "Int32": 4, "Int64": 8, "Int128": 16, "Int256": 32,
    "Float32": 4, "Float64": 8, "BFloat16": 2, "Bool": 1, "Date": 2, "Date32": 4, "UUID": 16,
    "IPv4": 4, "IPv6": 16, "String": None,
}
PRIMITIVE_NAMES = frozenset(PRIMITIVE_WIDTHS)

# Spellings ClickHouse accepts that name the same type (case-insensitive aliases are looked up lower-cased).
_ALIASES = {
    "boolean": "Bool", "bool": "Bool", "text": "String", "varchar": "String", "char": "String",
    "blob": "String", "tinyint": "Int8", "smallint": "Int16", "int": "Int32", "integer": "Int32",
    "bigint": "Int64", "float": "Float32", "double": "Float64", "real": "Float32",
}


@dataclass(frozen=True)
class Primitive(DataType):
    """A parameterless type: integers, floats (BFloat16 too), Bool, String, Date, Date32, UUID, IPv4, IPv6."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in PRIMITIVE_WIDTHS:
            raise UnsupportedError(f"unsupported ClickHouse type {self.name!r}")

    @property
    def width(self) -> int | None:
        return PRIMITIVE_WIDTHS[self.name]

    @property
    def family(self) -> str:
        return self.name

    def _spelling(self) -> str:
        return self.name


@dataclass(frozen=True)
class FixedString(DataType):
    length: int

    def _spelling(self) -> str:
        return f"FixedString({self.length})"


@dataclass(frozen=True)
class DateTime(DataType):
    """Seconds since the epoch as UInt32; the time zone only changes how values are displayed."""

    timezone: str | None = None

    def _spelling(self) -> str:
        return "DateTime" if self.timezone is None else f"DateTime({_quote(self.timezone)})"


@dataclass(frozen=True)
class DateTime64(DataType):
    """Int64 ticks of 10^-precision seconds since the epoch."""

    precision: int
    timezone: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.precision <= 9:
            raise FormatError(f"DateTime64 precision must be 0..9, got {self.precision}")

    def _spelling(self) -> str:
        if self.timezone is None:
            return f"DateTime64({self.precision})"
        return f"DateTime64({self.precision}, {_quote(self.timezone)})"


@dataclass(frozen=True)
class Time(DataType):
    """A time of day or a duration: Int32 seconds, −999:59:59..999:59:59."""

    def _spelling(self) -> str:
        return "Time"


@dataclass(frozen=True)
class Time64(DataType):
    """Time with 10^-precision second ticks as Int64, −999:59:59.99..9 to 999:59:59.99..9."""

    precision: int

    def __post_init__(self) -> None:
        if not 0 <= self.precision <= 9:
            raise FormatError(f"Time64 precision must be 0..9, got {self.precision}")

    def _spelling(self) -> str:
        return f"Time64({self.precision})"


# The largest |value| of Time, in seconds (999:59:59); Time64(p) reaches (TIME_MAX_SECONDS + 1) * 10^p - 1 ticks.
TIME_MAX_SECONDS = 999 * 3600 + 59 * 60 + 59


def time_ticks(dt: Time | Time64) -> tuple[int, int]:
    """(ticks per second, largest |ticks|) of a Time or Time64 type."""
    per_second = 10 ** dt.precision if isinstance(dt, Time64) else 1
    return per_second, (TIME_MAX_SECONDS + 1) * per_second - 1 if isinstance(dt, Time64) else TIME_MAX_SECONDS


@dataclass(frozen=True)
class Decimal(DataType):
    precision: int
    scale: int

    def __post_init__(self) -> None:
        if not 1 <= self.precision <= 76 or not 0 <= self.scale <= self.precision:
            raise FormatError(f"bad Decimal({self.precision}, {self.scale}): need 1 <= P <= 76 and 0 <= S <= P")

    @property
    def width(self) -> int:
        p = self.precision
        return 4 if p <= 9 else 8 if p <= 18 else 16 if p <= 38 else 32

    def _spelling(self) -> str:
        return f"Decimal({self.precision}, {self.scale})"


@dataclass(frozen=True)
class Enum(DataType):
    """Enum8 / Enum16: names stored as Int8 / Int16 values. `values` is sorted by value."""

    bits: int
    values: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if self.bits not in (8, 16):
            raise FormatError(f"Enum must be Enum8 or Enum16, got Enum{self.bits}")
        low, high = (-128, 127) if self.bits == 8 else (-32768, 32767)
        for name, value in self.values:
            if not low <= value <= high:
                raise FormatError(f"Enum{self.bits} value {value} for {name!r} is out of range {low}..{high}")
        if len({n for n, _ in self.values}) != len(self.values) or len({v for _, v in self.values}) != len(self.values):
            raise FormatError(f"Enum{self.bits} has duplicate names or values: {self.values!r}")
        object.__setattr__(self, "values", tuple(sorted(self.values, key=lambda nv: nv[1])))

    @property
    def family(self) -> str:
        return f"Enum{self.bits}"

    def _spelling(self) -> str:
        body = ", ".join(f"{_quote(name)} = {value}" for name, value in self.values)
        return f"Enum{self.bits}({body})"


# Aggregate function names ClickHouse stores as the function they stand for.
_FUNCTION_ALIASES = {"median": "quantile", "medianExact": "quantileExact", "medianTDigest": "quantileTDigest",
                     "medianTiming": "quantileTiming", "medianTimingWeighted": "quantileTimingWeighted"}


@dataclass(frozen=True)
class AggregateFunction(DataType):
    """States of an aggregate function, one per row, kept as opaque bytes (format/aggregate_states.py).

    `parameters` are the function's parameters as written (`quantiles(0.5, 0.9)`); `version` the
    state version some functions are spelled with (`AggregateFunction(1, sumMap, ...)`). A type of
    any function parses, so that a table's other columns can be read; its states can be read and
    written only when format/aggregate_states.py knows their layout."""

    function: str
    arguments: tuple[DataType, ...] = ()
    parameters: tuple[str, ...] = ()
    version: int | None = None

    def _spelling(self) -> str:
        function = self.function + (f"({', '.join(self.parameters)})" if self.parameters else "")
        version = [] if self.version is None else [str(self.version)]
        return "AggregateFunction(" + ", ".join([*version, function, *(a.to_clickhouse() for a in self.arguments)]) + ")"


@dataclass(frozen=True)
class Nullable(DataType):
    inner: DataType

    def __post_init__(self) -> None:
        # (Nullable(JSON) is allowed: a column's type, and ClickHouse's type of the objects in an array of
        # objects and NULLs)
        if isinstance(self.inner, (Nullable, Array, Map, Tuple, LowCardinality, Variant, Dynamic)):
            raise FormatError(f"Nullable cannot wrap {self.inner.to_clickhouse()}")

    def _spelling(self) -> str:
        return f"Nullable({self.inner.to_clickhouse()})"


@dataclass(frozen=True)
class Array(DataType):
    inner: DataType

    def _spelling(self) -> str:
        return f"Array({self.inner.to_clickhouse()})"


@dataclass(frozen=True)
class Map(DataType):
    key: DataType
    value: DataType

    def _spelling(self) -> str:
        return f"Map({self.key.to_clickhouse()}, {self.value.to_clickhouse()})"


@dataclass(frozen=True)
class Tuple(DataType):
    """Tuple(...); `names` is None for an unnamed tuple (its elements are then called 1, 2, ...)."""

    elements: tuple[DataType, ...]
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.elements:
            raise FormatError("Tuple needs at least one element")
        if self.names is not None and len(self.names) != len(self.elements):
            raise FormatError(f"Tuple has {len(self.elements)} elements but {len(self.names)} names")

    @property
    def element_names(self) -> tuple[str, ...]:
        return self.names if self.names is not None else tuple(str(i + 1) for i in range(len(self.elements)))

    def _spelling(self) -> str:
        if self.names is None:
            return "Tuple(" + ", ".join(e.to_clickhouse() for e in self.elements) + ")"
        return "Tuple(" + ", ".join(f"{_quote_name(n)} {e.to_clickhouse()}" for n, e in zip(self.names, self.elements, strict=True)) + ")"


@dataclass(frozen=True)
class LowCardinality(DataType):
    inner: DataType

    def __post_init__(self) -> None:
        base = self.dictionary_type
        ok = isinstance(base, (FixedString, DateTime)) or (isinstance(base, Primitive) and base.name != "Bool")
        if not ok:
            raise FormatError(f"LowCardinality cannot wrap {self.inner.to_clickhouse()}")

    @property
    def dictionary_type(self) -> DataType:
        """The type of the dictionary's keys: the inner type without Nullable."""
        return self.inner.inner if isinstance(self.inner, Nullable) else self.inner

    def _spelling(self) -> str:
        return f"LowCardinality({self.inner.to_clickhouse()})"


# The discriminator of a NULL Variant value.
VARIANT_NULL = 255


@dataclass(frozen=True)
class Variant(DataType):
    """Variant(T1, T2, ...): each row holds a value of one of the types, or NULL. The types are kept
    sorted by their names, as ClickHouse sorts them: a value's discriminator is its type's position."""

    variants: tuple[DataType, ...]

    def __post_init__(self) -> None:
        if not self.variants or len(self.variants) > VARIANT_NULL:
            raise FormatError(f"Variant needs 1 to {VARIANT_NULL} types, got {len(self.variants)}")
        for v in self.variants:
            if isinstance(v, (Nullable, Variant, Dynamic)) or (isinstance(v, LowCardinality) and isinstance(v.inner, Nullable)):
                raise FormatError(f"Variant cannot hold {v.to_clickhouse()} (a NULL is the Variant's own)")
        names = [v.to_clickhouse() for v in self.variants]
        if len(set(names)) != len(names):
            raise FormatError(f"Variant has duplicate types: {names!r}")
        object.__setattr__(self, "variants", tuple(sorted(self.variants, key=lambda v: v.to_clickhouse())))

    @property
    def names(self) -> tuple[str, ...]:
        """The variants' type names: the names of their subcolumns and of the Arrow struct's fields."""
        return tuple(v.to_clickhouse() for v in self.variants)

    def _spelling(self) -> str:
        return "Variant(" + ", ".join(self.names) + ")"


@dataclass(frozen=True)
class Dynamic(DataType):
    """Dynamic[(max_types=N)]: each row holds a value of any type (or NULL); each part lists the types
    it stores (at most N get their own streams, the rest share one)."""

    max_types: int | None = None

    def __post_init__(self) -> None:
        if self.max_types is not None and not 0 <= self.max_types <= 254:
            raise FormatError(f"Dynamic max_types must be 0..254, got {self.max_types}")

    def _spelling(self) -> str:
        return "Dynamic" if self.max_types is None else f"Dynamic(max_types={self.max_types})"


@dataclass(frozen=True)
class Json(DataType):
    """JSON[(max_dynamic_paths=N, max_dynamic_types=M, path Type, ...)]: an object per row, stored path
    by path (format/json_text.py); read as the JSON text ClickHouse prints for it. `params` keep the
    order they were written in (a binary type encoding's order of typed paths is its own; the name
    lists them sorted, as ClickHouse does): (name, int) for a setting, (path, type) for a typed path."""

    params: tuple[tuple[str, int | DataType], ...] = ()
    skips: tuple[str, ...] = ()  # SKIP paths: not stored
    skip_regexps: tuple[str, ...] = ()  # SKIP REGEXP patterns: paths matching them are not stored

    @property
    def family(self) -> str:
        return "JSON"

    @property
    def typed_paths(self) -> tuple[tuple[str, DataType], ...]:
        return tuple((p, t) for p, t in self.params if isinstance(t, DataType))

    def _spelling(self) -> str:
        # As ClickHouse prints it: settings, typed paths (sorted by path), SKIP paths, SKIP REGEXP patterns.
        items = [f"{k}={v}" for k, v in self.params if isinstance(v, int)]
        items += [f"{_quote_name(k)} {v.to_clickhouse()}" for k, v in sorted(self.typed_paths, key=lambda p: p[0])]
        items += [f"SKIP {_quote_name(path)}" for path in self.skips]
        items += [f"SKIP REGEXP {_quote(pattern)}" for pattern in self.skip_regexps]
        return "JSON" + (f"({', '.join(items)})" if items else "")


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quote_name(name: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return name
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


# --------------------------------------------------------------------------------------------- parser

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|\\.|'')*')|(?P<bq>`(?:[^`\\]|\\.)*`)|(?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(),=]))"
)


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0"}.get(m.group(1), m.group(1)), body)


class _Parser:
    """Recursive descent over tokens: type := ident [ '(' args ')' ]."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                raise FormatError(f"cannot parse type {text!r}: unexpected character at offset {pos}")
            kind = match.lastgroup
            assert kind is not None  # every alternative of _TOKEN is a named group
            value = match.group(kind)
            if kind == "str":
                value = _unescape(value[1:-1].replace("''", "\\'"))
            elif kind == "bq":
                value, kind = _unescape(value[1:-1]), "ident"
            self.tokens.append((kind, value, match.start(kind)))
            pos = match.end()
        self.i = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _fail(self, what: str) -> FormatError:
        tok = self._peek()
        where = f"offset {tok[2]}" if tok else "end of text"
        return FormatError(f"cannot parse type {self.text!r}: expected {what} at {where}")

    def _take(self, kind: str, value: str | None = None) -> str:
        tok = self._peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            raise self._fail(value or kind)
        self.i += 1
        return tok[1]

    def _accept(self, value: str) -> bool:
        tok = self._peek()
        if tok is not None and tok[0] == "punct" and tok[1] == value:
            self.i += 1
            return True
        return False

    def parse(self) -> DataType:
        result = self.type()
        if self._peek() is not None:
            raise self._fail("end of type")
        return result

    def _int(self) -> int:
        text = self._take("num")
        if not text.lstrip("-").isdigit():
            raise FormatError(f"cannot parse type {self.text!r}: expected an integer, got {text}")
        return int(text)

    def type(self) -> DataType:
        name = self._take("ident")
        canonical = _ALIASES.get(name.lower(), name)
        if canonical in PRIMITIVE_WIDTHS and not self._peek_is("("):
            return Primitive(canonical)
        if name == "FixedString":
            self._take("punct", "(")
            n = self._int()
            self._take("punct", ")")
            if n <= 0:
                raise FormatError(f"FixedString length must be positive in {self.text!r}")
            return FixedString(n)
        if name == "DateTime":
            tz = None
            if self._accept("("):
                tz = self._take("str")
                self._take("punct", ")")
            return DateTime(tz)
        if name == "Time" and not self._peek_is("("):
            return Time()
        if name == "Time64":
            self._take("punct", "(")
            precision = self._int()
            self._take("punct", ")")
            return Time64(precision)
        if name == "DateTime64":
            self._take("punct", "(")
            precision = self._int()
            tz = self._take("str") if self._accept(",") else None
            self._take("punct", ")")
            return DateTime64(precision, tz)
        if name == "Decimal":
            self._take("punct", "(")
            precision = self._int()
            scale = self._int() if self._accept(",") else 0
            self._take("punct", ")")
            return Decimal(precision, scale)
        if name in ("Decimal32", "Decimal64", "Decimal128", "Decimal256"):
            self._take("punct", "(")
            scale = self._int()
            self._take("punct", ")")
            return Decimal({"Decimal32": 9, "Decimal64": 18, "Decimal128": 38, "Decimal256": 76}[name], scale)
        if name in ("Enum8", "Enum16"):
            self._take("punct", "(")
            values = []
            while True:
                label = self._take("str")
                self._take("punct", "=")
                values.append((label, self._int()))
                if not self._accept(","):
                    break
            self._take("punct", ")")
            return Enum(int(name[4:]), tuple(values))
        if name in _GEO_TYPES and not self._peek_is("("):
            return geo_type(name)
        if name == "SimpleAggregateFunction":
            self._take("punct", "(")
            function = self._take("ident")
            if self._peek_is("("):
                raise UnsupportedError(f"SimpleAggregateFunction with a parametric function in {self.text!r}")
            self._take("punct", ",")
            stored = self.type()
            self._take("punct", ")")
            return replace(stored, custom_name=f"SimpleAggregateFunction({function}, {stored.to_clickhouse()})")
        if name == "AggregateFunction":
            self._take("punct", "(")
            version = None
            if self._peek() is not None and self._peek()[0] == "num":  # type: ignore[index]
                version = self._int()
                self._take("punct", ",")
            function = self._take("ident")
            function = _FUNCTION_ALIASES.get(function, function)
            parameters: list[str] = []
            if self._accept("("):
                while not self._accept(")"):
                    if parameters:
                        self._take("punct", ",")
                    # Kept as written: a string parameter quoted again (no layout we know takes one).
                    tok = self._peek()
                    parameters.append(_quote(self._take("str")) if tok is not None and tok[0] == "str"
                                      else self._take("num"))
            arguments: list[DataType] = []
            while self._accept(","):
                arguments.append(self.type())
            self._take("punct", ")")
            return AggregateFunction(function, tuple(arguments), tuple(parameters), version)
        if name == "JSON":
            params: list[tuple[str, int | DataType]] = []
            skips: list[str] = []
            skip_regexps: list[str] = []
            if self._accept("("):
                while True:
                    param = self._take("ident")
                    following = self._peek()
                    if param in ("max_dynamic_paths", "max_dynamic_types") and self._peek_is("="):
                        self._take("punct", "=")
                        params.append((param, self._int()))
                    elif param.upper() == "SKIP" and following is not None and following[0] == "ident":
                        path = self._take("ident")
                        if path.upper() == "REGEXP" and self._peek() is not None and self._peek()[0] == "str":  # type: ignore[index]
                            skip_regexps.append(self._take("str"))
                        else:
                            skips.append(path)
                    elif self._peek_is("=") or self._peek_is(",") or self._peek_is(")"):
                        raise UnsupportedError(f"JSON with unknown settings ({self.text!r}) is not supported")
                    else:
                        params.append((param, self.type()))
                    if not self._accept(","):
                        break
                self._take("punct", ")")
            return Json(tuple(params), tuple(skips), tuple(skip_regexps))
        if name == "Dynamic":
            max_types = None
            if self._accept("("):
                if self._take("ident") != "max_types":
                    raise self._fail("max_types")
                self._take("punct", "=")
                max_types = self._int()
                self._take("punct", ")")
            return Dynamic(max_types)
        if name == "Variant":
            self._take("punct", "(")
            variants = [self.type()]
            while self._accept(","):
                variants.append(self.type())
            self._take("punct", ")")
            return Variant(tuple(variants))
        if name in ("Nullable", "Array", "LowCardinality"):
            self._take("punct", "(")
            inner = self.type()
            self._take("punct", ")")
            return {"Nullable": Nullable, "Array": Array, "LowCardinality": LowCardinality}[name](inner)
        if name == "Map":
            self._take("punct", "(")
            key = self.type()
            self._take("punct", ",")
            value = self.type()
            self._take("punct", ")")
            return Map(key, value)
        if name in ("Tuple", "Nested"):
            self._take("punct", "(")
            names: list[str] = []
            elements: list[DataType] = []
            while True:
                # A named element is `name Type`: two tokens in a row before a type's own arguments.
                tok, nxt = self._peek(), self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
                if tok is not None and tok[0] == "ident" and nxt is not None and nxt[0] == "ident":
                    names.append(self._take("ident"))
                elements.append(self.type())
                if not self._accept(","):
                    break
            self._take("punct", ")")
            if names and len(names) != len(elements):
                raise FormatError(f"cannot parse type {self.text!r}: Tuple mixes named and unnamed elements")
            if name == "Nested":
                # An unflattened Nested table (flatten_nested = 0) is stored as Array(Tuple(...)).
                if not names:
                    raise FormatError(f"cannot parse type {self.text!r}: Nested needs named elements")
                element = Tuple(tuple(elements), tuple(names))
                return Array(element, custom_name="Nested" + element.to_clickhouse()[len("Tuple"):])
            return Tuple(tuple(elements), tuple(names) if names else None)
        raise UnsupportedError(f"unsupported ClickHouse type {name!r} in {self.text!r}")

    def _peek_is(self, value: str) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == "punct" and tok[1] == value


_GEO_TYPES = ("Point", "Ring", "LineString", "Polygon", "MultiLineString", "MultiPolygon")


def geo_type(name: str) -> DataType:
    """A geo type as ClickHouse stores it: Point = Tuple(Float64, Float64); Ring and LineString =
    Array(Point); Polygon = Array(Ring); MultiLineString = Array(LineString); MultiPolygon = Array(Polygon)."""
    if name == "Point":
        return Tuple((Primitive("Float64"), Primitive("Float64")), custom_name="Point")
    inner = {"Ring": "Point", "LineString": "Point", "Polygon": "Ring", "MultiLineString": "LineString",
             "MultiPolygon": "Polygon"}[name]
    return Array(geo_type(inner), custom_name=name)


def parse_column_type(column: str, text: str, where: str = "") -> DataType:
    """`parse_type` for a column: an error names the column (after `where`, e.g. a file) and the type."""
    try:
        return parse_type(text)
    except (FormatError, UnsupportedError) as exc:
        raise type(exc)(f"{where}column {column!r}: {exc}") from exc


def parse_type(text: str) -> DataType:
    """Parse ClickHouse type text (`Array(Nullable(String))`, `DateTime64(3, 'UTC')`, ...)."""
    if not isinstance(text, str) or not text.strip():
        raise FormatError(f"empty or non-text ClickHouse type: {text!r}")
    return _parse_type_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_type_text(text: str) -> DataType:
    # Cached: every part of a table names the same types (columns.txt), and types are immutable.
    try:
        parsed = _Parser(text).parse()
    except FormatError:
        if re.search(r"\bJSON\s*\(", text):
            raise UnsupportedError(f"cannot parse JSON type {text!r} (a dotted path must be in backquotes)") from None
        raise
    _refuse_nested_objects(parsed, top=True)
    return parsed


def contains_type(dt: DataType, kind: type | Callable[[DataType], bool]) -> bool:
    """Whether `dt` is of class `kind` (or a type `kind` holds true of) or holds one (in Array, Map,
    Tuple, Nullable, LowCardinality or Variant)."""
    if isinstance(dt, kind) if isinstance(kind, type) else kind(dt):
        return True
    if isinstance(dt, (Nullable, Array, LowCardinality)):
        return contains_type(dt.inner, kind)
    if isinstance(dt, Map):
        return contains_type(dt.key, kind) or contains_type(dt.value, kind)
    if isinstance(dt, Tuple):
        return any(contains_type(e, kind) for e in dt.elements)
    if isinstance(dt, Variant):
        return any(contains_type(v, kind) for v in dt.variants)
    return False


def _refuse_nested_objects(dt: DataType, top: bool, container: bool = False, place: str = "") -> None:
    """JSON and Dynamic are read as a column, an Array's elements, a Map's values or a Tuple's element
    (`container`: dt is one of those), which ClickHouse stores under that element's stream names, and
    so is a Nullable(JSON) there: a `.null` map beside the JSON's streams (format_spec/types.md,
    *Dynamic*, *JSON*), and so is a Map's key (`place` says where dt is, for the error)."""
    if isinstance(dt, (Json, Dynamic)) and not (top or container):
        raise UnsupportedError(f"{dt.family} {place} is not supported (a column of type {dt.family}, or one inside "
                               f"Array, Map, Tuple{' or Variant' if isinstance(dt, Json) else ''}, is; so is Nullable(JSON) where "
                               "ClickHouse takes it)")
    if isinstance(dt, Array):
        _refuse_nested_objects(dt.inner, False, True)
    elif isinstance(dt, Map):
        # (ClickHouse takes a JSON or Dynamic key, but not a Nullable(JSON) one)
        _refuse_nested_objects(dt.key, False, not isinstance(dt.key, Nullable), "as a Map key")
        _refuse_nested_objects(dt.value, False, True)
    elif isinstance(dt, Tuple):
        for element in dt.elements:
            _refuse_nested_objects(element, False, True)
    elif isinstance(dt, Nullable):
        # (ClickHouse takes Nullable(JSON) wherever a JSON may be; Nullable(Dynamic) it refuses)
        if isinstance(dt.inner, Json) and "null" in dict(dt.inner.typed_paths):
            # Its typed path `null` and the NULL map are both `<col>.null`: ClickHouse writes the two into
            # one stream and cannot read the part back.
            raise UnsupportedError(f"{dt.to_clickhouse()}: a typed path named `null` inside Nullable is not supported "
                                   "(it shares its stream with the NULL map)")
        _refuse_nested_objects(dt.inner, False, (top or container) and isinstance(dt.inner, Json),
                               f"inside Nullable{' ' + place if place else ''}")
    elif isinstance(dt, LowCardinality):
        _refuse_nested_objects(dt.inner, False, False, "inside LowCardinality")
    elif isinstance(dt, Variant):
        for variant in dt.variants:
            _refuse_nested_objects(variant, False, isinstance(variant, Json), "inside Variant")


# ---------------------------------------------------------------------------------------------- Arrow

_INT_ARROW = {
    "UInt8": pa.uint8(), "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
    "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(),
    "Float32": pa.float32(), "Float64": pa.float64(), "Bool": pa.bool_(), "String": pa.string(),
    "Date": pa.date32(), "Date32": pa.date32(), "UUID": pa.string(),
    # As ClickHouse exports them to Arrow: IPv4 the address as a number, IPv6 its 16 bytes in network order.
    "IPv4": pa.uint32(), "IPv6": pa.binary(16),
    # Every BFloat16 is a float32 (its upper 16 bits); ClickHouse's own Arrow export gives 2 raw bytes.
    "BFloat16": pa.float32(),
    # 128/256-bit integers have no Arrow integer type: exact decimals with scale 0 hold every value.
    "Int128": pa.decimal256(39, 0), "UInt128": pa.decimal256(39, 0),
    "Int256": pa.decimal256(76, 0), "UInt256": pa.decimal256(76, 0),
}

DEFAULT_TIMEZONE = "UTC"


def datetime64_arrow_unit(precision: int) -> tuple[str, int]:
    """The Arrow timestamp unit for DateTime64(precision) and the factor Arrow values = ticks × factor."""
    for unit, digits in (("s", 0), ("ms", 3), ("us", 6), ("ns", 9)):
        if precision <= digits:
            return unit, 10 ** (digits - precision)
    raise FormatError(f"DateTime64 precision must be 0..9, got {precision}")


def to_arrow(dt: DataType) -> pa.DataType:
    """The Arrow type a column of `dt` is read into (nullability lives on the field, not the type)."""
    if isinstance(dt, Primitive):
        return _INT_ARROW[dt.name]
    if isinstance(dt, FixedString):
        return pa.binary(dt.length)
    if isinstance(dt, DateTime):
        return pa.timestamp("s", tz=dt.timezone or DEFAULT_TIMEZONE)
    if isinstance(dt, DateTime64):
        return pa.timestamp(datetime64_arrow_unit(dt.precision)[0], tz=dt.timezone or DEFAULT_TIMEZONE)
    if isinstance(dt, Decimal):
        return pa.decimal128(dt.precision, dt.scale) if dt.precision <= 38 else pa.decimal256(dt.precision, dt.scale)
    if isinstance(dt, Time):
        return pa.duration("s")
    if isinstance(dt, Time64):
        return pa.duration(datetime64_arrow_unit(dt.precision)[0])
    if isinstance(dt, Enum):
        return pa.string()
    if isinstance(dt, AggregateFunction):
        return pa.binary()
    if isinstance(dt, (Nullable, LowCardinality)):
        return to_arrow(dt.inner)
    if isinstance(dt, Array):
        return pa.list_(pa.field("item", to_arrow(dt.inner), nullable=is_nullable(dt.inner)))
    if isinstance(dt, Map):
        return pa.map_(pa.field("key", to_arrow(dt.key), nullable=False),
                       pa.field("value", to_arrow(dt.value), nullable=is_nullable(dt.value)))
    if isinstance(dt, Tuple):
        return pa.struct([pa.field(n, to_arrow(e), nullable=is_nullable(e)) for n, e in zip(dt.element_names, dt.elements, strict=True)])
    if isinstance(dt, Json):
        return pa.string()  # the object as ClickHouse's text of it
    if isinstance(dt, Dynamic):
        # A value as ClickHouse's binary encoding of its type, then the value (format_spec/types.md).
        return pa.binary()
    if isinstance(dt, Variant):
        # One nullable field per variant, named by its type; at most one is set, none for NULL.
        return pa.struct([pa.field(n, to_arrow(v), nullable=True) for n, v in zip(dt.names, dt.variants, strict=True)])
    raise UnsupportedError(f"no Arrow mapping for {dt.to_clickhouse()}")


def is_nullable(dt: DataType) -> bool:
    """True when values of `dt` can be NULL (Nullable, or LowCardinality(Nullable(...)))."""
    return isinstance(dt, (Nullable, Variant, Dynamic)) or (isinstance(dt, LowCardinality) and isinstance(dt.inner, Nullable))


def to_arrow_holding(dt: DataType, child_types: list[pa.DataType]) -> pa.DataType:
    """`to_arrow(dt)` of an Array, Map, Tuple or Variant whose children are of `child_types` (an
    Array's element; a Map's key and value; a Tuple's elements, a Variant's variants) where they differ from `to_arrow`'s, as a
    JSON inside one read in a merge's stored form does."""
    target = to_arrow(dt)
    if isinstance(dt, Array):
        return pa.list_(target.value_field.with_type(child_types[0]))
    if isinstance(dt, Map):
        return pa.map_(target.key_field.with_type(child_types[0]), target.item_field.with_type(child_types[1]))
    return pa.struct([field.with_type(child) for field, child in zip(target, child_types, strict=True)])


def to_arrow_field(name: str, dt: DataType) -> pa.Field:
    return pa.field(name, to_arrow(dt), nullable=is_nullable(dt))


def from_arrow(arrow_type: pa.DataType, nullable: bool = False, *, nullable_scalars: bool = True) -> DataType:
    """The ClickHouse type to store an Arrow type in.

    `nullable` is the Arrow field's nullability; it yields Nullable(T) only for types ClickHouse lets be
    Nullable (not Array/Map/Tuple), and only when `nullable_scalars` is true — callers pass False for
    key columns, which ClickHouse does not allow to be Nullable. Nested fields follow their own
    nullability (with the same flag).
    """
    def wrap(dt: DataType) -> DataType:
        return Nullable(dt) if nullable and nullable_scalars else dt

    t = arrow_type
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return wrap(Primitive("UUID"))
        t = t.storage_type
    if pa.types.is_dictionary(t):
        inner = from_arrow(t.value_type, nullable, nullable_scalars=nullable_scalars)
        try:
            return LowCardinality(inner)
        except FormatError:
            return inner
    for name, arrow in (("Bool", pa.bool_()), ("Int8", pa.int8()), ("Int16", pa.int16()), ("Int32", pa.int32()),
                        ("Int64", pa.int64()), ("UInt8", pa.uint8()), ("UInt16", pa.uint16()),
                        ("UInt32", pa.uint32()), ("UInt64", pa.uint64()), ("Float32", pa.float32()),
                        ("Float64", pa.float64())):
        if t == arrow:
            return wrap(Primitive(name))
    if pa.types.is_float16(t):
        return wrap(Primitive("Float32"))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) \
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return wrap(Primitive("String"))
    if pa.types.is_fixed_size_binary(t):
        return wrap(FixedString(t.byte_width))
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return wrap(Primitive("Date32"))
    if pa.types.is_timestamp(t):
        precision = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
        return wrap(DateTime64(precision, t.tz or DEFAULT_TIMEZONE))
    if pa.types.is_decimal(t):
        return wrap(Decimal(t.precision, t.scale))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) \
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        f = t.value_field
        return Array(from_arrow(f.type, f.nullable, nullable_scalars=nullable_scalars))
    if pa.types.is_map(t):
        return Map(from_arrow(t.key_field.type, False, nullable_scalars=nullable_scalars),
                   from_arrow(t.item_field.type, t.item_field.nullable, nullable_scalars=nullable_scalars))
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        return Tuple(tuple(from_arrow(f.type, f.nullable, nullable_scalars=nullable_scalars) for f in fields),
                     tuple(f.name for f in fields))
    raise SchemaMismatchError(f"no ClickHouse type for Arrow type {t}")
