"""The interface rules (dradriver.contract.ifrules) as the schema, and so `dra-driver
validate-config` and prepare, apply them: each refusal names the field."""

from __future__ import annotations

from typing import Any

import pytest

from dradriver.contract.config import ConfigSchema
from dradriver.contract.registry import HandlerRegistry

SCHEMA = ConfigSchema(HandlerRegistry(), "dra.example.com")


def _issues(kind: str = "veth", **netdev: Any) -> dict[str, str]:
    return dict(SCHEMA.issues({"type": "netdev", "netdev": {"kind": kind, **netdev}}))


@pytest.mark.parametrize(
    ("netdev", "path", "message"),
    [
        ({"ipAddresses": ["192.0.2.7/24", "192.0.2.7/25"]}, "ipAddresses[1]",
         "192.0.2.7 is ipAddresses[0] already, with another prefix length"),
        ({"ipAddresses": ["2001:db8::7/64", "10.0.0.1/8", "2001:db8::7/128"]}, "ipAddresses[2]",
         "2001:db8::7 is ipAddresses[0] already"),
        ({"routes": [{"destination": "::/0", "gateway": "fe80::1", "metric": 0}]},
         "routes[0].metric", "a default route needs a metric other than 0 and 1024"),
        ({"routes": [{"destination": "10.1.0.0/16"}, {"destination": "10.1.0.0/16", "metric": 0}]},
         "routes[1]", "routes[0] already goes to 10.1.0.0/16 at metric 0"),
        ({"ipAddresses": ["192.0.2.7/24"],
          "routes": [{"destination": "2001:db8:1::/48", "gateway": "192.0.2.1"}]},
         "routes[0].gateway", "192.0.2.1 is not of the family of the destination 2001:db8:1::/48"),
        ({"ipAddresses": ["192.0.2.7/32"],
          "routes": [{"destination": "203.0.113.0/24", "gateway": "192.0.2.8"}]},
         "routes[0].gateway", "192.0.2.8 is not on a network of the interface's addresses"),
        ({"ipAddresses": ["192.0.2.7/24"],
          "routes": [{"destination": "203.0.113.0/24", "gateway": "192.0.2.255"}]},
         "routes[0].gateway", "192.0.2.255 is the broadcast address of 192.0.2.0/24"),
        ({"sysctls": {"net.ipv4.conf.all.rp_filter": 1}},
         'sysctls["net.ipv4.conf.all.rp_filter"]', "names interface all, which is no claim's"),
        ({"interfaceName": "n1", "sysctls": {"net.ipv4.conf.eth1.rp_filter": 1}},
         'sysctls["net.ipv4.conf.eth1.rp_filter"]', "names interface eth1, not this claim's n1"),
        ({"sysctls": {"net.ipv4.conf.eth1.rp_filter": 2**31}},
         'sysctls["net.ipv4.conf.eth1.rp_filter"]', '"2147483648" is not a number the kernel'),
        ({"ipAddresses": ["2001:db8::7/64"], "sysctls": {"net.ipv6.conf.eth1.disable_ipv6": "1"}},
         'sysctls["net.ipv6.conf.eth1.disable_ipv6"]',
         "turns IPv6 off, but ipAddresses[0] is an IPv6 address"),
    ],
)  # fmt: skip
def test_each_rule_names_its_field(netdev, path, message):
    issues = _issues(**netdev)
    assert f"$.netdev.{path}" in issues, issues
    assert message in issues[f"$.netdev.{path}"]


def test_what_the_rules_accept():
    assert not _issues(
        interfaceName="n1",
        ipAddresses=["10.0.0.1/24", "10.0.0.10/24", "2001:db8::1:0:0:7/64", "192.0.2.6/31"],
        routes=[
            {"destination": "0.0.0.0/0", "gateway": "192.0.2.7", "metric": 100},
            {"destination": "::/0", "gateway": "fe80::1", "metric": 1025},
            {"destination": "2001:db8:1::/48", "gateway": "2001:db8::1:0:0:1"},
            {"destination": "2001:db8:1::/48", "gateway": "2001:db8::1", "metric": 1},
        ],
        sysctls={"net.ipv6.conf.n1.stable_secret": "x", "net.ipv4.conf.n1.arp_ignore": "-2"},
    )


def test_a_host_nic_keeps_its_own_addresses_so_reachability_is_the_nodes():
    route = {"destination": "203.0.113.0/24", "gateway": "198.51.100.1"}
    assert not _issues("host-device", ipAddresses=["192.0.2.7/24"], routes=[route])
    assert _issues("veth", ipAddresses=["192.0.2.7/24"], routes=[route])


def test_a_value_refused_in_form_takes_no_part():
    """An address written wrongly is the format's refusal alone: it makes no duplicate."""
    issues = _issues(ipAddresses=["2001:DB8::7/64", "2001:db8::7/128"])
    assert list(issues) == ["$.netdev.ipAddresses[0]"], issues
