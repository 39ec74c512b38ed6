"""RDMA devices from /sys/class/infiniband: uverbs node, GUID, link layer, port state, netdev."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dradriver import naming
from dradriver.hookspecs import AttrValue, Device, HandlerContext
from handlers import sysfs
from handlers.netdev import hostdevice

KIND = "uverbs"
_STATE = re.compile(r"^\d+:\s*(\w+)$")


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
    match = _STATE.match(state)
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
    """Whether combo/roce may hand this device and its netdev to a pod."""
    return (
        dev.link_layer == "Ethernet"
        and dev.netdev is not None
        and hostdevice.offered(context, dev.netdev, primary) is None
    )


def discover(context: HandlerContext) -> list[Device]:
    """Every RDMA device with a uverbs node, as `rdma-<name>`."""
    fs = sysfs.Sysfs(context.sysfs_root)
    primary = sysfs.default_route_interfaces(hostdevice.PROC)
    devices = []
    for ibdev in fs.rdma_devices():
        dev = read(fs, ibdev)
        if dev.uverbs is None:
            continue
        attrs: dict[str, AttrValue] = {
            "type": "rdma",
            "kind": KIND,
            "rdmaDevice": ibdev,
            "uverbs": dev.uverbs,
            "roce": roce_capable(context, dev, primary),
        }
        for name, value in (
            ("nodeGUID", dev.node_guid),
            ("linkLayer", dev.link_layer),
            ("portState", dev.port_state),
            ("netdev", dev.netdev),
            ("pciAddress", dev.pci),
        ):
            if value:
                attrs[name] = value
        if dev.pci:
            numa = fs.pci_numa_node(dev.pci)
            if numa is not None:
                attrs["numaNode"] = numa
        healthy = dev.port_state in (None, "ACTIVE")
        devices.append(
            Device(
                naming.published_device_name("rdma", ibdev),
                attrs,
                healthy=healthy,
                health_message="" if healthy else f"port 1 is {dev.port_state}",
            )
        )
    return devices


def char_devices(context: HandlerContext, dev: RdmaDevice) -> list[Path]:
    """Host paths of the character devices a workload needs for this RDMA device."""
    ib = context.dev_root / "infiniband"
    paths = [ib / dev.uverbs] if dev.uverbs else []
    paths += [ib / "rdma_cm"]
    paths += [ib / u for u in dev.umads]
    return paths
