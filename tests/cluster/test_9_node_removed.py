"""A node going away (the last test of the tier: the cluster keeps one node after it):
its kubelet stopped and its Node deleted, its ResourceSlices are gone and a
Deployment's NIC pods come up on the other node."""

from __future__ import annotations

from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

from .chart import ChartCluster


def deployment(name: str, replicas: int) -> dict:
    spec = pod(name, ["veth"])["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def test_a_removed_nodes_slices_go_and_its_nic_pods_come_up_elsewhere(
    chart: ChartCluster, kns: str
):
    keep, gone = chart.node_names

    def placement() -> str:
        return str(
            [
                (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
                for p in chart.api.pods(kns)
            ]
        )

    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    chart.api.apply(deployment("nics", 4), kns)

    def spread() -> bool:
        pods = [p for p in chart.api.pods(kns) if p["status"].get("phase") == "Running"]
        return len(pods) == 4 and {p["spec"]["nodeName"] for p in pods} == {keep, gone}

    wait_for(
        "4 NIC pods on both nodes",
        spread,
        120,
        log=placement,
    )
    assert chart.api.slices(gone)

    chart.node(gone).kubelet.stop()  # type: ignore[union-attr]
    chart.api.delete(f"/api/v1/nodes/{gone}")
    wait_for("the removed node's slices to go", lambda: not chart.api.slices(gone), 90)

    def moved() -> bool:
        pods = [p for p in chart.api.pods(kns) if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return len(running) == 4 and {p["spec"]["nodeName"] for p in running} == {keep}

    wait_for(
        "the 4 NIC pods to run on the remaining node",
        moved,
        180,
        log=placement,
    )
    assert chart.api.slices(keep)
