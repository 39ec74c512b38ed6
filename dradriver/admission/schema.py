"""The types and kinds of the assembled config schema, as the policies need them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dradriver.admission.cel import IGNORED


@dataclass(frozen=True)
class KindSpec:
    """One kind's schema: its fields (kind excluded), required ones, and if it is closed."""

    properties: Mapping[str, Mapping[str, Any]]
    required: tuple[str, ...]
    closed: bool
    rest: Mapping[str, Any]  # keywords beyond type/properties/required/additionalProperties


@dataclass(frozen=True)
class TypeSpec:
    """One type (netdev, rdma...) and its kinds."""

    name: str
    kinds: Mapping[str, KindSpec]

    @property
    def fields(self) -> list[str]:
        """Every field of any kind, in first-seen order, `kind` first."""
        out = ["kind"]
        for spec in self.kinds.values():
            out += [f for f in spec.properties if f not in out]
        return out

    @property
    def closed(self) -> bool:
        """Whether every kind refuses fields it does not list."""
        return all(spec.closed for spec in self.kinds.values())

    def groups(self, name: str) -> list[tuple[list[str], Mapping[str, Any]]]:
        """The kinds having field `name`, grouped by what its schema checks."""
        out: dict[str, tuple[list[str], Mapping[str, Any]]] = {}
        for kind, spec in self.kinds.items():
            if name in spec.properties:
                schema = spec.properties[name]
                key = json.dumps(essence(schema), sort_keys=True)
                out.setdefault(key, ([], schema))[0].append(kind)
        return list(out.values())

    def kind_sets(self) -> dict[str, list[str]]:
        """Each kind's fields, `kind` included."""
        return {kind: ["kind", *spec.properties] for kind, spec in self.kinds.items()}


def types_of(schema: Mapping[str, Any]) -> list[TypeSpec]:
    """The types and kinds of an assembled config schema (dradriver.contract.config builds it)."""
    out = []
    for name, type_schema in schema["properties"].items():
        if name == "type":
            continue
        kinds: dict[str, KindSpec] = {}
        for branch in type_schema.get("allOf", []):
            kind = branch["if"]["properties"]["kind"]["const"]
            then = dict(branch["then"])
            properties = dict(then.pop("properties", None) or {})
            properties.pop("kind", None)  # the type's kind enum checks it
            required = tuple(then.pop("required", ()))
            closed = then.pop("additionalProperties", True) is False
            then.pop("type", None)
            kinds[kind] = KindSpec(properties, required, closed, then)
        out.append(TypeSpec(name, kinds))
    return out


def essence(schema: Any) -> Any:
    """`schema` without the keywords that do not validate (description, default...)."""
    if isinstance(schema, Mapping):
        return {k: essence(v) for k, v in schema.items() if k not in IGNORED}
    if isinstance(schema, list):
        return [essence(v) for v in schema]
    return schema
