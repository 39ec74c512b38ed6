"""Issue 13: no claim may change how the node itself routes (the real daemon, the real
kernel, a throw-away namespace standing in for the node).

With CDI netDevices the driver adds a claim's addresses on the host side of the link,
where the kernel makes an IPv4 one local at once, link down or not. A claim naming the
node's gateway would make `ip route get <gateway>` answer `local ... dev lo`: it must be
refused before any kernel work, naming the claim and the field.
"""

from __future__ import annotations

import pytest

from tests.integration.helpers import answer, veth_claim
from tests.support import netns
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]

RANGES = "192.0.2.0/24,198.51.100.0/24,2001:db8::/32"
GATEWAY, GATEWAY6 = "192.0.2.254", "2001:db8::fffe"


@pytest.fixture
def uplink(ns):
    """The node's uplink `up0` with 192.0.2.5/24, 2001:db8::5/64 and default routes."""
    netns.ip(ns, "link", "add", "up0", "type", "veth", "peer", "name", "up0p")
    for link in ("up0", "up0p"):
        netns.ip(ns, "link", "set", link, "up")
    netns.ip(ns, "addr", "add", "192.0.2.5/24", "dev", "up0")
    netns.ip(ns, "-6", "addr", "add", "2001:db8::5/64", "dev", "up0", "nodad")
    netns.ip(ns, "route", "add", "default", "via", GATEWAY)
    netns.ip(ns, "-6", "route", "add", "default", "via", GATEWAY6)
    return ns


def _route(ns, address):
    return netns.ip(ns, "route", "get", address).split("\n")[0].strip()


def _ours(ns):
    return [ln["name"] for ln in links_in(ns) if ln["name"] not in ("up0", "up0p")]


@pytest.mark.parametrize(
    "address,gateway", [("192.0.2.254/32", GATEWAY), ("2001:db8::fffe/64", GATEWAY6)]
)
def test_a_claim_naming_the_gateway_is_refused_and_routing_is_unchanged(
    api, start_driver, uplink, address, gateway
):
    fake, _ = api
    ns = uplink
    before = _route(ns, gateway)
    assert before.startswith(f"{gateway} ") and "dev up0" in before, before
    claim = veth_claim("c", extra={"ipAddresses": ["198.51.100.7/24", address]})
    fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", RANGES)
    err = answer(d.prepare([claim]), claim).error
    uid = claim["metadata"]["uid"]
    assert err.startswith(f"claim default/c ({uid}): request nic: config $.netdev.ipAddresses[1]: ")
    assert f"{gateway} is the gateway of this node's route default via {gateway} dev up0" in err
    assert _route(ns, gateway) == before
    assert _ours(ns) == [] and list(d.cdi.glob("*.json")) == []


def test_a_free_address_of_the_nodes_subnet_is_allowed_and_routing_to_the_gateway_stays(
    api, start_driver, uplink
):
    fake, _ = api
    ns = uplink
    before = _route(ns, GATEWAY)
    claim = veth_claim("c", extra={"ipAddresses": ["192.0.2.77/24"]})
    fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", RANGES)
    assert answer(d.prepare([claim]), claim).error == ""
    assert _route(ns, GATEWAY) == before
    # Until the runtime moves the link the address is the node's: the known window.
    assert _route(ns, "192.0.2.77").startswith("local 192.0.2.77 dev lo")
    assert answer(d.unprepare([claim]), claim).error == ""
    assert _route(ns, "192.0.2.77").startswith("192.0.2.77 dev up0")
    assert _ours(ns) == []


def test_without_ranges_no_claim_may_set_an_address(api, start_driver, uplink):
    fake, _ = api
    claim = veth_claim("c", extra={"ipAddresses": ["198.51.100.7/24"]})
    fake.add_claim(claim)
    d = start_driver()
    err = answer(d.prepare([claim]), claim).error
    assert "config $.netdev.ipAddresses[0]: 198.51.100.7 is outside the address ranges" in err
    assert "--claim-address-ranges: empty" in err
    assert _ours(uplink) == []
