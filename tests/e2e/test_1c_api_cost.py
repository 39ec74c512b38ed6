"""What one node's driver asks of the real API server, by its audit log: nothing at
rest but its open watch, and two requests per claim from prepare to unprepare."""

from __future__ import annotations

import time

import pytest

from localcluster.audit import DRIVER_USER as USER
from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node
from .kubelet import check_answer
from .test_3_capacity import claim_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def test_a_node_at_rest_costs_its_watch_only_and_heals_from_it(
    cluster: Cluster, node: Node
) -> None:
    """Rediscovery every second (--publish-interval 1) asks the API server nothing; a
    slice deleted by someone else is back within seconds, from the watch's event: one
    Node GET (its UID, for the owner) and one create."""
    audit = cluster.cp.audit
    audit.mark()
    # 1000 slots: the API server stores the quantity as "1k", which must not make the
    # driver write the slice again on each of its own watch events.
    d = node.start_driver("--publish-interval", "1", "--virtual-slots", "1000")
    [first] = wait_for("the driver's slice", cluster.slices)
    assert first["spec"]["devices"][0]["capacity"]["slots"]["value"] == "1k"
    wait_for("the driver's watch", lambda: audit.counts(USER)["watch resourceslices"], 10)
    # Start-up: the slices listed (publisher, watch), the Node read, the slice created,
    # and once, DEVICE_CLASS_DELAY after the start, the DeviceClasses checked.
    wait_for("the DeviceClass check", lambda: audit.counts(USER)["list deviceclasses"], 20)
    time.sleep(0.5)
    started = audit.counts(USER)
    assert started == {
        "list resourceslices": 2,
        "watch resourceslices": 1,
        "get nodes": 1,
        "create resourceslices": 1,
        "list deviceclasses": 1,
    }, started
    audit.mark()
    time.sleep(10)
    assert audit.counts(USER) == {}, d.log()

    cluster.delete_slices()
    [again] = wait_for("the slice back", cluster.slices, 5)
    assert again["spec"]["devices"] == first["spec"]["devices"]
    time.sleep(1)
    assert audit.counts(USER) == {"get nodes": 1, "create resourceslices": 1}


def test_a_claims_lifecycle_costs_two_requests(cluster: Cluster, node: Node, kns: str) -> None:
    """Prepare GETs the claim, the status writer applies its status; unprepare asks
    nothing."""
    audit = cluster.cp.audit
    d = node.start_driver()
    wait_for("the driver's slice", cluster.slices)
    cluster.apply(veth_template(kns))
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    name = claim["metadata"]["name"]
    time.sleep(1)
    audit.mark()
    check_answer(d.prepare([claim]), [claim])
    wait_for(
        "the claim's status",
        lambda: (cluster.claim(kns, name).get("status") or {}).get("devices"),
        10,
    )
    assert d.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    wait_for("the veth's host end gone", lambda: node.tagged() == {}, 10)
    time.sleep(1)
    assert audit.counts(USER) == {"get resourceclaims": 1, "patch resourceclaims/status": 1}
    cluster.finish_pod_deletion(kns, "app")
    cluster.wait_claims_released(kns, [name])
