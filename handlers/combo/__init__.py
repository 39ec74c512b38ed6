"""combo plugin: RoCE (an RDMA device together with its own Ethernet netdev)."""

from __future__ import annotations

from dradriver.hookspecs import Handler, hookimpl
from handlers.combo.roce import RoceHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The RoCE combo handler."""
    return [RoceHandler()]
