"""Scenario 9: the Helm chart (deploy/helm/dra-driver) installed, upgraded and
uninstalled by a real helm (hack/build-helm.sh) against the real control plane.

The DaemonSet's pods cannot run here: there is no kubelet and no container runtime. The
DaemonSet controller still creates them and the scheduler binds them to the node, so the
test takes what a kubelet would: the pod as stored, its environment with the downward
API filled in, and a token of the chart's ServiceAccount bound to that pod. It runs
`dra-driver run` with exactly that environment (only --kubeconfig added) in a throw-away
network namespace standing for the node. The chart's host paths point into the node's
directory, as on a node whose kubelet root is not /var/lib/kubelet.

The release uses its own names (release, namespace, driver name, DeviceClass names), so
it is beside, not over, the session's deploy/ objects: a second driver in one cluster.
Its config admission policies follow its driver name: the API server refuses a bad
config of that driver at create time (and only warns once an upgrade says Warn), and
they are gone with the release.
deploy/ itself is the chart's default rendering (tests/deploy/test_helm_chart.py), which
every other e2e scenario applies.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.apiclient import ApiError, load_documents
from localcluster.forward import Forwarder
from localcluster.manifests import DEPLOY
from tests.support.driverproc import DriverProcess
from tests.support.helm import Helm, device_classes, pod_env
from tests.support.waiting import wait_for

from .cluster import ADMISSION, CONTROLLERS, RESOURCE, SLICES, Cluster
from .conftest import Node, forwarded, node_machine
from .kubelet import check_answer, results, spec_files
from .test_3_capacity import claim_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]

CHART = DEPLOY / "helm" / "dra-driver"
RELEASE = "e2e-helm"
NAMESPACE = "e2e-helm-system"
NODE = "e2e-helm-node"
DRIVER = "helm.e2e.example.com"
NAME = f"{RELEASE}-dra-driver"  # the chart's full name for this release
POLICY = f"{NAME}-resourceslices"
CONFIG_POLICY = f"{DRIVER}-opaque-config"  # named after the driver, not the release
MERGED_POLICY = f"{DRIVER}-opaque-config-merged"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
CLASS = "helm-virtual-network"


def install_values(root: Path) -> dict[str, Any]:
    """The operator's values: another driver name and class names, the DaemonSet on the
    one labelled node, the kubelet's directories where this node has them. A publish
    interval longer than the test: the old driver of a rolling update must not rewrite
    the slice the new one published (in a cluster the kubelet stops it within seconds)."""
    return {
        "driverName": DRIVER,
        "nodeSelector": {"dra-e2e/helm": "true"},
        "hostPaths": {
            "kubeletRegistryDir": str(root / "registry"),
            "kubeletPluginsDir": str(root / "plugins"),
            "cdiDir": str(root / "cdi"),
        },
        "settings": {"virtualSlots": 16, "publishInterval": 3600},
        "deviceClasses": device_classes("helm-"),
    }


@dataclass
class HelmNode:
    """The node the chart's DaemonSet is pinned to, helm, and the API forwarder."""

    node: Node
    helm: Helm
    fwd: Forwarder

    def kubeconfig(self, pod: dict[str, Any]) -> Path:
        """A token of the pod's ServiceAccount bound to the pod (as the kubelet would
        mount it), reaching the API server from inside the node's namespace."""
        dest = self.node.root / f"kubeconfig-{pod['metadata']['uid']}"
        return forwarded(self.node.cluster.cp.pod_kubeconfig(pod), self.fwd, dest)


