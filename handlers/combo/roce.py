"""combo / roce: an RDMA device and its own Ethernet netdev, in one CDI device.

The netdev is the one the RDMA device's port is bound to (found in sysfs), never a
stand-in: RoCE traffic needs the GIDs of that netdev inside the pod. If handing over
the netdev fails, the RDMA half is rolled back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.errors import ConfigError, DeviceError
from dradriver.hookspecs import DeviceRequest, Prepared, Validated
from handlers import sysfs
from handlers.netdev import claimed, common, hostdevice
from handlers.rdma import uverbs

KIND = "roce"


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
                "rdma": uverbs.SCHEMA,
                "netdev": common.schema({}, drop=["kind"]),
            },
            "additionalProperties": False,
        }

    def _parts(self, req: DeviceRequest) -> tuple[Any, str, common.NetConfig]:
        dev = uverbs.rdma_device(req)
        uverbs.check_mode(req.config.get("rdma", {}), "$.combo.rdma")
        if dev.link_layer != "Ethernet" or not dev.netdev:
            raise ConfigError(
                f"RDMA device {dev.name} is not RoCE (link layer "
                f"{dev.link_layer}, netdev {dev.netdev or 'none'}); request the "
                "roce-devices class",
                "$.combo.kind",
            )
        reason = hostdevice.offered(
            req.context, dev.netdev, sysfs.default_route_interfaces(hostdevice.PROC)
        )
        if reason is not None:
            raise DeviceError(
                f"netdev {dev.netdev} of RDMA device {dev.name} cannot be handed to a pod: {reason}"
            )
        return dev, dev.netdev, common.NetConfig.parse(req.config.get("netdev", {}))

    def validate(self, req: DeviceRequest) -> Validated:
        """RoCE device, shared mode, netdev allowed, character devices present."""
        dev, _, cfg = self._parts(req)
        uverbs.edits(req, dev)
        return cfg.validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """RDMA edits first, then claim the netdev; undo the RDMA half if that fails."""
        dev, ifname, cfg = self._parts(req)
        rdma = uverbs.UverbsHandler()
        rdma_edits = uverbs.edits(req, dev)  # the RDMA half (shared mode: edits only)
        try:
            undo, network_data = claimed.claim(
                lambda u: req.journal({"rdma": {}, "netdev": u}), ifname, cfg
            )
        except Exception:
            rdma.unprepare({})
            raise
        edits = {**rdma_edits, **common.net_devices_edit(ifname, cfg.interface_name)}
        return Prepared(edits=edits, undo={"rdma": {}, "netdev": undo}, network_data=network_data)

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Give the netdev back, then release the RDMA half."""
        if undo.get("netdev"):
            claimed.release(undo["netdev"])
        uverbs.UverbsHandler().unprepare(undo.get("rdma") or {})
