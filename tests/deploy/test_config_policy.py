"""deploy/config-policy.yaml: what the generator prints, and what Kubernetes' own admission
code (k8s.io/apiserver v0.36.3, tests/deploy/k8scheck) makes of it.

* The chart's template (templates/config-policy/policies.yaml) is what
  hack/gen_config_policy.py makes of `dra-driver admission-policy` now, and the file holds
  exactly the generator's objects: tests/unit/test_generated_files.py (make unit) checks it.
* It compiles for new expressions in the CEL environment of Kubernetes 1.33 and of the
  library's own version, as a 1.34 and a 1.36 API server require to create it.
* The table of tests/support/configcases.py: each invalid config is refused, naming its
  fields, in a ResourceClaim, a ResourceClaimTemplate and (where a DeviceClass alone shows
  it) a DeviceClass; each valid one and every example of deploy/, README.md and docs/ is
  accepted; nothing is refused by an evaluation error.
* Configs of other drivers are never looked at; DeviceClass updates are checked only when
  their config changes; firstAvailable subrequests merge with their own class.
* The driver agrees with the table (test_config_policy_corpus.py compares the two on a
  corpus derived from the schema, and measures the cost); what the table marks as the
  node's is refused by the handlers on a node (an in-memory kernel) and by nothing else.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from dradriver.admission.schema import KindSpec, types_of
from dradriver.base.errors import ConfigError
from dradriver.claims.resolution import deep_merge
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import NRI, Device
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel import netlink
from dradriver.kernel.netlink import Route
from dradriver.settings import DEFAULT_CNI_PLUGINS, split_list
from tests.deploy.support import (
    DEPLOY,
    DRIVER,
    admission_request,
    deployed_classes,
    device_classes,
    gen_config_policy,
    run_k8scheck,
)
from tests.support import configcases as cc
from tests.support import handlers
from tests.support.fakekernel import FakeKernel
from tests.support.handlers import virtual_device

POLICY = DEPLOY / "config-policy.yaml"
# As the daemon builds it with its default --cni-plugins, as the policy is generated.
SCHEMA = ConfigSchema(HandlerRegistry(), DRIVER, (), split_list(DEFAULT_CNI_PLUGINS))
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")


def test_the_template_takes_the_driver_name_only_where_it_can_quote_it():
    """hack/gen_config_policy.py refuses what it could not substitute safely: a name in
    CEL outside a single-quoted literal, a generator whose objects depend on the name
    otherwise than by copying it."""
    gcp = gen_config_policy()
    p = gcp.PLACEHOLDER
    fine = f"c.driver == '{p}' && 'it\\'s' == \"x\" + '{p} config: ' + 'a\\\\'"
    gcp.check_in_cel_literals(fine, "fine")
    outside = [
        f"c.driver == {p}",
        f'c.driver == "{p}"',
        f"c.driver == r'{p}'",
        f"c.driver == b'{p}'",
        f"c.driver == Rb'{p}'",
        f"c.driver == '''{p}'''",
        f"'a\\\\' + {p}",
        f"'it\\'s' + {p} + ''",
    ]
    for expr in outside:
        with pytest.raises(gcp.TemplateError, match="outside a single-quoted string literal"):
            gcp.check_in_cel_literals(expr, "expr")

    def by_length(driver: str) -> tuple[str, str]:
        return f"kind: X\nname: {driver}\nsize: {len(driver)}\n", ""

    with pytest.raises(gcp.TemplateError, match="otherwise than by copying"):
        gcp.placeholder_objects(by_length)


def _objects(case: cc.Case, kind: str, n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The object of `kind` for a case and the DeviceClasses the API server would hold."""
    params = deployed_classes()
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
    assert run_k8scheck(k8scheck, *args, cases=[]) == []


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
    results = run_k8scheck(
        k8scheck,
        "vap",
        str(POLICY),
        cases=[admission_request(obj, params) for *_, obj, params in rows],
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
        "docs/configuration.md",
    } <= sources
    assert len(examples) >= 8, [e.source for e in examples]
    results = run_k8scheck(
        k8scheck,
        "vap",
        str(POLICY),
        cases=[admission_request(e.obj, deployed_classes()) for e in examples],
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
        admission_request(claim, deployed_classes()),
        admission_request(device_class, deployed_classes()),
        admission_request(mixed, deployed_classes()),
    ]
    results = run_k8scheck(k8scheck, "vap", str(POLICY), cases=cases)
    assert [r["allowed"] for r in results] == [True, True, False]
    assert "config[0].opaque.parameters.netdev.mtu" in results[2]["messages"][0]
    assert "config[1]" not in " ".join(results[2]["messages"])
    assert results[0]["cost"] == results[1]["cost"] == 0, "match conditions stop the policy"


