"""LIKE and ILIKE patterns as ClickHouse reads them: wildcards, escapes, and the regular expression
they match with.

A pattern is UTF-8 text where `%` matches any run of characters (newlines included), `_` exactly one
character (a code point, not a byte), and a backslash escapes what follows: `\\%`, `\\_` and `\\\\`
stand for `%`, `_` and `\\`. A backslash before any other character stands for itself (`\\a` is
backslash + `a`), and a pattern ending in an unpaired backslash is an error, as in ClickHouse.
These are the pattern's own escapes, applied after the string literal's escapes: the SQL text
`'%\\\\\\\\'` is the pattern `%\\\\`, which matches every string ending in one backslash.
"""

from __future__ import annotations

import enum
import re

from spark_mergetree.errors import ExpressionError


class Wildcard(enum.Enum):
    ANY_RUN = "%"
    ANY_CHAR = "_"


_ESCAPABLE = "%_\\"
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def like_parts(pattern: str) -> list[str | Wildcard]:
    """The pattern as a list of pieces: wildcards, or literal text (never empty).

    Raises ExpressionError for a pattern ClickHouse refuses (an unpaired backslash at the end)."""
    parts: list[str | Wildcard] = []
    literal: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if index + 1 == len(pattern):
                raise ExpressionError(f"LIKE pattern {pattern!r} ends with an unpaired backslash (write '\\\\\\\\' "
                                      "in the SQL string for one literal backslash)")
            following = pattern[index + 1]
            if following in _ESCAPABLE:
                literal.append(following)
                index += 2
            else:
                literal.append("\\")
                index += 1
            continue
        if char in ("%", "_"):
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(Wildcard(char))
        else:
            literal.append(char)
        index += 1
    if literal:
        parts.append("".join(literal))
    return parts


def like_regex(pattern: str) -> str:
    """An RE2 expression matching exactly the strings `pattern` matches (whole string, dot-all)."""
    pieces = []
    for part in like_parts(pattern):
        if part is Wildcard.ANY_RUN:
            pieces.append(".*")
        elif part is Wildcard.ANY_CHAR:
            pieces.append(".")
        else:
            pieces.append(_escape(part))
    return "(?s)\\A" + "".join(pieces) + "\\z"


def like_prefix(pattern: str) -> str:
    """The literal text every string matching `pattern` starts with (empty when it starts with a wildcard)."""
    parts = like_parts(pattern)
    return parts[0] if parts and isinstance(parts[0], str) else ""


def _escape(text: str) -> str:
    # RE2 takes a backslash before ASCII punctuation as that character; everything else is literal.
    return _PUNCTUATION.sub(r"\\\g<0>", text)
