"""The shape shared by kinds that create a new virtual link for the container.

They are all served on the node's one shareable virtual device, `netdev-virtual`,
whose `slots` capacity bounds how many such interfaces the node hands out at once, and
whose `bandwidth` capacity (when the operator sets one) is what their rate limits share.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from dradriver.base.errors import ConfigError
from dradriver.contract import naming
from dradriver.contract.hookspecs import (
    Capacity,
    Device,
    DeviceRequest,
    HandlerContext,
    Prepared,
    Validated,
)
from dradriver.kernel import netlink
from dradriver.kit import links, netconfig, shaping

VIRTUAL_DEVICE = "netdev-virtual"
VIRTUAL_KIND = "virtual"  # the `kind` attribute of the virtual device
SLOTS = "slots"


def virtual_device(context: HandlerContext) -> list[Device]:
    """The node's virtual device: shareable, `virtual_slots` slots, one per request, and
    the operator's `virtual_bandwidth` (bits per second), none unless a request asks."""
    if context.virtual_slots <= 0:
        return []
    capacity = {SLOTS: Capacity(str(context.virtual_slots), default="1")}
    if context.virtual_bandwidth:
        capacity[shaping.BANDWIDTH] = shaping.capacity(context)
    return [
        Device(
            VIRTUAL_DEVICE,
            {"type": "netdev", "kind": VIRTUAL_KIND},
            capacity=capacity,
            allow_multiple_allocations=True,
        )
    ]


def require_virtual_device(req: DeviceRequest) -> None:
    """Virtual kinds must be allocated on the virtual device."""
    if req.published is None or req.published.kind != VIRTUAL_KIND:
        raise ConfigError(
            f"kind {req.kind} creates a virtual interface, but the allocated device "
            f"{req.device} is not the virtual device; request the virtual-network class",
            f"{netconfig.NETDEV_PATH}.kind",
        )


def require_allowed_parent(req: DeviceRequest, parent: str, field: str = "parent") -> netlink.Link:
    """The parent link, if the operator allows it (--virtual-parents) and it exists."""
    allowed = req.context.virtual_parents
    if not any(fnmatch.fnmatchcase(parent, pattern) for pattern in allowed):
        raise ConfigError(
            f"{parent} is not on the operator's list of parent interfaces "
            f"(--virtual-parents: {','.join(allowed) or 'empty'})",
            f"{netconfig.NETDEV_PATH}.{field}",
        )
    link = netlink.find(parent)
    if link is None:
        raise ConfigError(
            f"interface {parent} does not exist on this node", f"{netconfig.NETDEV_PATH}.{field}"
        )
    return link


class VirtualLinkHandler:
    """Creates one down, tagged link per device; the runtime moves it into the container.

    Subclasses name their `kinds`, their schema fragment and the link attributes.
    """

    type = "netdev"
    kinds: tuple[str, ...] = ()
    # Why the kind's rate cannot be limited where the pod cannot undo it ("": it can).
    unlimited = "its link has no host end to limit it on"

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields only; subclasses add theirs."""
        return netconfig.schema({})

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """Link attributes for netlink.create (parent `link` index, `mode`, ...)."""
        return {}

    def check(self, req: DeviceRequest) -> None:
        """Kind-specific validation beyond the schema (parents...)."""

    def validate(self, req: DeviceRequest) -> Validated:
        """Virtual device allocated, kind-specific checks, addresses; no kernel change."""
        require_virtual_device(req)
        if self.unlimited:
            shaping.refuse(req, self.unlimited)
        self.check(req)
        return netconfig.checked(req).validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Create, tag and configure the link; delete it again if any step fails."""
        cfg = netconfig.NetConfig.parse(req.config)
        name, alias = links.host_name(req), links.tag(req)
        created = links.CreatedLinks((name,), alias, (name,))
        req.journal(created.to_json())  # the name is known before the link exists
        with netlink.rollback() as undo:
            link = links.create(req, name, req.kind, **self.link_attrs(req))
            undo.append(lambda: netlink.delete(name))
            mac = netconfig.configure(link, cfg, alias, addresses=links.on_host(req))
        return Prepared(
            edits=links.net_devices_edit(name, cfg.interface_name),
            undo=created.to_json(),
            network_data=cfg.network_data(mac),
            created_interfaces=(name,),
            pod_interfaces=(netconfig.pod_interface(name, cfg),),
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Delete the link if it is still on the host (it dies with the pod's namespace)."""
        links.delete_own(links.CreatedLinks.from_json(undo))


class ParentedLinkHandler(VirtualLinkHandler):
    """A virtual link on an allowed `parent` in one of `modes` (macvlan, ipvlan).

    Subclasses name the link kind, its modes (the config's names, which netlink.create
    takes as they are), the default mode and any common field the kind cannot honour.
    """

    modes: tuple[str, ...] = ()
    default_mode = ""
    dropped: tuple[str, ...] = ()

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields (minus `dropped`) plus parent (required) and mode."""
        return netconfig.schema(
            {
                "parent": netconfig.PARENT,
                "mode": {"enum": list(self.modes), "default": self.default_mode},
            },
            required=["parent"],
            drop=self.dropped,
        )

    def check(self, req: DeviceRequest) -> None:
        """The parent must be allowed and exist, and the MTU not above the parent's."""
        parent = require_allowed_parent(req, req.config["parent"])
        cfg = netconfig.NetConfig.parse(req.config)
        if cfg.mac is not None:
            holder = next(  # (the driver's own links are other claims', or a leftover)
                (
                    ln.name
                    for ln in netlink.links()
                    if (ln.address or "").lower() == cfg.mac and not naming.is_host_ifname(ln.name)
                ),
                None,
            )
            if holder is not None:  # the kernel would refuse it only in the pod, unnamed
                what = "the parent" if holder == parent.name else "the node's interface"
                raise ConfigError(
                    f"{cfg.mac} is the MAC address of {what} {holder}",
                    f"{netconfig.NETDEV_PATH}.macAddress",
                )
        netconfig.check_mtu(cfg, netconfig.NETDEV_PATH, parent, parent=True)
        netconfig.check_ipv6_mtu(cfg, netconfig.NETDEV_PATH, cfg.mtu or parent.mtu)

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """The link on the parent's index, in the configured mode."""
        parent = require_allowed_parent(req, req.config["parent"])
        return {"link": parent.index, "mode": req.config.get("mode", self.default_mode)}
