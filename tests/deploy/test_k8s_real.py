"""deploy/ evaluated by Kubernetes' own code (k8s.io v0.36.3 libraries, tests/deploy/k8scheck).

- DeviceClass selectors: k8s.io/dynamic-resource-allocation/cel, the compiler and
  evaluator the scheduler uses, must give exactly what tests/deploy/cel.py gives, for
  every class and device of test_selectors and every case of test_cel.
- The ResourceSlice admission policy: compiled and run by k8s.io/apiserver's validating
  admission policy code on create, update and delete requests.

Needs Go (the machine has it; the first build downloads the modules and takes about two
minutes, later ones are cached in .cache/go like hack/build-k8s.sh's). Without Go these
tests skip and say so; DRA_SKIP_K8S_LIBS=1 skips them on purpose.
"""

from __future__ import annotations

import pytest

from dradriver.apiserver import slices
from dradriver.contract.hookspecs import Device
from tests.deploy import cel, test_cel
from tests.deploy.support import DEPLOY, DRIVER, device_classes, discover, run_k8scheck, selectors
from tests.deploy.test_selectors import constructed_devices, fabricated_sysfs
from tests.support.fakeapi import allocated_claim, opaque

SA = "system:serviceaccount:dra-system:dra-driver"
NODE_KEY = "authentication.kubernetes.io/node-name"


def _mini(expr: str, driver: str, device: dict) -> dict:
    try:
        return {"value": cel.evaluate(expr, driver, device)}
    except cel.CelError as exc:
        return {"error": str(exc)}


@pytest.mark.timeout(1500)
def test_selectors_evaluate_as_kubernetes_does(k8scheck, tmp_path):
    devices = [(d, DRIVER) for d in constructed_devices()]
    devices += [(d, DRIVER) for d in discover()]
    root = fabricated_sysfs(tmp_path / "sys")
    devices += [
        (d, DRIVER)
        for d in discover("--sysfs-root", str(root), "--parent-interfaces", "zz*",
                          "--sriov-pfs", "zzpf*", "--virtual-parents", "zz*")
    ]  # fmt: skip
    devices.append(
        (slices.device_json(Device("rdma-x", {"type": "rdma", "kind": "uverbs"})), DRIVER)
    )
    devices.append(
        ({"name": "gpu-0", "attributes": {"type": {"string": "rdma"},
                                          "gpu.example.com/model": {"string": "x"}}},
         "gpu.example.com")
    )  # fmt: skip
    cases = [
        (f"{name} on {dev['name']}", expr, driver, dev)
        for name, dc in device_classes().items()
        for expr in selectors(dc)
        for dev, driver in devices
    ]
    cases += [(f"value {e}", e, DRIVER, test_cel.DEV) for e, _ in test_cel.VALUE_CASES]
    cases += [(f"error {e}", e, DRIVER, test_cel.DEV) for e in test_cel.ERROR_CASES]
    real = run_k8scheck(k8scheck, "cel", cases=[{"expr": e, "driver": d, "device": dev}
                                       for _, e, d, dev in cases])  # fmt: skip
    differences = []
    for (label, expr, driver, device), got in zip(cases, real, strict=True):
        assert "compileError" not in got, f"{label}: {got['compileError']}"
        mine = _mini(expr, driver, device)
        if ("value" in mine) != ("value" in got) or mine.get("value") != got.get("value"):
            differences.append(f"{label}: kubernetes {got}, tests/deploy/cel.py {mine}")
    assert not differences, "\n".join(differences)


def _slice(node: str | None) -> dict:
    spec: dict = {"driver": DRIVER, "pool": {"name": node or "all", "generation": 1,
                                             "resourceSliceCount": 1}}  # fmt: skip
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node or 'all'}-dra-example-com-0"}, "spec": spec}  # fmt: skip


ON_NODE_1 = {NODE_KEY: ["node-1"]}
# (case, user, extra, operation, object's node, old object's node, allowed); "-": none
VAP_CASES = [
    ("create own", SA, ON_NODE_1, "CREATE", "node-1", "-", True),
    ("create another node's", SA, ON_NODE_1, "CREATE", "node-2", "-", False),
    ("create a cluster-wide slice", SA, ON_NODE_1, "CREATE", None, "-", False),
    ("create without node in token", SA, None, "CREATE", "node-1", "-", False),
    ("update own", SA, ON_NODE_1, "UPDATE", "node-1", "node-1", True),
    ("update another node's", SA, ON_NODE_1, "UPDATE", "node-2", "node-2", False),
    ("take over another's slice", SA, ON_NODE_1, "UPDATE", "node-1", "node-2", False),
    ("move own slice away", SA, ON_NODE_1, "UPDATE", "node-2", "node-1", False),
    ("delete own", SA, ON_NODE_1, "DELETE", "-", "node-1", True),
    ("delete another node's", SA, ON_NODE_1, "DELETE", "-", "node-2", False),
    ("delete without node in token", SA, None, "DELETE", "-", "node-1", False),
    ("another service account", "system:serviceaccount:kube-system:x", None, "CREATE",
     "node-2", "-", True),
    ("an administrator deletes", "kubernetes-admin", None, "DELETE", "-", "node-2", True),
]  # fmt: skip


