"""The shape shared by kinds that create a new virtual link for the container."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver import netlink
from dradriver.hookspecs import DeviceRequest, Prepared, Validated
from handlers.netdev import common


class VirtualLinkHandler:
    """Creates one down, tagged link per device; the runtime moves it into the container.

    Subclasses name their `kinds`, their schema fragment and the link attributes.
    """

    type = "netdev"
    kinds: tuple[str, ...] = ()

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields only; subclasses add theirs."""
        return common.schema({})

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """pyroute2 `link add` attributes (kind, parent index, mode...)."""
        raise NotImplementedError

    def check(self, req: DeviceRequest) -> None:
        """Kind-specific validation beyond the schema (parents...)."""

    def validate(self, req: DeviceRequest) -> Validated:
        """Virtual device allocated, kind-specific checks; no kernel change."""
        common.require_virtual_device(req)
        self.check(req)
        return common.NetConfig.parse(req.config).validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Create, tag and configure the link; delete it again if any step fails."""
        cfg = common.NetConfig.parse(req.config)
        name, alias = common.host_name(req), common.tag(req)
        with netlink.rollback() as undo:
            link = common.create(req, name, req.kind, **self.link_attrs(req))
            undo.append(lambda: netlink.delete(name))
            mac = common.configure(link, cfg, alias)
        return Prepared(
            edits=common.net_devices_edit(name, cfg.interface_name),
            undo={"interfaces": [name], "alias": alias},
            network_data=cfg.network_data(mac),
            created_interfaces=(name,),
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Delete the link if it is still on the host (it dies with the pod's namespace)."""
        common.delete_own(undo.get("interfaces", []), undo.get("alias", ""))


class ParentedLinkHandler(VirtualLinkHandler):
    """A virtual link on an allowed `parent` in one of `modes` (macvlan, ipvlan).

    Subclasses name the link kind, its modes (config value -> kernel value), the
    pyroute2 attribute carrying the mode, the default mode and any common field the
    kind cannot honour.
    """

    modes: Mapping[str, Any] = {}
    mode_attr = ""
    default_mode = ""
    dropped: tuple[str, ...] = ()

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields (minus `dropped`) plus parent (required) and mode."""
        return common.schema(
            {
                "parent": common.PARENT,
                "mode": {"enum": list(self.modes), "default": self.default_mode},
            },
            required=["parent"],
            drop=self.dropped,
        )

    def check(self, req: DeviceRequest) -> None:
        """The parent must be allowed and exist."""
        common.require_allowed_parent(req, req.config["parent"])

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """The link on the parent's index, in the configured mode."""
        parent = common.require_allowed_parent(req, req.config["parent"])
        return {
            "kind": req.kind,
            "link": parent.index,
            self.mode_attr: self.modes[req.config.get("mode", self.default_mode)],
        }
