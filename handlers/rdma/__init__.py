"""rdma plugin: RDMA devices (uverbs), discovered from /sys/class/infiniband."""

from __future__ import annotations

from dradriver.hookspecs import Device, Handler, HandlerContext, hookimpl
from handlers.rdma import devices
from handlers.rdma.uverbs import UverbsHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The RDMA handler."""
    return [UverbsHandler()]


@hookimpl
def dradriver_discover(context: HandlerContext) -> list[Device]:
    """RDMA devices with a uverbs node."""
    return devices.discover(context)
