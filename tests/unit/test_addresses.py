"""Which addresses a claim may take: the pure rules (dradriver.contract.iprules) and the checks
against a node (dradriver.kit.hostaddr) on an in-memory kernel holding the node's
addresses and routes, without root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dradriver.base.errors import ConfigError
from dradriver.contract import iprules
from dradriver.kernel import netlink
from dradriver.kernel.netlink import Route
from dradriver.kit import hostaddr
from tests.support.fakekernel import FakeKernel
from tests.support.handlers import context, prepare, request

DOC = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
API = "198.51.100.1"


@pytest.mark.parametrize(
    "text,reason",
    [
        ("0.0.0.0/0", "0.0.0.0/8"),
        ("0.0.0.0/32", "unspecified"),
        ("127.0.0.1/8", "loopback"),
        ("169.254.169.254/32", "cloud metadata"),
        ("224.0.0.1/32", "multicast"),
        ("239.1.2.3/24", "multicast"),
        ("255.255.255.255/32", "broadcast address 255.255.255.255"),
        ("240.0.0.1/24", "reserved"),
        ("10.0.0.0/24", "network address of 10.0.0.0/24"),
        ("10.0.0.255/24", "broadcast address of 10.0.0.0/24"),
        ("10.0.0.1/0", "prefix length of 0"),
        ("::/0", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:192.0.2.1/128", "IPv4-mapped"),
        ("::ffff:c000:201/128", "IPv4-mapped"),
        ("::1.2.3.4/128", "reserved (::/8)"),
        ("fe80::1/64", "link-local"),
        ("fe80::1%eth0/64", "zone"),
        ("2001:db8::1%eth0/64", "zone"),
        ("ff02::1/128", "multicast"),
        ("2001:db8::/64", "subnet-router anycast"),
        ("10.0.0.1/255.255.255.0", "decimal number (not a netmask)"),
        ("10.0.0.1/0.0.0.255", "decimal number"),
        ("10.0.0.1/24\n", "decimal number"),
        ("10.0.0.1/+24", "decimal number"),
        ("10.0.0.1/024", "canonical form: 10.0.0.1/24"),
        ("2001:DB8::1/64", "canonical form: 2001:db8::1/64"),
        ("2001:db8:0:0::1/64", "canonical form: 2001:db8::1/64"),
        ("10.0.0.01/24", "Leading zeros"),
        ("10.0.0.1", "needs a prefix length"),
        ("10.0.0.1/33", "not a valid netmask"),
        (" 10.0.0.1/24", "10.0.0.1"),
        ("10.0.0.1/\uff12\uff14", "decimal number"),  # full-width digits
    ],
)
def test_form_refuses_special_ranges_and_odd_spellings(text, reason):
    with pytest.raises(ValueError, match=None) as err:
        iprules.parse_interface(text)
    assert reason in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "text", ["10.0.0.1/24", "10.0.0.0/31", "10.0.0.1/32", "192.0.2.254/32", "2001:db8::1/64"]
)
def test_form_accepts_unicast_host_addresses(text):
    assert str(iprules.parse_interface(text)) == text


def test_operator_ranges_must_be_networks():
    assert [str(n) for n in iprules.parse_ranges(["192.0.2.0/24", "2001:db8::/32"])] == [
        "192.0.2.0/24",
        "2001:db8::/32",
    ]
    with pytest.raises(ValueError, match=r"did you mean 192\.0\.2\.0/24"):
        iprules.parse_ranges(["192.0.2.1/24"])
    with pytest.raises(ValueError, match="'eth0'"):
        iprules.parse_ranges(["eth0"])


# -- the node --------------------------------------------------------------------------------


@pytest.fixture
def kernel() -> Iterator[FakeKernel]:
    """A node: uplink up0 with addresses and default routes, a multipath route in another
    table, an AnyIP local range; the API server is reached at API."""
    kernel = FakeKernel()
    up = kernel.add("up0", up=True, mtu=1500)
    up.addresses |= {("192.0.2.5", 24), ("2001:db8::5", 64)}
    kernel.add("par0", up=True, mtu=1400)  # a macvlan parent
    lo = kernel.add("lo", up=True)
    kernel.static_routes += [
        Route("0.0.0.0/0", "unicast", 254, ("192.0.2.254",), up.index),
        Route("::/0", "unicast", 254, ("2001:db8::fffe",), up.index),
        Route("10.0.0.0/8", "unicast", 100, ("192.0.2.253", "192.0.2.252"), up.index),
        Route("203.0.113.0/28", "local", 255, (), lo.index),
    ]
    previous = netlink.use(kernel)
    try:
        yield kernel
    finally:
        netlink.use(previous)


def _ctx(ranges=DOC, **kw):
    return context(
        claim_address_ranges=ranges, protected_addresses=((API, "the API server"),), **kw
    )


def _issues(ips, ranges=DOC, **kw):
    try:
        hostaddr.check(_ctx(ranges), [iprules.parse_interface(i) for i in ips], "$.netdev.ip", **kw)
    except ConfigError as exc:
        return dict(exc.issues)
    return {}


@pytest.mark.parametrize(
    "address,reason",
    [
        ("192.0.2.254", "the gateway of this node's route default via 192.0.2.254 dev up0"),
        ("192.0.2.253", "the gateway of this node's route 10.0.0.0/8 via 192.0.2.253 via"),
        ("192.0.2.252", "table 100"),
        ("2001:db8::fffe", "the gateway of this node's route default via 2001:db8::fffe"),
        ("192.0.2.5", "an address of this node (on up0)"),
        ("2001:db8::5", "an address of this node (on up0)"),
        ("203.0.113.7", "local on this node (local 203.0.113.0/28 dev lo"),
        (API, "the API server"),
    ],
)
def test_an_address_the_node_uses_is_refused_naming_what_it_is(kernel, address, reason):
    ip = f"{address}/{64 if ':' in address else 24}"
    issues = _issues(["198.51.100.7/24", ip])
    assert list(issues) == ["$.netdev.ip[1]"]
    assert (
        reason in issues["$.netdev.ip[1]"] and "a claim may not take it" in issues["$.netdev.ip[1]"]
    ), issues


def test_addresses_outside_the_operator_ranges_are_refused_naming_the_setting(kernel):
    issues = _issues(["192.0.2.77/24", "10.1.2.3/24", "fd00::7/64"])
    assert list(issues) == ["$.netdev.ip[1]", "$.netdev.ip[2]"]
    assert "outside the address ranges" in issues["$.netdev.ip[1]"]
    assert "--claim-address-ranges: " + ",".join(DOC) in issues["$.netdev.ip[1]"]
    empty = _issues(["192.0.2.77/24"], ranges=())
    assert "empty, so no claim may set one" in empty["$.netdev.ip[0]"]


def test_the_same_address_twice_is_refused(kernel):
    issues = _issues(["192.0.2.77/24", "192.0.2.77/25"])
    assert issues == {"$.netdev.ip[1]": "192.0.2.77 is already $.netdev.ip[0]"}


def test_a_free_address_of_the_nodes_subnet_is_allowed(kernel):
    assert _issues(["192.0.2.77/24", "2001:db8::77/64", "198.51.100.7/32"]) == {}


def test_addresses_of_claims_links_and_of_the_pods_own_link_are_not_the_nodes(kernel):
    ours = kernel.add("drcaaaaaaaaaaaa")
    ours.addresses.add(("192.0.2.80", 24))
    assert _issues(["192.0.2.80/24"]) == {}
    nic = kernel.add("eth7")
    nic.addresses.add(("192.0.2.81", 24))
    assert "on eth7" in _issues(["192.0.2.81/24"])["$.netdev.ip[0]"]
    assert _issues(["192.0.2.81/24"], own=(nic.index,)) == {}


def test_host_checks_apply_only_where_the_host_sees_the_address(kernel):
    assert _issues(["192.0.2.254/32"], on_host=False) == {}
    assert "outside" in _issues(["10.0.0.1/24"], on_host=False)["$.netdev.ip[0]"]


def test_no_addresses_need_no_kernel_dump(kernel, monkeypatch):
    monkeypatch.setattr(kernel, "routes", lambda: pytest.fail("routes dumped"))
    hostaddr.check(_ctx(), [], "$.netdev.ip")


# -- through the handlers ----------------------------------------------------------------


def test_every_netdev_kind_checks_its_addresses_before_any_kernel_work(kernel):
    netdev = {"kind": "veth", "ipAddresses": ["192.0.2.254/32"]}
    handler, req = request({"type": "netdev", "netdev": netdev}, ctx=_ctx())
    before = kernel.names()
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    assert err.value.path == "$.netdev.ipAddresses[0]" and "gateway" in str(err.value)
    assert kernel.names() == before and kernel.route_get("192.0.2.254") == "oif 2"
    assert kernel.route_get("198.51.100.9") == "via 192.0.2.254 oif 2"


def test_a_macvlan_mtu_above_its_parents_is_refused_naming_both(kernel):
    netdev = {"kind": "macvlan", "parent": "par0", "mtu": 1500}
    handler, req = request(
        {"type": "netdev", "netdev": netdev}, ctx=_ctx(virtual_parents=("par0",))
    )
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    assert err.value.path == "$.netdev.mtu"
    assert "1500 is above the MTU 1400 of the parent par0" in str(err.value)
    netdev["mtu"] = 1400
    _, validated, _ = prepare(
        {"type": "netdev", "netdev": netdev}, ctx=_ctx(virtual_parents=("par0",))
    )
    assert validated.container_interfaces == ("eth1",)


def test_handler_errors_name_the_full_json_path(kernel):
    netdev = {"kind": "macvlan", "parent": "nope0"}
    handler, req = request({"type": "netdev", "netdev": netdev}, ctx=_ctx(virtual_parents=("*",)))
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    assert err.value.path == "$.netdev.parent"


def test_ipv6_on_a_child_of_a_parent_below_1280_is_refused(kernel):
    kernel.table["par0"].mtu = 1200
    netdev = {"kind": "macvlan", "parent": "par0", "ipAddresses": ["2001:db8::9/64"]}
    ctx = _ctx(virtual_parents=("par0",))
    handler, req = request({"type": "netdev", "netdev": netdev}, ctx=ctx)
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    assert err.value.path == "$.netdev.ipAddresses[0]" and "the link's is 1200" in str(err.value)
