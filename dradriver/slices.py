"""ResourceSlice building (pure): device JSON, API limits, splitting, change detection."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dradriver.hookspecs import ATTR_KIND, ATTR_TYPE, VIRTUAL_KIND, Capacity, Device, Version
from dradriver.log import event

log = logging.getLogger(__name__)

API_VERSION = "resource.k8s.io/v1"
VIRTUAL_DEVICE = "netdev-virtual"
SLOTS = "slots"
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_ATTRIBUTE = 64
_VIRTUAL_RE = re.compile(rf"^{VIRTUAL_DEVICE}(-\d+)?$")


def virtual_devices(slots: int, fallback: bool) -> list[Device]:
    """The virtual device: one shareable device with `slots`, or `slots` plain devices."""
    attrs: dict[str, Any] = {ATTR_TYPE: "netdev", ATTR_KIND: VIRTUAL_KIND}
    if slots <= 0:
        return []
    if fallback:
        return [Device(f"{VIRTUAL_DEVICE}-{i}", attrs) for i in range(slots)]
    return [
        Device(
            VIRTUAL_DEVICE,
            attrs,
            capacity={SLOTS: Capacity(str(slots), default="1")},
            allow_multiple_allocations=True,
        )
    ]


def is_virtual_device(name: str) -> bool:
    """Whether a device name is the virtual device (shared or one of its fallbacks)."""
    return bool(_VIRTUAL_RE.match(name))


def virtual_device(name: str) -> Device:
    """The published form of a virtual device name (either mode)."""
    return Device(name, {ATTR_TYPE: "netdev", ATTR_KIND: VIRTUAL_KIND})


def device_json(device: Device) -> dict[str, Any]:
    """One device in resource.k8s.io/v1 form, trimmed to the API's limits."""
    attributes: dict[str, Any] = {}
    room = MAX_ATTRIBUTES_AND_CAPACITIES - len(device.capacity)
    for name, value in device.attributes.items():  # in the handler's order of importance
        if len(attributes) >= room:
            event(
                log,
                logging.WARNING,
                "attribute dropped: device has too many",
                device=device.name,
                attribute=name,
            )
            continue
        attributes[name] = _attribute(device.name, name, value)
    out: dict[str, Any] = {"name": device.name, "attributes": attributes}
    if device.capacity:
        out["capacity"] = {name: _capacity(c) for name, c in sorted(device.capacity.items())}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    return out


def _attribute(device: str, name: str, value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.value}
    text = str(value)
    if len(text) > MAX_STRING_ATTRIBUTE:
        event(
            log,
            logging.WARNING,
            "attribute truncated to 64 characters",
            device=device,
            attribute=name,
        )
        text = text[:MAX_STRING_ATTRIBUTE]
    return {"string": text}


def _capacity(capacity: Capacity) -> dict[str, Any]:
    out: dict[str, Any] = {"value": capacity.value}
    if capacity.default is not None:
        out["requestPolicy"] = {
            "default": capacity.default,
            "validRange": {"min": capacity.default, "step": capacity.default},
        }
    return out


def slice_name(driver: str, node_name: str, index: int) -> str:
    """Deterministic slice name for index `index` of this node's pool."""
    name = f"{node_name}-{driver.replace('.', '-')}-{index}"
    if len(name) > 253:
        digest = hashlib.sha256(f"{node_name}/{driver}".encode()).hexdigest()[:10]
        name = f"{node_name[:200]}-{digest}-{index}"
    return name


def build_slices(
    driver: str, node_name: str, node_uid: str, devices: Sequence[Device], generation: int
) -> list[dict[str, Any]]:
    """The slices of this node's pool: devices split 128 per slice, at least one slice."""
    rendered = [device_json(d) for d in sorted(devices, key=lambda d: d.name)]
    chunks = [
        rendered[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(rendered), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node_name,
        "uid": node_uid,
        "controller": True,
    }
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(driver, node_name, i), "ownerReferences": [owner]},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {
                    "name": node_name,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "devices": chunk,
            },
        }
        for i, chunk in enumerate(chunks)
    ]


def content(slice_: Mapping[str, Any]) -> Any:
    """What makes two slices equal for publishing: spec without the pool generation."""
    spec = dict(slice_.get("spec") or {})
    spec["pool"] = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    return _strip_empty(spec)


def _strip_empty(value: Any) -> Any:
    """Drop empty maps and lists, which the API server omits when it stores an object."""
    if isinstance(value, dict):
        items = {k: _strip_empty(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v not in ({}, [], None)}
    if isinstance(value, list):
        return [_strip_empty(v) for v in value]
    return value


def dropped_fields(sent: Iterable[Mapping[str, Any]], stored: Mapping[str, Any]) -> list[str]:
    """Device fields the API server silently dropped (a feature gate off), as paths."""
    kept = {d["name"]: d for d in (stored.get("spec") or {}).get("devices") or []}
    dropped = []
    for device in sent:
        back = kept.get(device["name"], {})
        if device.get("allowMultipleAllocations") and not back.get("allowMultipleAllocations"):
            dropped.append(f"{device['name']}.allowMultipleAllocations")
        for cap, value in (device.get("capacity") or {}).items():
            if "requestPolicy" in value and "requestPolicy" not in (back.get("capacity") or {}).get(
                cap, {}
            ):
                dropped.append(f"{device['name']}.capacity.{cap}.requestPolicy")
            if cap not in (back.get("capacity") or {}):
                dropped.append(f"{device['name']}.capacity.{cap}")
    return dropped
