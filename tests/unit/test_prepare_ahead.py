"""Claims prepared before the kubelet asks (dradriver/claims/ahead.py), in-process against
the in-memory kernel and real files: the kubelet's call answers from the record without
reading the claim, a claim whose pod is done before the kubelet asked is released by the
driver (by any instance on the node, and after a restart or a reboot), one the kubelet
asked for is left to the kubelet, and a call for a pod that no longer runs prepares the
claim again from the API."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from dradriver.base.metrics import Metrics
from dradriver.claims import reconcile
from dradriver.claims.ahead import PrepareAhead
from dradriver.claims.budget import Deadline
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import ClaimRef
from tests.support.statenode import (
    DRIVER,
    POD,
    UID,
    Node,
    add_claim,
    claim_object,
    claim_ref,
    prepare_one,
    unprepare_one,
)
from tests.support.waiting import wait_for

RUNNING = {"metadata": {"uid": POD}, "status": {"phase": "Running"}}


class Pods:
    """The pod watch's copy and the read-ahead copies, as prefetch.py hands them out."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.pods: dict[str, dict[str, Any]] = {POD: copy.deepcopy(RUNNING)}
        self.used: set[str] = set()

    def take(
        self, refs: Sequence[ClaimRef], deadline: Deadline, abandon: Future[None]
    ) -> dict[str, dict[str, Any]]:
        out = {}
        for ref in refs:
            if ref.uid not in self.used:
                self.used.add(ref.uid)
                out[ref.uid] = self.node.api.fake.claim(ref.namespace, ref.name)
        return out

    def snapshot(self) -> Mapping[str, Mapping[str, Any]]:
        return copy.deepcopy(self.pods)


def wired(node: Node, preparer: Preparer | None = None) -> tuple[Preparer, Pods, PrepareAhead]:
    """A Preparer (a new one unless given) with its ahead worker, wired as the daemon does."""
    metrics = Metrics()
    if preparer is None:
        preparer = node.preparer()
    pods = Pods(node)
    ahead = PrepareAhead(preparer, pods.take, pods.snapshot, metrics)
    ahead._metrics = preparer.ahead._metrics = metrics
    return preparer, pods, ahead


def counted(ahead: PrepareAhead, result: str) -> float:
    metrics = ahead._metrics
    assert metrics is not None
    return float(metrics.prepared_ahead.labels(result)._value.get())


def mark(preparer: Preparer) -> str | None:
    return preparer.records.ahead_pod(UID)


def claim_gets(node: Node) -> int:
    return sum(1 for method, path in node.api.fake.requests if method == "GET")


def test_the_kubelets_call_answers_from_the_claim_prepared_ahead(node: Node) -> None:
    add_claim(node, "veth")
    preparer, _, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
        assert mark(preparer) == POD
        links = node.links()
        assert len(links) == 4  # ens1, ens2 and the pair
        reads = claim_gets(node)
        outcome = prepare_one(preparer)
        assert outcome.error is None and outcome.devices
        assert claim_gets(node) == reads  # nothing read in the call
        assert node.links() == links
        # The kubelet owns the claim now: the mark went before the answer.
        assert mark(preparer) is None
        assert counted(ahead, "used") == 1
        assert preparer.ahead.candidates() == {}
        assert unprepare_one(preparer).error is None
        assert node.files() == []
    finally:
        ahead.stop()


def test_a_claim_whose_pod_is_gone_before_the_kubelet_asks_is_released(node: Node) -> None:
    add_claim(node, "veth")
    before = node.links()
    preparer, pods, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
        assert node.links() != before
        pods.pods[POD]["status"]["phase"] = "Failed"  # rejected at admission, say
        ahead.pods_changed({POD})
        wait_for("released", lambda: counted(ahead, "released") == 1)
        assert preparer.reaper.drain(30) == 0
        assert node.links() == before and node.files() == []
    finally:
        ahead.stop()


def test_a_claim_the_kubelet_asked_for_is_left_to_the_kubelet(node: Node) -> None:
    add_claim(node, "veth")
    preparer, pods, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
        assert prepare_one(preparer).error is None
        assert mark(preparer) is None
        prepared = node.links()
        # A release decided before the kubelet asked finds nothing to do when it runs.
        preparer.ahead._candidates[UID] = POD  # as if the pod ended just before the call
        del pods.pods[POD]  # deleted: the kubelet unprepares, not the driver
        ahead.pods_changed({POD})
        ahead.stop()  # the worker has run every job
        assert counted(ahead, "released") == 0
        assert node.links() == prepared
        assert unprepare_one(preparer).error is None
    finally:
        ahead.stop()


