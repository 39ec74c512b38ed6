"""deploy/selection-examples.yaml's `firstAvailable` claim on the real control plane:
kube-scheduler gives the first pod the node's host NIC (nic/physical) and the second,
with the NIC taken, a macvlan share of netdev-virtual (nic/macvlan); the driver
prepares each with the config of the alternative it got."""

from __future__ import annotations

import copy
from typing import Any

from localcluster.manifests import DEPLOY
from tests.support import netns
from tests.support.waiting import wait_for

from .cluster import Cluster, example_objects
from .conftest import PARENT, Node
from .kubelet import results
from .test_3_capacity import prepare_pod

SPARE = "spare0"


def _pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    """The example's Deployment pod, as a bare pod named `name`."""
    pod = copy.deepcopy(template)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod["spec"]}


def test_the_scheduler_takes_the_host_nic_first_then_a_macvlan(
    cluster: Cluster, node: Node, kns: str
) -> None:
    netns.ip(node.ns, "link", "add", SPARE, "type", "veth", "peer", "name", "spare0p")
    netns.ip(node.ns, "link", "set", "spare0p", "up")
    netns.ip(node.ns, "link", "set", SPARE, "up")
    d = node.start_driver("--parent-interfaces", SPARE, "--virtual-parents", PARENT)
    wait_for("nic-spare0 published", lambda: f"nic-{SPARE}" in cluster.devices())
    docs = [
        o
        for o in example_objects(DEPLOY / "selection-examples.yaml", kns)
        if o["metadata"]["name"] == "uplink"
    ]
    [template] = [o for o in docs if o["kind"] == "ResourceClaimTemplate"]
    [deployment] = [o for o in docs if o["kind"] == "Deployment"]
    cluster.apply(template)
    got = []
    for name in ("first", "second"):
        cluster.apply(_pod(deployment["spec"]["template"], name), kns)
        pod = cluster.wait_bound(kns, name)
        claim, entry = prepare_pod(cluster, d, pod)
        [result] = results(claim)
        got.append((result["request"], result["device"], len(entry.devices)))
    assert got[0] == ("nic/physical", f"nic-{SPARE}", 1)
    assert got[1][0] == "nic/macvlan" and got[1][1].startswith("netdev-virtual")
