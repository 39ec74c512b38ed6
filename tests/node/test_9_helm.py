"""The Helm chart on the real node: installed, upgraded and uninstalled by a real helm
(hack/build-helm.sh) against the node's API server, its driver registered with the real
kubelet, and pods of the chart's DeviceClass given their interface by the real runtime.

The chart's DaemonSet cannot run here: there is no driver image (docs/testing.md, "The local
node"). Its nodeSelector therefore matches no node, and its driver runs as the node
tier's does, a host process with a stand-in pod's identity (localcluster/driver.py), but
from exactly the environment the release renders for the DaemonSet's container (every
setting, the downward API's fields filled in for the stand-in pod), as the chart's
ServiceAccount: the chart's RBAC, admission policy and DeviceClasses are what let it
publish, prepare and write status. The DaemonSet's own rollout, the admission policies
and the release's objects are checked in detail by the e2e tier (tests/e2e/test_9_helm.py).
The release has its own driver and class names, beside the session's deploy/ objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.apiclient import load_documents
from localcluster.driver import HostDriver
from localcluster.layout import PARENT
from localcluster.manifests import DEPLOY
from localcluster.node import LocalNode
from localcluster.podnet import via_exec
from tests.support.helm import Helm, device_classes, pod_env
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .conftest import Drivers
from .leftovers import driver_state
from .scenario import pod, template

CHART = DEPLOY / "helm" / "dra-driver"
RELEASE = "node-helm"
NAMESPACE = "node-helm-system"
DRIVER = "helm.node.example.com"
NAME = f"{RELEASE}-dra-driver"  # the chart's full name: DaemonSet, ServiceAccount, ...
CLASS = "helm-virtual-network"
NETDEV = {"kind": "veth", "interfaceName": "net1", "mtu": 1400, "ipAddresses": []}


def release_values(node: LocalNode, slots: int, log_level: str = "info") -> dict[str, Any]:
    """The operator's values: the node's directories and NRI socket, this release's
    driver and class names, a DaemonSet on no node (see the module docstring)."""
    lay = node.lay
    return {
        "driverName": DRIVER,
        "nodeSelector": {"dra-node-tier/helm": "no-driver-image-here"},
        "hostPaths": {
            "kubeletRegistryDir": str(lay.kubelet_registry),
            "kubeletPluginsDir": str(lay.kubelet_plugins),
            "cdiDir": str(lay.cdi_dir),
            "nriSocket": str(lay.nri_socket),
        },
        "settings": {
            "virtualSlots": slots,
            "virtualParents": [PARENT],
            "claimAddressRanges": ["198.51.100.0/24"],
            "healthcheckPort": 51516,  # the session's driver has the default one
            "logLevel": log_level,
        },
        "deviceClasses": device_classes("helm-"),
    }


def daemonset_env(helm: Helm) -> Callable[[dict[str, Any]], dict[str, str]]:
    """The environment of the release's DaemonSet container, for a given stand-in pod."""
    [ds] = [o for o in helm.manifest() if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]

    def env(stand_in: dict[str, Any]) -> dict[str, str]:
        as_scheduled = {
            "metadata": {k: stand_in["metadata"][k] for k in ("uid", "name", "namespace")},
            "spec": {**spec, "nodeName": stand_in["spec"]["nodeName"]},
        }
        return pod_env(as_scheduled)

    return env


@pytest.fixture
def helm(cluster: NodeCluster, node: LocalNode, tmp_path: Path) -> Iterator[Helm]:
    """helm for the release, its namespace (deploy/namespace.yaml's labels); at the end,
    whatever a failure left is uninstalled and removed."""
    h = Helm(node.control_plane.admin_kubeconfig, tmp_path / "helm", RELEASE, NAMESPACE)
    [namespace] = load_documents(DEPLOY / "namespace.yaml")
    namespace["metadata"]["name"] = NAMESPACE
    cluster.apply(namespace)
    try:
        yield h
    finally:
        h("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found", check=False)
        cluster.remove_namespace(NAMESPACE)
        cluster.delete_slices(driver=DRIVER)


