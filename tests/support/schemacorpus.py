"""A corpus of configs derived from the config schema, for comparing checkers: every field
of every kind with boundary and wrong values (70 spellings of CIDRs, every special range
of dradriver.contract.iprules among them), and addresses at the edges of a prefix of every
length. The admission policies (tests/deploy) and the schema validator (tests/unit) are
each compared with the driver's verdicts on it."""

from __future__ import annotations

import ipaddress
from typing import Any

from dradriver.admission.schema import types_of

GENERIC = [None, True, 0, -1, 7, 1.5, "", "x", "eth0", [], {}, ["x"], {"x": 1}]
STRINGS = [
    "a" * 15,
    "a" * 16,
    "lo",
    ".",
    "..",
    "a b",
    "a/b",
    "a:b",
    "é",
    "net1\n",
    "-",
    "aa:bb:cc:dd:ee:ff",
    "AA:BB:CC:DD:EE:FF",
    "aa:bb:cc:dd:ee:ff\n",
    "aa:bb:cc:dd:ee",
    "aa:bb:cc:dd:ee:f",
    "aa:bb:cc:dd:ee:ff:00",
    "ib0.8001",
    "all",
    "default",
    "net%d",
    "%",
    "00:00:00:00:00:00",
    "01:00:5e:00:00:01",
    "ff:ff:ff:ff:ff:ff",
    "02:00:00:00:00:01",
]
CIDRS = [
    "10.0.0.2/24",
    "0.0.0.0/0",
    "10.0.0.2/32",
    "10.0.0.2/33",
    "10.0.0.2",
    "10.0.0.2/",
    "10.0.0.2/024",
    "10.0.0.2/+24",
    "10.0.0.2/ 24",
    "10.0.0.2/24 ",
    " 10.0.0.2/24",
    "10.0.0.2/255.255.255.0",
    "010.0.0.2/24",
    "10.0.0.256/24",
    "10.0.0/24",
    "10.0.0.2.1/24",
    "fd00::2/64",
    "::/0",
    "::1/128",
    "fd00::2/129",
    "FD00::A/64",
    "fd00:0:0:0:0:0:0:2/64",
    "fd00::0002/64",
    "fd00::00002/64",
    "fd00::2::3/64",
    "::ffff:10.0.0.2/104",
    "::10.0.0.2/96",
    "1:2:3:4:5:6:10.0.0.2/64",
    "fe80::1%eth0/64",
    "fd00::2/064",
    "1:2:3:4:5:6:7::/64",
    "::1:2:3:4:5:6:7/64",
    "1:2:3:4:5:6:7:8/64",
    "1:2:3:4:5:6:7:8:9/64",
    "10.0.0.2/24/1",
    "10.0.0.2//24",
    "/24",
    "abc",
    "10.0.0.2/\u0662\u0664",
    "\u0661\u0660.0.0.2/24",
    # dradriver.contract.iprules, rule 1: special ranges, a prefix's own network, broadcast and
    # subnet-router addresses, /0
    "0.0.0.5/8",
    "127.0.0.1/8",
    "169.254.169.254/32",
    "224.0.0.1/32",
    "240.0.0.1/4",
    "255.255.255.255/32",
    "::/128",
    "::2/64",
    "fe80::1/64",
    "ff02::1/128",
    "::ffff:a00:2/96",
    "10.0.0.0/24",
    "10.0.0.255/24",
    "10.0.0.254/24",
    "10.0.0.0/31",
    "10.0.0.1/31",
    "10.0.0.0/32",
    "10.0.0.2/0",
    "fd00::/64",
    "fd00::/127",
    "fd00::/128",
    "fd00::ffff:ffff:ffff:ffff/64",
    "2001:db8::1/128",
]


def _values(schema: dict[str, Any]) -> list[Any]:
    values: list[Any] = [*GENERIC]
    if schema.get("type") == "string" or "enum" in schema:
        values += STRINGS
    for kw in ("minimum", "maximum"):
        if kw in schema:
            n = schema[kw]
            values += [n - 1, n, n + 1, float(n), str(n)]
    values += [2**63, -(2**63), 2**64]
    if schema.get("type") == "array":
        values += [[c] for c in CIDRS]
        values += [[f"10.0.0.{i + 1}/24" for i in range(n)] for n in (16, 17)]
        values += [["10.0.0.2/24", "10.0.0.2/24"], ["10.0.0.2/24", "fd00::2/64"], [5]]
    values += [
        "bridge",
        "vepa",
        "private",
        "passthru",
        "l2",
        "l3",
        "l3s",
        "datagram",
        "connected",
        "shared",
        "exclusive",
    ]
    return values


def field_corpus(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every field of every kind of `schema` with boundary and wrong values, one config each."""
    out = []
    for t in types_of(schema):
        for kind, spec in t.kinds.items():
            base = {"kind": kind, **{f: "eth0" for f in spec.required}}
            for name, field in [*spec.properties.items(), ("bogus", {})]:
                for value in _values(dict(field)):
                    out.append({"type": t.name, t.name: {**base, name: value}})
                for sub, sub_schema in (field.get("properties") or {}).items():
                    for value in _values(dict(sub_schema)):
                        out.append({"type": t.name, t.name: {**base, name: {sub: value}}})
    return out


def address_sweep() -> list[dict[str, Any]]:
    """One address each, as a veth's: for a prefix of every length, its network,
    broadcast and last host address, and addresses whose low bits are all ones (IPv4:
    around 203.0.113.77; IPv6: the network address, the one after it and the last one,
    around 2001:db8:1234:5678::9)."""
    values = []
    for prefix in range(33):
        net = ipaddress.ip_network(f"203.0.113.77/{prefix}", strict=False)
        ips = [net.network_address, net.broadcast_address, net.broadcast_address - 1]
        ips += map(ipaddress.ip_address, ("203.0.113.255", "203.0.255.255", "203.127.255.255"))
        values += [f"{ip}/{prefix}" for ip in ips]
    for prefix in range(129):
        net = ipaddress.ip_network(f"2001:db8:1234:5678::9/{prefix}", strict=False)
        ips = [net.network_address, net.network_address + 1, net.broadcast_address]
        values += [f"{ip}/{prefix}" for ip in ips]
    return [{"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": [v]}} for v in values]
