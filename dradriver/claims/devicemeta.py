"""A prepared claim's device metadata files (state/metadata.py), from its record: each
request's devices with the attributes they are published with and the network data the
claim's status carries. Written before the record's commit, rewritten (generation + 1)
whenever the claim is prepared again (a new sandbox in NRI mode, a reboot), restored
from the record when missing, removed with the claim."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dradriver.apiserver.slices import attribute_json
from dradriver.contract.hookspecs import Device
from dradriver.state import metadata
from dradriver.state.records import ClaimRecord, DeviceRecord

Lookup = Callable[[str], Device | None]  # a published device by name (the inventory)


def _device(
    driver: str, device: DeviceRecord, published: Device | None, consumed: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"driver": driver, "pool": device.pool, "name": device.device}
    if published is not None and published.attributes:
        out["attributes"] = {
            name: attribute_json(device.device, name, value)
            for name, value in published.attributes.items()
        }
    nd = {k: v for k, v in (device.network_data or {}).items() if v}
    if nd:
        out["networkData"] = nd
    if consumed:  # what the request takes of the device's capacities (its bandwidth)
        out["consumedCapacity"] = consumed
    return out


def requests(record: ClaimRecord) -> dict[str, list[DeviceRecord]]:
    """The record's devices by request (as allocated: `req/sub` for a subrequest)."""
    out: dict[str, list[DeviceRecord]] = {}
    for device in record.devices:
        out.setdefault(device.request, []).append(device)
    return out


def mounts(root: Path, driver: str, record: ClaimRecord) -> dict[str, dict[str, Any]]:
    """The CDI mount of each request's file, by the key of the request's first device
    (one mount per request: every device of it reaches the same containers)."""
    return {
        devices[0].key: metadata.mount(
            metadata.host_path(root, record.claim, request),
            metadata.container_path(driver, record.claim, record.pod_claim_name, request),
        )
        for request, devices in requests(record).items()
    }


def write(root: Path, driver: str, record: ClaimRecord, lookup: Lookup) -> None:
    """Write every request's file of the record, each a generation after the one there."""
    for request, devices in requests(record).items():
        path = metadata.host_path(root, record.claim, request)
        doc = metadata.document(
            record.claim,
            record.pod_claim_name,
            metadata.generation(path) + 1,
            request,
            [_device(driver, d, lookup(d.device), record.consumed.get(d.key, {})) for d in devices],
        )
        metadata.write(path, doc)


def missing(root: Path, record: ClaimRecord) -> bool:
    """Whether a file of the record's requests is not there."""
    return any(
        not metadata.host_path(root, record.claim, request).is_file()
        for request in requests(record)
    )
