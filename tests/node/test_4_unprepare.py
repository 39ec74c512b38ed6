"""Pod deletion on the real node: the kubelet unprepares the claim, and nothing of it
is left: no interface in the node's namespace, no CDI spec, no allocation record."""

from __future__ import annotations

import pytest

from localcluster.driver import HostDriver
from localcluster.layout import PARENT
from localcluster.podnet import via_exec
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import pod, template

KINDS = {
    "veth": {"kind": "veth", "interfaceName": "net1"},
    "macvlan": {"kind": "macvlan", "parent": PARENT, "interfaceName": "net1"},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_deleting_the_pod_leaves_nothing(cluster: NodeCluster, driver: HostDriver, kns, kind):
    lay = cluster.local.lay
    cluster.apply([template("t", KINDS[kind]), pod("p", ["t"])], kns)
    p = cluster.wait_running(kns, "p")
    assert "net1" in via_exec(cluster.local.kubectl, kns, "p", "app")
    [claim_name] = cluster.pod_claim_names(p)
    uid = cluster.claim(kns, claim_name)["metadata"]["uid"]
    held = driver_state(lay).of(uid)
    # A veth keeps its host end (tagged) on the node; a macvlan moved whole.
    assert held == (["link", "spec", "record"] if kind == "veth" else ["spec", "record"])

    cluster.delete_and_wait(kns, "p")
    wait_for(
        f"claim {uid} to be unprepared",
        lambda: not driver_state(lay).of(uid),
        30,
        log=lambda: f"left: {driver_state(lay).of(uid)}\n{driver.log()[-3000:]}",
    )
    assert not driver_state(lay).untagged
