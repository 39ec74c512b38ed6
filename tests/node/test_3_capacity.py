"""Consumable capacity on the real node: with three slots, three pods run, a fourth
stays Pending with the scheduler's reason, and runs once one of the three is gone."""

from __future__ import annotations

from localcluster.podnet import via_exec
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .scenario import pod, template

SLOTS = 3


def _published_slots(cluster: NodeCluster) -> str | None:
    device = cluster.devices().get("netdev-virtual") or {}
    return ((device.get("capacity") or {}).get("slots") or {}).get("value")


def test_a_fourth_pod_waits_for_a_free_slot(cluster: NodeCluster, drivers, kns):
    drivers.start("--virtual-slots", str(SLOTS))
    wait_for("the driver to publish 3 slots", lambda: _published_slots(cluster) == str(SLOTS), 30)
    cluster.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    for i in range(1, SLOTS + 1):
        cluster.apply(pod(f"p{i}", ["veth"]), kns)
        cluster.wait_running(kns, f"p{i}")
        assert "net1" in via_exec(cluster.local.kubectl, kns, f"p{i}", "app")

    cluster.apply(pod("p4", ["veth"]), kns)

    def unschedulable() -> dict | None:
        cond = cluster.condition(cluster.pod(kns, "p4"), "PodScheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = wait_for("p4 to be found unschedulable", unschedulable, 60)
    assert cond["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in cond["message"], cond
    assert cluster.pod(kns, "p4")["status"]["phase"] == "Pending"

    cluster.delete_and_wait(kns, "p1")
    cluster.wait_running(kns, "p4")
    assert "net1" in via_exec(cluster.local.kubectl, kns, "p4", "app")
