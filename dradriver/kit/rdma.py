"""RDMA devices in sysfs and the CDI edits that hand one to a container.

A device is read from /sys/class/infiniband: its uverbs node, GUID, port 1's link layer
and state, and the Ethernet netdev behind it (RoCE). In shared netns mode (the kernel
default) every network namespace sees every RDMA device, so nothing moves: the
container gets the character devices and variables naming the device. A claim may ask
for exclusive mode (`netnsMode: exclusive`) when the node's RDMA subsystem is in
exclusive netns mode and the claim is prepared in NRI injection mode: the RDMA device
then follows the pod's network namespace (the driver moves it at sandbox creation and
back when the sandbox stops), and only that pod sees it.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dradriver.base.errors import ConfigError, DeviceError
from dradriver.contract.hookspecs import NEEDS_NRI, NRI, DeviceRequest, HandlerContext
from dradriver.kernel import netlink
from dradriver.kit import hostif, sysfs

ENV_DEVICE = "DRA_RDMA_DEVICE"
_STATE = re.compile(r"[0-9]+:[ \t]*([A-Za-z0-9_]+)")  # fullmatch: "4: ACTIVE"

# The `rdma` object of a config: type rdma, and combo/roce's RDMA half.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string"},
        "netnsMode": {
            "enum": ["shared", "exclusive"],
            "default": "shared",
            "description": "RDMA netns mode: shared (every namespace sees the device) or "
            "exclusive (the device follows the pod's network namespace; NRI injection "
            "mode, on a node whose RDMA subsystem is in exclusive netns mode)",
        },
    },
    "additionalProperties": False,
}


@dataclass(frozen=True)
class RdmaDevice:
    """What the driver knows about one RDMA device."""

    name: str
    uverbs: str | None
    node_guid: str | None
    link_layer: str | None
    port_state: str | None
    netdev: str | None
    pci: str | None
    umads: tuple[str, ...]


def read(fs: sysfs.Sysfs, ibdev: str) -> RdmaDevice:
    """Read one RDMA device (port 1 describes link layer, state and RoCE netdev)."""
    state = fs.read("class", "infiniband", ibdev, "ports", "1", "state") or ""
    match = _STATE.fullmatch(state)
    verbs = _by_ibdev(fs, "infiniband_verbs", ibdev)
    return RdmaDevice(
        name=ibdev,
        uverbs=verbs[0] if verbs else None,
        node_guid=fs.read("class", "infiniband", ibdev, "node_guid"),
        link_layer=fs.read("class", "infiniband", ibdev, "ports", "1", "link_layer"),
        port_state=match[1] if match else (state or None),
        netdev=fs.rdma_netdev(ibdev),
        pci=fs.link_name("class", "infiniband", ibdev, "device"),
        umads=tuple(_by_ibdev(fs, "infiniband_mad", ibdev)),
    )


def _by_ibdev(fs: sysfs.Sysfs, cls: str, ibdev: str) -> list[str]:
    """Entries of class/<cls> (uverbsN, umadN) whose `ibdev` file names this device."""
    return [e for e in fs.listdir("class", cls) if fs.read("class", cls, e, "ibdev") == ibdev]


def roce_capable(context: HandlerContext, dev: RdmaDevice, primary: set[str]) -> bool:
    """Whether this device and its Ethernet netdev may be handed to a pod (RoCE)."""
    return (
        dev.link_layer == "Ethernet"
        and dev.netdev is not None
        and hostif.refusal(context, dev.netdev, primary) is None
    )


def char_devices(context: HandlerContext, dev: RdmaDevice) -> list[Path]:
    """Host paths of the character devices a workload needs for this RDMA device."""
    ib = context.dev_root / "infiniband"
    paths = [ib / dev.uverbs] if dev.uverbs else []
    paths += [ib / "rdma_cm"]
    paths += [ib / u for u in dev.umads]
    return paths


def allocated(req: DeviceRequest) -> RdmaDevice:
    """The allocated RDMA device as it is in sysfs now."""
    published = req.published
    if published is None or published.type != "rdma":
        raise ConfigError(
            f"an RDMA config needs an RDMA device, but the allocated device "
            f"{req.device} is {published.type if published else 'unknown'}; "
            "request the rdma-devices class",
            "$.type",
        )
    dev = read(sysfs.Sysfs(req.context.sysfs_root), str(published.attributes["rdmaDevice"]))
    if dev.uverbs is None:
        raise DeviceError(f"RDMA device {dev.name} has no uverbs device (module ib_uverbs?)")
    return dev


def check_mode(req: DeviceRequest, config: Mapping[str, Any], path: str) -> bool:
    """Whether the device goes to the pod in exclusive netns mode; refuse that mode
    outside NRI injection mode and on a node whose RDMA subsystem shares devices."""
    if config.get("netnsMode", "shared") != "exclusive":
        return False
    if req.injection != NRI:
        raise ConfigError(f"exclusive {NEEDS_NRI}", f"{path}.netnsMode")
    if not netlink.rdma_exclusive():
        raise ConfigError(
            "exclusive needs the node's RDMA subsystem in exclusive netns mode (`rdma "
            "system set netns exclusive`, before any other namespace exists; `rdma system "
            "show netns` says shared here)",
            f"{path}.netnsMode",
        )
    return True


def edits(req: DeviceRequest, dev: RdmaDevice) -> dict[str, Any]:
    """CDI edits: the device's character devices and the variables naming it."""
    nodes = []
    for path in char_devices(req.context, dev):
        try:
            is_char = stat.S_ISCHR(path.stat().st_mode)
        except FileNotFoundError:
            is_char = False
        if not is_char:
            if path.name == "rdma_cm":
                continue  # optional: only present with rdma_ucm loaded
            raise DeviceError(f"character device {path} for RDMA device {dev.name} is missing")
        inside = f"/dev/infiniband/{path.name}"
        node: dict[str, Any] = {"path": inside}
        if str(path) != inside:
            node["hostPath"] = str(path)
        nodes.append(node)
    suffix = re.sub(r"[^A-Z0-9]", "_", req.request.upper())
    return {
        "deviceNodes": nodes,
        "env": [f"{ENV_DEVICE}={dev.name}", f"{ENV_DEVICE}_{suffix}={dev.name}"],
    }
