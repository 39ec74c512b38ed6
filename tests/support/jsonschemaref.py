"""The config validation as the driver did it with jsonschema (Draft202012Validator with
the project's keywords, formats, `pattern` and `integer`), kept as the reference that
dradriver.contract.schemacheck is compared with (tests/unit/test_schemacheck.py).

`validator` and `issues` are the driver's code of before, unchanged in behaviour;
`as_issue` turns a jsonschema error into a schemacheck.SchemaIssue, so that the two
validators' errors can be compared field by field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from dradriver.contract import fieldrules, ifrules, iprules, jsonpaths, patterns
from dradriver.contract.schemacheck import SchemaIssue

MESSAGE_LIMIT = 300
FORMATS = FormatChecker()


@FORMATS.checks("cidr", raises=ValueError)
def _is_cidr(value: object) -> bool:
    if isinstance(value, str):
        iprules.parse_interface(value)
    return True


@FORMATS.checks("route-destination", raises=ValueError)
def _is_destination(value: object) -> bool:
    if isinstance(value, str):
        iprules.parse_destination(value)
    return True


@FORMATS.checks("route-gateway", raises=ValueError)
def _is_gateway(value: object) -> bool:
    if isinstance(value, str):
        iprules.parse_gateway(value)
    return True


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not patterns.search(pattern, instance):
        yield ValidationError(f"{jsonpaths.brief(instance)} does not match {pattern!r}")


def _interface_rules(
    validator: Any, value: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    name = ((schema.get("properties") or {}).get("interfaceName") or {}).get("default")
    keeps = bool(value.get("keepsAddresses"))
    for path, message in ifrules.config_issues(instance, name, keeps):
        yield ValidationError(message, path=path)


def _exactly_one(
    validator: Any, fields: Sequence[str], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    issue = fieldrules.exactly_one_issue(instance, fields)
    if issue is not None:
        yield ValidationError(issue[1], path=[issue[0]])


def _json_types(
    validator: Any, rule: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    field, allowed = str(rule.get("field")), rule.get("allowed")
    if not validator.is_type(instance, "object") or allowed is None:
        return
    text = instance.get(field)
    if isinstance(text, str):
        for name in fieldrules.refused_types(text, allowed):
            yield ValidationError(fieldrules.refusal(json.dumps(name)), path=[field])


def _is_integer(_checker: object, instance: object) -> bool:
    return (
        isinstance(instance, int)
        and not isinstance(instance, bool)
        and -(2**63) <= instance < 2**63
    )


Validator = validators.extend(
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
    """jsonschema's validator of `schema` with the project's keywords and formats."""
    return Validator(schema, format_checker=FORMATS)


def issues(checker: Any, parameters: object) -> list[tuple[str, str]]:
    """Every (JSON path, reason) `checker` finds in `parameters`, sorted by path."""
    return issues_of(checker.iter_errors(parameters))


def issues_of(errors: Iterable[ValidationError]) -> list[tuple[str, str]]:
    """The (JSON path, reason) of `errors`, sorted by path."""
    found = [leaf for e in errors for leaf in describe(e)]
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
        path = jsonpaths.join(path, error.instance)
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


def as_issue(error: ValidationError) -> SchemaIssue:
    """`error` as schemacheck reports one (a false schema's keyword is "false")."""
    return SchemaIssue(
        keyword="false" if error.validator is None else str(error.validator),
        message=error.message,
        path=tuple(error.absolute_path),
        instance=error.instance,
        schema=error.schema,
        cause=error.cause if isinstance(error.cause, ValueError) else None,
        context=tuple(as_issue(sub) for sub in error.context),
        key="propertyNames" in error.relative_schema_path,
    )
