"""macvlan: a child of an allowed parent with its own MAC address."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.kit import netconfig

from .virtual import ParentedLinkHandler


class MacvlanHandler(ParentedLinkHandler):
    """Creates a macvlan link on `parent` in `mode` (default bridge)."""

    kinds = ("macvlan",)
    modes = ("bridge", "vepa", "private", "passthru")
    default_mode = "bridge"

    def schema(self, kind: str) -> Mapping[str, Any]:
        """The parented fields, with a locally administered MAC only: a macvlan's MAC is
        seen on the node's LAN, where a global one may be the gateway's."""
        out = dict(super().schema(kind))
        out["properties"] = {**out["properties"], "macAddress": netconfig.LOCAL_MAC}
        return out
