"""Validate CDI specs like the upstream loader: the v1.1.0 JSON schema plus its strict rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

_DIR = Path(__file__).resolve().parent.parent / "data" / "cdi-schema-v1.1.0"
_SCHEMA = json.loads((_DIR / "schema.json").read_text())
_DEFS = json.loads((_DIR / "defs.json").read_text())
_REGISTRY = Registry().with_resource(
    "defs.json", Resource.from_contents(_DEFS, default_specification=DRAFT7)
)
_VALIDATOR = Draft7Validator(_SCHEMA, registry=_REGISTRY)

_NAME_PART = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
# Fields the Go types of CDI v1.1.0 know; anything else fails a strict decode.
_SPEC_FIELDS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_FIELDS = {"name", "annotations", "containerEdits"}
_EDIT_FIELDS = {"env", "deviceNodes", "hooks", "mounts", "netDevices", "intelRdt", "additionalGids"}
_NODE_FIELDS = {
    "path",
    "hostPath",
    "type",
    "major",
    "minor",
    "fileMode",
    "permissions",
    "uid",
    "gid",
}
_NETDEV_FIELDS = {"hostInterfaceName", "name"}


def problems(spec: Any) -> list[str]:
    """Every reason the upstream v1.1.0 loader would reject `spec` (empty if none)."""
    found = [f"schema: {e.json_path}: {e.message}" for e in _VALIDATOR.iter_errors(spec)]
    if not isinstance(spec, dict):
        return found or ["not an object"]
    found += [f"unknown field {k}" for k in set(spec) - _SPEC_FIELDS]
    if spec.get("cdiVersion") != "1.1.0":
        found.append(f"cdiVersion {spec.get('cdiVersion')} cannot hold netDevices")
    vendor, _, cls = str(spec.get("kind", "")).partition("/")
    if not (_NAME_PART.match(vendor) and _NAME_PART.match(cls)) or len(cls) > 63:
        found.append(f"bad kind {spec.get('kind')}")
    names = set()
    for device in spec.get("devices") or []:
        found += [f"unknown device field {k}" for k in set(device) - _DEVICE_FIELDS]
        name = device.get("name", "")
        if not _DEVICE_NAME.match(name):
            found.append(f"bad device name {name!r}")
        if name in names:
            found.append(f"duplicate device name {name}")
        names.add(name)
        edits = device.get("containerEdits") or {}
        if not any(edits.values()):
            found.append(f"device {name} has empty containerEdits")
        found += _edit_problems(name, edits)
    return found


def _edit_problems(name: str, edits: dict[str, Any]) -> list[str]:
    found = [f"device {name}: unknown edit field {k}" for k in set(edits) - _EDIT_FIELDS]
    hosts, inner = set(), set()
    for nd in edits.get("netDevices") or []:
        found += [f"device {name}: unknown netDevice field {k}" for k in set(nd) - _NETDEV_FIELDS]
        if not nd.get("hostInterfaceName") or not nd.get("name"):
            found.append(f"device {name}: netDevice with empty name")
        if nd.get("hostInterfaceName") in hosts or nd.get("name") in inner:
            found.append(f"device {name}: duplicate netDevice")
        hosts.add(nd.get("hostInterfaceName"))
        inner.add(nd.get("name"))
    for node in edits.get("deviceNodes") or []:
        found += [f"device {name}: unknown deviceNode field {k}" for k in set(node) - _NODE_FIELDS]
        if not str(node.get("path", "")).startswith("/"):
            found.append(f"device {name}: deviceNode path must be absolute")
    for env in edits.get("env") or []:
        if not isinstance(env, str) or "=" not in env:
            found.append(f"device {name}: env entry {env!r} is not KEY=VALUE")
    return found