@pytest.fixture
def helm_node(cluster: Cluster, tmp_path: Path) -> Iterator[HelmNode]:
    """A node labelled for the chart's nodeSelector, its machine, its namespace for the
    release (labelled for privileged pods as deploy/namespace.yaml), and helm. At the
    end, whatever a failure left is removed: the release, its namespace (its pods
    finished as a kubelet would), the node's slices, the Node."""
    helm = Helm(cluster.cp.admin_kubeconfig, tmp_path / "helm", RELEASE, NAMESPACE)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(cluster.delete, f"/api/v1/nodes/{NODE}")
        cleanup.callback(cluster.delete_slices, NODE, DRIVER)
        cluster.cp.create_node(NODE, labels={"dra-e2e/helm": "true"})
        port = int(cluster.cp.server.rsplit(":", 1)[1])
        ns, root, fwd = cleanup.enter_context(node_machine(port))
        cleanup.callback(leave_nothing, cluster, helm)
        [namespace] = load_documents(DEPLOY / "namespace.yaml")
        namespace["metadata"]["name"] = NAMESPACE
        cluster.apply(namespace)
        node = Node(cluster, ns, root, Path())
        node.name = NODE
        cleanup.callback(node.close)
        yield HelmNode(node, helm, fwd)


def leave_nothing(cluster: Cluster, helm: Helm) -> None:
    """Remove what a failed run left: the release, its cluster-wide objects, its
    namespace once its pods are finished."""
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found", check=False)
    for path in CLUSTER_WIDE:
        for obj in cluster.get(f"{path}?labelSelector={INSTANCE}")["items"]:
            cluster.delete(f"{path}/{obj['metadata']['name']}")
    cluster.remove_namespace(NAMESPACE)


CLUSTER_WIDE = [
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    f"{RESOURCE}/deviceclasses",
]
NAMESPACED = [
    f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
    f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets",
    f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions",
    f"/api/v1/namespaces/{NAMESPACE}/pods",
]


def of_release(cluster: Cluster) -> list[str]:
    """Every object in the API server labelled as this release's: kind/name."""
    found = []
    for path in CLUSTER_WIDE + NAMESPACED:
        for obj in cluster.get(f"{path}?labelSelector={INSTANCE}")["items"]:
            found.append(f"{path.rsplit('/', 1)[1]}/{obj['metadata']['name']}")
    secrets = cluster.get(f"/api/v1/namespaces/{NAMESPACE}/secrets?labelSelector=owner=helm")
    found += [f"secrets/{s['metadata']['name']}" for s in secrets["items"]]
    return found


def object_path(cluster: Cluster, obj: dict[str, Any]) -> str:
    """The API path of a rendered object of the release."""
    assert cluster.cp.rest is not None
    return cluster.cp.rest.object_path(obj, NAMESPACE)


def driver_pods(cluster: Cluster) -> list[dict[str, Any]]:
    """The chart's DaemonSet pods, oldest first."""
    pods = cluster.pods(NAMESPACE, INSTANCE)
    return sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])


def run_pod(node: Node, pod: dict[str, Any], fwd_kubeconfig: Path) -> DriverProcess:
    """`dra-driver run` as `pod` would run it: its environment, its token."""
    env = pod_env(pod)
    assert env["DRA_KUBELET_REGISTRY_DIR"] == str(node.root / "registry")
    assert env["DRA_KUBELET_PLUGINS_DIR"] == str(node.root / "plugins")
    assert env["DRA_CDI_DIR"] == str(node.root / "cdi")
    d = DriverProcess(
        node.root, node.ns, fwd_kubeconfig, node=NODE, pod_uid=pod["metadata"]["uid"],
        env=env, driver=env["DRA_DRIVER_NAME"], own_flags=False,
    )  # fmt: skip
    node.drivers.append(d)
    d.start()
    info = d.get_info()
    assert (info.name, info.endpoint) == (DRIVER, str(d.service_socket))
    assert d.service_socket.parent == node.root / "plugins" / DRIVER
    d.notify(True)
    return d


