"""deploy/config-policy.yaml against the driver on a corpus derived from the schema, and
its cost, with Kubernetes' own admission code (tests/deploy/k8scheck).

* Every field of every kind with boundary and wrong values (and 70 spellings of CIDRs,
  every special range of dradriver.contract.iprules among them): the policy refuses exactly what
  the driver refuses and names only fields the driver names.
* The network, broadcast (subnet-router) and last host address of a prefix of every
  length, IPv4 and IPv6: the same verdicts.
* The costliest objects the API admits are refused by the policy, not by a cost error.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from dradriver.admission.schema import types_of
from dradriver.contract.config import ConfigSchema
from dradriver.contract.registry import HandlerRegistry
from tests.deploy.support import (
    DEPLOY,
    DRIVER,
    admission_request,
    deployed_classes,
    run_k8scheck,
)
from tests.support import configcases as cc

POLICY = DEPLOY / "config-policy.yaml"
SCHEMA = ConfigSchema(HandlerRegistry(), DRIVER)
RUNTIME_BUDGET = 10_000_000  # k8s.io/apiserver/pkg/apis/cel: per policy evaluation

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


def _corpus() -> list[dict[str, Any]]:
    out = []
    for t in types_of(SCHEMA.schema):
        for kind, spec in t.kinds.items():
            base = {"kind": kind, **{f: "eth0" for f in spec.required}}
            for name, schema in [*spec.properties.items(), ("bogus", {})]:
                for value in _values(dict(schema)):
                    out.append({"type": t.name, t.name: {**base, name: value}})
                for sub, sub_schema in (schema.get("properties") or {}).items():
                    for value in _values(dict(sub_schema)):
                        out.append({"type": t.name, t.name: {**base, name: {sub: value}}})
    return out


def _driver_paths(params: dict[str, Any]) -> set[str]:
    paths = set()
    for path, reason in SCHEMA.issues(params):
        required = re.match(r"'(\w+)' is a required property", reason)
        paths.add(path + ("." + required.group(1) if required else ""))
    return {p.replace("$", "spec.devices.config[0].opaque.parameters", 1) for p in paths}


def _policy_paths(messages: list[str]) -> set[str]:
    paths = set()
    for message in messages:
        for issue in message.split(": ", 1)[1].split("; "):
            paths.add(issue.split(": ", 1)[0])
    return paths


def _address_sweep() -> list[dict[str, Any]]:
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


def _disagreements(k8scheck: Any, corpus: list[dict[str, Any]]) -> list[str]:
    """Where the policy's verdict on a claim with one config differs from the driver's,
    or it names a field the driver does not (or not the one the driver names)."""
    cases = [
        admission_request(cc.claim(f"c{i}", [p], p["type"]), deployed_classes())
        for i, p in enumerate(corpus)
    ]
    for case in cases:
        case["object"]["spec"]["devices"]["config"][0].pop("requests")
        case["object"]["spec"]["devices"]["requests"].pop()  # one request: one verdict
    results = run_k8scheck(k8scheck, "vap", str(POLICY), cases=cases)
    wrong = []
    for params, got in zip(corpus, results, strict=True):
        driver = _driver_paths(params)
        policy = _policy_paths(got["messages"])
        if got["errors"] or got["allowed"] != (not driver) or not policy <= driver:
            wrong.append(f"{params!r}: driver {sorted(driver)}, policy {got}")
        elif len(driver) == 1 and policy != driver:
            wrong.append(f"{params!r}: driver {sorted(driver)}, policy {sorted(policy)}")
    return wrong


def test_the_policy_gives_the_drivers_verdict_on_a_corpus(k8scheck):
    corpus = _corpus()
    assert len(corpus) > 1000
    wrong = _disagreements(k8scheck, corpus)
    assert not wrong, f"{len(wrong)} of {len(corpus)} differ:\n" + "\n".join(wrong[:40])


def test_the_policy_gives_the_drivers_verdict_on_every_prefix_length(k8scheck):
    sweep = _address_sweep()
    refused = [p for p in sweep if SCHEMA.issues(p)]
    assert 100 < len(refused) < len(sweep) - 100, "the sweep has both verdicts"
    wrong = _disagreements(k8scheck, sweep)
    assert not wrong, f"{len(wrong)} of {len(sweep)} differ:\n" + "\n".join(wrong[:40])


# ------------------------------------------------------------------------- cost


def _big_claim(
    kind: str, params: dict[str, Any], requests: int, subrequests: int, configs: int = 32
) -> dict[str, Any]:
    """32 configs (the API's limit) with `params`, and `requests` requests of
    `subrequests` subrequests each (1: an `exactly` request), all of virtual-network."""
    obj = cc.claim("big", [params] * configs, kind=kind)
    devices = (
        obj["spec"]["spec"]["devices"]
        if kind == "ResourceClaimTemplate"
        else obj["spec"]["devices"]
    )
    devices["requests"] = [
        {"name": f"r{i}", "exactly": {"deviceClassName": "virtual-network"}}
        if subrequests == 1
        else {
            "name": f"r{i}",
            "firstAvailable": [
                {"name": f"s{j}", "deviceClassName": "virtual-network"} for j in range(subrequests)
            ],
        }
        for i in range(requests)
    ]
    for entry in devices["config"]:
        entry.pop("requests")
    obj["metadata"]["namespace"] = "default"
    return obj


def _heaviest() -> list[tuple[str, dict[str, Any]]]:
    """The costliest objects the API admits, each refused by the policy."""
    long = {
        "type": "netdev",
        "netdev": {  # about 10 KiB, the API's limit per config
            "kind": "macvlan",
            "parent": "x" * 9000,
            "interfaceName": "n" * 500,
            "mtu": 1500,
            "macAddress": "m" * 200,
            "mode": "bridge",
            "ipAddresses": [f"10.0.0.{i + 1}/24" for i in range(16)],
        },
    }
    no_parent = cc.nd(kind="macvlan", interfaceName="n1", mtu=1500)
    # Every list of the interface rules at its longest: 16 addresses, 32 routes (the last
    # two alike, the last through a gateway on no network), 32 sysctls of another interface.
    full = cc.nd(
        kind="veth",
        interfaceName="n1",
        ipAddresses=[f"192.0.2.{i + 1}/28" for i in range(8)]
        + [f"2001:db8::{i + 1}/64" for i in range(8)],
        routes=[
            {"destination": f"203.0.{i}.0/24", "gateway": "192.0.2.14", "metric": i}
            for i in range(31)
        ]
        + [{"destination": "203.0.30.0/24", "gateway": "2001:db8:2::1", "metric": 30}],
        sysctls={f"net.ipv6.conf.n2.k{i}": "2147483647" for i in range(31)}
        | {"net.ipv6.conf.n1.disable_ipv6": 1},
    )
    return [
        ("long values, 256 subrequests", _big_claim("ResourceClaim", long, 32, 8)),
        ("long values, template", _big_claim("ResourceClaimTemplate", long, 32, 8)),
        (
            "1500 unknown keys per config",
            _big_claim("ResourceClaim", {f"k{i:04}": 0 for i in range(1500)}, 1, 1),
        ),
        ("merge: 32 requests x 32 configs", _big_claim("ResourceClaim", no_parent, 32, 1)),
        ("merge: 4 x 8 subrequests x 32 configs", _big_claim("ResourceClaim", no_parent, 4, 8)),
        ("interface rules: 32 requests x 32 configs", _big_claim("ResourceClaim", full, 32, 1)),
        ("interface rules: 1 request x 16 configs", _big_claim("ResourceClaim", full, 1, 1, 16)),
        ("interface rules: 4 x 8 subrequests", _big_claim("ResourceClaim", full, 4, 8)),
    ]


def test_cost_stays_within_the_budgets(k8scheck, record_property):
    """Examples cost a few thousand units; the costliest objects the API admits are still
    refused by the policy itself, not by a cost error (which would let them in)."""
    examples = [admission_request(e.obj, deployed_classes()) for e in cc.examples()]
    heaviest = _heaviest()
    cases = examples + [admission_request(obj, deployed_classes()) for _, obj in heaviest]
    results = run_k8scheck(k8scheck, "vap", str(POLICY), cases=cases)
    typical = max(r["cost"] for r in results[: len(examples)])
    record_property("cost_examples_max", typical)
    report = [f"examples: at most {typical}"]
    for (name, _), got in zip(heaviest, results[len(examples) :], strict=True):
        record_property(f"cost {name}", got["cost"])
        report.append(f"{name}: {got['cost']}")
        assert not got["errors"], f"{name}: {got['errors']}"
        assert not got["allowed"], name
        assert got["cost"] < RUNTIME_BUDGET // 4, name
    print("CEL cost (both policies, messages included): " + "; ".join(report))
    assert typical < 20_000
