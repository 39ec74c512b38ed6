"""The opaque claim config: JSON Schema assembled from the handlers, defaults, validation."""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from dradriver import patterns
from dradriver.errors import ConfigError
from dradriver.hookspecs import UNKNOWN_DEVICE, Device
from dradriver.registry import HandlerRegistry

SCHEMA_ID = "https://github.com/dra-driver/dra-driver/config.schema.json"

FORMATS = FormatChecker()
CIDR_HINT = "must be an address with a prefix length, e.g. 10.0.0.2/24"


@FORMATS.checks("cidr", raises=ValueError)
def _is_cidr(value: object) -> bool:
    """An interface address with prefix length, e.g. 10.0.0.2/24 or fd00::2/64.

    Exactly what Kubernetes' CEL `isCIDR()` accepts (Go's netip.ParsePrefix, no
    IPv4-mapped IPv6), so the admission policy and the driver agree: no netmask
    notation, no leading zeros in the prefix length, no IPv6 zone.
    """
    if not isinstance(value, str):
        return True  # the type keyword reports it
    address, slash, bits = value.partition("/")
    leading_zero = len(bits) > 1 and bits.startswith("0")
    if not slash or not (bits.isascii() and bits.isdigit()) or leading_zero:
        raise ValueError(CIDR_HINT)
    if "%" in address:
        raise ValueError("an IPv6 zone (%...) is not allowed")
    interface = ipaddress.ip_interface(value)
    if isinstance(interface, ipaddress.IPv6Interface) and interface.ip.ipv4_mapped:
        raise ValueError("an IPv4-mapped IPv6 address is not allowed; write the IPv4 address")
    return True


def _pattern(validator: Any, pattern: str, instance: object, schema: Mapping[str, Any]) -> Any:
    """`pattern` read as RE2 and JSON Schema read it: `$` is the end of the string."""
    if validator.is_type(instance, "string") and not patterns.search(pattern, str(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _is_integer(_checker: object, instance: object) -> bool:
    """A JSON integer that fits in 64 bits (what the API server reads as one): not 1.0."""
    return (
        isinstance(instance, int)
        and not isinstance(instance, bool)
        and -(2**63) <= instance < 2**63
    )


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={"pattern": _pattern},
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

    def __init__(self, registry: HandlerRegistry, driver_name: str) -> None:
        """Assemble the schema from the handlers' fragments."""
        self.registry = registry
        self.schema = _build_schema(registry, driver_name)
        self._validator = _Validator(self.schema, format_checker=FORMATS)

    def issues(self, parameters: object) -> list[tuple[str, str]]:
        """Every (JSON path, reason) the schema finds in `parameters`, sorted by path."""
        found: list[tuple[str, str]] = []
        for error in self._validator.iter_errors(parameters):
            found.extend(_describe(error))
        return sorted(set(found))

    def resolve(self, parameters: object, device: Device | None) -> ResolvedConfig:
        """Fill the defaults the handlers declare for `device` and validate; raise ConfigError.

        Without a device (`dra-driver validate-config`), the defaults for UNKNOWN_DEVICE.
        """
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise ConfigError("opaque parameters must be a JSON object", "$")
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


def _describe(error: ValidationError) -> list[tuple[str, str]]:
    """(path, reason) pairs for one schema error, pointing at the offending field."""
    path = error.json_path
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        if extra:
            return [(_join(path, k), "unknown field") for k in extra]
    if error.validator in ("allOf", "anyOf", "oneOf") and error.context:
        return [pair for sub in error.context for pair in _describe(sub)]
    if error.validator in ("pattern", "not", "maxLength") and "description" in schema:
        return [(path, f"{error.instance!r} is invalid: {schema['description']}")]
    if error.validator == "format" and error.cause is not None:
        return [(path, f"{error.instance!r} is invalid: {error.cause}")]
    return [(path, error.message)]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"
