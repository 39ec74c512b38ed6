"""netdev plugin: virtual kinds and host interfaces (host-device, SR-IOV VFs)."""

from __future__ import annotations

from dradriver.hookspecs import Device, Handler, HandlerContext, hookimpl
from handlers.netdev import hostdevice, sriov
from handlers.netdev.dummy import DummyHandler
from handlers.netdev.hostdevice import HostDeviceHandler
from handlers.netdev.ipoib import IpoibHandler
from handlers.netdev.ipvlan import IpvlanHandler
from handlers.netdev.macvlan import MacvlanHandler
from handlers.netdev.sriov import SriovVfHandler
from handlers.netdev.veth import VethHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The netdev handlers."""
    return [
        VethHandler(),
        MacvlanHandler(),
        IpvlanHandler(),
        DummyHandler(),
        IpoibHandler(),
        HostDeviceHandler(),
        SriovVfHandler(),
    ]


@hookimpl
def dradriver_discover(context: HandlerContext) -> list[Device]:
    """Allowed host interfaces and SR-IOV VFs."""
    return hostdevice.discover(context) + sriov.discover(context)
