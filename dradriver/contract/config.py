"""The opaque claim config: JSON Schema assembled from the handlers, defaults, validation."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from dradriver.base.errors import ConfigError
from dradriver.contract import fieldrules, ifrules, iprules, macs, patterns
from dradriver.contract.hookspecs import UNKNOWN_DEVICE, Device
from dradriver.contract.registry import HandlerRegistry

SCHEMA_ID = "https://github.com/dra-driver/dra-driver/config.schema.json"
# A device's config is a handful of fields: anything deeper or bigger is refused before
# it is copied or validated (both recurse), with the path where it went too deep.
MAX_DEPTH = 16
VALIDATIONS_KEPT = 256  # distinct configs whose validation result is remembered
MAX_VALUES = 2000
_MESSAGE_LIMIT = 300

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
        yield ValidationError(f"{_brief(instance)} does not match {pattern!r}")


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
            yield ValidationError(fieldrules.refusal(name), path=[field])


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


@dataclass(frozen=True)
class ResolvedConfig:
    """A validated config: its type, kind and the type's object with defaults filled."""

    type: str
    kind: str
    config: Mapping[str, Any]


class ConfigSchema:
    """Validates opaque parameters against the schema of every registered handler."""

    def __init__(
        self,
        registry: HandlerRegistry,
        driver_name: str,
        global_macs: Sequence[str] = (),
        allowed_types: Sequence[str] | None = None,
    ) -> None:
        """Assemble the schema from the handlers' fragments; `global_macs`: the globally
        administered MACs the operator allows where a locally administered one is asked
        (contract.macs; ValueError for an entry that is not a unicast MAC);
        `allowed_types`: the CNI plugins the operator allows (--cni-plugins), for the
        `jsonTypes` keyword (contract.fieldrules; None: not checked)."""
        self.registry = registry
        schema = _with_pattern(
            _build_schema(registry, driver_name), macs.LOCAL_MAC_PATTERN, macs.local_or(global_macs)
        )
        if allowed_types is not None:
            schema = fieldrules.with_allowed_types(schema, allowed_types)
        self.schema = schema
        self._validator = Validator(self.schema, format_checker=FORMATS)
        # Claims made from one template carry one config: validating it again (~0.3 ms
        # of a prepare) finds what it found before. Keyed by the config's canonical JSON.
        self._issues_of = functools.lru_cache(maxsize=VALIDATIONS_KEPT)(self._validate_json)

    def issues(self, parameters: object) -> list[tuple[str, str]]:
        """Every (JSON path, reason) the schema finds in `parameters`, sorted by path."""
        shape = shape_problem(parameters)
        if shape is not None:
            return [shape]
        try:
            key = json.dumps(parameters, sort_keys=True)
        except (TypeError, ValueError):  # not JSON (a YAML date, say): no cache
            return self._validate(parameters)
        if json.loads(key) != parameters:  # JSON changed it (integer keys, tuples, NaN)
            return self._validate(parameters)
        return list(self._issues_of(key))

    def _validate_json(self, text: str) -> tuple[tuple[str, str], ...]:
        return tuple(self._validate(json.loads(text)))

    def _validate(self, parameters: object) -> list[tuple[str, str]]:
        found = [leaf for e in self._validator.iter_errors(parameters) for leaf in _describe(e)]
        # A field whose format check failed also fails its coarser pattern: one reason.
        formats = {path for path, _, keyword in found if keyword == "format"}
        return sorted(
            {(p, _short(r)) for p, r, keyword in found if keyword != "pattern" or p not in formats}
        )

    def resolve(self, parameters: object, device: Device | None) -> ResolvedConfig:
        """Fill the defaults the handlers declare for `device` and validate; raise ConfigError.

        Without a device (`dra-driver validate-config`), the defaults for UNKNOWN_DEVICE.
        """
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise ConfigError("opaque parameters must be a JSON object", "$")
        shape = shape_problem(parameters)
        if shape is not None:
            raise ConfigError(shape[1], shape[0])
        params = copy.deepcopy(parameters)
        default = self.registry.default_for_device(device.kind if device else UNKNOWN_DEVICE)
        if "type" not in params:
            if default is None:
                what = f"device {device.name} (kind {device.kind!r})" if device else "a config"
                raise ConfigError(f"required: {what} has no default type", "$.type")
            params["type"] = default.type
        type_ = params["type"]
        if isinstance(type_, str) and isinstance(params.setdefault(type_, {}), dict):
            same = default is not None and default.type == type_
            kind = default.kind if same and default else self.registry.default_kind(type_)
            if kind is not None:
                params[type_].setdefault("kind", kind)
        issues = self.issues(params)
        if issues:
            raise ConfigError.many(issues)
        return ResolvedConfig(type_, params[type_]["kind"], params[type_])

    def dumps(self) -> str:
        """The schema as indented JSON (what `dra-driver schema` prints)."""
        return json.dumps(self.schema, indent=2, sort_keys=True)


