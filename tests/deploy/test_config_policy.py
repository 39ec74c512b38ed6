"""deploy/config-policy.yaml: what the generator prints, and what Kubernetes' own admission
code (k8s.io/apiserver v0.36.3, tests/deploy/k8scheck) makes of it.

* The file is `dra-driver admission-policy`'s output: editing one without the other fails.
* It compiles for new expressions in the CEL environment of Kubernetes 1.33 and of the
  library's own version, as a 1.34 and a 1.36 API server require to create it.
* The table of tests/support/configcases.py: each invalid config is refused, naming its
  fields, in a ResourceClaim, a ResourceClaimTemplate and (where a DeviceClass alone shows
  it) a DeviceClass; each valid one and every example of deploy/ and README.md is
  accepted; nothing is refused by an evaluation error.
* A corpus derived from the schema itself (every field of every kind with boundary and
  wrong values, and a list of CIDRs) gets the driver's verdict, naming the same fields.
* Configs of other drivers are never looked at; the cost stays far below the budgets.
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

import pytest

from dradriver.admission.schema import types_of
from dradriver.claims import deep_merge
from dradriver.config import ConfigSchema
from dradriver.errors import ConfigError
from dradriver.hookspecs import Device
from dradriver.registry import HandlerRegistry
from dradriver.slices import virtual_device
from tests.deploy.support import DEPLOY, DRIVER, device_classes, k8scheck_run, run_driver
from tests.support import configcases as cc

POLICY = DEPLOY / "config-policy.yaml"
SCHEMA = ConfigSchema(HandlerRegistry(), DRIVER)
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
PER_CALL_LIMIT = 1_000_000  # k8s.io/apiserver/pkg/apis/cel: per expression
RUNTIME_BUDGET = 10_000_000  # per policy evaluation


def test_the_file_is_the_generators_output():
    res = run_driver("admission-policy")
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", "the built-in handlers' schema must translate fully"
    assert res.stdout == POLICY.read_text(), (
        "deploy/config-policy.yaml differs from `dra-driver admission-policy`: "
        "run make config-policy"
    )


def _request(
    obj: dict[str, Any],
    params: list[dict[str, Any]],
    op: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "operation": op,
        "kind": obj["kind"],
        "resource": cc.RESOURCES[obj["kind"]],
        "namespace": obj["metadata"].get("namespace", ""),
        "object": obj,
        "oldObject": old,
        "params": params,
    }


def _deploy_classes() -> list[dict[str, Any]]:
    return list(device_classes().values())


def _objects(case: cc.Case, kind: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The object of `kind` for a case and the DeviceClasses the API server would hold."""
    params = _deploy_classes()
    if kind == "DeviceClass":
        return cc.device_class(f"case-{n}", case.configs), params
    class_name = None
    if case.class_configs is not None:
        class_name = f"case-class-{n}"
        params.append(cc.device_class(class_name, case.class_configs))
    obj = cc.claim(f"case-{n}", case.configs, case.type, class_name, kind)
    obj["metadata"]["namespace"] = "default"
    return obj, params


@pytest.mark.parametrize("compat", ["1.33", ""])
def test_compiles_for_new_expressions(k8scheck, compat):
    args = ["vap", compat, str(POLICY)] if compat else ["vap", str(POLICY)]
    assert k8scheck_run(k8scheck, *args, cases=[]) == []


def _table() -> list[tuple[str, str, tuple[str, ...], str, dict[str, Any], list[dict[str, Any]]]]:
    rows = []
    for n, case in enumerate(cc.cases()):
        for kind in KINDS:
            if kind == "DeviceClass" and case.class_configs is not None:
                continue  # the case is about a claim merged with its class
            obj, params = _objects(case, kind, n)
            want = case.class_paths if kind == "DeviceClass" else case.paths
            rows.append((case.name, kind, want, f"case-class-{n}", obj, params))
    return rows


def test_table_of_configs(k8scheck):
    rows = _table()
    results = k8scheck_run(
        k8scheck, "vap", str(POLICY), cases=[_request(obj, params) for *_, obj, params in rows]
    )
    wrong = []
    for (name, kind, want, class_name, _, _), got in zip(rows, results, strict=True):
        label = f"{name} [{kind}]"
        if got["errors"]:
            wrong.append(f"{label}: evaluation errors {got['errors']}")
        if got["allowed"] == bool(want):
            wrong.append(
                f"{label}: allowed={got['allowed']}, want refused for {want}: {got['messages']}"
            )
            continue
        text = " ".join(got["messages"])
        for path in want:
            full = cc.full_path(kind, path, class_name)
            if f"{full}:" not in text:
                wrong.append(f"{label}: the message does not name {full}: {text}")
    assert not wrong, "\n".join(wrong)
    assert sum(1 for r in rows if r[2]) >= 80, "the table lost its invalid cases"


