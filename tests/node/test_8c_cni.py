"""Claims of type cni on a real kubelet, containerd and runc: the NetworkAttachmentDefinitions
of deploy/cni-examples.yaml applied unchanged, Debian's CNI plugins run by the driver at
each pod sandbox (NRI), seen from inside the pods; a bridge network two pods share;
host-local's leases given back when the pods go; a failing plugin's words on the pod; a
CHECK failing after a restart reported on the pod and the claim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster.driver import HostDriver
from localcluster.manifests import DEPLOY, DRIVER_NAMESPACE, DRIVER_SA
from localcluster.podnet import sandbox_pid, via_exec, via_sandbox
from tests.e2e.cluster import example_objects
from tests.support import kernel
from tests.support.cniexamples import EXAMPLES, EXPECTED
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .scenario import SLEEPER

pytestmark = pytest.mark.skipif(
    not Path("/usr/lib/cni/bridge").exists(), reason="containernetworking-plugins is not installed"
)
CRD = DEPLOY / "helm/dra-driver/files/network-attachment-definition-crd.yaml"


@pytest.fixture
def cni_driver(cluster: NodeCluster, drivers: Any) -> tuple[HostDriver, Path]:
    """The NAD CRD in the cluster; a driver running Debian's plugins, the cni-examples'
    bridges allowed, host-local's leases in the node's work directory."""
    cluster.apply(CRD)
    wait_for(
        "the NetworkAttachmentDefinition API",
        lambda: cluster.get("/apis/k8s.cni.cncf.io/v1", missing_ok=True),
        60,
    )
    state = cluster.local.lay.workdir / "cni-state"
    driver = drivers.start(
        "--virtual-parents", "eth0,cni-br*",
        "--cni-bin-dir", "/usr/lib/cni",
        "--cni-state-dir", str(state),
    )  # fmt: skip
    return driver, state


def _leases(state: Path, network: str) -> list[str]:
    """The addresses host-local holds for `network`."""
    folder = state / "networks" / network
    return (
        sorted(p.name for p in folder.iterdir() if p.name[0].isdigit()) if folder.exists() else []
    )


def _claim_status(cluster: NodeCluster, kns: str, pod: dict[str, Any]) -> dict[str, Any]:
    [name] = cluster.pod_claim_names(pod)
    [device] = cluster.claim(kns, name)["status"]["devices"]
    return dict(device["networkData"])


def test_each_example_network_reaches_its_pod_unchanged(
    cluster: NodeCluster, cni_driver: tuple[HostDriver, Path], kns
):
    _, state = cni_driver
    runnable = {n for n, (_, feature) in EXPECTED.items() if not kernel.missing(feature)}
    objects = [
        o
        for o in example_objects(EXAMPLES, kns)
        if o["metadata"]["name"].removeprefix("cni-") in runnable
    ]
    assert {"macvlan-conf", "bridge-static", "tuned-limited"} <= runnable
    cluster.apply(objects, kns)
    for name in sorted(runnable):
        pod = cluster.wait_running(kns, f"cni-{name}")
        net1 = via_exec(cluster.local.kubectl, kns, f"cni-{name}", "app")["net1"]
        [address] = net1.addresses
        prefix, _ = EXPECTED[name]
        assert address.startswith(prefix), (name, address)
        assert _claim_status(cluster, kns, pod) == {
            "interfaceName": "net1",
            "ips": [address],
            "hardwareAddress": net1.mac,
        }
        if name == "tuned-limited":
            assert net1.mtu == 1400
        if name != "bridge-static":
            assert _leases(state, name) == [address.split("/")[0]]
    for name in sorted(runnable):
        cluster.delete_and_wait(kns, f"cni-{name}")
        assert _leases(state, name) == [], name


def _pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "net", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.37.0",
                    "imagePullPolicy": "Never",
                    "command": SLEEPER,
                    "resources": {"claims": [{"name": "net"}]},
                }
            ],
        },
    }


def _objects(name: str, namespace: str) -> list[dict[str, Any]]:
    """The NAD and template `name` of the examples, in `namespace`."""
    return [
        o
        for o in example_objects(EXAMPLES, namespace)
        if o["metadata"]["name"] == name and o["kind"] != "Pod"
    ]


def test_two_pods_on_one_bridge_network_reach_each_other(
    cluster: NodeCluster, cni_driver: tuple[HostDriver, Path], kns
):
    _, state = cni_driver
    cluster.apply(
        [*_objects("tuned-limited", kns), _pod("a", "tuned-limited"), _pod("b", "tuned-limited")],
        kns,
    )
    cluster.wait_running(kns, "a")
    cluster.wait_running(kns, "b")
    [b_address] = via_exec(cluster.local.kubectl, kns, "b", "app")["net1"].addresses
    b_ip = b_address.split("/")[0]
    ping = cluster.local.kubectl(
        "exec", "-n", kns, "a", "-c", "app", "--", "ping", "-c", "1", "-W", "5", "-I", "net1", b_ip,
        check=False,
    )  # fmt: skip
    assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout + ping.stderr
    assert len(_leases(state, "tuned-limited")) == 2
    cluster.delete_and_wait(kns, "a")
    cluster.delete_and_wait(kns, "b")
    assert _leases(state, "tuned-limited") == []


def test_a_failing_plugin_fails_the_sandbox_with_its_words_and_leaves_nothing(
    cluster: NodeCluster, cni_driver: tuple[HostDriver, Path], kns
):
    _, state = cni_driver
    [nad, template] = _objects("macvlan-conf", kns)
    conf = json.loads(nad["spec"]["config"])
    conf["plugins"].append({"type": "tuning", "sysctl": {"net.ipv4.conf.net1.no_such_key": "1"}})
    nad["spec"]["config"] = json.dumps(conf)
    cluster.apply([nad, template, _pod("p", "macvlan-conf")], kns)

    def failed() -> str | None:
        for ev in cluster.events(kns, "p"):
            if "plugin tuning (CNI ADD) failed" in ev.get("message", ""):
                return str(ev["message"])
        return None

    message = wait_for("the sandbox to fail with the plugin's words", failed, 90)
    assert "NetworkAttachmentDefinition" in message or "network macvlan-conf" in message, message
    assert "no_such_key" in message, message
    assert cluster.pod(kns, "p")["status"]["phase"] == "Pending"
    assert _leases(state, "macvlan-conf") == []


def test_check_failing_after_a_restart_is_reported_on_the_pod_and_the_claim(
    cluster: NodeCluster, cni_driver: tuple[HostDriver, Path], kns
):
    """net1 removed by hand inside a running pod: the driver, started again, runs CHECK
    at the runtime's Synchronize and says so on the pod and on its claim, with the
    plugin's words; the pod keeps running."""
    driver, _ = cni_driver
    lay = cluster.local.lay
    cluster.apply([*_objects("macvlan-conf", kns), _pod("p", "macvlan-conf")], kns)
    cluster.wait_running(kns, "p")
    pod = cluster.pod(kns, "p")
    uid = pod["metadata"]["uid"]
    [claim] = cluster.pod_claim_names(pod)
    pid = sandbox_pid(lay, uid)
    assert pid is not None
    subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "link", "del", "net1"], check=True
    )
    driver.kill()
    driver.start()

    def reported(name: str) -> str | None:
        for ev in cluster.events(kns, name):
            if ev.get("reason") == "NetworkCheckFailed" and ev.get("type") == "Warning":
                return str(ev["message"])
        return None

    on_pod = wait_for("NetworkCheckFailed on the pod", lambda: reported("p"), 60, log=driver.log)
    on_claim = wait_for("NetworkCheckFailed on the claim", lambda: reported(claim), 30)
    for message in (on_pod, on_claim):
        assert "plugin macvlan (CNI CHECK) failed" in message and "net1" in message, message
    assert cluster.pod(kns, "p")["status"]["phase"] == "Running"


