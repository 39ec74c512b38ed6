"""SIGKILL of the driver while pods start on the real node, then its restart (same
pod, same directories, as after a container restart): every pod runs with its
interface, and the node holds exactly what the running pods' claims need."""

from __future__ import annotations

import time

from localcluster.podnet import via_exec

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import pod, template

PODS = 6


def test_pods_start_across_a_driver_crash(cluster: NodeCluster, drivers, kns):
    d = drivers.start()
    cluster.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    names = [f"p{i}" for i in range(PODS)]
    for i, name in enumerate(names):
        cluster.apply(pod(name, ["veth"]), kns)
        if i == 2:
            time.sleep(0.3)  # let the kubelet reach the driver for some of them
            d.kill()
    time.sleep(2)  # the kubelet retries against a dead socket meanwhile
    d.start()  # registers again: same pod UID, same sockets
    for name in names:
        cluster.wait_running(kns, name)
        assert "net1" in via_exec(cluster.local.kubectl, kns, name, "app")

    uids = {
        cluster.claim(kns, c)["metadata"]["uid"]
        for name in names
        for c in cluster.pod_claim_names(cluster.pod(kns, name))
    }
    state = driver_state(cluster.local.lay)
    assert state.records == uids  # this test's claims are the only prepared ones
    assert state.specs == uids
    assert state.links == uids  # one veth host end per claim, no orphan
    assert not state.untagged
