"""Device health as taints, on the real node: a host NIC without carrier is published
with the driver's NoSchedule taint, the scheduler leaves a claim for it unallocated and
its pod Pending; the carrier back, the taint goes within seconds and the pod gets the NIC."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.podnet import via_exec
from tests.e2e.test_3_capacity import unschedulable
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .scenario import pod, template

NIC, PEER = "sick0", "sick0p"
TAINT = {"key": "dra.example.com/unhealthy", "effect": "NoSchedule"}


@pytest.fixture
def nic_without_carrier(cluster: NodeCluster) -> Iterator[str]:
    """A host NIC in the node's namespace whose link partner is down (no carrier)."""
    netns = cluster.local.lay.netns
    ip = ["ip", "-n", netns, "link"]
    subprocess.run([*ip, "add", NIC, "type", "veth", "peer", "name", PEER], check=True)
    subprocess.run([*ip, "set", NIC, "up"], check=True)
    try:
        yield netns
    finally:
        subprocess.run([*ip, "del", PEER], check=False)


def _published(cluster: NodeCluster) -> dict[str, Any] | None:
    return cluster.devices().get(f"nic-{NIC}")


def test_a_nic_without_carrier_is_tainted_and_gets_no_pod_until_it_has_one(
    cluster: NodeCluster, drivers, node_sysfs: Path, nic_without_carrier: str, kns: str
):
    # (kns last: its pods go, and give the NIC back, before the NIC and sysfs go)
    drivers.start("--parent-interfaces", NIC, "--sysfs-root", str(node_sysfs))
    device = wait_for(
        f"nic-{NIC} published tainted",
        lambda: (d := _published(cluster)) and d.get("taints") and d,
        30,
    )
    assert [{k: t[k] for k in ("key", "effect")} for t in device["taints"]] == [TAINT]
    netdev = {"kind": "host-device", "interfaceName": "net1"}
    cluster.apply([template("nic", netdev, device_class="network-devices"), pod("p", ["nic"])], kns)
    wait_for("the pod unschedulable", lambda: unschedulable(cluster, kns, "p"), 60)
    time.sleep(3)  # and it stays so: the only device is tainted
    assert unschedulable(cluster, kns, "p"), cluster.describe_pod(kns, "p")

    subprocess.run(["ip", "-n", nic_without_carrier, "link", "set", PEER, "up"], check=True)
    started = time.monotonic()
    wait_for("the taint gone", lambda: (d := _published(cluster)) and not d.get("taints"), 30)
    assert time.monotonic() - started < 15  # a link event republishes, not the 60 s timer
    running = cluster.wait_running(kns, "p")
    assert "net1" in via_exec(cluster.local.kubectl, kns, running["metadata"]["name"], "app")
