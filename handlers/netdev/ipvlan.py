"""ipvlan: a child of an allowed parent sharing its MAC (kernel module `ipvlan`)."""

from __future__ import annotations

from .virtual import ParentedLinkHandler


class IpvlanHandler(ParentedLinkHandler):
    """Creates an ipvlan link on `parent` in `mode` (default l2)."""

    kinds = ("ipvlan",)
    modes = ("l2", "l3", "l3s")
    default_mode = "l2"
    dropped = ("macAddress",)  # ipvlan uses the parent's MAC
