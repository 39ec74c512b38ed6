"""Opaque configs the admission policy (deploy/config-policy.yaml) must judge as the driver
does: the invalid ones of tests/unit/test_config.py and adversarial ones, each with the
fields its refusal must name, and the valid examples of deploy/, README.md and docs/, read
from those files. tests/deploy/test_config_policy.py runs them through Kubernetes' own CEL
code, tests/e2e/test_9_config_policy.py through a real API server.

A case is the list of config parameters of one claim (or DeviceClass); `paths` are the
fields a refusal must name, written `[i].a.b` for `<config list>[i].opaque.parameters.a.b`
of the object, and `class[i].a.b` for config i of the case's own DeviceClass. `node`
marks a config valid in form that only the node refuses (docs/deployment.md, "What only the node
can check"): the policy and `dra-driver validate-config` accept it, the handlers refuse
it at prepare on NODE, naming those fields.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.unit import test_config as unit

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "dra.example.com"
# The deploy/ DeviceClass a request of each type uses when the case brings none.
CLASS_OF_TYPE = {
    "netdev": "virtual-network",
    "rdma": "rdma-devices",
    "combo": "roce-devices",
    "cni": "virtual-network",
}
CONFIG_LISTS = {
    "ResourceClaim": "spec.devices.config",
    "ResourceClaimTemplate": "spec.spec.devices.config",
    "DeviceClass": "spec.config",
}
RESOURCES = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "DeviceClass": "deviceclasses",
}
Params = dict[str, Any]
# The node the `node` cases are refused on: its claim address ranges (as deploy/driver.yaml
# gives the DaemonSet), its own address and the gateway of its default route.
NODE_RANGES = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
NODE_ADDRESS, NODE_GATEWAY = "192.0.2.5/24", "192.0.2.254"
# Names the kernel refuses or rewrites, besides the unit tests' (tests/unit/test_config.py).
RESERVED_NAMES = ["net%d", "%", "all", "default"]
# What iprules' rule 1 refuses besides the unit tests' BAD_CIDRS: special ranges, the
# network, broadcast or subnet-router address of the address's own prefix.
RULE_1_CIDRS = [
    "0.0.0.5/8",
    "127.0.0.1/8",
    "169.254.169.254/32",
    "224.0.0.1/32",
    "240.0.0.1/4",
    "255.255.255.255/32",
    "::2/64",
    "fe80::1/64",
    "ff02::1/128",
    "10.0.0.0/24",
    "10.0.0.255/24",
    "10.255.255.255/8",
    "10.0.0.3/30",
    "fd00::/64",
    "10.0.0.2/0",
]


@dataclass(frozen=True)
class Case:
    """Configs of one claim; `paths` empty: accepted.

    `class_configs`: the configs of a DeviceClass made for the case (the claim's request
    uses it); without them the request uses the deploy/ class of its type, which has
    the configs deploy/resourceclass.yaml gives it. `as_class`: the paths a DeviceClass
    with the same configs is refused for (None: the same as `paths`; () when only the
    merge with a claim shows the problem).
    """

    name: str
    configs: tuple[Params, ...]
    paths: tuple[str, ...] = ()
    class_configs: tuple[Params, ...] | None = None
    as_class: tuple[str, ...] | None = None
    type: str = "netdev"
    node: tuple[str, ...] = ()

    @property
    def class_paths(self) -> tuple[str, ...]:
        """What a DeviceClass with these configs is refused for."""
        return self.paths if self.as_class is None else self.as_class


def nd(**netdev: Any) -> Params:
    """A netdev config."""
    return {"type": "netdev", "netdev": netdev}


def _bad_values() -> Iterator[Case]:
    many = unit.MANY_ERRORS
    yield Case(
        "unit: many errors", (many,), tuple(p.replace("$", "[0]") for p in unit.MANY_ERRORS_PATHS)
    )
    yield Case(
        "unit: missing parent, bad mode",
        (unit.MISSING_PARENT_BAD_MODE,),
        ("[0].netdev.mode", "[0].netdev.parent"),
        as_class=("[0].netdev.mode",),
    )
    yield Case("unit: unknown kind", (unit.UNKNOWN_KIND,), ("[0].netdev.kind",))
    for name in [*unit.BAD_INTERFACE_NAMES, *RESERVED_NAMES, "eth0"]:  # eth0: the pod's own
        yield Case(
            f"unit: name {name!r}",
            (nd(kind="veth", interfaceName=name),),
            ("[0].netdev.interfaceName",),
        )
    yield Case("unit: cidr /40", (unit.BAD_CIDR,), ("[0].netdev.ipAddresses[0]",))
    for cidr in [*unit.BAD_CIDRS, *RULE_1_CIDRS]:
        yield Case(
            f"cidr {cidr!r}",
            (nd(ipAddresses=["10.9.9.9/24", cidr]),),
            ("[0].netdev.ipAddresses[1]",),
        )
    yield Case("typo macvlna", (nd(kind="macvlna", parent="eth0"),), ("[0].netdev.kind",))
    for mtu in (67, 65536, 70000, -1):
        yield Case(f"mtu {mtu}", (nd(kind="veth", mtu=mtu),), ("[0].netdev.mtu",))
    for mtu in ("1500", 1500.0, True, None, [1500], 2**63):
        yield Case(f"mtu {mtu!r}", (nd(mtu=mtu),), ("[0].netdev.mtu",))
    for mac in (
        "aa:bb:cc:dd:ee",
        "aa-bb-cc-dd-ee-ff",
        "aa:bb:cc:dd:ee:fg",
        "aabb.ccdd.eeff",
        "aa:bb:cc:dd:ee:ff\n",
        "aa:bb:cc:dd:ee:ff:00",
        42,
        "01:00:5e:00:00:01",
        "ff:ff:ff:ff:ff:ff",
        "03:00:00:00:00:01",
        "00:00:00:00:00:00",
    ):
        yield Case(
            f"mac {mac!r}",
            (nd(kind="macvlan", parent="eth0", macAddress=mac),),
            ("[0].netdev.macAddress",),
        )
    yield Case(
        "a global mac on a macvlan (the LAN may have it: the gateway's)",
        (nd(kind="macvlan", parent="eth0", macAddress="00:1b:21:00:00:01"),),
        ("[0].netdev.macAddress",),
    )
    yield Case(
        "17 addresses",
        (nd(ipAddresses=[f"10.0.0.{i + 1}/24" for i in range(17)]),),
        ("[0].netdev.ipAddresses",),
    )
    yield Case(
        "repeated address",
        (nd(ipAddresses=["10.0.0.1/24", "10.0.0.1/24"]),),
        ("[0].netdev.ipAddresses",),
    )
    yield Case(
        "addresses not a list", (nd(ipAddresses="10.0.0.1/24"),), ("[0].netdev.ipAddresses",)
    )
    yield Case("address not a string", (nd(ipAddresses=[10]),), ("[0].netdev.ipAddresses[0]",))
    for vlan in (-1, 4095):
        yield Case(f"vlan {vlan}", (nd(kind="sriov-vf", vlan=vlan),), ("[0].netdev.vlan",))
    for pkey in (0, 65536):
        yield Case(
            f"pkey {pkey}", (nd(kind="ipoib", parent="ib0", pkey=pkey),), ("[0].netdev.pkey",)
        )
    yield Case("vfIndex -1", (nd(kind="sriov-vf", vfIndex=-1),), ("[0].netdev.vfIndex",))
    yield Case("trust 'yes'", (nd(kind="sriov-vf", trust="yes"),), ("[0].netdev.trust",))
    yield Case("vlanQoS 8", (nd(kind="sriov-vf", vlan=1, vlanQoS=8),), ("[0].netdev.vlanQoS",))
    yield Case("linkState up", (nd(kind="sriov-vf", linkState="up"),), ("[0].netdev.linkState",))
    yield Case("maxTxRate -1", (nd(kind="sriov-vf", maxTxRate=-1),), ("[0].netdev.maxTxRate",))
    yield Case(
        "ipvlan mode vepa", (nd(kind="ipvlan", parent="eth0", mode="vepa"),), ("[0].netdev.mode",)
    )
    yield Case("mode of no kind", (nd(mode="l4"),), ("[0].netdev.mode",))
    yield Case("parent with a slash", (nd(kind="macvlan", parent="eth/0"),), ("[0].netdev.parent",))
    yield Case("parent of 16 bytes", (nd(kind="macvlan", parent="p" * 16),), ("[0].netdev.parent",))
    for name in RESERVED_NAMES:
        yield Case(f"parent {name!r}", (nd(kind="macvlan", parent=name),), ("[0].netdev.parent",))
    yield Case("bridge not a string", (nd(kind="veth", bridge=1),), ("[0].netdev.bridge",))
    yield Case(
        "netnsMode",
        ({"type": "rdma", "rdma": {"kind": "uverbs", "netnsMode": "host"}},),
        ("[0].rdma.netnsMode",),
        type="rdma",
    )
    yield Case(
        "combo rdma not an object",
        ({"type": "combo", "combo": {"kind": "roce", "rdma": "x"}},),
        ("[0].combo.rdma",),
        type="combo",
    )
    yield Case(
        "combo nested",
        (
            {
                "type": "combo",
                "combo": {"kind": "roce", "rdma": {"x": 1}, "netdev": {"mtu": 10, "kind": "veth"}},
            },
        ),
        ("[0].combo.rdma.x", "[0].combo.netdev.mtu", "[0].combo.netdev.kind"),
        type="combo",
    )


def _bad_shapes() -> Iterator[Case]:
    yield Case(
        "unknown top-level field",
        ({"type": "netdev", "netdve": {"kind": "veth"}},),
        ("[0].netdve",),
    )
    yield Case(
        "unknown field of the kind",
        (nd(kind="macvlan", parent="eth0", bridge="br0"),),
        ("[0].netdev.bridge",),
    )
    yield Case(
        "ipvlan has no macAddress",
        (nd(kind="ipvlan", parent="eth0", macAddress="aa:bb:cc:dd:ee:ff"),),
        ("[0].netdev.macAddress",),
    )
    yield Case("field of no kind", (nd(mtu=1400, speed=10),), ("[0].netdev.speed",))
    yield Case("fields of no single kind", (nd(parent="eth0", bridge="br0"),), ("[0].netdev",))
    yield Case("type unknown", ({"type": "gpu"},), ("[0].type",))
    yield Case("type not a string", ({"type": 5},), ("[0].type",))
    yield Case(
        "type object not an object", ({"type": "netdev", "netdev": "veth"},), ("[0].netdev",)
    )
    yield Case("key needing quotes", ({"type": "netdev", "net dev": {}},), ('[0]["net dev"]',))
    yield Case("too many fields", ({f"f{i}": i for i in range(40)},), ("[0]",))
    yield Case(
        "second config bad",
        (nd(kind="veth", interfaceName="net1"), nd(mtu=9), {"type": "rdma", "rdma": {"kind": "x"}}),
        ("[1].netdev.mtu", "[2].rdma.kind"),
    )
    for kind in ("macvlan", "ipvlan", "ipoib"):
        yield Case(f"{kind} without parent", (nd(kind=kind),), ("[0].netdev.parent",), as_class=())
    yield Case(
        "kind of the first, field of the second",
        (nd(kind="dummy"), nd(parent="eth0")),
        ("[1].netdev.parent",),
        as_class=(),
    )
    yield Case(
        "later kind wins",
        (nd(kind="macvlan", parent="eth0"), nd(kind="dummy")),
        ("[0].netdev.parent",),
        as_class=(),
    )
    yield Case(
        "mode for the merged kind",
        (nd(kind="ipvlan", parent="eth0"), nd(mode="vepa")),
        ("[1].netdev.mode",),
        as_class=(),
    )
    yield Case(
        "class kind, claim field",
        (nd(interfaceName="n1", parent="eth0"),),
        ("[0].netdev.parent",),
        class_configs=(nd(kind="dummy"),),
        as_class=(),
    )
    yield Case(
        "class kind needs a parent",
        (nd(interfaceName="n1"),),
        ("class[0].netdev.parent",),
        class_configs=(nd(kind="macvlan"),),
        as_class=(),
    )
    yield Case(
        "only the request's configs count",
        (
            {"type": "netdev", "netdev": {"kind": "macvlan"}},
            {"requests": ["other"], "netdev": {"parent": "eth0"}},
        ),
        ("[0].netdev.parent",),
        as_class=(),
    )


def _bad_routes_and_sysctls() -> Iterator[Case]:
    routes = [
        {"destination": "10.0.0.1/24"},  # host bits
        {"gateway": "10.0.0.1"},  # no destination
        {"destination": "0.0.0.0/0", "gateway": "10.0.0.1/32"},
        {"destination": "fd00::/64", "gateway": "ff02::1"},  # multicast
        {"destination": "FD00::/64"},  # not canonical
        {"destination": "10.0.0.0/8", "metric": -1, "via": "x"},
        "0.0.0.0/0",
    ]
    yield Case(
        "bad routes",
        (nd(kind="veth", routes=routes),),
        (
            "[0].netdev.routes[0].destination",
            "[0].netdev.routes[1].destination",
            "[0].netdev.routes[2].gateway",
            "[0].netdev.routes[3].gateway",
            "[0].netdev.routes[4].destination",
            "[0].netdev.routes[5].metric",
            "[0].netdev.routes[5].via",
            "[0].netdev.routes[6]",
        ),
    )
    yield Case(
        "bad sysctls",
        (
            nd(
                kind="veth",
                sysctls={
                    "net.ipv4.ip_forward": 1,  # not per interface
                    "net.ipv4.conf.eth1.rp_filter": "1\n",
                    "net.ipv6.conf.eth1.accept_ra": 1.5,
                    "kernel.panic": "0",
                },
            ),
        ),
        (
            '[0].netdev.sysctls["net.ipv4.ip_forward"]',
            '[0].netdev.sysctls["net.ipv4.conf.eth1.rp_filter"]',
            '[0].netdev.sysctls["net.ipv6.conf.eth1.accept_ra"]',
            '[0].netdev.sysctls["kernel.panic"]',
        ),
    )
    yield Case(
        "too many sysctls",
        (nd(sysctls={f"net.ipv4.conf.eth1.k{i}": 1 for i in range(33)}),),
        ("[0].netdev.sysctls",),
    )


def _interface_rules() -> Iterator[Case]:
    """What an interface's values say of each other (dradriver.contract.ifrules): refused at
    admission. What one config decides alone is refused in a DeviceClass too; what needs
    the merge (a gateway against the addresses, a sysctl against the name) is a claim's
    config over a class of its own, so the class alone shows nothing."""
    v4, v6 = ["192.0.2.7/24"], ["2001:db8::7/64"]
    for name, ips in [
        ("one address, two prefix lengths", ["192.0.2.7/24", "192.0.2.7/32"]),
        ("one IPv6 address, two prefix lengths", ["2001:db8::7/64", "2001:db8::7/128"]),
        ("one address, /31 and /30", ["192.0.2.9/31", "10.0.0.2/24", "192.0.2.9/30"]),
    ]:
        at = len(ips) - 1
        yield Case(name, (nd(kind="veth", ipAddresses=ips),), (f"[0].netdev.ipAddresses[{at}]",))
    for name, routes, at in [
        ("a default route without a metric (the pod's own is at metric 0)",
         [{"destination": "0.0.0.0/0", "gateway": "192.0.2.1"}], "routes[0].metric"),
        ("an IPv4 default route at metric 1024",
         [{"destination": "0.0.0.0/0", "gateway": "192.0.2.1", "metric": 1024}],
         "routes[0].metric"),
        ("an IPv6 default route without a metric (the kernel's 1024)",
         [{"destination": "::/0", "gateway": "fe80::1"}], "routes[0].metric"),
        ("an IPv6 default route at metric 0 (read as 1024)",
         [{"destination": "::/0", "gateway": "fe80::1", "metric": 0}], "routes[0].metric"),
        ("two routes to one destination at one metric",
         [{"destination": "203.0.113.0/24", "gateway": "192.0.2.1"},
          {"destination": "203.0.113.0/24", "gateway": "192.0.2.2", "metric": 0}],
         "routes[1]"),
        ("two IPv6 routes at metric 0 and none (both 1024)",
         [{"destination": "2001:db8:1::/48", "metric": 0},
          {"destination": "192.0.2.0/25"},
          {"destination": "2001:db8:1::/48"}], "routes[2]"),
        ("an IPv4 gateway for an IPv6 destination",
         [{"destination": "2001:db8:1::/48", "gateway": "192.0.2.1"}], "routes[0].gateway"),
        ("an IPv6 gateway for an IPv4 destination",
         [{"destination": "203.0.113.0/24", "gateway": "fe80::1"}], "routes[0].gateway"),
    ]:  # fmt: skip
        yield Case(
            name, (nd(kind="veth", ipAddresses=v4 + v6, routes=routes),), (f"[0].netdev.{at}",)
        )
    for name, key in [
        ("a sysctl of every interface (all)", "net.ipv4.conf.all.rp_filter"),
        ("a sysctl of new interfaces (default)", "net.ipv6.conf.default.accept_ra"),
        ("a sysctl of the pod's eth0", "net.ipv4.conf.eth0.rp_filter"),
    ]:
        yield Case(name, (nd(kind="veth", sysctls={key: 1}),), (f'[0].netdev.sysctls["{key}"]',))
    for value in ("abc", "", "0x10", "+1", " 1", "1.0", 2**31, -(2**31) - 1, "2147483648",
                  "99999999999"):  # fmt: skip
        yield Case(
            f"sysctl value {value!r}",
            (nd(kind="veth", sysctls={"net.ipv4.conf.eth1.rp_filter": value}),),
            ('[0].netdev.sysctls["net.ipv4.conf.eth1.rp_filter"]',),
        )
    veth = nd(kind="veth", ipAddresses=v4 + v6)
    for name, gateway, destination in [
        ("a gateway that is the network's broadcast address", "192.0.2.255", "203.0.113.0/24"),
        ("a gateway that is the network's network address", "192.0.2.0", "203.0.113.0/24"),
        ("a gateway that is the interface's own address", "192.0.2.7", "203.0.113.0/24"),
        ("an IPv6 gateway that is the interface's own address", "2001:db8::7", "2001:db8:1::/48"),
        ("a gateway on no network of the interface", "198.51.100.1", "203.0.113.0/24"),
        ("an IPv6 gateway on no network of the interface", "2001:db8:1::1", "2001:db8:2::/48"),
    ]:
        yield Case(
            name,
            (nd(routes=[{"destination": "198.51.100.0/24"},
                        {"destination": destination, "gateway": gateway}]),),
            ("[0].netdev.routes[1].gateway",),
            class_configs=(veth,),
            as_class=(),  # the merge shows it: the merged policy refuses it
        )  # fmt: skip
    for name, ips, gateway in [
        ("a gateway beside a /32 address", ["192.0.2.7/32"], "192.0.2.8"),
        ("a gateway beside a /128 address", ["2001:db8::7/128"], "2001:db8::8"),
        ("a gateway on the network of an address in bad form", ["2001:DB8::7/64"], "2001:db8::1"),
    ]:
        yield Case(
            name,
            (nd(kind="veth", ipAddresses=ips,
                routes=[{"destination": "2001:db8:1::/48" if ":" in gateway else
                         "203.0.113.0/24", "gateway": gateway}]),),
            ("[0].netdev.routes[0].gateway",) + (("[0].netdev.ipAddresses[0]",) if "D" in ips[0]
                                                 else ()),
            class_configs=(),
            # The gateway only the merged policy reads; an address's form, the other.
            as_class=("[0].netdev.ipAddresses[0]",) if "D" in ips[0] else (),
        )  # fmt: skip
    yield Case(
        "a sysctl of another interface than the claim's",
        (nd(sysctls={"net.ipv4.conf.eth1.rp_filter": 2}),),
        ('[0].netdev.sysctls["net.ipv4.conf.eth1.rp_filter"]',),
        class_configs=(nd(kind="veth", interfaceName="n1"),),
        as_class=(),
    )
    yield Case(
        "a class's sysctl of net1 where no config names the interface (eth1)",
        (nd(mtu=1500),),
        ('class[0].netdev.sysctls["net.ipv4.conf.net1.rp_filter"]',),
        class_configs=(nd(kind="veth", sysctls={"net.ipv4.conf.net1.rp_filter": 2}),),
        as_class=(),
    )
    yield Case(
        "IPv6 turned off with an IPv6 address",
        (nd(sysctls={"net.ipv6.conf.n1.disable_ipv6": "1"}),),
        ('[0].netdev.sysctls["net.ipv6.conf.n1.disable_ipv6"]',),
        class_configs=(nd(kind="veth", interfaceName="n1", ipAddresses=v4 + v6),),
        as_class=(),
    )
    yield Case(
        "IPv6 turned off by the class, an IPv6 address from the claim",
        (nd(ipAddresses=["2001:db8::7/64"]),),
        ('class[0].netdev.sysctls["net.ipv6.conf.eth1.disable_ipv6"]',),
        class_configs=(nd(kind="veth", sysctls={"net.ipv6.conf.eth1.disable_ipv6": 2}),),
        as_class=(),
    )


def _interface_rules_kept() -> Iterator[Case]:
    """What the interface rules accept, where a wrong reading would refuse."""
    yield Case(
        "addresses alike as strings, not as addresses",
        (nd(kind="veth", ipAddresses=["10.0.0.1/24", "10.0.0.10/24", "2001:db8::7/64",
                                      "2001:db8::70/64", "2001:db8::7:0/64"]),),
    )  # fmt: skip
    yield Case(
        "gateways on the interface's networks, IPv6 compressed and link-local",
        (nd(kind="veth", ipAddresses=["192.0.2.6/31", "2001:db8::1:0:0:7/64", "10.0.0.1/8"],
            routes=[{"destination": "0.0.0.0/0", "gateway": "192.0.2.7", "metric": 100},
                    {"destination": "::/0", "gateway": "fe80::1", "metric": 1023},
                    {"destination": "2001:db8:1::/48", "gateway": "2001:db8::1:0:0:1"},
                    {"destination": "203.0.113.0/24", "gateway": "10.255.255.254"},
                    {"destination": "203.0.113.0/24", "gateway": "10.0.0.2", "metric": 1},
                    {"destination": "2001:db8:1::/48", "gateway": "fe80::2", "metric": 1025}]),),
    )  # fmt: skip
    yield Case(
        "a host NIC keeps its own addresses: its gateway is the node's business",
        (nd(kind="host-device", ipAddresses=["192.0.2.7/24"],
            routes=[{"destination": "203.0.113.0/24", "gateway": "198.51.100.1"}]),),
    )  # fmt: skip
    yield Case(
        "sysctls of the interface named by the class",
        (nd(sysctls={"net.ipv4.conf.n1.rp_filter": 2, "net.ipv6.conf.n1.stable_secret": "x"}),),
        class_configs=(nd(kind="veth", interfaceName="n1"),),
    )
    yield Case(
        "sysctl values at the ends of 32 bits",
        (nd(kind="veth", sysctls={"net.ipv4.conf.eth1.rp_filter": "2147483647",
                                  "net.ipv4.conf.eth1.arp_ignore": -(2**31),
                                  "net.ipv4.conf.eth1.forwarding": "-2147483648",
                                  "net.ipv4.conf.eth1.arp_announce": "0000000000002"}),),
    )  # fmt: skip
    yield Case(
        "IPv6 turned off by the class, on again by the claim",
        (nd(sysctls={"net.ipv6.conf.eth1.disable_ipv6": "0"}),),
        class_configs=(
            nd(kind="veth", ipAddresses=["2001:db8::7/64"],
               sysctls={"net.ipv6.conf.eth1.disable_ipv6": 1}),
        ),
    )  # fmt: skip
    yield Case(
        "IPv6 turned off without an IPv6 address",
        (nd(kind="veth", ipAddresses=["192.0.2.7/24"],
            sysctls={"net.ipv6.conf.eth1.disable_ipv6": 1}),),
    )  # fmt: skip


def _good() -> Iterator[Case]:
    yield Case("empty parameters", ({},))
    yield Case("type alone", ({"type": "netdev"},))
    yield Case("fragment without type", ({"netdev": {"mtu": 1400}},))
    yield Case("kind-less mode of some kind", (nd(mode="vepa"),))
    for cidr in (
        "10.0.0.1/32",
        "fd00::1/128",
        "10.0.0.1/31",
        "10.0.0.0/31",
        "10.0.0.254/24",
        "10.0.0.255/23",
        "fd00::a/64",
        "fd00::/127",
        "fd00::ffff:ffff:ffff:ffff/64",
    ):
        yield Case(f"cidr {cidr}", (nd(ipAddresses=[cidr]),))
    for name in ("default0", "lo0", "..."):
        yield Case(f"name {name!r}", (nd(kind="veth", interfaceName=name),))
    yield Case("unicast mac", (nd(kind="veth", macAddress="02:00:00:00:00:01"),))
    yield Case("a global mac on a veth", (nd(kind="veth", macAddress="00:1b:21:00:00:01"),))
    yield Case(
        "a locally administered mac on a macvlan",
        (nd(kind="macvlan", parent="eth0", macAddress="0a:00:00:00:00:01"),),
    )
    for mtu in (68, 65535):
        yield Case(f"mtu {mtu}", (nd(kind="dummy", mtu=mtu),))
    yield Case(
        "bounds",
        (
            nd(kind="sriov-vf", vlan=4094, vfIndex=0, trust=False, spoofchk=True),
            nd(kind="sriov-vf", vlan=0, vlanQoS=7, linkState="disable"),
            nd(kind="sriov-vf", minTxRate=0, maxTxRate=100000),
        ),
    )
    yield Case("ipoib", (nd(kind="ipoib", parent="ib0", pkey=65535, mode="connected"),))
    yield Case(
        "names",
        (nd(kind="veth", interfaceName="n" * 15, macAddress="AA:bb:CC:dd:EE:ff", bridge="br-0.x"),),
    )
    yield Case("16 addresses", (nd(ipAddresses=[f"10.0.0.{i + 1}/24" for i in range(16)]),))
    yield Case("parent from a later config", (nd(kind="macvlan"), nd(parent="eth0")))
    yield Case(
        "parent from the class",
        (nd(kind="macvlan", interfaceName="m0"),),
        class_configs=(nd(parent="eth0"),),
    )
    yield Case(
        "kind from the class",
        (nd(interfaceName="m0", mode="vepa"),),
        class_configs=(nd(kind="macvlan", parent="eth0"),),
    )
    yield Case(
        "claim kind overrides the class's",
        (nd(kind="veth"),),
        class_configs=(nd(kind="dummy", mtu=1400),),
    )
    yield Case(
        "rdma", ({"type": "rdma", "rdma": {"kind": "uverbs", "netnsMode": "shared"}},), type="rdma"
    )
    yield Case(
        "rdma exclusive (the node checks the injection mode and the host)",
        ({"type": "rdma", "rdma": {"kind": "uverbs", "netnsMode": "exclusive"}},),
        type="rdma",
    )
    yield Case(
        "routes and sysctls (NRI mode; the node checks the interface and the mode)",
        (
            nd(
                kind="veth",
                ipAddresses=["10.0.0.2/24", "fd00::2/64"],
                routes=[
                    {"destination": "0.0.0.0/0", "gateway": "10.0.0.1", "metric": 100},
                    {"destination": "fd00:20::/64", "gateway": "fe80::1", "metric": 4294967295},
                    {"destination": "192.0.2.0/24"},
                ],
                sysctls={"net.ipv4.conf.eth1.rp_filter": 2, "net.ipv6.conf.eth1.accept_ra": "0"},
            ),
        ),
    )
    yield Case(
        "sysctls merge with the class's",
        (nd(sysctls={"net.ipv4.conf.eth1.forwarding": 1}),),
        class_configs=(nd(kind="veth", sysctls={"net.ipv4.conf.eth1.rp_filter": 2}),),
    )
    yield Case(
        "combo over its class", ({"combo": {"netdev": {"interfaceName": "r0"}}},), type="combo"
    )


def cn(**cni: Any) -> Params:
    """A config of type cni."""
    return {"type": "cni", "cni": cni}


def network_text(*plugins: str) -> str:
    """A CNI network configuration list running `plugins` (the first with host-local)."""
    first, *rest = plugins
    head = {"type": first, "ipam": {"type": "host-local", "subnet": "203.0.113.0/24"}}
    listed = [head, *({"type": p} for p in rest)]
    return json.dumps({"cniVersion": "1.0.0", "name": "n", "plugins": listed}, indent=1)


def _cni() -> Iterator[Case]:
    """One source of a network, and only plugins the nodes allow in an inline one."""
    nad = cn(networkAttachment="macvlan-conf")
    yield Case("cni: a NAD", (nad,), type="cni")
    yield Case("cni: an inline network", (cn(config=network_text("bridge", "tuning")),), type="cni")
    yield Case(
        "cni: both sources",
        (cn(networkAttachment="macvlan-conf", config=network_text("bridge")),),
        ("[0].cni.config",),
        type="cni",
    )
    yield Case("cni: no source", (cn(interfaceName="net2"),), ("[0].cni.networkAttachment",),
               as_class=(), type="cni")  # fmt: skip
    yield Case(
        "cni: the class names the NAD",
        (cn(interfaceName="net2"),),
        class_configs=(nad,),
        type="cni",
    )
    yield Case(
        "cni: a source in the class, another in the claim",
        (cn(config=network_text("bridge")),),
        ("[0].cni.config",),
        class_configs=(nad,),
        type="cni",
    )
    yield Case(
        "cni: a plugin not allowed",
        (cn(config=network_text("bridge", "portmap")),),
        ("[0].cni.config",),
        type="cni",
    )
    yield Case(
        "cni: an IPAM plugin not allowed",
        (cn(config=network_text("macvlan").replace("host-local", "dhcp")),),
        ("[0].cni.config",),
        type="cni",
    )
    yield Case("cni: not a JSON object", (cn(config="[]"),), ("[0].cni.config",), type="cni")


def _node_only() -> Iterator[Case]:
    """Valid in form, refused at prepare on NODE: accepted at admission."""
    yield Case(
        "outside the node's ranges",
        (nd(kind="veth", ipAddresses=["192.0.2.7/24", "10.9.9.9/24"]),),
        node=("[0].netdev.ipAddresses[1]",),
    )
    yield Case(
        "the node's gateway",
        (nd(kind="veth", ipAddresses=[f"{NODE_GATEWAY}/24"]),),
        node=("[0].netdev.ipAddresses[0]",),
    )
    yield Case(
        "the node's own address",
        (nd(kind="veth", ipAddresses=[NODE_ADDRESS]),),
        node=("[0].netdev.ipAddresses[0]",),
    )
    yield Case(
        "IPv6 below MTU 1280",
        (nd(kind="veth", mtu=1279, ipAddresses=["2001:db8::7/64"]),),
        node=("[0].netdev.ipAddresses[0]",),
    )


def cases() -> list[Case]:
    """Every case of the table."""
    out = [
        *_bad_values(),
        *_bad_shapes(),
        *_bad_routes_and_sysctls(),
        *_interface_rules(),
        *_good(),
        *_interface_rules_kept(),
        *_cni(),
        *_node_only(),
    ]
    names = [c.name for c in out]
    assert len(names) == len(set(names)), "case names must be unique"
    return out


# ---------------------------------------------------------------- valid examples


@dataclass(frozen=True)
class Example:
    """An object of deploy/, README.md or docs/ with opaque config of ours (applied as it is)."""

    source: str
    obj: dict[str, Any] = field(hash=False)


def examples() -> list[Example]:
    """Every DeviceClass, claim and claim template with config of ours in deploy/*.yaml,
    every such object in the yaml blocks of README.md and docs/*.md, and their inline config
    examples (`{type: ...}` spans without placeholders) as claims of their type's class."""
    out = []
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and _has_our_config(doc):
                out.append(Example(f"{path.name}: {doc['kind']}/{doc['metadata']['name']}", doc))
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text, where = page.read_text(), page.relative_to(ROOT)
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            for doc in yaml.safe_load_all(block):
                if doc and _has_our_config(doc):
                    out.append(Example(f"{where}: {doc['kind']}/{doc['metadata']['name']}", doc))
        for span in re.findall(r"`(\{[^`]+\})`", text):
            params = yaml.safe_load(span)
            if isinstance(params, dict) and "type" in params and not _has_null(params):
                name = f"readme-{len(out)}"
                out.append(Example(f"{where}: `{span}`", claim(name, [params], params["type"])))
    return out


def _has_our_config(doc: dict[str, Any]) -> bool:
    return any(((c.get("opaque") or {}).get("driver") == DRIVER) for c in _configs(doc))


def _configs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    if doc.get("kind") == "DeviceClass":
        return list(spec.get("config") or [])
    if doc.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    if doc.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
        return list((spec.get("devices") or {}).get("config") or [])
    return []


def _has_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    return value is None


# ---------------------------------------------------------------- objects


def opaque(params: Params, driver: str = DRIVER) -> dict[str, Any]:
    """One config entry; a `requests` key of the case's parameters scopes it."""
    params = copy.deepcopy(params)
    entry: dict[str, Any] = {}
    if "requests" in params:
        entry["requests"] = params.pop("requests")
    entry["opaque"] = {"driver": driver, "parameters": params}
    return entry


def claim(
    name: str,
    configs: Sequence[Params],
    type_: str = "netdev",
    device_class: str | None = None,
    kind: str = "ResourceClaim",
) -> dict[str, Any]:
    """A ResourceClaim (or template) with one request `nic` of the class and the configs."""
    devices = {
        "requests": [
            {"name": "nic", "exactly": {"deviceClassName": device_class or CLASS_OF_TYPE[type_]}},
            {"name": "other", "exactly": {"deviceClassName": CLASS_OF_TYPE[type_]}},
        ],
        "config": [opaque(p) for p in configs],
    }
    for entry in devices["config"]:
        entry.setdefault("requests", ["nic"])
    spec: dict[str, Any] = {"devices": devices}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def device_class(name: str, configs: Sequence[Params]) -> dict[str, Any]:
    """A DeviceClass of the driver with the configs (the merged policy reads the
    selector's driver name: another driver's classes are left alone)."""
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [selector],
            "config": [{"opaque": opaque(p)["opaque"]} for p in configs],
        },
    }


def full_path(kind: str, path: str, class_name: str = "") -> str:
    """A case's `[i].a.b` (or `class[i].a.b`) as the JSON path in the object of `kind`."""
    if path.startswith("class["):
        index, rest = path[len("class") :].split("]", 1)
        return f"DeviceClass {class_name} spec.config{index}].opaque.parameters{rest}"
    index, rest = path.split("]", 1)
    return f"{CONFIG_LISTS[kind]}{index}].opaque.parameters{rest}"
