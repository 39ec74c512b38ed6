"""deploy/selection-examples.yaml's `firstAvailable` claim on the real node: the first pod
gets the node's free host NIC (nic/physical), the next one, with the NIC taken, a
macvlan on eth0 (nic/macvlan); each claim's allocation says which alternative it got,
and each pod has its net1."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.manifests import DEPLOY
from localcluster.podnet import via_exec
from tests.e2e.cluster import example_objects
from tests.support.waiting import wait_for

from .cluster import NodeCluster

SPARE = "spare0"  # a host NIC of the node no pod uses: a veth end, its peer stays


def _link(netns: str, name: str) -> dict[str, Any] | None:
    out = subprocess.run(
        ["ip", "-n", netns, "-j", "link", "show", "dev", name], capture_output=True, text=True
    )
    return json.loads(out.stdout)[0] if out.returncode == 0 else None


@pytest.fixture
def spare_nic(cluster: NodeCluster) -> Iterator[str]:
    """A host NIC in the node's namespace (its MAC), removed at the end."""
    netns = cluster.local.lay.netns
    subprocess.run(
        ["ip", "-n", netns, "link", "add", SPARE, "type", "veth", "peer", "name", "spare0p"],
        check=True,
    )
    for end in ("spare0p", SPARE):  # with carrier: a NIC without is tainted unhealthy
        subprocess.run(["ip", "-n", netns, "link", "set", end, "up"], check=True)
    try:
        link = _link(netns, SPARE)
        assert link is not None
        yield str(link["address"])
    finally:
        subprocess.run(["ip", "-n", netns, "link", "del", "spare0p"], check=False)


def _uplink_objects(kns: str, replicas: int) -> list[dict[str, Any]]:
    """The example's uplink template and Deployment (not the GPU example)."""
    docs = [
        d
        for d in example_objects(DEPLOY / "selection-examples.yaml", kns)
        if d["metadata"]["name"] == "uplink"
    ]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    deployment["spec"]["replicas"] = replicas
    return docs


def _running(cluster: NodeCluster, kns: str, count: int) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        pods = [p for p in cluster.pods(kns, "app=uplink") if p["status"].get("phase") == "Running"]
        return pods if len(pods) == count else None

    return wait_for(f"{count} uplink pods running", ready, 120)


def _alternative(cluster: NodeCluster, kns: str, pod: dict[str, Any]) -> tuple[str, str]:
    """(request, device) of the pod's uplink claim allocation."""
    [claim] = cluster.pod_claim_names(pod)
    [result] = cluster.claim(kns, claim)["status"]["allocation"]["devices"]["results"]
    return result["request"], result["device"]


def test_first_available_takes_the_free_host_nic_then_a_macvlan(
    cluster: NodeCluster, drivers, node_sysfs: Path, spare_nic: str, kns: str
):
    # (kns last: its pods go, and give the NIC back, before the NIC and sysfs go)
    drivers.start("--parent-interfaces", SPARE, "--sysfs-root", str(node_sysfs))
    cluster.apply(_uplink_objects(kns, 1), kns)
    [first] = _running(cluster, kns, 1)
    assert _alternative(cluster, kns, first) == ("nic/physical", f"nic-{SPARE}")
    inside = via_exec(cluster.local.kubectl, kns, first["metadata"]["name"], "app")
    assert inside["net1"].mac == spare_nic  # the node's NIC itself, renamed
    assert _link(cluster.local.lay.netns, SPARE) is None  # gone from the node

    cluster.apply(_uplink_objects(kns, 2), kns)
    [second] = [
        p for p in _running(cluster, kns, 2) if p["metadata"]["uid"] != first["metadata"]["uid"]
    ]
    request, device = _alternative(cluster, kns, second)
    assert request == "nic/macvlan" and device.startswith("netdev-virtual")
    inside = via_exec(cluster.local.kubectl, kns, second["metadata"]["name"], "app")
    assert "net1" in inside and inside["net1"].mac != spare_nic

    cluster.delete(f"/apis/apps/v1/namespaces/{kns}/deployments/uplink")
    wait_for(
        f"{SPARE} back on the node",
        lambda: _link(cluster.local.lay.netns, SPARE),
        90,
    )