def _bridged(cluster: NodeCluster, bridge: str) -> list[str]:
    """The node's links whose master is `bridge` (the pods' veth ends)."""
    out = subprocess.run(
        ["ip", "-n", cluster.local.lay.netns, "-j", "link", "show", "master", bridge],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return [ln["ifname"] for ln in json.loads(out.stdout or "[]")]


def test_driver_sigkill_while_sandboxes_are_made_and_gone_leaves_nothing(
    cluster: NodeCluster, cni_driver: tuple[HostDriver, Path], kns
):
    driver, state = cni_driver
    lay = cluster.local.lay
    names = [f"p{i}" for i in range(3)]
    cluster.apply(
        [*_objects("tuned-limited", kns), *(_pod(n, "tuned-limited") for n in names)], kns
    )
    log = lay.logs / "containerd.log"
    wait_for(
        "containerd to begin creating the pods' sandboxes",
        lambda: all(f'RunPodSandbox for name:\\"{n}\\"' in log.read_text() for n in names),
        60,
        interval=0.01,
        log=driver.log,
    )
    driver.kill()  # while the plugins of some sandbox may be running
    time.sleep(1)
    driver.start()
    for name in names:
        cluster.wait_running(kns, name)
    wait_for(
        "one lease per pod", lambda: len(_leases(state, "tuned-limited")) == 3, 30, log=driver.log
    )

    # The driver dies again; meanwhile p0's sandbox dies and the kubelet makes a new one,
    # which the runtime creates without the plugin. Back, the driver deletes the network
    # of the sandbox that went and makes it in the new one (its Synchronize).
    driver.kill()
    uid = cluster.pod(kns, "p0")["metadata"]["uid"]
    old = sandbox_pid(lay, uid)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_for(
        "p0's new sandbox to run without the driver",
        lambda: (pid := sandbox_pid(lay, uid)) is not None and pid != old,
        60,
        log=lambda: cluster.describe_pod(kns, "p0"),
    )
    driver.start()
    wait_for(
        "p0's new sandbox to get net1", lambda: "net1" in via_sandbox(lay, uid), 30, log=driver.log
    )
    wait_for(
        "one lease per pod", lambda: len(_leases(state, "tuned-limited")) == 3, 30, log=driver.log
    )
    assert len(_bridged(cluster, "cni-br-tuned")) == 3
    for name in names:
        cluster.delete_and_wait(kns, name)
    assert _leases(state, "tuned-limited") == []
    assert _bridged(cluster, "cni-br-tuned") == []
    assert "Traceback" not in driver.log()


def test_the_pods_network_status_annotation_as_multus_writes_it(
    cluster: NodeCluster, drivers: Any, kns
):
    """With --cni-network-status on, and patch on pods granted as the chart grants it."""
    cluster.apply(CRD)
    grant = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "dra-driver-network-status"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "dra-driver-network-status"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "dra-driver-network-status"},
        "subjects": [{"kind": "ServiceAccount", "name": DRIVER_SA,
                      "namespace": DRIVER_NAMESPACE}],
    }  # fmt: skip
    cluster.apply([grant, binding])
    try:
        _annotated(cluster, drivers, kns)
    finally:
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        cluster.delete(f"{rbac}/clusterrolebindings/dra-driver-network-status")
        cluster.delete(f"{rbac}/clusterroles/dra-driver-network-status")


def _annotated(cluster: NodeCluster, drivers: Any, kns: str) -> None:
    """A pod with a NAD's network gets its annotation."""
    state = cluster.local.lay.workdir / "cni-state"
    driver = drivers.start(
        "--virtual-parents", "eth0,cni-br*", "--cni-bin-dir", "/usr/lib/cni",
        "--cni-state-dir", str(state), "--cni-network-status", "on",
    )  # fmt: skip
    cluster.apply([*_objects("macvlan-conf", kns), _pod("p", "macvlan-conf")], kns)
    cluster.wait_running(kns, "p")
    net1 = via_exec(cluster.local.kubectl, kns, "p", "app")["net1"]

    def annotation() -> str | None:
        return (cluster.pod(kns, "p")["metadata"].get("annotations") or {}).get(
            "k8s.v1.cni.cncf.io/network-status"
        )

    text = wait_for("the network-status annotation", annotation, 30, log=driver.log)
    assert json.loads(text) == [
        {
            "name": f"{kns}/macvlan-conf",
            "interface": "net1",
            "ips": [net1.addresses[0].split("/")[0]],
            "mac": net1.mac,
            "default": False,
            "dns": {},
        }
    ]
    cluster.delete_and_wait(kns, "p")