def test_every_example_of_deploy_and_readme_is_accepted(k8scheck):
    examples = cc.examples()
    sources = {e.source.split(":")[0] for e in examples}
    assert {
        "deployment.yaml",
        "multi-nic-deployment.yaml",
        "resourceclass.yaml",
        "README.md",
    } <= sources
    assert len(examples) >= 8, [e.source for e in examples]
    results = k8scheck_run(
        k8scheck, "vap", str(POLICY), cases=[_request(e.obj, _deploy_classes()) for e in examples]
    )
    wrong = [
        f"{e.source}: {got}"
        for e, got in zip(examples, results, strict=True)
        if not got["allowed"] or got["errors"]
    ]
    assert not wrong, "\n".join(wrong)


def test_configs_of_other_drivers_are_untouched(k8scheck):
    garbage = [{"type": 5, "netdev": {"kind": "tap", "mtu": -1}, "anything": [1, 2]}]
    claim = cc.claim("other", garbage)
    for entry in claim["spec"]["devices"]["config"]:
        entry["opaque"]["driver"] = "gpu.example.com"
    device_class = cc.device_class("other", garbage)
    device_class["spec"]["config"][0]["opaque"]["driver"] = "gpu.example.com"
    mixed = cc.claim("mixed", [cc.nd(kind="veth", mtu=1)])
    mixed["spec"]["devices"]["config"].append(copy.deepcopy(claim["spec"]["devices"]["config"][0]))
    cases = [
        _request(claim, _deploy_classes()),
        _request(device_class, _deploy_classes()),
        _request(mixed, _deploy_classes()),
    ]
    results = k8scheck_run(k8scheck, "vap", str(POLICY), cases=cases)
    assert [r["allowed"] for r in results] == [True, True, False]
    assert "config[0].opaque.parameters.netdev.mtu" in results[2]["messages"][0]
    assert "config[1]" not in " ".join(results[2]["messages"])
    assert results[0]["cost"] == results[1]["cost"] == 0, "match conditions stop the policy"


def test_device_class_updates_are_checked_only_when_the_config_changes(k8scheck):
    bad = cc.device_class("c", [cc.nd(mtu=1)])
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"] = {"x": "y"}
    good = cc.device_class("c", [cc.nd(mtu=1500)])
    cases = [
        _request(relabelled, [], "UPDATE", old=bad),  # stored before the policy: still usable
        _request(bad, [], "UPDATE", old=good),
        _request(good, [], "UPDATE", old=bad),
    ]
    results = k8scheck_run(k8scheck, "vap", str(POLICY), cases=cases)
    assert [r["allowed"] for r in results] == [True, False, True]


def test_first_available_subrequests_merge_with_their_own_class(k8scheck):
    claim = cc.claim(
        "fa", [cc.nd(kind="macvlan"), {"requests": ["nic/b"], "netdev": {"parent": "eth0"}}]
    )
    claim["spec"]["devices"]["requests"][0] = {
        "name": "nic",
        "firstAvailable": [
            {"name": "a", "deviceClassName": "virtual-network"},
            {"name": "b", "deviceClassName": "virtual-network"},
        ],
    }
    claim["spec"]["devices"]["config"][0]["requests"] = ["nic"]
    [got] = k8scheck_run(k8scheck, "vap", str(POLICY), cases=[_request(claim, _deploy_classes())])
    assert not got["allowed"] and not got["errors"]
    text = " ".join(got["messages"])
    assert "request nic/a at spec.devices.requests[0].firstAvailable[0]" in text, text
    assert "nic/b" not in text, "subrequest b has its parent"


# ------------------------------------------------------------ the driver agrees

DEVICES = [
    virtual_device("netdev-virtual"),
    Device("nic-eth1", {"type": "netdev", "kind": "host-device"}),
    Device("vf-0", {"type": "netdev", "kind": "sriov-vf"}),
    Device("rdma-0", {"type": "rdma", "kind": "uverbs"}),
]


def _merged(configs: list[dict[str, Any]], prefix: dict[str, Any] | None = None) -> Any:
    merged: Any = prefix
    for params in configs:
        merged = deep_merge(merged, {k: v for k, v in params.items() if k != "requests"})
    return merged


def _valid(params: Any, device: Device) -> bool:
    try:
        SCHEMA.resolve(params, device)
    except ConfigError:
        return False
    return True


def _class_configs(case: cc.Case) -> list[dict[str, Any]]:
    if case.class_configs is not None:
        return list(case.class_configs)
    spec = device_classes()[cc.CLASS_OF_TYPE[case.type]]["spec"]
    return [c["opaque"]["parameters"] for c in spec.get("config") or []]


