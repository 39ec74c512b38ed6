"""Claims prepared before the kubelet asks (dradriver/claims/ahead.py), in-process against
the in-memory kernel and real files: the kubelet's call answers from the record without
reading the claim, a claim whose pod is done before the kubelet asked is released by the
driver, one the kubelet asked for is left to the kubelet, and a call for a pod that no
longer runs prepares the claim again from the API."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from dradriver.base.metrics import Metrics
from dradriver.claims.ahead import AHEAD, PrepareAhead
from dradriver.claims.budget import Deadline
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import ClaimRef
from tests.support.statenode import (
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

    def pod(self, uid: str) -> Mapping[str, Any] | None:
        return self.pods.get(uid)


def wired(node: Node, preparer: Preparer | None = None) -> tuple[Preparer, Pods, PrepareAhead]:
    preparer = preparer or node.preparer()
    pods = Pods(node)
    metrics = Metrics()
    ahead = PrepareAhead(preparer, pods.take, pods.pod, lambda: True, metrics)
    return preparer, pods, ahead


def counted(ahead: PrepareAhead, result: str) -> float:
    metrics = ahead._metrics
    assert metrics is not None
    return float(metrics.prepared_ahead.labels(result)._value.get())


def claim_gets(node: Node) -> int:
    return sum(1 for method, path in node.api.fake.requests if method == "GET")


def test_the_kubelets_call_answers_from_the_claim_prepared_ahead(node: Node) -> None:
    add_claim(node, "veth")
    preparer, _, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1, 5)
        record = preparer.records.load(UID)
        assert record is not None and record.extra[AHEAD] == POD
        links = node.links()
        assert len(links) == 4  # ens1, ens2 and the pair
        reads = claim_gets(node)
        outcome = prepare_one(preparer)
        assert outcome.error is None and outcome.devices
        assert claim_gets(node) == reads  # nothing read in the call
        assert node.links() == links
        # The kubelet owns the claim now: the mark goes after the answer.
        wait_for("the mark dropped", lambda: AHEAD not in preparer.records.load(UID).extra, 5)  # type: ignore[union-attr]
        assert counted(ahead, "used") == 1
        assert not preparer.ahead.pending(UID)
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
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1, 5)
        assert node.links() != before
        pods.pods[POD]["status"]["phase"] = "Failed"  # rejected at admission, say
        ahead.pods_changed()
        wait_for("released", lambda: counted(ahead, "released") == 1, 5)
        assert preparer.reaper.drain(5) == 0
        assert node.links() == before and node.files() == []
    finally:
        ahead.stop()


def test_a_claim_the_kubelet_asked_for_is_left_to_the_kubelet(node: Node) -> None:
    add_claim(node, "veth")
    preparer, pods, ahead = wired(node)
    try:
        ahead.claim_read(claim_ref(), POD)
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1, 5)
        assert prepare_one(preparer).error is None
        prepared = node.links()
        del pods.pods[POD]  # deleted: the kubelet unprepares, not the driver
        ahead.pods_changed()
        # A release decided before the kubelet asked finds nothing to do either.
        only = preparer.unprepare([claim_ref()], only=lambda r: preparer.ahead.pending(r.uid))
        assert only[UID].error is None
        wait_for("the mark dropped", lambda: counted(ahead, "used") == 1, 5)
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
        wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1, 5)
        pods.pods[POD]["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
        reads = claim_gets(node)
        outcome = prepare_one(preparer)
        assert outcome.error is None and outcome.devices
        assert claim_gets(node) == reads + 1  # read in the call, as without prefetching
        record = preparer.records.load(UID)
        assert record is not None and AHEAD not in record.extra
        assert not preparer.ahead.pending(UID)
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
        wait_for("failed", lambda: counted(ahead, "failed") == 1, 5)
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
    wait_for("prepared ahead", lambda: counted(ahead, "prepared") == 1, 5)
    ahead.stop()
    restarted = node.start()
    restarted.ahead.load(restarted.records.load_all()[0])
    assert restarted.ahead.pending(UID)
    _, pods, again = wired(node, restarted)
    try:
        pods.pods.clear()  # the pod went while the driver was down
        again.pods_changed()
        wait_for("released", lambda: counted(again, "released") == 1, 5)
        assert restarted.reaper.drain(5) == 0
        assert node.links() == before and node.files() == []
    finally:
        again.stop()
