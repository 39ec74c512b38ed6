"""ResourceSlice building (pure): device JSON, API limits, splitting, change detection."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dradriver.base.log import event
from dradriver.contract.hookspecs import Capacity, Device, Version

log = logging.getLogger(__name__)

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_TAINTS = 64  # per slice, once any device of it carries a taint
TAINT_EFFECTS = ("NoSchedule", "NoExecute")
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_ATTRIBUTE = 64
_SHARE_RE = re.compile(r"(?P<base>.+)-(?P<index>[0-9]+)")  # fullmatch


def share_count(device: Device) -> int | None:
    """How many single-allocation devices stand for a shareable device: its one capacity
    that every request takes one unit of, divided by that unit (None if it has none).
    Its other capacities (bandwidth) are then not published, nor consumed."""
    counts = [c for c in device.capacity.values() if c.per_request]
    if not device.allow_multiple_allocations or len(counts) != 1:
        return None
    [capacity] = counts
    if capacity.default is None or not (capacity.value + capacity.default).isdigit():
        return None
    return int(capacity.value) // max(1, int(capacity.default))


def single_allocation(devices: Iterable[Device]) -> list[Device]:
    """Devices as published where the API server lacks consumable capacity (feature gate
    DRAConsumableCapacity off): each shareable device becomes `<name>-<i>` devices."""
    out: list[Device] = []
    for device in devices:
        count = share_count(device)
        if count is None:
            out.append(device)
        else:
            out.extend(Device(f"{device.name}-{i}", device.attributes) for i in range(count))
    return out


def share_of(name: str, devices: Mapping[str, Device]) -> Device | None:
    """The published form of `<base>-<i>`, one single-allocation share of a shareable
    device in `devices` (by name), whichever way the node publishes it right now."""
    match = _SHARE_RE.fullmatch(name)
    base = devices.get(match["base"]) if match else None
    count = share_count(base) if base else None
    if base is None or count is None or int(match["index"]) >= count:  # type: ignore[index]
        return None
    return Device(name, base.attributes)


def taint_key(driver: str) -> str:
    """The taint an unhealthy device carries: `<driver>/unhealthy`."""
    return f"{driver}/unhealthy"


def device_json(device: Device, taint: tuple[str, str] | None = None) -> dict[str, Any]:
    """One device in resource.k8s.io/v1 form, trimmed to the API's limits; an unhealthy
    one carries `taint` (key, effect) when given."""
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
        attributes[name] = attribute_json(device.name, name, value)
    out: dict[str, Any] = {"name": device.name, "attributes": attributes}
    if device.capacity:
        out["capacity"] = {name: _capacity(c) for name, c in sorted(device.capacity.items())}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if taint is not None and not device.healthy:
        out["taints"] = [{"key": taint[0], "effect": taint[1]}]
    return out


def attribute_json(device: str, name: str, value: object) -> dict[str, Any]:
    """One attribute value in resource.k8s.io/v1 form (a string cut to the API's limit)."""
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
        minimum, step = capacity.minimum or capacity.default, capacity.step or capacity.default
        out["requestPolicy"] = {
            "default": capacity.default,
            "validRange": {"min": minimum, "step": step},
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
    driver: str,
    node_name: str,
    node_uid: str,
    devices: Sequence[Device],
    generation: int,
    taint_effect: str | None = None,
) -> list[dict[str, Any]]:
    """The slices of this node's pool, at least one: devices split 128 per slice, or 64
    once a device carries a taint (unhealthy devices do, with `taint_effect`)."""
    taint = (taint_key(driver), taint_effect) if taint_effect else None
    rendered = [device_json(d, taint) for d in sorted(devices, key=lambda d: d.name)]
    per_slice = MAX_DEVICES_PER_SLICE
    if any("taints" in d for d in rendered):
        per_slice = MAX_DEVICES_WITH_TAINTS
    chunks = [rendered[i : i + per_slice] for i in range(0, len(rendered), per_slice)] or [[]]
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
    """What makes two slices equal for publishing: spec without the pool generation and
    the times the API server stamps on taints."""
    spec = dict(slice_.get("spec") or {})
    spec["pool"] = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    spec["devices"] = [_without_times(d) for d in spec.get("devices") or []]
    return _strip_empty(spec)


def _without_times(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """A device with its taints' timeAdded left out."""
    if not device.get("taints"):
        return device
    taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in device["taints"]]
    return {**device, "taints": taints}


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


def keep_taint_times(
    desired: Iterable[Mapping[str, Any]], stored: Iterable[Mapping[str, Any]]
) -> None:
    """Give each taint of `desired` slices the timeAdded the API server stamped on the same
    taint (device, key, effect) in `stored` slices, in place: a republish (another device
    changed) must not restart a NoExecute taint's tolerationSeconds."""
    stamped = {
        (d["name"], t.get("key"), t.get("effect")): t["timeAdded"]
        for s in stored
        for d in (s.get("spec") or {}).get("devices") or []
        for t in d.get("taints") or []
        if t.get("timeAdded")
    }
    for s in desired:
        for d in s["spec"]["devices"]:
            for t in d.get("taints") or []:
                when = stamped.get((d["name"], t.get("key"), t.get("effect")))
                if when:
                    t["timeAdded"] = when


def dropped_taints(sent: Iterable[Mapping[str, Any]], stored: Mapping[str, Any]) -> list[str]:
    """Devices whose taints the API server silently dropped (DRADeviceTaints off)."""
    kept = {d["name"]: d for d in (stored.get("spec") or {}).get("devices") or []}
    return [
        d["name"] for d in sent if d.get("taints") and not kept.get(d["name"], {}).get("taints")
    ]
