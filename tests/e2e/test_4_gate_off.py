"""Scenario 4: kube-apiserver without DRAConsumableCapacity. It silently drops
`allowMultipleAllocations` and the capacity `requestPolicy` from a new slice; the driver
notices, says so once, and publishes single-allocation `netdev-virtual-<n>` devices."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.support.waiting import wait_for

from .cluster import CONTROLLERS, Cluster
from .conftest import Node
from .kubelet import net_devices, results, spec_files
from .test_2_examples import wait_status
from .test_3_capacity import claim_pod, prepare_pod, unschedulable, veth_template

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.root,
    pytest.mark.kind("veth"),
    pytest.mark.apiserver_restart(order=1),
]

SLOTS = 4
DROPPED = "API server dropped consumable-capacity fields"


@pytest.fixture
def capacity_gate_off(cluster: Cluster) -> Iterator[None]:
    """kube-apiserver restarted with DRAConsumableCapacity=false; restored afterwards
    (scheduler and controller manager keep the gate on, as in a skewed upgrade)."""
    cluster.cp.restart_apiserver({"DRAConsumableCapacity": False})
    try:
        yield
    finally:
        cluster.cp.restart_apiserver({"DRAConsumableCapacity": True})


def test_driver_falls_back_to_single_allocation_devices(
    cluster: Cluster, capacity_gate_off: None, node: Node, kns: str
) -> None:
    assert cluster.slices() == [], "the slice must be created anew for the gate to matter"
    d = node.start_driver("--virtual-slots", str(SLOTS))
    fallback = [f"netdev-virtual-{i}" for i in range(SLOTS)]
    wait_for("the fallback devices", lambda: sorted(cluster.devices()) == fallback)
    [stored] = cluster.slices()
    for dev in stored["spec"]["devices"]:
        assert "allowMultipleAllocations" not in dev
        assert "capacity" not in dev
        assert dev["attributes"]["kind"] == {"string": "virtual"}
    # One clear line, naming what was dropped, and only one.
    lines = [ln for ln in d.log().splitlines() if DROPPED in ln]
    assert len(lines) == 1, lines
    assert "level=error" in lines[0]
    assert "netdev-virtual.allowMultipleAllocations" in lines[0]
    assert re.search(r"netdev-virtual-<n>", lines[0])

    # The same workload as with the gate on: the API server drops the capacity
    # request of the claim template too, and the scheduler allocates whole devices.
    stored_template = cluster.apply(veth_template(kns))[0]
    request = stored_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert "capacity" not in request
    names = [f"app-{i}" for i in range(SLOTS)]
    # Pinned to this node: the scheduler's caches, refilled after the restart, may
    # still hold the previous test's node and its slice for a while.
    cluster.apply([claim_pod(kns, n, node=cluster.node) for n in names])
    pods = [cluster.wait_bound(kns, n) for n in names]
    claims = []
    for pod in pods:
        claim, entry = prepare_pod(cluster, d, pod)
        [result] = results(claim)
        assert result["pool"] == cluster.node
        assert result["device"] in fallback
        assert "shareID" not in result and "consumedCapacity" not in result
        assert entry.devices[0].share_id == ""
        claims.append(claim)
    assert sorted(results(c)[0]["device"] for c in claims) == fallback
    # status.devices entries without a share ID are accepted as well.
    for claim in claims:
        wait_status(cluster, claim)
    hosts = {
        nd["hostInterfaceName"] for s in spec_files(d).values() for nd in net_devices(s).values()
    }
    assert len(hosts) == SLOTS and hosts <= set(node.tagged())

    # Every device is taken: a fifth pod waits.
    cluster.apply(claim_pod(kns, "app-late", node=cluster.node))
    wait_for(
        "app-late to be unschedulable",
        lambda: unschedulable(cluster, kns, "app-late"),
        CONTROLLERS,
    )

    resp = d.unprepare(claims)
    assert {e.error for e in resp.claims.values()} == {""}
    assert node.tagged() == {} and spec_files(d) == {}
    # Still exactly one line: later publishes do not repeat it.
    assert len([ln for ln in d.log().splitlines() if DROPPED in ln]) == 1