def _completions() -> list[dict[str, Any] | None]:
    """Configs that could come with a fragment: none, or one naming each kind."""
    out: list[dict[str, Any] | None] = [None]
    for t in types_of(SCHEMA.schema):
        for kind, spec in t.kinds.items():
            out.append(
                {"type": t.name, t.name: {"kind": kind, **{f: "eth0" for f in spec.required}}}
            )
    return out


def _somewhere(configs: list[dict[str, Any]], before: list[dict[str, Any]]) -> bool:
    """Whether the driver accepts `configs` after `before` for some device, with or
    without one more config naming a kind before or after them all (another class's, or
    a claim's)."""
    for extra, device in itertools.product(_completions(), DEVICES):
        if _valid(_merged(before + configs, extra), device):
            return True
        if extra is not None and _valid(_merged([*before, *configs, extra]), device):
            return True
    return False


@pytest.mark.parametrize("case", cc.cases(), ids=lambda c: c.name)
def test_the_driver_agrees_with_the_table(case):
    """What the policy refuses the driver refuses for every device; what it accepts the
    driver accepts in some context (a device, another config naming the kind)."""
    configs = [p for p in case.configs if (p.get("requests") or ["nic"]) == ["nic"]]
    if case.paths:
        merged = _merged(_class_configs(case) + configs)
        assert not any(_valid(merged, d) for d in DEVICES), f"{case.name}: the driver accepts it"
    else:
        assert _somewhere(configs, _class_configs(case)), f"{case.name}: the driver refuses it"
    if case.class_configs is None and case.class_paths:
        merged = _merged(list(case.configs))
        assert not any(_valid(merged, d) for d in DEVICES), f"{case.name}: a class could have it"
    elif case.class_configs is None:
        assert _somewhere(list(case.configs), []), f"{case.name}: no claim could use the class"


# ------------------------------------------------ a corpus derived from the schema

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
        values += [[f"10.0.0.{i}/24" for i in range(n)] for n in (16, 17)]
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


def test_the_policy_gives_the_drivers_verdict_on_a_corpus(k8scheck):
    corpus = _corpus()
    assert len(corpus) > 1000
    cases = [
        _request(cc.claim(f"c{i}", [p], p["type"]), _deploy_classes()) for i, p in enumerate(corpus)
    ]
    for case in cases:
        case["object"]["spec"]["devices"]["config"][0].pop("requests")
        case["object"]["spec"]["devices"]["requests"].pop()  # one request: one verdict
    results = k8scheck_run(k8scheck, "vap", str(POLICY), cases=cases)
    wrong = []
    for params, got in zip(corpus, results, strict=True):
        driver = _driver_paths(params)
        policy = _policy_paths(got["messages"])
        if got["errors"] or got["allowed"] != (not driver) or not policy <= driver:
            wrong.append(f"{params!r}: driver {sorted(driver)}, policy {got}")
        elif len(driver) == 1 and policy != driver:
            wrong.append(f"{params!r}: driver {sorted(driver)}, policy {sorted(policy)}")
    assert not wrong, f"{len(wrong)} of {len(corpus)} differ:\n" + "\n".join(wrong[:40])


# ------------------------------------------------------------------------- cost


def _big_claim(
    kind: str, params: dict[str, Any], requests: int, subrequests: int
) -> dict[str, Any]:
    """32 configs (the API's limit) with `params`, and `requests` requests of
    `subrequests` subrequests each (1: an `exactly` request), all of virtual-network."""
    obj = cc.claim("big", [params] * 32, kind=kind)
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
            "ipAddresses": [f"10.0.0.{i}/24" for i in range(16)],
        },
    }
    no_parent = cc.nd(kind="macvlan", interfaceName="n1", mtu=1500)
    return [
        ("long values, 256 subrequests", _big_claim("ResourceClaim", long, 32, 8)),
        ("long values, template", _big_claim("ResourceClaimTemplate", long, 32, 8)),
        (
            "1500 unknown keys per config",
            _big_claim("ResourceClaim", {f"k{i:04}": 0 for i in range(1500)}, 1, 1),
        ),
        ("merge: 32 requests x 32 configs", _big_claim("ResourceClaim", no_parent, 32, 1)),
        ("merge: 4 x 8 subrequests x 32 configs", _big_claim("ResourceClaim", no_parent, 4, 8)),
    ]


def test_cost_stays_within_the_budgets(k8scheck, record_property):
    """Examples cost a few thousand units; the costliest objects the API admits are still
    refused by the policy itself, not by a cost error (which would let them in)."""
    examples = [_request(e.obj, _deploy_classes()) for e in cc.examples()]
    heaviest = _heaviest()
    cases = examples + [_request(obj, _deploy_classes()) for _, obj in heaviest]
    results = k8scheck_run(k8scheck, "vap", str(POLICY), cases=cases)
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
