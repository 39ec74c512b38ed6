"""combo / roce: an RDMA device and its own Ethernet netdev, in one CDI device.

The netdev is the one the RDMA device's port is bound to (found in sysfs), never a
stand-in: RoCE traffic needs the GIDs of that netdev inside the pod. In shared netns
mode the RDMA half changes nothing on the host, so only the netdev is undone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dradriver.base.errors import ConfigError, DeviceError
from dradriver.contract.hookspecs import DeviceRequest, Prepared, Validated
from dradriver.kit import hostif, links, netconfig, rdma

KIND = "roce"


@dataclass(frozen=True)
class RoceUndo:
    """Undo payload of a RoCE device: its netdev once claimed (the RDMA half changes
    nothing on the host; its key is kept, empty, as every format has written it)."""

    netdev: hostif.ClaimedInterface | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored in the allocation record."""
        return {"rdma": {}, "netdev": self.netdev.to_json() if self.netdev else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoceUndo:
        """Read a stored payload (unknown keys ignored)."""
        netdev = data.get("netdev")
        return cls(hostif.ClaimedInterface.from_json(netdev) if netdev else None)


class RoceHandler:
    """Hands the allocated RoCE device's uverbs nodes and its netdev to the container."""

    type = "combo"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """kind, rdma (as for type rdma) and netdev (the common netdev fields)."""
        return {
            "type": "object",
            "properties": {
                "kind": {"type": "string"},
                "rdma": rdma.SCHEMA,
                "netdev": netconfig.schema({}, drop=["kind", "ipam"], keeps_addresses=True),
            },
            "additionalProperties": False,
        }

    def _parts(self, req: DeviceRequest) -> tuple[rdma.RdmaDevice, str, netconfig.NetConfig]:
        """The RDMA device, its netdev and the netdev config, checked against the node."""
        dev = rdma.allocated(req)
        rdma.check_mode(req, req.config.get("rdma", {}), "$.combo.rdma")
        if dev.link_layer != "Ethernet" or not dev.netdev:
            raise ConfigError(
                f"RDMA device {dev.name} is not RoCE (link layer "
                f"{dev.link_layer}, netdev {dev.netdev or 'none'}); request the "
                "roce-devices class",
                "$.combo.kind",
            )
        reason = hostif.refusal(req.context, dev.netdev, hostif.primary_interfaces())
        if reason is not None:
            raise DeviceError(
                f"netdev {dev.netdev} of RDMA device {dev.name} cannot be handed to a pod: {reason}"
            )
        cfg = hostif.checked(req, dev.netdev, req.config.get("netdev", {}), "$.combo.netdev")
        return dev, dev.netdev, cfg

    def validate(self, req: DeviceRequest) -> Validated:
        """RoCE device, a netns mode the node allows, netdev allowed, character devices
        present."""
        dev, _, cfg = self._parts(req)
        rdma.edits(req, dev)
        return cfg.validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """RDMA edits (nothing changes on the host for them), then claim the netdev."""
        dev, ifname, cfg = self._parts(req)
        rdma_edits = rdma.edits(req, dev)
        exclusive = rdma.check_mode(req, req.config.get("rdma", {}), "$.combo.rdma")
        claimed, network_data = hostif.claim(
            req.journal,
            ifname,
            cfg,
            wrap=lambda c: RoceUndo(c).to_json(),
            on_host=links.on_host(req),
        )
        edits = {**rdma_edits, **links.net_devices_edit(ifname, cfg.interface_name)}
        return Prepared(
            edits=edits,
            undo=RoceUndo(claimed).to_json(),
            network_data=network_data,
            pod_interfaces=(netconfig.pod_interface(ifname, cfg, network_data.ips, returns=True),),
            pod_rdma=(dev.name,) if exclusive else (),
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Give the netdev back."""
        netdev = RoceUndo.from_json(undo).netdev
        if netdev is not None:
            hostif.release(netdev)