def test_a_call_for_a_pod_being_deleted_prepares_the_claim_again_from_the_api(
    node: Node,
) -> None:
    add_claim(node, "veth")
    preparer, pods, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
        pods.pods[POD]["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
        reads = claim_gets(node)
        outcome = prepare_one(preparer)
        assert outcome.error is None and outcome.devices
        assert claim_gets(node) == reads + 1  # read in the call, as without prefetching
        assert mark(preparer) is None
        assert preparer.ahead.candidates() == {}
        assert unprepare_one(preparer).error is None
        assert node.files() == []
    finally:
        ahead.stop()


def test_a_failed_prepare_ahead_leaves_nothing_and_tells_nobody(node: Node) -> None:
    bad = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "net/1"}}
    node.api.fake.add_claim(claim_object(UID, "netdev-virtual", bad, True))
    told: list[str] = []
    preparer = node.preparer()
    preparer.failures = lambda ref, error, obj: told.append(error)
    before = node.links()
    _, _, ahead = wired(node, preparer)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("failed", lambda: counted(ahead, "failed") == 1)
        assert told == [] and node.links() == before and node.files() == []
        outcome = prepare_one(preparer)  # the kubelet's call says why
        assert outcome.error is not None and "interfaceName" in outcome.error, outcome.error
        assert len(told) == 1
    finally:
        ahead.stop()


def test_a_claim_prepared_ahead_before_a_restart_is_released_when_its_pod_is_gone(
    node: Node,
) -> None:
    add_claim(node, "veth")
    before = node.links()
    _, _, ahead = wired(node)
    ahead.claim_read(claim_ref(), POD)
    wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
    ahead.stop()
    restarted = node.start()
    restarted.ahead.load(restarted.records)
    assert restarted.ahead.candidates() == {UID: POD}
    _, pods, again = wired(node, restarted)
    try:
        pods.pods.clear()  # the pod went while the driver was down
        again.pods_changed()
        wait_for("released", lambda: counted(again, "released") == 1)
        assert restarted.reaper.drain(30) == 0
        assert node.links() == before and node.files() == []
    finally:
        again.stop()


def test_another_instance_releases_a_claim_prepared_ahead_or_hands_it_over(node: Node) -> None:
    """A rolling update: instance A prepared the claim ahead; B, started before that,
    finds it from the pod index when the pod ends, or answers the kubelet for it; A's
    own release then finds no mark and leaves the claim alone."""
    add_claim(node, "veth")
    before = node.links()
    a, _, ahead_a = wired(node)
    b, pods_b, ahead_b = wired(node)
    try:
        ahead_a.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead_a, "prepared") == 1)
        assert b.ahead.candidates() == {}
        assert prepare_one(b).error is None  # the kubelet asks B
        assert mark(b) is None and counted(ahead_b, "used") == 1
        prepared = node.links()
        ahead_a.pods_changed()  # A still counts it as its own
        ahead_a.stop()
        assert node.links() == prepared and counted(ahead_a, "released") == 0
        assert unprepare_one(b).error is None
        # Again, and this time the pod ends before the kubelet asks: B releases it.
        _, _, ahead_a = wired(node, a)
        a.ahead.forget(UID)
        ahead_a._take = lambda refs, deadline, abandon: {UID: node.api.fake.claim("default", "c")}
        ahead_a.claim_read(claim_ref(), POD)
        wait_for("prepared ahead again", lambda: counted(ahead_a, "prepared") == 1)
        assert mark(a) == POD
        del pods_b.pods[POD]
        ahead_b.pods_changed({POD})
        wait_for("released by B", lambda: counted(ahead_b, "released") == 1)
        assert b.reaper.drain(30) == 0
        assert node.links() == before and node.files() == []
    finally:
        ahead_a.stop()
        ahead_b.stop()


def test_a_repair_after_a_reboot_keeps_the_claim_the_drivers(node: Node) -> None:
    """prepare_again (a reboot) keeps the mark: the claim stays the driver's to release."""
    add_claim(node, "veth")
    preparer, _, ahead = wired(node)
    preparer.lifecycle.boot_id = "boot-1"
    ahead.claim_read(claim_ref(), POD)
    wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
    ahead.stop()
    node.kernel.table = {n: ln for n, ln in node.kernel.table.items() if n in ("ens1", "ens2")}
    restarted = node.preparer()
    restarted.lifecycle.boot_id = "boot-2"
    loaded, _ = restarted.records.load_all()
    report = reconcile.reconcile(loaded, node.cdi_dir, DRIVER, restarted.lifecycle)
    assert report.reprepared_claims == [UID]
    assert mark(restarted) == POD
    assert unprepare_one(restarted).error is None


