"""JSON Schema (draft 2020-12) validation for the keywords the config schema uses, each
error reported as jsonschema reports it: the same message, instance path and keyword.

The keywords: properties, additionalProperties, required, propertyNames; items; format
(the string formats the caller gives); allOf, oneOf, not, if/then/else; boolean schemas;
and the assertions of dradriver.contract.schemaassertions (type, enum, const, min/max
Length, Items and Properties, uniqueItems, pattern, minimum, maximum and their exclusive
forms). Annotations ($schema, $id, title, description, default, contentMediaType...) are
read past, and the caller may add keywords of its own. A schema with
anything else is refused when its Validator is built (SchemaError): a keyword that is
not checked must not look as if it were.

One difference, on purpose: the error of a false subschema (`"old": false` among the
properties) names the value it refuses, where jsonschema names the object holding it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dradriver.contract.schemaassertions import ASSERTIONS, Test

Path = tuple[str | int, ...]
# An added keyword: (its value, the instance, the schema holding it) -> the (path below
# the instance, message) of each error.
KeywordCheck = Callable[[Any, Any, Mapping[str, Any]], Iterable[tuple[Path, str]]]
# A format: reads a string, raises ValueError (saying why) when it is not of the format.
FormatCheck = Callable[[str], object]
DIALECT = "https://json-schema.org/draft/2020-12/schema"
ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
     "readOnly", "writeOnly", "$anchor", "contentEncoding", "contentMediaType"}
)  # fmt: skip


class SchemaError(Exception):
    """A schema that cannot be checked in full: an unknown keyword or format, a bad value."""


@dataclass(frozen=True, slots=True)
class SchemaIssue:
    """One keyword an instance fails: its message, where, and what it judged."""

    keyword: str  # "false": a false schema
    message: str
    path: Path  # from the root of the instance validated
    instance: Any  # the value the keyword judged
    schema: Mapping[str, Any] | bool  # the schema holding the keyword
    cause: ValueError | None = None  # why a format refused the value
    context: tuple[SchemaIssue, ...] = ()  # oneOf: the errors of every branch
    key: bool = False  # below propertyNames: the instance is a property name


_Check = Callable[[Any, Path, bool], Iterator[SchemaIssue]]  # (instance, path, key)


class Validator:
    """A schema, compiled: the errors an instance has."""

    def __init__(
        self,
        schema: Mapping[str, Any] | bool,
        keywords: Mapping[str, KeywordCheck] | None = None,
        formats: Mapping[str, FormatCheck] | None = None,
    ) -> None:
        """Compile `schema` with added `keywords` and string `formats`; SchemaError if
        it uses anything this module does not check."""
        if isinstance(schema, Mapping) and schema.get("$schema", DIALECT) != DIALECT:
            raise SchemaError(f"#/$schema: {schema['$schema']!r} is not {DIALECT}")
        self._root = _Compiler(dict(keywords or {}), dict(formats or {})).compile(schema, "#")

    def iter_errors(self, instance: object) -> Iterator[SchemaIssue]:
        """Every error of `instance`."""
        return self._root(instance, (), False)

    def is_valid(self, instance: object) -> bool:
        """Whether `instance` has no error."""
        return _valid(self._root, instance)


@dataclass(frozen=True)
class _Compiler:
    keywords: dict[str, KeywordCheck]
    formats: dict[str, FormatCheck]
    # Each handler kind repeats the common fields: one check per distinct subschema.
    done: dict[str, _Check] = field(default_factory=dict)

    def compile(self, schema: object, at: str) -> _Check:
        if schema is True:
            return _nothing
        if schema is False:
            return _false
        if not isinstance(schema, Mapping):
            raise SchemaError(f"{at}: a schema is an object or a boolean, not {schema!r}")
        text = repr(schema)  # in its order: the same text, the same errors
        if text not in self.done:
            self.done[text] = self._compile(schema, at)
        return self.done[text]

    def _compile(self, schema: Mapping[str, Any], at: str) -> _Check:
        checks: list[_Check] = []
        for keyword, value in schema.items():
            where = f"{at}/{keyword}"
            if keyword in self.keywords:
                checks.append(_added(keyword, self.keywords[keyword], value, schema))
            elif keyword in ASSERTIONS:
                checks.append(_tested(keyword, self.assertion(keyword, value, where), schema))
            elif keyword in _BUILDERS:
                checks.append(_BUILDERS[keyword](self, value, schema, where))
            elif keyword in ("then", "else"):
                if "if" not in schema:
                    raise SchemaError(f"{where}: {keyword} without if is never applied")
            elif keyword not in ANNOTATIONS:
                known = ", ".join(sorted([*ASSERTIONS, *_BUILDERS, "then", "else", *self.keywords]))
                raise SchemaError(f"{where}: unknown keyword {keyword!r} (known: {known})")
        if len(checks) == 1:
            return checks[0]

        def run(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
            for check in checks:
                yield from check(instance, path, key)

        return run

    def assertion(self, keyword: str, value: object, at: str) -> Test:
        try:
            return ASSERTIONS[keyword](value)
        except ValueError as exc:
            raise SchemaError(f"{at}: {exc}") from None

    def compile_each(self, value: object, at: str) -> list[_Check]:
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{at}: must be a non-empty list of schemas")
        return [self.compile(sub, f"{at}/{i}") for i, sub in enumerate(value)]


def _nothing(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
    return iter(())


def _false(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
    message = f"False schema does not allow {instance!r}"
    yield SchemaIssue("false", message, path, instance, False, key=key)


def _valid(check: _Check, instance: object) -> bool:
    return next(check(instance, (), False), None) is None


def _added(keyword: str, fn: KeywordCheck, value: Any, schema: Mapping[str, Any]) -> _Check:
    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        for below, message in fn(value, instance, schema):
            yield SchemaIssue(keyword, message, (*path, *below), instance, schema, key=key)

    return check


def _tested(keyword: str, test: Test, schema: Mapping[str, Any]) -> _Check:
    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        message = test(instance)
        if message is not None:
            yield SchemaIssue(keyword, message, path, instance, schema, key=key)

    return check


# A keyword that looks into the instance or at subschemas: (validator, its value, the
# schema holding it, its location) -> its check.
_Builder = Callable[[_Compiler, Any, Mapping[str, Any], str], _Check]


def _required(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise SchemaError(f"{at}: must be a list of property names")

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if isinstance(instance, dict):
            for name in value:
                if name not in instance:
                    message = f"{name!r} is a required property"
                    yield SchemaIssue("required", message, path, instance, schema, key=key)

    return check


def _format(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    if not isinstance(value, str) or value not in v.formats:
        raise SchemaError(f"{at}: unknown format {value!r} (known: {', '.join(sorted(v.formats))})")
    parse = v.formats[value]

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if isinstance(instance, str):
            try:
                parse(instance)
            except ValueError as exc:
                message = f"{instance!r} is not a {value!r}"
                yield SchemaIssue("format", message, path, instance, schema, exc, key=key)

    return check


def _properties(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    if not isinstance(value, Mapping) or not all(isinstance(n, str) for n in value):
        raise SchemaError(f"{at}: must be an object of schemas")
    children = [(name, v.compile(sub, f"{at}/{name}")) for name, sub in value.items()]

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if isinstance(instance, dict):
            for name, child in children:
                if name in instance:
                    yield from child(instance[name], (*path, name), key)

    return check


def _additional(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    known = schema.get("properties", {})
    if value is not False:
        child = v.compile(value, at)

        def each(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
            if isinstance(instance, dict):
                for name in [n for n in instance if n not in known]:
                    yield from child(instance[name], (*path, name), key)

        return each

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        extras = (
            sorted((n for n in instance if n not in known), key=str)
            if isinstance(instance, dict)
            else []
        )
        if extras:
            verb = "was" if len(extras) == 1 else "were"
            shown = ", ".join(repr(n) for n in extras)
            message = f"Additional properties are not allowed ({shown} {verb} unexpected)"
            yield SchemaIssue("additionalProperties", message, path, instance, schema, key=key)

    return check


def _property_names(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    child = v.compile(value, at)

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if isinstance(instance, dict):
            for name in instance:
                yield from child(name, path, True)

    return check


def _items(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    if value is False:
        return _tested("items", _no_items, schema)
    child = v.compile(value, at)

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if isinstance(instance, list):
            for index, item in enumerate(instance):
                yield from child(item, (*path, index), key)

    return check


def _no_items(x: Any) -> str | None:
    if not isinstance(x, list) or not x:
        return None
    return f"Expected at most 0 items but found {len(x)} extra: {x if len(x) != 1 else x[0]!r}"


def _all_of(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    children = v.compile_each(value, at)

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        for child in children:
            yield from child(instance, path, key)

    return check


def _one_of(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    children = v.compile_each(value, at)

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        found: list[SchemaIssue] = []
        first = next(
            (i for i, c in enumerate(children) if _collect(c, instance, path, key, found)), None
        )
        if first is None:
            message = f"{instance!r} is not valid under any of the given schemas"
            yield SchemaIssue("oneOf", message, path, instance, schema, None, tuple(found), key)
            return
        more = [value[i] for i in range(first + 1, len(children)) if _valid(children[i], instance)]
        if more:
            shown = ", ".join(repr(each) for each in [*more, value[first]])
            message = f"{instance!r} is valid under each of {shown}"
            yield SchemaIssue("oneOf", message, path, instance, schema, key=key)

    return check


def _collect(child: _Check, instance: Any, path: Path, key: bool, into: list[SchemaIssue]) -> bool:
    """Whether `instance` passes `child`; its errors added to `into` if not."""
    errors = list(child(instance, path, key))
    into += errors
    return not errors


def _not(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    child = v.compile(value, at)

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        if _valid(child, instance):
            message = f"{instance!r} should not be valid under {value!r}"
            yield SchemaIssue("not", message, path, instance, schema, key=key)

    return check


def _if(v: _Compiler, value: Any, schema: Mapping[str, Any], at: str) -> _Check:
    condition, base = v.compile(value, at), at.rpartition("/")[0]
    then = v.compile(schema["then"], f"{base}/then") if "then" in schema else _nothing
    else_ = v.compile(schema["else"], f"{base}/else") if "else" in schema else _nothing

    def check(instance: Any, path: Path, key: bool) -> Iterator[SchemaIssue]:
        return (then if _valid(condition, instance) else else_)(instance, path, key)

    return check


_BUILDERS: dict[str, _Builder] = {
    "required": _required,
    "format": _format,
    "properties": _properties,
    "additionalProperties": _additional,
    "propertyNames": _property_names,
    "items": _items,
    "allOf": _all_of,
    "oneOf": _one_of,
    "not": _not,
    "if": _if,
}