def policy_mistakes(k8scheck, policy_file, sa: str = SA) -> list[str]:
    """The VAP_CASES (with the driver's user `sa`) where the ValidatingAdmissionPolicy
    in `policy_file`, run by Kubernetes' admission code, decides otherwise."""
    cases = [
        {
            "user": sa if user == SA else user,
            "extra": extra or {},
            "operation": op,
            "object": None if obj == "-" else _slice(obj),
            "oldObject": None if old == "-" else _slice(old),
        }
        for _, user, extra, op, obj, old, _ in VAP_CASES
    ]
    results = run_k8scheck(k8scheck, "vap", str(policy_file), cases=cases)
    wrong = []
    for case, got in zip(VAP_CASES, results, strict=True):
        if got["allowed"] != case[-1]:
            wrong.append(f"{case[0]}: allowed={got['allowed']} {got['messages']}")
        for message in got["messages"]:
            assert "error" not in message.lower(), f"{case[0]}: denied by an error: {message}"
    return wrong


@pytest.mark.timeout(1500)
def test_admission_policy_keeps_the_driver_to_its_own_node(k8scheck):
    wrong = policy_mistakes(k8scheck, DEPLOY / "driver.yaml")
    assert not wrong, "\n".join(wrong)


def _claim(pods, results, configs=()):
    claim = allocated_claim("c", results, uid="11111111-2222-4333-8444-555555555555",
                            config=list(configs), pods=[])  # fmt: skip
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods
    ]
    return claim


NIC = [{"request": "nic", "pool": "node-a", "device": "netdev-virtual"}]
RDMA = [{"request": "rdma", "pool": "node-a", "device": "rdma-mlx5-0"}]
OTHER = [{"request": "gpu", "pool": "node-a", "device": "gpu-0", "driver": "gpu.example.com"}]
# (name, old reservedFor, new reservedFor, results, configs, allowed)
SHARING_CASES = [
    ("a first pod", [], ["a"], NIC, (), True),
    ("a second pod", ["a"], ["a", "b"], NIC, (), False),
    ("two pods at once", [], ["a", "b"], NIC, (), False),
    ("a claim shared before the policy, unchanged", ["a", "b"], ["a", "b"], NIC, (), True),
    ("a claim shared before the policy, shrinking", ["a", "b"], ["a"], NIC, (), True),
    ("a claim shared before the policy, a pod swapped", ["a", "b"], ["a", "c"], NIC, (), False),
    ("RDMA device nodes only", ["a"], ["a", "b"], RDMA, (), True),
    ("RoCE (combo from the class)", ["a"], ["a", "b"], RDMA,
     (opaque({"type": "combo"}, source="FromClass"),), False),
    ("RDMA in exclusive netns mode", ["a"], ["a", "b"], RDMA,
     (opaque({"type": "rdma", "rdma": {"netnsMode": "exclusive"}}, requests=["rdma"]),), False),
    ("exclusive mode for another request", ["a"], ["a", "b"], RDMA,
     (opaque({"rdma": {"netnsMode": "exclusive"}}, requests=["other"]),), True),
    ("a firstAvailable subrequest", ["a"], ["a", "b"],
     [{"request": "rdma/roce", "pool": "node-a", "device": "rdma-mlx5-0"}],
     (opaque({"type": "combo"}, requests=["rdma"]),), False),
    ("another driver's claim", ["a"], ["a", "b"], OTHER, (), True),
]  # fmt: skip


@pytest.mark.timeout(1500)
def test_a_network_claim_is_never_reserved_for_a_second_pod(k8scheck):
    """deploy/driver.yaml's claim-sharing policy, run by Kubernetes' admission code on the
    status updates the scheduler makes when it reserves a claim for a pod."""
    cases = [
        {"user": "system:kube-scheduler", "operation": "UPDATE", "kind": "ResourceClaim",
         "resource": "resourceclaims", "namespace": "default",
         "policy": "dra-driver-claim-sharing",
         "object": _claim(new, results, configs), "oldObject": _claim(old, results, configs)}
        for _, old, new, results, configs, _ in SHARING_CASES
    ]  # fmt: skip
    results = run_k8scheck(k8scheck, "vap", str(DEPLOY / "driver.yaml"), cases=cases)
    wrong = []
    for case, got in zip(SHARING_CASES, results, strict=True):
        assert not got["errors"], f"{case[0]}: {got['errors']}"
        if got["allowed"] != case[-1]:
            wrong.append(f"{case[0]}: allowed={got['allowed']} {got['messages']}")
    assert not wrong, "\n".join(wrong)
    [message] = results[1]["messages"]
    assert message == (
        "ResourceClaim default/c: request nic (device netdev-virtual) goes into one pod's "
        "network namespace, and the claim is reserved for pod a: a network claim serves one "
        "pod; give each pod its own claim (a ResourceClaimTemplate)"
    )
