"""rdma / uverbs: the allocated RDMA device's character devices.

In shared mode (the kernel default, `rdma system set netns shared`) every network
namespace sees every RDMA device, so nothing moves: the container gets the device
nodes and an environment variable naming the device. In exclusive mode (NRI injection
only) the RDMA device also follows the pod's network namespace (`Prepared.pod_rdma`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.contract import naming
from dradriver.contract.hookspecs import (
    AttrValue,
    Device,
    DeviceRequest,
    HandlerContext,
    Prepared,
    Validated,
)
from dradriver.kit import hostif, rdma, sysfs

KIND = "uverbs"


def discover(context: HandlerContext) -> list[Device]:
    """Every RDMA device with a uverbs node, as `rdma-<name>`."""
    fs = sysfs.Sysfs(context.sysfs_root)
    primary = hostif.primary_interfaces()
    devices = []
    for ibdev in fs.rdma_devices():
        dev = rdma.read(fs, ibdev)
        if dev.uverbs is None:
            continue
        attrs: dict[str, AttrValue] = {
            "type": "rdma",
            "kind": KIND,
            "rdmaDevice": ibdev,
            "uverbs": dev.uverbs,
            "roce": rdma.roce_capable(context, dev, primary),
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


class UverbsHandler:
    """Gives the container the allocated RDMA device's uverbs (and rdma_cm, umad) nodes."""

    type = "rdma"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """kind and netnsMode."""
        return rdma.SCHEMA

    def validate(self, req: DeviceRequest) -> Validated:
        """RDMA device allocated, a netns mode the node and the injection mode allow,
        character devices present."""
        exclusive = rdma.check_mode(req, req.config, "$.rdma")
        rdma.edits(req, rdma.allocated(req))
        return Validated(pod_rdma=exclusive)

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Nothing changes on the host: the edits are the whole work (in exclusive mode
        the device moves into the pod's namespace with the sandbox)."""
        dev = rdma.allocated(req)
        exclusive = rdma.check_mode(req, req.config, "$.rdma")
        return Prepared(
            edits=rdma.edits(req, dev), undo={}, pod_rdma=(dev.name,) if exclusive else ()
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Nothing to undo: an exclusive device comes back with the sandbox's stop."""
