"""The assertion keywords of JSON Schema that the config schema uses: each judges a value
alone, with jsonschema's messages (dradriver.contract.schemacheck applies them, beside
the keywords that look into subschemas).

type, enum, const, uniqueItems, maxProperties, maxItems, minLength, maxLength, pattern,
minimum, maximum. Two readings are the project's own: `pattern` is read in
dradriver.contract.patterns' dialect (`$` is the end of the string, as in JSON Schema and
RE2) and quotes the value briefly; an `integer` is a JSON integer that fits in 64 bits, as
the API server reads one (1.0 is not one).
"""

from __future__ import annotations

import itertools
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dradriver.contract import jsonpaths, patterns

# A keyword's test of a value: the message of its error, or None.
Test = Callable[[Any], str | None]


def _is_number(value: object) -> bool:
    """A JSON number: any number but a boolean."""
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    "integer": _is_integer,
}


def _type(value: Any) -> Test:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or any(n not in TYPES for n in names):
        raise ValueError(f"{value!r} is not a type or a list of types ({', '.join(TYPES)})")
    tests, shown = [TYPES[n] for n in names], ", ".join(repr(n) for n in names)
    return lambda x: None if any(t(x) for t in tests) else f"{x!r} is not of type {shown}"


def _enum(value: Any) -> Test:
    if not isinstance(value, list):
        raise ValueError("must be a list")
    return lambda x: None if any(equal(e, x) for e in value) else f"{x!r} is not one of {value!r}"


def _const(value: Any) -> Test:
    return lambda x: None if equal(x, value) else f"{value!r} was expected"


def _unique_items(value: Any) -> Test:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return lambda x: f"{x!r} has non-unique elements" if value and _repeats(x) else None


def _repeats(x: object) -> bool:
    return isinstance(x, list) and not unique(x)


# The size keywords: (the type they judge, a least size (else a most), the verdict at the
# edge (1 for a least, 0 for a most), the verdict otherwise).
_SIZES = {
    "minProperties": (dict, True, "should be non-empty", "does not have enough properties"),
    "maxProperties": (dict, False, "is expected to be empty", "has too many properties"),
    "minItems": (list, True, "should be non-empty", "is too short"),
    "maxItems": (list, False, "is expected to be empty", "is too long"),
    "minLength": (str, True, "should be non-empty", "is too short"),
    "maxLength": (str, False, "is expected to be empty", "is too long"),
}


def _size(keyword: str) -> Callable[[Any], Test]:
    kind, least, edge, other = _SIZES[keyword]

    def test(value: Any) -> Test:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"must be a non-negative integer, not {value!r}")
        verdict = edge if value == int(least) else other
        if least:
            return lambda x: f"{x!r} {verdict}" if isinstance(x, kind) and len(x) < value else None
        return lambda x: f"{x!r} {verdict}" if isinstance(x, kind) and len(x) > value else None

    return test


def _pattern(value: Any) -> Test:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    try:
        patterns.search(value, "")  # compiled now, not at the first config
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    return lambda x: (
        f"{jsonpaths.brief(x)} does not match {value!r}"
        if isinstance(x, str) and not patterns.search(value, x)
        else None
    )


def _minimum(value: Any) -> Test:
    if not _is_number(value):
        raise ValueError(f"must be a number, not {value!r}")
    return lambda x: (
        f"{x!r} is less than the minimum of {value!r}" if _is_number(x) and x < value else None
    )


def _maximum(value: Any) -> Test:
    if not _is_number(value):
        raise ValueError(f"must be a number, not {value!r}")
    return lambda x: (
        f"{x!r} is greater than the maximum of {value!r}" if _is_number(x) and x > value else None
    )


def _exclusive_minimum(value: Any) -> Test:
    if not _is_number(value):
        raise ValueError(f"must be a number, not {value!r}")
    return lambda x: (
        f"{x!r} is less than or equal to the minimum of {value!r}"
        if _is_number(x) and x <= value
        else None
    )


def _exclusive_maximum(value: Any) -> Test:
    if not _is_number(value):
        raise ValueError(f"must be a number, not {value!r}")
    return lambda x: (
        f"{x!r} is greater than or equal to the maximum of {value!r}"
        if _is_number(x) and x >= value
        else None
    )


# Each keyword: its value in a schema -> its test (ValueError for a value it cannot take).
ASSERTIONS: dict[str, Callable[[Any], Test]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "uniqueItems": _unique_items,
    **{keyword: _size(keyword) for keyword in _SIZES},
    "pattern": _pattern,
    "minimum": _minimum,
    "maximum": _maximum,
    "exclusiveMinimum": _exclusive_minimum,
    "exclusiveMaximum": _exclusive_maximum,
}


def equal(one: object, two: object) -> bool:
    """JSON equality: true is not 1, false is not 0, also inside lists and objects."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(k in two and equal(x, two[k]) for k, x in one.items())
    return _unbool(one) == _unbool(two)


_TRUE, _FALSE = object(), object()


def _unbool(value: object) -> object:
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    return value


def unique(items: Sequence[object]) -> bool:
    """Whether no two of `items` are equal (as `equal` reads them)."""
    try:
        ordered: list[Any] = sorted(_unbool(i) for i in items)
        return not any(equal(a, b) for a, b in itertools.pairwise(ordered))
    except (NotImplementedError, TypeError):
        seen: list[object] = []
        for item in map(_unbool, items):
            if any(equal(s, item) for s in seen):
                return False
            seen.append(item)
        return True
