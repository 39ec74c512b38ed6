"""macvlan: a child of an allowed parent with its own MAC address."""

from __future__ import annotations

from .virtual import ParentedLinkHandler


class MacvlanHandler(ParentedLinkHandler):
    """Creates a macvlan link on `parent` in `mode` (default bridge)."""

    kinds = ("macvlan",)
    modes = ("bridge", "vepa", "private", "passthru")
    default_mode = "bridge"
