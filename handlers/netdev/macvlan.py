"""macvlan: a child of an allowed parent with its own MAC address."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.hookspecs import DeviceRequest
from handlers.netdev import common
from handlers.netdev.virtual import VirtualLinkHandler

MODES = ("bridge", "vepa", "private", "passthru")


class MacvlanHandler(VirtualLinkHandler):
    """Creates a macvlan link on `parent` in `mode` (default bridge)."""

    kinds = ("macvlan",)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields plus parent (required) and mode."""
        return common.schema(
            {"parent": common.PARENT, "mode": {"enum": list(MODES), "default": "bridge"}},
            required=["parent"],
        )

    def check(self, req: DeviceRequest) -> None:
        """The parent must be allowed and exist."""
        common.require_allowed_parent(req, req.config["parent"])

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """macvlan on the parent's index."""
        parent = common.require_allowed_parent(req, req.config["parent"])
        return {
            "kind": "macvlan",
            "link": parent.index,
            "macvlan_mode": req.config.get("mode", "bridge"),
        }
