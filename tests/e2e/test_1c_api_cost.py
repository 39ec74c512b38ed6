"""What one node's driver asks of the real API server, by its audit log: nothing at
rest but its open watches, and two requests per claim from prepare to unprepare (the
claim read as its pod is bound, before the kubelet asks)."""

from __future__ import annotations

import time

import pytest

from localcluster.audit import DRIVER_USER as USER
from localcluster.audit import AuditLog, describe
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
    # the node's pods listed and watched, and once, DEVICE_CLASS_DELAY after the start,
    # the DeviceClasses checked.
    wait_for("the DeviceClass check", lambda: audit.counts(USER)["list deviceclasses"], 20)
    time.sleep(0.5)
    started = audit.counts(USER)
    assert started == {
        "list resourceslices": 2,
        "watch resourceslices": 1,
        "get nodes": 1,
        "create resourceslices": 1,
        "list deviceclasses": 1,
        "list pods": 1,
        "watch pods": 1,
    }, started
    audit.mark()
    time.sleep(10)
    assert audit.counts(USER) == {}, d.log()

    cluster.delete_slices()
    [again] = wait_for("the slice back", cluster.slices, 5)
    assert again["spec"]["devices"] == first["spec"]["devices"]
    time.sleep(1)
    assert audit.counts(USER) == {"get nodes": 1, "create resourceslices": 1}


def _claim_reads(audit: AuditLog) -> list[str]:
    """The request URIs of the driver's claim GETs since the mark."""
    return [
        e["requestURI"]
        for e in audit.entries()
        if e.get("user", {}).get("username") == USER and describe(e) == "get resourceclaims"
    ]


def test_a_claims_lifecycle_costs_two_requests(cluster: Cluster, node: Node, kns: str) -> None:
    """The claim is read when its pod is bound here, at the binding's version (from the
    API server's cache), and prepared then, so the kubelet's prepare finds it prepared
    and asks nothing; the status writer applies the status; unprepare asks nothing."""
    audit = cluster.cp.audit
    d = node.start_driver()
    wait_for("the driver's slice", cluster.slices)
    wait_for("the driver's pod watch", lambda: audit.counts(USER)["watch pods"], 10)
    cluster.apply(veth_template(kns))
    audit.mark()
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    name = claim["metadata"]["name"]
    [read] = wait_for("the claim read ahead", lambda: _claim_reads(audit), 10)
    assert f"/resourceclaims/{name}?resourceVersion=" in read
    # Its log line, not the first tagged link: each end of a veth is tagged in a call of
    # its own, so the first link seen may be alone.
    wait_for("the claim prepared ahead", lambda: 'msg="prepared ahead"' in d.log(), 10)
    ahead = node.tagged()
    assert len(ahead) == 2, ahead  # the veth's two ends, both on the host until the pod
    check_answer(d.prepare([claim]), [claim])
    assert node.tagged() == ahead
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


def test_a_claim_of_a_pod_being_deleted_is_read_in_the_call(
    cluster: Cluster, node: Node, kns: str
) -> None:
    """A copy read ahead answers only while its pod is alive: once the pod is being
    deleted, a prepare reads the claim itself (and still prepares it: the kubelet asks
    only for claims reserved for a pod it runs)."""
    audit = cluster.cp.audit
    d = node.start_driver()
    wait_for("the driver's pod watch", lambda: audit.counts(USER)["watch pods"], 10)
    cluster.apply(veth_template(kns))
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    wait_for("the claim read ahead", lambda: _claim_reads(audit), 10)
    cluster.delete(f"/api/v1/namespaces/{kns}/pods/app")  # graceful: the pod terminates
    time.sleep(1)  # the deletion's event reaches the driver's watch
    audit.mark()
    check_answer(d.prepare([claim]), [claim])
    [read] = _claim_reads(audit)
    assert "resourceVersion" not in read, read
    assert d.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    cluster.finish_pod_deletion(kns, "app")


def test_a_claim_prepared_ahead_is_released_when_its_pod_goes_first(
    cluster: Cluster, node: Node, kns: str
) -> None:
    """The kubelet never unprepares a claim it did not ask for: when the pod is deleted
    before it asks, the driver releases the claim it prepared ahead by itself."""
    audit = cluster.cp.audit
    d = node.start_driver()
    wait_for("the driver's pod watch", lambda: audit.counts(USER)["watch pods"], 10)
    cluster.apply(veth_template(kns))
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    wait_for("the claim prepared ahead", node.tagged, 10)
    assert list(d.state.glob("*.json")) and list(d.cdi.glob("*.json"))
    cluster.delete(f"/api/v1/namespaces/{kns}/pods/app")
    cluster.finish_pod_deletion(kns, "app")
    wait_for("the claim released", lambda: node.tagged() == {}, 10, log=d.log)
    wait_for("its files gone", lambda: not list(d.state.glob("*.json")), 10, log=d.log)
    assert not list(d.cdi.glob("*.json"))
    # logged once the release is done, a moment after its last file went
    wait_for("the release logged", lambda: "released a claim prepared ahead" in d.log(), 10)
    cluster.wait_claims_released(kns, [claim["metadata"]["name"]])


def test_a_claim_prepared_ahead_before_a_crash_is_released_after_it(
    cluster: Cluster, node: Node, kns: str
) -> None:
    """SIGKILL after a claim was prepared ahead, the pod deleted while the driver is
    down: the restarted driver finds the mark in the record and releases the claim when
    its first pod list shows the pod gone."""
    audit = cluster.cp.audit
    d = node.start_driver()
    wait_for("the driver's pod watch", lambda: audit.counts(USER)["watch pods"], 10)
    cluster.apply(veth_template(kns))
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    wait_for("the claim prepared ahead", lambda: 'msg="prepared ahead"' in d.log(), 10)
    ahead = node.tagged()
    assert ahead
    d.kill()
    cluster.delete(f"/api/v1/namespaces/{kns}/pods/app")
    cluster.finish_pod_deletion(kns, "app")
    assert node.tagged() == ahead  # nobody released it while the driver was down
    node.restart(d)
    wait_for("the claim released", lambda: node.tagged() == {}, 15, log=d.log)
    wait_for("its files gone", lambda: not list(d.state.glob("*.json")), 10, log=d.log)
    assert not list(d.cdi.glob("*.json"))
    cluster.wait_claims_released(kns, [claim["metadata"]["name"]])
