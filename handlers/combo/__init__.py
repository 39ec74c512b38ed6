"""combo plugin: RoCE (an RDMA device together with its own Ethernet netdev)."""

from __future__ import annotations

from dradriver.contract.hookspecs import Default, Handler, hookimpl

from .roce import KIND, RoceHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The RoCE combo handler."""
    return [RoceHandler()]


@hookimpl
def dradriver_defaults() -> list[Default]:
    """roce for a combo config without kind."""
    return [Default("combo", KIND)]