def config_claim(namespace: str, netdev: dict[str, Any]) -> dict[str, Any]:
    """A claim of the chart's virtual class with a netdev config for the chart's driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bad-config", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "nic", "exactly": {"deviceClassName": CLASS}}],
                "config": [
                    {
                        "requests": ["nic"],
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {"type": "netdev", "netdev": netdev},
                        },
                    }
                ],
            }
        },
    }


BAD_CONFIG = {"kind": "macvlan", "parent": "eth0", "mtu": 70000}
MTU_MESSAGE = (
    f"{DRIVER} opaque config: spec.devices.config[0].opaque.parameters.netdev.mtu: "
    "70000 is out of range 68-65535"
)


def kubectl_create(cluster: Cluster, obj: dict[str, Any], *flags: str) -> Any:
    """`kubectl create -f -` of `obj`, as a user would (its exit status and output)."""
    return cluster.cp.kubectl("create", *flags, "-f", "-", input=yaml.safe_dump(obj), check=False)


def config_policies_enforced(cluster: Cluster) -> None:
    """The chart's two config policies act (the API server's informers have them, and
    the merged one the chart's DeviceClasses): a claim only each refuses is refused."""
    probes = {
        CONFIG_POLICY: config_claim("default", {"mtu": 1}),
        MERGED_POLICY: config_claim("default", {"kind": "macvlan"}),  # no parent
    }
    for policy, claim in probes.items():
        wait_for(
            f"admission policy {policy} to be enforced",
            lambda p=policy, c=claim: cluster.config_policy_refuses(p, c),
            30,
        )


def slots(cluster: Cluster) -> str | None:
    for s in cluster.slices(NODE, DRIVER):
        for dev in s["spec"].get("devices") or []:
            if dev["name"] == "netdev-virtual":
                return str(dev["capacity"]["slots"]["value"])
    return None


def prepare_one(cluster: Cluster, d: DriverProcess, kns: str, name: str) -> None:
    """A pod with a claim of the chart's class: the scheduler allocates it from the
    driver's slice, the driver prepares it and writes its status (RBAC resourceNames of
    the chart's driver name), then the kubelet's unprepare and the pod's removal."""
    pod = claim_pod(kns, name, template="helm-veth")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    cluster.apply(pod)
    pod = cluster.wait_bound(kns, name)
    [claim] = cluster.kubelet_claims(pod, driver=DRIVER)
    [result] = results(claim, DRIVER)
    assert (result["pool"], result["device"]) == (NODE, "netdev-virtual")
    resp = d.prepare([claim])
    check_answer(resp, [claim], driver=DRIVER)
    assert [f for f in spec_files(d) if claim["metadata"]["uid"] in f]

    def status() -> Any:
        got = cluster.claim(kns, claim["metadata"]["name"]).get("status", {}).get("devices")
        return got if got and got[0]["driver"] == DRIVER else None

    wait_for("status.devices written by the chart's driver", status, 15, log=d.log)
    assert d.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    cluster.finish_pod_deletion(kns, name)
    cluster.wait_claims_released(kns, [claim["metadata"]["name"]])
    assert "writing claim status failed" not in d.log()
    assert "publishing ResourceSlices failed" not in d.log()


