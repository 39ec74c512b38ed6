"""veth: a pair; one end goes to the container, the other stays on the host, where the
claim's share of the virtual device's bandwidth is enforced (dradriver.kit.shaping)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.base.errors import ConfigError
from dradriver.contract.hookspecs import DeviceRequest, Prepared
from dradriver.kernel import netlink
from dradriver.kit import links, netconfig, shaping

from .virtual import VirtualLinkHandler, require_allowed_parent


class VethHandler(VirtualLinkHandler):
    """Creates a veth pair; the host end may join an allowed bridge (`bridge`)."""

    kinds = ("veth",)
    unlimited = ""

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields plus the optional bridge for the host end."""
        bridge = dict(netconfig.PARENT, description="bridge the host end joins (optional)")
        return netconfig.schema({"bridge": bridge})

    def check(self, req: DeviceRequest) -> None:
        """A named bridge must be allowed, exist and be a bridge."""
        if "bridge" in req.config:
            link = require_allowed_parent(req, req.config["bridge"], "bridge")
            if link.kind != "bridge":
                raise ConfigError(
                    f"interface {link.name} is not a bridge", f"{netconfig.NETDEV_PATH}.bridge"
                )

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Create the pair, tag both ends, configure the container end, attach the host end."""
        cfg = netconfig.NetConfig.parse(req.config)
        inner, outer = links.host_name(req, "c"), links.host_name(req, "h")
        alias, rate = links.tag(req), shaping.allocated(req)
        ifb: tuple[str, ...] = (shaping.ifb_name(req),) if rate else ()
        created = links.CreatedLinks((outer, *ifb), alias, (inner,))  # one end takes both
        req.journal(created.to_json())  # the names are known before the pair exists
        with netlink.rollback() as undo:
            link = links.create(req, inner, "veth", peer=outer)
            undo.append(lambda: netlink.delete(outer))
            host_end = netlink.require(outer, "veth host end")
            netlink.set_link(host_end, f"tag {outer}", ifalias=alias)
            if rate:
                ifb_end = shaping.create_ifb(req)
                undo.append(lambda: netlink.delete(ifb_end.name))
                shaping.limit(req, host_end, ifb_end, rate)
            mac = netconfig.configure(link, cfg, alias, addresses=links.on_host(req))
            if "bridge" in req.config:
                bridge = require_allowed_parent(req, req.config["bridge"], "bridge")
                netlink.set_link(
                    host_end, f"attach {outer} to {bridge.name}", master=bridge.index, state="up"
                )
        return Prepared(
            edits=links.net_devices_edit(inner, cfg.interface_name),
            undo=created.to_json(),
            network_data=cfg.network_data(mac),
            created_interfaces=(inner, outer, *ifb),
            host_interfaces=(outer,),  # (an ifb gone loses the limit, not the pod's NIC)
            pod_interfaces=(netconfig.pod_interface(inner, cfg),),
        )
