"""netdev plugin: virtual kinds on the node's virtual device, and host interfaces
(host-device, SR-IOV VFs) the operator allow-lists."""

from __future__ import annotations

from dradriver.contract.hookspecs import (
    UNKNOWN_DEVICE,
    Default,
    Device,
    Handler,
    HandlerContext,
    hookimpl,
)

from . import hostdevice, sriov, virtual
from .dummy import DummyHandler
from .hostdevice import HostDeviceHandler
from .ipoib import IpoibHandler
from .ipvlan import IpvlanHandler
from .macvlan import MacvlanHandler
from .sriov import SriovVfHandler
from .veth import VethHandler


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
    """The virtual device, allowed host interfaces and SR-IOV VFs."""
    return virtual.virtual_device(context) + hostdevice.discover(context) + sriov.discover(context)


@hookimpl
def dradriver_defaults() -> list[Default]:
    """veth on the virtual device (and for a config without type or kind checked without a
    device); each physical device kind is served by its own handler."""
    return [
        Default("netdev", "veth"),
        Default("netdev", "veth", device_kind=virtual.VIRTUAL_KIND),
        Default("netdev", "veth", device_kind=UNKNOWN_DEVICE),
        Default("netdev", hostdevice.KIND, device_kind=hostdevice.KIND),
        Default("netdev", sriov.KIND, device_kind=sriov.KIND),
    ]
