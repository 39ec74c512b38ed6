"""ipoib: an IPoIB child interface of an allowed InfiniBand parent, on a partition key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver.base.errors import ConfigError
from dradriver.contract.hookspecs import DeviceRequest
from dradriver.kernel import netlink
from dradriver.kit import netconfig

from .virtual import VirtualLinkHandler, require_allowed_parent

FULL_MEMBERSHIP = 0x8000
DEFAULT_PKEY = 0x7FFF


class IpoibHandler(VirtualLinkHandler):
    """Creates an IPoIB child on `parent` with partition key `pkey` (full member)."""

    kinds = ("ipoib",)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields minus macAddress (20-byte IPoIB addresses), plus parent, pkey, mode."""
        return netconfig.schema(
            {
                "parent": netconfig.PARENT,
                "pkey": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 0xFFFF,
                    "description": "partition key; the full-membership bit is always set",
                },
                "mode": {"enum": ["datagram", "connected"], "default": "datagram"},
            },
            required=["parent"],
            drop=["macAddress"],
        )

    def check(self, req: DeviceRequest) -> None:
        """The parent must be allowed, exist, and be an InfiniBand (IPoIB) interface."""
        parent = require_allowed_parent(req, req.config["parent"])
        if parent.link_type != netlink.ARPHRD_INFINIBAND:
            raise ConfigError(
                f"parent {parent.name} is not an IPoIB interface (link type "
                f"{parent.link_type}, not InfiniBand {netlink.ARPHRD_INFINIBAND})",
                f"{netconfig.NETDEV_PATH}.parent",
            )

    def link_attrs(self, req: DeviceRequest) -> dict[str, Any]:
        """ipoib on the parent with the full-membership bit set on the pkey."""
        parent = require_allowed_parent(req, req.config["parent"])
        pkey = int(req.config.get("pkey", DEFAULT_PKEY)) | FULL_MEMBERSHIP
        return {"link": parent.index, "pkey": pkey, "mode": req.config.get("mode", "datagram")}
