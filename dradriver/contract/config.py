"""The opaque claim config: JSON Schema assembled from the handlers, defaults, validation."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dradriver.base.errors import ConfigError
from dradriver.contract import fieldrules, jsonpaths, macs, validation
from dradriver.contract.hookspecs import UNKNOWN_DEVICE, Device
from dradriver.contract.registry import HandlerRegistry

SCHEMA_ID = "https://github.com/dra-driver/dra-driver/config.schema.json"
# A device's config is a handful of fields: anything deeper or bigger is refused before
# it is copied or validated (both recurse), with the path where it went too deep.
MAX_DEPTH = 16
VALIDATIONS_KEPT = 256  # distinct configs whose validation result is remembered
MAX_VALUES = 2000


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
        `jsonTypes` keyword (contract.fieldrules; None: not checked). RegistryError if a
        handler's fragment uses a keyword or format the validator does not check."""
        self.registry = registry
        schema = _with_pattern(
            _build_schema(registry, driver_name), macs.LOCAL_MAC_PATTERN, macs.local_or(global_macs)
        )
        if allowed_types is not None:
            schema = fieldrules.with_allowed_types(schema, allowed_types)
        self.schema = schema
        self._validator = validation.validator(self.schema)
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
        return validation.issues(self._validator, parameters)

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
                    return path, f"key {jsonpaths.brief(key)} is not a string"
                stack.append((child, jsonpaths.join(path, key), depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
    return None
