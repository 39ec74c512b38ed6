"""ipvlan: a child of an allowed parent sharing its MAC (kernel module `ipvlan`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.hookspecs import DeviceRequest
from handlers.netdev import common
from handlers.netdev.virtual import VirtualLinkHandler

MODES = {"l2": 0, "l3": 1, "l3s": 2}  # IPVLAN_MODE_* in linux/if_link.h


class IpvlanHandler(VirtualLinkHandler):
    """Creates an ipvlan link on `parent` in `mode` (default l2)."""

    kinds = ("ipvlan",)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields minus macAddress (ipvlan uses the parent's), plus parent and mode."""
        return common.schema(
            {"parent": common.PARENT, "mode": {"enum": list(MODES), "default": "l2"}},
            required=["parent"],
            drop=["macAddress"],
        )

    def check(self, req: DeviceRequest) -> None:
        """The parent must be allowed and exist."""
        common.require_allowed_parent(req, req.config["parent"])

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """ipvlan on the parent's index."""
        parent = common.require_allowed_parent(req, req.config["parent"])
        return {
            "kind": "ipvlan",
            "link": parent.index,
            "ipvlan_mode": MODES[req.config.get("mode", "l2")],
        }