def start_release_driver(drivers: Drivers, helm: Helm) -> HostDriver:
    """A driver instance of the release's current revision, registered with the kubelet."""
    return drivers.start(
        namespace=NAMESPACE, service_account=NAME, daemonset_env=daemonset_env(helm)
    )


def slots(cluster: NodeCluster) -> str | None:
    """The `slots` capacity the release's driver published for the node."""
    for s in cluster.slices(driver=DRIVER):
        for dev in s["spec"].get("devices") or []:
            if dev["name"] == "netdev-virtual":
                return str(dev["capacity"]["slots"]["value"])
    return None


def pod_gets_its_interface(cluster: NodeCluster, kns: str, name: str, address: str) -> str:
    """A pod with a claim of the release's class runs with the interface inside it, and
    the release's driver wrote the claim's status; returns the claim's UID."""
    netdev = {**NETDEV, "ipAddresses": [address]}
    tpl = template(f"{name}-net", netdev, device_class=CLASS, driver=DRIVER)
    cluster.apply([tpl, pod(name, [tpl["metadata"]["name"]])], kns)
    running = cluster.wait_running(kns, name)
    inside = via_exec(cluster.local.kubectl, kns, name, "app")
    assert inside["net1"].mtu == 1400 and set(inside["net1"].addresses) == {address}, inside
    [claim_name] = cluster.pod_claim_names(running)

    def status() -> Any:
        got = cluster.claim(kns, claim_name).get("status", {}).get("devices")
        return got if got and got[0]["driver"] == DRIVER else None

    [device] = wait_for("status.devices written by the release's driver", status, 15)
    assert device["networkData"]["ips"] == [address]
    return str(cluster.claim(kns, claim_name)["metadata"]["uid"])


@pytest.mark.timeout(600)
def test_install_upgrade_uninstall_on_the_real_node(
    cluster: NodeCluster, node: LocalNode, helm: Helm, drivers: Drivers, kns: str
) -> None:
    # --- helm install -----------------------------------------------------------------
    out = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--values", helm.values("install", release_values(node, 8)),
    ).stdout  # fmt: skip
    assert f"is installed as release {RELEASE} in namespace {NAMESPACE}" in out
    assert [(r["status"], r["revision"]) for r in helm.releases()] == [("deployed", "1")]
    assert cluster.pods(NAMESPACE, f"app.kubernetes.io/instance={RELEASE}") == []
    first = start_release_driver(drivers, helm)
    assert first.process.driver == DRIVER
    wait_for("the release's slice with 8 slots", lambda: slots(cluster) == "8", 30, log=first.log)
    uid = pod_gets_its_interface(cluster, kns, "before-upgrade", "198.51.100.61/24")
    assert "level=debug" not in first.log()

    # --- helm upgrade: fewer slots, debug logging; a new instance, then the old one goes
    helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--values", helm.values("upgrade", release_values(node, 4, "debug")),
    )  # fmt: skip
    assert [(r["status"], r["revision"]) for r in helm.releases()] == [("deployed", "2")]
    second = start_release_driver(drivers, helm)
    wait_for("the new slice with 4 slots", lambda: slots(cluster) == "4", 30, log=second.log)
    first.remove()
    assert "level=debug" in second.log()
    pod_gets_its_interface(cluster, kns, "after-upgrade", "198.51.100.62/24")
    # The pod prepared by the old instance is unprepared by the new one.
    cluster.delete_and_wait(kns, "before-upgrade")
    cluster.delete_and_wait(kns, "after-upgrade")
    wait_for(
        "the release's driver to hold nothing on the node",
        lambda: (
            driver_state(node.lay, DRIVER).of(uid) == []
            and not driver_state(node.lay, DRIVER).records
        ),
        30,
        log=second.log,
    )

    # --- helm uninstall -----------------------------------------------------------------
    installed = helm.manifest()
    helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    assert helm.releases() == []
    for obj in installed:
        path = cluster.cp.rest.object_path(obj, NAMESPACE)
        assert cluster.get(path, missing_ok=True) is None, f"{path} is left"
    assert cluster.get(f"/apis/resource.k8s.io/v1/deviceclasses/{CLASS}", missing_ok=True) is None
