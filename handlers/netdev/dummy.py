"""dummy: an interface with no parent and no traffic path (kernel module `dummy`)."""

from __future__ import annotations

from .virtual import VirtualLinkHandler


class DummyHandler(VirtualLinkHandler):
    """Creates a dummy link."""

    kinds = ("dummy",)
