"""Opaque configs validated against the assembled schema: JSON Schema draft 2020-12 with
the project's own keywords and formats, each error turned into (JSON path, reason).

The checking is dradriver.contract.schemacheck's: the keywords the schema uses, with
jsonschema's messages and paths. The driver does not load jsonschema, which with
referencing, rpds, attrs and its metaschemas cost every node ~4 MB of RSS and ~50 ms of
start-up; the tests keep it as the reference (tests/support/jsonschemaref.py).
ConfigSchema builds its validator when it is made (~4 ms), so the first claim a driver
prepares, often inside the kubelet's call, does not pay for compiling the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dradriver.base.errors import RegistryError
from dradriver.contract import fieldrules, ifrules, iprules, jsonpaths, schemacheck
from dradriver.contract.schemacheck import Path, SchemaIssue

MESSAGE_LIMIT = 300

# The string formats of the schema, each a parser whose ValueError says what is wrong.
FORMATS: dict[str, schemacheck.FormatCheck] = {
    "cidr": iprules.parse_interface,  # a claim's interface address (rule 1, form)
    "route-destination": iprules.parse_destination,
    "route-gateway": iprules.parse_gateway,
}


def _interface_rules(
    value: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[tuple[Path, str]]:
    """The `interfaceRules` keyword: what one interface's values say of each other
    (dradriver.contract.ifrules), each issue at the field it names."""
    if not isinstance(instance, dict):
        return
    name = ((schema.get("properties") or {}).get("interfaceName") or {}).get("default")
    keeps = bool(value.get("keepsAddresses"))
    yield from ifrules.config_issues(instance, name, keeps)


def _exactly_one(
    fields: Sequence[str], instance: Any, schema: Mapping[str, Any]
) -> Iterator[tuple[Path, str]]:
    """The `exactlyOneOf` keyword (dradriver.contract.fieldrules), at the field it names."""
    if not isinstance(instance, dict):
        return
    issue = fieldrules.exactly_one_issue(instance, fields)
    if issue is not None:
        yield (issue[0],), issue[1]


def _json_types(
    rule: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[tuple[Path, str]]:
    """The `jsonTypes` keyword (dradriver.contract.fieldrules), at the text's field."""
    field, allowed = str(rule.get("field")), rule.get("allowed")
    if not isinstance(instance, dict) or allowed is None:
        return
    text = instance.get(field)
    if isinstance(text, str):
        for name in fieldrules.refused_types(text, allowed):
            yield (field,), fieldrules.refusal(json.dumps(name))


KEYWORDS: dict[str, schemacheck.KeywordCheck] = {
    ifrules.KEYWORD: _interface_rules,
    fieldrules.EXACTLY_ONE: _exactly_one,
    fieldrules.JSON_TYPES: _json_types,
}


def validator(schema: Mapping[str, Any]) -> schemacheck.Validator:
    """A validator of `schema` with the project's keywords and formats; RegistryError if
    a handler's fragment uses a keyword or format it cannot check."""
    try:
        return schemacheck.Validator(schema, KEYWORDS, FORMATS)
    except schemacheck.SchemaError as exc:
        raise RegistryError(
            f"the config schema the handler plugins make cannot be checked: {exc}"
        ) from None


def issues(checker: schemacheck.Validator, parameters: object) -> list[tuple[str, str]]:
    """Every (JSON path, reason) `checker` finds in `parameters`, sorted by path."""
    found = [leaf for e in checker.iter_errors(parameters) for leaf in describe(e)]
    # A field whose format check failed also fails its coarser pattern: one reason.
    formats = {path for path, _, keyword in found if keyword == "format"}
    return sorted(
        {(p, _short(r)) for p, r, keyword in found if keyword != "pattern" or p not in formats}
    )


def describe(error: SchemaIssue) -> list[tuple[str, str, str]]:
    """(path, reason, keyword) for one schema error, pointing at the offending field."""
    path, keyword = "$", error.keyword
    for elem in error.path:
        path = f"{path}[{elem}]" if isinstance(elem, int) else jsonpaths.join(path, elem)
    if error.key and isinstance(error.instance, str):
        path = jsonpaths.join(path, error.instance)  # a key refused: name the key, as for a value
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if extra:
            return [(jsonpaths.join(path, k), "unknown field", keyword) for k in extra]
    if error.context:
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