@pytest.mark.timeout(600)
def test_install_upgrade_uninstall(cluster: Cluster, helm_node: HelmNode, kns: str) -> None:
    node, helm = helm_node.node, helm_node.helm
    values = install_values(node.root)
    cluster.apply(veth_template(kns, "helm-veth", device_class=CLASS, driver=DRIVER))

    # --- helm install ---------------------------------------------------------------
    out = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--values", helm.values("install", values),
    ).stdout  # fmt: skip
    assert f"is installed as release {RELEASE} in namespace {NAMESPACE}" in out
    [release] = helm.releases()
    assert (release["status"], release["revision"]) == ("deployed", "1")
    installed = helm.manifest()
    assert {o["kind"] for o in installed} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
    }  # fmt: skip
    for obj in installed:
        stored = cluster.get(object_path(cluster, obj))
        assert stored["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
        assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"

    # The config policies of the chart's driver name: a bad config of that driver is
    # refused when it is created, the message naming the bad field; nothing is stored.
    names = {o["metadata"]["name"] for o in installed}
    assert {n for n in names if "opaque-config" in n} == {CONFIG_POLICY, MERGED_POLICY}
    config_policies_enforced(cluster)
    bad = config_claim(kns, BAD_CONFIG)
    res = kubectl_create(cluster, bad)
    assert res.returncode != 0, res.stdout
    print(f"kubectl create of a bad config: {res.stderr.strip()}")
    assert res.stderr.strip() == (
        'The resourceclaims "bad-config" is invalid: : '
        f"ValidatingAdmissionPolicy '{CONFIG_POLICY}' with binding '{CONFIG_POLICY}' "
        f"denied request: {MTU_MESSAGE}"
    )
    claim_path = f"{RESOURCE}/namespaces/{kns}/resourceclaims/bad-config"
    assert cluster.get(claim_path, missing_ok=True) is None

    # The DaemonSet controller makes one pod, for the one labelled node; the scheduler
    # binds it there. The test runs it as the kubelet would, and reports it running.
    [pod] = wait_for(
        "the DaemonSet's pod",
        lambda: [p for p in driver_pods(cluster) if p["spec"].get("nodeName")],
        CONTROLLERS,
    )
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["serviceAccountName"] == NAME
    assert pod["spec"]["priorityClassName"] == "system-node-critical"
    kubeconfig = helm_node.kubeconfig(pod)
    cluster.wait_policy_enforced(kubeconfig, POLICY, DRIVER)
    old = run_pod(node, pod, kubeconfig)
    cluster.report_pod_running(NAMESPACE, pod["metadata"]["name"])  # the kubelet's report

    # Its slice, written with the chart's RBAC through the chart's admission policy.
    wait_for("the driver's slice with 16 slots", lambda: slots(cluster) == "16", 15, log=old.log)
    [stored] = cluster.slices(NODE, DRIVER)
    assert stored["spec"]["pool"]["name"] == NODE
    # The policy keeps this driver's token to its own node.
    other = copy.deepcopy(stored)
    other["metadata"] = {"name": f"{RELEASE}-elsewhere"}
    other["spec"]["nodeName"] = other["spec"]["pool"]["name"] = "e2e-helm-elsewhere"
    token = cluster.kubeconfig_token(kubeconfig)
    with pytest.raises(ApiError) as err:
        cluster.cp.request("POST", SLICES, other, token=token)
    assert err.value.code == 403 and f"'{POLICY}'" in str(err.value)
    # A claim of the chart's DeviceClass, allocated by the scheduler, is prepared.
    prepare_one(cluster, old, kns, "before-upgrade")
    assert "level=debug" not in old.log()

    # --- helm upgrade: fewer slots, debug logging, no RDMA class, config policies warn ---
    values["settings"] |= {"virtualSlots": 4, "logLevel": "debug"}
    values["deviceClasses"]["rdmaDevices"]["enabled"] = False
    values["configPolicy"] = {"validationActions": ["Warn"]}
    helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--values", helm.values("upgrade", values),
    )  # fmt: skip
    [release] = helm.releases()
    assert (release["status"], release["revision"]) == ("deployed", "2")
    assert cluster.get(f"{RESOURCE}/deviceclasses/helm-rdma-devices", missing_ok=True) is None
    assert (
        cluster.get(f"{RESOURCE}/deviceclasses/{CLASS}")["metadata"]["labels"][
            "app.kubernetes.io/instance"
        ]
        == RELEASE
    )

    # The rolling update surges: a new pod beside the old one (maxSurge 1,
    # maxUnavailable 0); the old one, ready, stays until the new one is ready.
    def surged() -> list[dict[str, Any]] | None:
        pods = [p for p in driver_pods(cluster) if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None

    old_pod, new_pod = wait_for("a second driver pod on the node", surged, CONTROLLERS)
    assert old_pod["metadata"]["uid"] == pod["metadata"]["uid"]
    assert (pod_env(old_pod)["DRA_VIRTUAL_SLOTS"], pod_env(new_pod)["DRA_VIRTUAL_SLOTS"]) == (
        "16",
        "4",
    )
    assert pod_env(new_pod)["DRA_LOG_LEVEL"] == "debug"
    new = run_pod(node, new_pod, helm_node.kubeconfig(new_pod))
    assert new.reg_socket != old.reg_socket and old.get_info().name == DRIVER  # both serve
    wait_for("the new driver's slice with 4 slots", lambda: slots(cluster) == "4", 15, log=new.log)
    assert not cluster.pod(NAMESPACE, old_pod["metadata"]["name"])["metadata"].get(
        "deletionTimestamp"
    ), "the old pod must stay while the new one is not ready (maxUnavailable 0)"
    # The new pod is ready: only now the DaemonSet controller deletes the old one, whose
    # container the kubelet stops before it removes the pod.
    cluster.report_pod_running(NAMESPACE, new_pod["metadata"]["name"])
    wait_for(
        "the DaemonSet controller to delete the old pod",
        lambda: cluster.pod(NAMESPACE, old_pod["metadata"]["name"])["metadata"].get(
            "deletionTimestamp"
        ),
        CONTROLLERS,
    )
    old.stop()
    cluster.finish_pod_deletion(NAMESPACE, old_pod["metadata"]["name"])
    assert [p["metadata"]["uid"] for p in driver_pods(cluster)] == [new_pod["metadata"]["uid"]]
    assert not driver_pods(cluster)[0]["metadata"].get("deletionTimestamp")
    assert "level=debug" in new.log()
    prepare_one(cluster, new, kns, "after-upgrade")
    assert slots(cluster) == "4"

    # The bindings now say Warn: the bad config gets in, with the same message as a
    # warning to the client (a server-side dry run: nothing is stored).
    def warned() -> Any:
        res = kubectl_create(cluster, bad, "--dry-run=server")
        return res if res.returncode == 0 else None

    res = wait_for("the config policy to warn instead of refusing", warned, 30)
    print(f"with validationActions [Warn]: {res.stderr.strip()}")
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{CONFIG_POLICY}' "
        f"with binding '{CONFIG_POLICY}': {MTU_MESSAGE}"
    ) in res.stderr.splitlines(), res.stderr
    assert "(server dry run)" in res.stdout

    # --- helm uninstall -------------------------------------------------------------------
    upgraded = helm.manifest()
    helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    assert helm.releases() == []
    for obj in upgraded:
        path = object_path(cluster, obj)
        assert cluster.get(path, missing_ok=True) is None, f"{path} is left"
    for name in (CONFIG_POLICY, MERGED_POLICY):
        for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
            assert cluster.get(f"{ADMISSION}/{kind}/{name}", missing_ok=True) is None, name
    # ... and no longer act: the bad config is accepted without a word from them.
    wait_for(
        "the config policies to be gone from the API server's informers",
        lambda: CONFIG_POLICY not in kubectl_create(cluster, bad, "--dry-run=server").stderr,
        30,
    )
    res = kubectl_create(cluster, bad, "--dry-run=server")
    assert res.returncode == 0 and "Warning" not in res.stderr, res.stderr
    # The garbage collector deletes the DaemonSet's pod (and revisions); the kubelet
    # stops the driver and removes the pod, and the driver's slices once it is gone.
    wait_for(
        "the pod to be terminating",
        lambda: all(p["metadata"].get("deletionTimestamp") for p in driver_pods(cluster)),
        CONTROLLERS,
    )
    new.stop()
    for p in driver_pods(cluster):
        cluster.finish_pod_deletion(NAMESPACE, p["metadata"]["name"])
    cluster.delete_slices(NODE, DRIVER)
    wait_for(
        "nothing of the release in the API server", lambda: not of_release(cluster), CONTROLLERS
    )
    assert cluster.slices(NODE, DRIVER) == []