def _with_pattern(node: Any, old: str, new: str) -> Any:
    """A copy of schema `node` with every `pattern` `old` made `new`."""
    if isinstance(node, Mapping):
        out = {k: _with_pattern(v, old, new) for k, v in node.items()}
        if out.get("pattern") == old:
            out["pattern"] = new
        return out
    if isinstance(node, list):
        return [_with_pattern(v, old, new) for v in node]
    return node


def _build_schema(registry: HandlerRegistry, driver_name: str) -> dict[str, Any]:
    types = registry.kinds()
    properties: dict[str, Any] = {
        "type": {"enum": sorted(types), "description": "device family; picks the handler"}
    }
    all_of: list[dict[str, Any]] = []
    for type_, kinds in types.items():
        per_kind = [
            {
                "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                "then": dict(registry.get(type_, kind).schema(kind)),
            }
            for kind in kinds
        ]
        properties[type_] = {
            "type": "object",
            "description": f"config of a {type_} device; fields depend on kind",
            "properties": {"kind": {"enum": kinds}},
            "allOf": per_kind,
        }
        all_of.append(
            {
                "if": {"properties": {"type": {"const": type_}}, "required": ["type"]},
                "then": {"required": [type_]},
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"Opaque device configuration of the {driver_name} DRA driver",
        "description": (
            f"`parameters` of a DeviceClass or ResourceClaim opaque config with driver "
            f"{driver_name}. A request without config gets the default of its device."
        ),
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "allOf": all_of,
    }


def _describe(error: ValidationError) -> list[tuple[str, str, str]]:
    """(path, reason, keyword) for one schema error, pointing at the offending field."""
    path, keyword = "$", str(error.validator)
    for elem in error.absolute_path:
        path = f"{path}[{elem}]" if isinstance(elem, int) else _join(path, elem)
    if "propertyNames" in error.relative_schema_path and isinstance(error.instance, str):
        path = _join(path, error.instance)  # a key refused: name the key, as for a value
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if extra:
            return [(_join(path, k), "unknown field", keyword) for k in extra]
    if keyword in ("allOf", "anyOf", "oneOf") and error.context:
        return [leaf for sub in error.context for leaf in _describe(sub)]
    if keyword in ("pattern", "not", "maxLength") and "description" in schema:
        return [(path, f"{_brief(error.instance)} is invalid: {schema['description']}", keyword)]
    if keyword == "format" and error.cause is not None:
        return [(path, f"{_brief(error.instance)} is invalid: {error.cause}", keyword)]
    return [(path, error.message, keyword)]


def shape_problem(value: object) -> tuple[str, str] | None:
    """(path, reason) if `value` is nested too deeply, too big, or has a key that is not
    a string (YAML allows them); walked without recursion."""
    stack: list[tuple[object, str, int]] = [(value, "$", 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return "$", f"more than {MAX_VALUES} values: a device config is a handful of fields"
        if depth > MAX_DEPTH:
            return path, f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return path, f"key {_brief(key)} is not a string"
                stack.append((child, _join(path, key), depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
    return None


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _short(message: str) -> str:
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."


def _join(path: str, key: object) -> str:
    key = str(key)
    return f"{path}.{key}" if key.isidentifier() and key.isascii() else f"{path}[{json.dumps(key)}]"
