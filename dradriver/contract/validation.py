"""Opaque configs validated against the assembled schema: JSON Schema draft 2020-12 with
the project's own keywords and formats, each error turned into (JSON path, reason).

ConfigSchema builds its validator when it is made: the first claim a driver prepares,
often inside the kubelet's call, does not pay for loading jsonschema (~65 ms; far more
on a slow node).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from dradriver.contract import fieldrules, ifrules, iprules, jsonpaths, patterns

MESSAGE_LIMIT = 300

FORMATS = FormatChecker()


@FORMATS.checks("cidr", raises=ValueError)
def _is_cidr(value: object) -> bool:
    """A claim's interface address: see dradriver.contract.iprules (rule 1, form)."""
    if isinstance(value, str):
        iprules.parse_interface(value)
    return True


@FORMATS.checks("route-destination", raises=ValueError)
def _is_destination(value: object) -> bool:
    """A route's destination network (dradriver.contract.iprules.parse_destination)."""
    if isinstance(value, str):
        iprules.parse_destination(value)
    return True


@FORMATS.checks("route-gateway", raises=ValueError)
def _is_gateway(value: object) -> bool:
    """A route's gateway (dradriver.contract.iprules.parse_gateway)."""
    if isinstance(value, str):
        iprules.parse_gateway(value)
    return True


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """`pattern` read as RE2 and JSON Schema read it: `$` is the end of the string."""
    if validator.is_type(instance, "string") and not patterns.search(pattern, instance):
        yield ValidationError(f"{jsonpaths.brief(instance)} does not match {pattern!r}")


def _interface_rules(
    validator: Any, value: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The `interfaceRules` keyword: what one interface's values say of each other
    (dradriver.contract.ifrules), each issue at the field it names."""
    if not validator.is_type(instance, "object"):
        return
    name = ((schema.get("properties") or {}).get("interfaceName") or {}).get("default")
    keeps = bool(value.get("keepsAddresses"))
    for path, message in ifrules.config_issues(instance, name, keeps):
        yield ValidationError(message, path=path)


def _exactly_one(
    validator: Any, fields: Sequence[str], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The `exactlyOneOf` keyword (dradriver.contract.fieldrules), at the field it names."""
    if not validator.is_type(instance, "object"):
        return
    issue = fieldrules.exactly_one_issue(instance, fields)
    if issue is not None:
        yield ValidationError(issue[1], path=[issue[0]])


def _json_types(
    validator: Any, rule: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """The `jsonTypes` keyword (dradriver.contract.fieldrules), at the text's field."""
    field, allowed = str(rule.get("field")), rule.get("allowed")
    if not validator.is_type(instance, "object") or allowed is None:
        return
    text = instance.get(field)
    if isinstance(text, str):
        for name in fieldrules.refused_types(text, allowed):
            yield ValidationError(fieldrules.refusal(json.dumps(name)), path=[field])


def _is_integer(_checker: object, instance: object) -> bool:
    """A JSON integer that fits in 64 bits (what the API server reads as one): not 1.0."""
    return (
        isinstance(instance, int)
        and not isinstance(instance, bool)
        and -(2**63) <= instance < 2**63
    )


# Draft 2020-12 with `pattern` read as the standard (and the admission policy's RE2) reads
# it, and integers as the API server reads them.
Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={
        "pattern": _pattern,
        ifrules.KEYWORD: _interface_rules,
        fieldrules.EXACTLY_ONE: _exactly_one,
        fieldrules.JSON_TYPES: _json_types,
    },
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


def validator(schema: Mapping[str, Any]) -> Any:
    """A validator of `schema` with the project's keywords and formats."""
    return Validator(schema, format_checker=FORMATS)


def issues(checker: Any, parameters: object) -> list[tuple[str, str]]:
    """Every (JSON path, reason) `checker` finds in `parameters`, sorted by path."""
    found = [leaf for e in checker.iter_errors(parameters) for leaf in describe(e)]
    # A field whose format check failed also fails its coarser pattern: one reason.
    formats = {path for path, _, keyword in found if keyword == "format"}
    return sorted(
        {(p, _short(r)) for p, r, keyword in found if keyword != "pattern" or p not in formats}
    )


def describe(error: ValidationError) -> list[tuple[str, str, str]]:
    """(path, reason, keyword) for one schema error, pointing at the offending field."""
    path, keyword = "$", str(error.validator)
    for elem in error.absolute_path:
        path = f"{path}[{elem}]" if isinstance(elem, int) else jsonpaths.join(path, elem)
    if "propertyNames" in error.relative_schema_path and isinstance(error.instance, str):
        path = jsonpaths.join(path, error.instance)  # a key refused: name the key, as for a value
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if extra:
            return [(jsonpaths.join(path, k), "unknown field", keyword) for k in extra]
    if keyword in ("allOf", "anyOf", "oneOf") and error.context:
        return [leaf for sub in error.context for leaf in describe(sub)]
    if keyword in ("pattern", "not", "maxLength") and "description" in schema:
        return [
            (
                path,
                f"{jsonpaths.brief(error.instance)} is invalid: {schema['description']}",
                keyword,
            )
        ]
    if keyword == "format" and error.cause is not None:
        return [(path, f"{jsonpaths.brief(error.instance)} is invalid: {error.cause}", keyword)]
    return [(path, error.message, keyword)]


def _short(message: str) -> str:
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."
