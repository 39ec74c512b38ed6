"""rdma plugin: RDMA devices (uverbs), discovered from /sys/class/infiniband."""

from __future__ import annotations

from dradriver.contract.hookspecs import Default, Device, Handler, HandlerContext, hookimpl

from .uverbs import KIND, UverbsHandler, discover


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The RDMA handler."""
    return [UverbsHandler()]


@hookimpl
def dradriver_discover(context: HandlerContext) -> list[Device]:
    """RDMA devices with a uverbs node."""
    return discover(context)


@hookimpl
def dradriver_defaults() -> list[Default]:
    """uverbs for RDMA devices and for an rdma config without kind."""
    return [Default("rdma", KIND), Default("rdma", KIND, device_kind=KIND)]
