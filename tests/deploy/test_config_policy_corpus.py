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

import re
from typing import Any

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
from tests.support.schemacorpus import address_sweep, field_corpus

POLICY = DEPLOY / "config-policy.yaml"
SCHEMA = ConfigSchema(HandlerRegistry(), DRIVER)
RUNTIME_BUDGET = 10_000_000  # k8s.io/apiserver/pkg/apis/cel: per policy evaluation


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
    corpus = field_corpus(SCHEMA.schema)
    assert len(corpus) > 1000
    wrong = _disagreements(k8scheck, corpus)
    assert not wrong, f"{len(wrong)} of {len(corpus)} differ:\n" + "\n".join(wrong[:40])


def test_the_policy_gives_the_drivers_verdict_on_every_prefix_length(k8scheck):
    sweep = address_sweep()
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
