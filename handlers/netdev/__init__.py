"""netdev plugin: virtual kinds (veth, macvlan, ipvlan, dummy) and host interfaces."""

from __future__ import annotations

from dradriver.hookspecs import Handler, hookimpl
from handlers.netdev.dummy import DummyHandler
from handlers.netdev.ipvlan import IpvlanHandler
from handlers.netdev.macvlan import MacvlanHandler
from handlers.netdev.veth import VethHandler


@hookimpl
def dradriver_handlers() -> list[Handler]:
    """The netdev handlers."""
    return [VethHandler(), MacvlanHandler(), IpvlanHandler(), DummyHandler()]
