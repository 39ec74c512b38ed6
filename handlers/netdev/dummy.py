"""dummy: an interface with no parent and no traffic path (kernel module `dummy`)."""

from __future__ import annotations

from typing import Any

from dradriver.hookspecs import DeviceRequest
from handlers.netdev.virtual import VirtualLinkHandler


class DummyHandler(VirtualLinkHandler):
    """Creates a dummy link."""

    kinds = ("dummy",)

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """A plain dummy link."""
        return {"kind": "dummy"}
