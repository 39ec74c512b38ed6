"""A rolling update of the driver on the real node while pods start: a new instance
(its own pod, its own sockets by --pod-uid) registers beside the old one, the old
one stops and its pod goes; every pod gets its interface, and the new instance
unprepares what the old one prepared."""

from __future__ import annotations

from localcluster.podnet import via_exec
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import pod, template

PODS = 6


def test_pods_start_across_a_rolling_update(cluster: NodeCluster, drivers, kns):
    old = drivers.start()
    cluster.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    names = [f"p{i}" for i in range(PODS)]
    for i, name in enumerate(names):
        cluster.apply(pod(name, ["veth"]), kns)
        if i == 1:
            new = drivers.start()  # surge: both instances registered
            assert old.process.service_socket != new.process.service_socket
        if i == 3:
            old.remove()  # SIGTERM, then its pod is deleted, as the DaemonSet does
    for name in names:
        cluster.wait_running(kns, name)
        assert "net1" in via_exec(cluster.local.kubectl, kns, name, "app")
    uids = {
        cluster.claim(kns, c)["metadata"]["uid"]
        for name in names
        for c in cluster.pod_claim_names(cluster.pod(kns, name))
    }
    assert uids <= driver_state(cluster.local.lay).records

    for name in names:
        cluster.delete_pod(kns, name)
    for name in names:
        cluster.wait_pod_gone(kns, name)
    wait_for(
        "the new instance to unprepare every claim",
        lambda: not (uids & driver_state(cluster.local.lay).records),
        30,
        log=new.log,
    )
    assert not old.log().count("Traceback") and not new.log().count("Traceback")