def test_the_mark_of_a_prepare_ahead_cut_short_goes(node: Node) -> None:
    """A crash after the mark and before the journal: the mark goes at start (no
    prepared record), or with the kubelet's own prepare of the claim; the mark of a
    claim prepared ahead stays."""
    add_claim(node, "veth")
    preparer, _, ahead = wired(node)
    ahead.claim_read(claim_ref(), POD)
    wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
    ahead.stop()
    other = "5a0c6f5e-0000-4000-8000-000000000002"
    preparer.records.mark_ahead(other, POD)  # no record: the journal was never written
    restarted = node.start()
    restarted.ahead.load(restarted.records)
    assert restarted.records.ahead_claims() == [UID]
    assert restarted.ahead.candidates() == {UID: POD}
    assert unprepare_one(restarted).error is None
    restarted.records.mark_ahead(UID, POD)  # again, and this time the kubelet asks
    assert prepare_one(restarted).error is None
    assert restarted.records.ahead_claims() == []
    assert unprepare_one(restarted).error is None
    assert node.files() == []


def test_a_pod_that_ends_while_its_claim_is_prepared_ahead_has_it_released(node: Node) -> None:
    """A rolling update: instance A's prepare ahead is in flight (mark and journal written,
    interfaces not yet made) when the pod ends, and both instances' pod watches see it.
    B finds A's mark on disk and waits for the lock; A looks at the pod again when its
    prepare ends. Whichever decides first under the lock releases the claim, at once
    (not a retry later), and the other finds nothing to do."""
    add_claim(node, "veth")
    before = node.links()
    a, pods_a, ahead_a = wired(node)
    b, pods_b, ahead_b = wired(node)
    in_flight, go = threading.Event(), threading.Event()
    tick = node.steps.tick

    def paused(what: str) -> None:
        if what.startswith("create veth") and not in_flight.is_set():
            in_flight.set()
            assert go.wait(30)
        tick(what)

    node.steps.tick = paused  # type: ignore[method-assign]
    try:
        ahead_a.claim_read(claim_ref(), POD)
        assert in_flight.wait(30), "A's prepare ahead never reached its interfaces"
        assert mark(b) == POD and b.records.claims_of_pod(POD) == []
        for pods in (pods_a, pods_b):
            del pods.pods[POD]
        ahead_b.pods_changed({POD})  # B's event, during A's prepare
        go.set()

        def released() -> float:
            return counted(ahead_a, "released") + counted(ahead_b, "released")

        wait_for("released by one of them", lambda: released() == 1)
        ahead_b.pods_changed({POD})  # B hears of it once more (a relist, say)
        ahead_a.stop()  # every queued job done
        ahead_b.stop()
        assert counted(ahead_a, "prepared") == 1 and released() == 1
        assert a.reaper.drain(30) == 0 and b.reaper.drain(30) == 0
        assert node.links() == before and node.files() == []
    finally:
        go.set()
        ahead_a.stop()
        ahead_b.stop()


def test_a_mark_whose_pod_went_during_a_relist_is_released_by_another_instance(
    node: Node,
) -> None:
    """A rolling update: A prepared the claim ahead and stopped; B, started before that,
    never heard of the claim, and its pod watch relisted while the pod went (no event
    names it). The list's hook looks at every mark on disk: B releases the claim."""
    add_claim(node, "veth")
    before = node.links()
    _, _, ahead_a = wired(node)
    b, pods_b, ahead_b = wired(node)
    try:
        ahead_a.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead_a, "prepared") == 1)
        ahead_a.stop()
        assert b.ahead.candidates() == {}
        pods_b.pods.clear()
        ahead_b.pods_changed()  # after the relist: no pod ended by an event
        wait_for("released by B", lambda: counted(ahead_b, "released") == 1)
        assert b.reaper.drain(30) == 0
        assert node.links() == before and node.files() == []
    finally:
        ahead_b.stop()


def test_a_release_waiting_to_be_tried_again_holds_up_no_other_job(node: Node) -> None:
    """A release that failed is tried again RETRY seconds later, on a timer: a prepare
    ahead queued meanwhile runs at once."""
    add_claim(node, "veth")
    preparer, _, ahead = wired(node)
    try:
        ahead._later(3600.0, lambda: None)  # as a failed release's retry
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1)
        assert unprepare_one(preparer).error is None
    finally:
        ahead.stop()