def test_requests_of_another_drivers_class_are_not_merged_with_ours(k8scheck):
    """An unscoped config of ours reaches only the requests the driver serves: a gpu
    request of another driver's class is not refused for what it lacks."""
    gpu = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpus"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }
    scoped = {**cc.cn(networkAttachment="macvlan-conf"), "requests": ["nic"]}
    claim = cc.claim("two-drivers", [cc.cn(interfaceName="net2"), scoped], "cni")
    claim["spec"]["devices"]["config"][0]["requests"] = []
    claim["spec"]["devices"]["requests"][1]["exactly"]["deviceClassName"] = "gpus"
    unsourced = copy.deepcopy(claim)
    del unsourced["spec"]["devices"]["config"][1]
    cases = [admission_request(c, [*deployed_classes(), gpu]) for c in (claim, unsourced)]
    results = run_k8scheck(k8scheck, "vap", str(POLICY), cases=cases)
    assert [r["allowed"] for r in results] == [True, False], results
    text = " ".join(results[1]["messages"])
    assert "request nic at" in text and "request other" not in text, text


def test_device_class_updates_are_checked_only_when_the_config_changes(k8scheck):
    bad = cc.device_class("c", [cc.nd(mtu=1)])
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"] = {"x": "y"}
    good = cc.device_class("c", [cc.nd(mtu=1500)])
    cases = [
        admission_request(
            relabelled, [], "UPDATE", old=bad
        ),  # stored before the policy: still usable
        admission_request(bad, [], "UPDATE", old=good),
        admission_request(good, [], "UPDATE", old=bad),
    ]
    results = run_k8scheck(k8scheck, "vap", str(POLICY), cases=cases)
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
    [got] = run_k8scheck(
        k8scheck, "vap", str(POLICY), cases=[admission_request(claim, deployed_classes())]
    )
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
                {"type": t.name, t.name: {"kind": kind, **{f: "eth0" for f in _needed(spec)}}}
            )
    return out


def _needed(spec: KindSpec) -> list[str]:
    """The fields a config of this kind must set: required ones, the first of exactlyOneOf."""
    return [*spec.required, *spec.rest.get("exactlyOneOf", ())[:1]]


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


@pytest.fixture
def node() -> Iterator[FakeKernel]:
    """cc's node: an uplink with NODE_ADDRESS and a default route via NODE_GATEWAY."""
    kernel = FakeKernel()
    up = kernel.add("up0", up=True, mtu=1500)
    address, prefix = cc.NODE_ADDRESS.split("/")
    up.addresses.add((address, int(prefix)))
    kernel.static_routes.append(Route("0.0.0.0/0", "unicast", 254, (cc.NODE_GATEWAY,), up.index))
    previous = netlink.use(kernel)
    try:
        yield kernel
    finally:
        netlink.use(previous)


@pytest.mark.parametrize("case", [c for c in cc.cases() if c.node], ids=lambda c: c.name)
def test_what_only_the_node_checks_is_refused_at_prepare(node, case):
    """Valid in form (the policy accepts it, test_table_of_configs), refused by the
    handlers' validate on the node, naming the fields the table says."""
    configs = [p for p in case.configs if (p.get("requests") or ["nic"]) == ["nic"]]
    merged = _merged(_class_configs(case) + configs)
    handler, req = handlers.request(
        merged, ctx=handlers.context(claim_address_ranges=cc.NODE_RANGES)
    )
    netdev = merged.get("netdev") or {}
    if netdev.get("routes") or netdev.get("sysctls"):  # the NRI mode's only
        req = dataclasses.replace(req, injection=NRI)
    with pytest.raises(ConfigError) as err:
        handler.validate(req)
    named = {path for path, _ in err.value.issues}
    assert named == {"$" + p.split("]", 1)[1] for p in case.node}, err.value.issues
    assert not case.paths, "a node case is valid in form"
