"""Calling handlers in-process exactly as prepare.py does (schema defaults, validate, prepare)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dradriver.handlers.netdev.virtual import VIRTUAL_DEVICE, VIRTUAL_KIND

from dradriver.contract import naming
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import (
    ClaimRef,
    Device,
    DeviceRequest,
    Handler,
    HandlerContext,
    Prepared,
    Validated,
)
from dradriver.contract.registry import HandlerRegistry

REGISTRY = HandlerRegistry()
SCHEMA = ConfigSchema(REGISTRY, "dra.example.com")


def virtual_device(name: str = VIRTUAL_DEVICE) -> Device:
    """The virtual device as a handler sees it (shared, or one of its fallback shares)."""
    return Device(name, {"type": "netdev", "kind": VIRTUAL_KIND})


# The ranges handler tests may give claims addresses from (--claim-address-ranges).
TEST_ADDRESS_RANGES = (
    "10.0.0.0/8",
    "fd00::/8",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "2001:db8::/32",
)


def context(**kw: Any) -> HandlerContext:
    kw.setdefault("sysfs_root", Path("/sys"))
    kw.setdefault("claim_address_ranges", TEST_ADDRESS_RANGES)
    return HandlerContext(driver_name="dra.example.com", node_name="node-a", **kw)


def request(
    params: Mapping[str, Any],
    *,
    device: Device | None = None,
    ctx: HandlerContext | None = None,
    claim_uid: str | None = None,
    journal: Callable[[Mapping[str, Any]], None] | None = None,
    consumed: Mapping[str, str] | None = None,
) -> tuple[Handler, DeviceRequest]:
    """The handler and request prepare.py would build for one allocated device
    (`consumed`: what the scheduler gave it of the device's capacities)."""
    device = device or virtual_device("netdev-virtual")
    resolved = SCHEMA.resolve(params, device)
    uid = claim_uid or str(uuid.uuid4())
    share = str(uuid.uuid4()) if device.name == "netdev-virtual" else None
    req = DeviceRequest(
        claim=ClaimRef("default", "c", uid),
        request="nic",
        pool="node-a",
        device=device.name,
        share_id=share,
        key=naming.device_key("nic", device.name, share),
        kind=resolved.kind,
        config=resolved.config,
        published=device,
        context=ctx or context(),
        consumed=consumed or {},
    )
    if journal is not None:
        req = DeviceRequest(**{**req.__dict__, "journal": journal})
    return REGISTRY.get(resolved.type, resolved.kind), req


def prepare(params: Mapping[str, Any], **kw: Any) -> tuple[Handler, Validated, Prepared]:
    """Validate then prepare, as prepare.py does."""
    handler, req = request(params, **kw)
    validated = handler.validate(req)
    return handler, validated, handler.prepare(req)


def net_device(prepared: Prepared) -> tuple[str, str]:
    """(host name, container name) of the single netDevices edit."""
    [nd] = prepared.edits["netDevices"]
    return nd["hostInterfaceName"], nd["name"]
