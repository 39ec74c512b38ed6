"""Consumable capacity across nodes: with 2 slots per node (a `helm upgrade` of the
setting, rolled out by the DaemonSet), four single-NIC pods run, two per node; a
fifth stays Pending with the scheduler's reason and runs once one of them is gone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from localcluster.helmrelease import operator_values
from localcluster.podnet import via_exec
from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

from .chart import ChartCluster

SLOTS = 2


def _slots(chart: ChartCluster, node: str) -> str | None:
    device = chart.api.devices(node).get("netdev-virtual") or {}
    return ((device.get("capacity") or {}).get("slots") or {}).get("value")


def _allocated(chart: ChartCluster) -> list[str]:
    """Claims of any namespace still allocated (an earlier test's, being deleted)."""
    return [
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in chart.api.get("/apis/resource.k8s.io/v1/resourceclaims")["items"]
        if (c.get("status") or {}).get("allocation")
    ]


@pytest.fixture
def two_slots(chart: ChartCluster) -> Iterator[None]:
    # The earlier tests' claims hold slots until the resource claim controller deletes
    # them: a pod the scheduler found no room for then may wait for its next retry
    # (minutes) after they are gone. Start from none.
    wait_for("the earlier tests' claims to be gone", lambda: not _allocated(chart), 120)
    with chart.installed(operator_values(chart.image, virtualSlots=SLOTS)):
        for node in chart.node_names:
            wait_for(
                f"{node} to publish {SLOTS} slots",
                lambda n=node: _slots(chart, n) == str(SLOTS),
                60,
            )
        yield


def test_two_slots_per_node_run_four_pods_and_the_fifth_waits(chart: ChartCluster, two_slots, kns):
    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    for i in range(1, 5):
        chart.api.apply(pod(f"p{i}", ["veth"]), kns)
    for i in range(1, 5):
        chart.api.wait_running(kns, f"p{i}")
        assert "net1" in via_exec(chart.kubectl, kns, f"p{i}", "app")
    placed = Counter(chart.api.pod(kns, f"p{i}")["spec"]["nodeName"] for i in range(1, 5))
    assert placed == {n: SLOTS for n in chart.node_names}, placed

    chart.api.apply(pod("p5", ["veth"]), kns)

    def unschedulable() -> dict | None:
        cond = chart.api.condition(chart.api.pod(kns, "p5"), "PodScheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = wait_for("p5 to be found unschedulable", unschedulable, 60)
    assert cond["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in cond["message"], cond
    assert chart.api.pod(kns, "p5")["status"]["phase"] == "Pending"

    freed = chart.api.pod(kns, "p1")["spec"]["nodeName"]
    chart.api.delete_and_wait(kns, "p1")
    chart.api.wait_running(kns, "p5")
    assert chart.api.pod(kns, "p5")["spec"]["nodeName"] == freed
    assert "net1" in via_exec(chart.kubectl, kns, "p5", "app")
