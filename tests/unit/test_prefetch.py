"""Claims read ahead from the node's pod watch, and the rules for answering a call with one."""

from __future__ import annotations

import copy
import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from dradriver.apiserver.kubeapi import ApiError
from dradriver.claims.budget import Deadline
from dradriver.claims.prefetch import ClaimPrefetch, usable
from dradriver.contract.hookspecs import ClaimRef
from tests.support.queuedwatch import QueuedWatch
from tests.support.waiting import wait_for

POD = "0b9ef3b2-6a43-4d5e-9d5c-2a1f3c4d5e6f"
CLAIM = "5e1c2f9a-1b2c-4d3e-8f4a-5b6c7d8e9f01"
OTHER = "9f9f9f9f-0000-4000-8000-000000000009"
DRIVER = "dra.example.com"
REF = ClaimRef("ns", "app-nic-x7k2p", CLAIM)
_NEVER: Future[None] = Future()


def _pod(
    uid: str = POD, version: str = "20", claims: tuple[str, ...] = (), **status: Any
) -> dict[str, Any]:
    """A pod bound to node-a with claims made from its templates (REF's name by default)."""
    names = claims or (REF.name,)
    return {
        "metadata": {"name": "app", "namespace": "ns", "uid": uid, "resourceVersion": version},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Pending",
            "resourceClaimStatuses": [
                {"name": f"nic{i}", "resourceClaimName": n} for i, n in enumerate(names)
            ],
            **status,
        },
    }


def _claim(uid: str = CLAIM, pod: str = POD) -> dict[str, Any]:
    return {
        "metadata": {
            "name": REF.name,
            "namespace": "ns",
            "uid": uid,
            "ownerReferences": [{"kind": "Pod", "name": "app", "uid": pod, "controller": True}],
        },
        "status": {
            "allocation": {"devices": {"results": [{"driver": DRIVER}]}},
            "reservedFor": [{"resource": "pods", "name": "app", "uid": pod}],
        },
    }


class _Api:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.events: queue.Queue[Any] = queue.Queue()
        self.claim: dict[str, Any] | Exception = _claim()
        self.by_name: dict[str, dict[str, Any]] = {}  # claims other than `claim`, by name
        self.gets: list[tuple[str, str, str | None]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()  # a GET began
        self.watching = threading.Event()

    def list_pods_at(self, node: str) -> tuple[list[dict[str, Any]], str]:
        assert node == "node-a"
        return list(self.pods), "30"

    def watch_pods(self, node: str, version: str, seconds: int) -> QueuedWatch:
        self.watching.set()
        return QueuedWatch(self.events)

    def get_claim(
        self, namespace: str, name: str, timeout: float | None = None, version: str | None = None
    ) -> dict[str, Any]:
        self.started.set()
        self.release.wait(5)
        self.gets.append((namespace, name, version))
        if name in self.by_name:
            return copy.deepcopy(self.by_name[name])
        if isinstance(self.claim, Exception):
            raise self.claim
        return copy.deepcopy(self.claim)


@pytest.fixture
def api() -> _Api:
    return _Api()


def _started(api: _Api, bind: bool = True) -> ClaimPrefetch:
    """Started, with the pod bound (its ADDED event) once the watch is open."""
    p = ClaimPrefetch(api, "node-a", DRIVER, wait_limit=2.0)
    p.start()
    assert api.watching.wait(30)
    if bind:
        api.events.put({"type": "ADDED", "object": _pod()})
    return p


def _take(p: ClaimPrefetch, ref: ClaimRef = REF) -> dict[str, Any] | None:
    return p.take([ref], Deadline.after(5), _NEVER).get(ref.uid)


def test_a_bound_pods_claim_is_read_once_at_its_version_and_answers_the_call(api: _Api) -> None:
    p = _started(api)
    try:
        wait_for("the prefetch", lambda: api.gets)
        assert _take(p) == _claim()
        api.events.put({"type": "MODIFIED", "object": _pod(version="31")})
        api.events.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "32"}}})
        # A second pod's claim: read after the events before it were handled.
        api.events.put({"type": "ADDED", "object": _pod(OTHER, "33", ("second-nic",))})
        wait_for("the second pod's claim read", lambda: len(api.gets) == 2)
        assert api.gets == [("ns", REF.name, "20"), ("ns", "second-nic", "33")]
        assert _take(p) is None, "a copy answers one call at most"
    finally:
        p.stop()


def test_a_call_waits_for_the_read_in_flight(api: _Api) -> None:
    api.release.clear()
    p = _started(api)
    try:
        assert api.started.wait(30), "the read began"
        threading.Timer(0.2, api.release.set).start()
        assert _take(p) == _claim()
    finally:
        api.release.set()
        p.stop()


def test_pods_bound_before_the_list_are_not_read(api: _Api) -> None:
    api.pods = [_pod()]
    p = _started(api, bind=False)
    try:
        api.events.put({"type": "MODIFIED", "object": _pod(version="31")})
        api.events.put({"type": "ADDED", "object": _pod(OTHER, "33", ("second-nic",))})
        wait_for("the second pod's claim read", lambda: api.gets)
        assert api.gets == [("ns", "second-nic", "33")]
        assert _take(p) is None
    finally:
        p.stop()


def _then_another_pod(api: _Api, uid: str, reads: int) -> None:
    """Bind another pod and wait for its claim's read: the events before it are handled."""
    api.events.put({"type": "ADDED", "object": _pod(uid, "50", (f"nic-{uid[:8]}",))})
    wait_for("the other pod's claim read", lambda: len(api.gets) == reads)


@pytest.mark.parametrize("how", ["deleting", "succeeded", "deleted"])
def test_a_pod_deleted_or_done_takes_its_claims_with_it(api: _Api, how: str) -> None:
    p = _started(api)
    try:
        wait_for("the prefetch", lambda: api.gets)
        pod = _pod(version="40")
        if how == "deleting":
            pod["metadata"]["deletionTimestamp"] = "2026-11-27T10:00:00Z"
        if how == "succeeded":
            pod["status"]["phase"] = "Succeeded"
        api.events.put({"type": "DELETED" if how == "deleted" else "MODIFIED", "object": pod})
        _then_another_pod(api, OTHER, 2)
        assert p.held() == 1, "only the other pod's claim is held"
        assert _take(p) is None
    finally:
        p.stop()


def test_a_claim_bound_again_under_a_new_pod_is_read_for_it(api: _Api) -> None:
    p = _started(api)
    try:
        wait_for("the prefetch", lambda: api.gets)
        api.events.put({"type": "DELETED", "object": _pod()})
        api.claim = _claim(pod=OTHER)
        api.events.put({"type": "ADDED", "object": _pod(uid=OTHER)})
        wait_for("the second read", lambda: len(api.gets) == 2)
        assert _take(p) == api.claim
    finally:
        p.stop()


def test_a_failed_read_leaves_the_call_to_read_it(api: _Api) -> None:
    api.claim = ApiError(503, "ServiceUnavailable", "busy")
    p = _started(api)
    try:
        wait_for("the prefetch", lambda: api.gets)
        assert _take(p) is None
    finally:
        p.stop()


def test_a_refused_pod_list_is_said_once_and_reads_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No RBAC for pods: one ERROR naming the pods, no claim read, calls GET their claims."""
    refused = _Api()
    asked: list[str] = []

    def forbidden(node: str) -> tuple[list[dict[str, Any]], str]:
        asked.append(node)
        raise ApiError(403, "Forbidden", 'pods is forbidden: cannot list resource "pods"')

    refused.list_pods_at = forbidden  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        q = ClaimPrefetch(refused, "node-a", DRIVER)
        q.start()
        try:
            wait_for(
                "the refusal said", lambda: any("Pods" in r.getMessage() for r in caplog.records)
            )
            time.sleep(0.2)
            assert asked == ["node-a"], "asked again only after the longest pause"
            assert _take(q) is None and refused.gets == []
        finally:
            q.stop()


@pytest.mark.parametrize(
    ("why", "change"),
    [
        ("replaced under the same name", lambda c, p: c["metadata"].update(uid=OTHER)),
        ("another namespace asked", lambda c, p: c["metadata"].update(namespace="other")),
        ("not made for the pod", lambda c, p: c["metadata"].update(ownerReferences=[])),
        (
            "owned but not as its controller",
            lambda c, p: c["metadata"]["ownerReferences"][0].update(controller=False),
        ),
        ("not reserved for the pod", lambda c, p: c["status"].update(reservedFor=[])),
        ("not allocated", lambda c, p: c["status"].pop("allocation")),
        ("pod being deleted", lambda c, p: p["metadata"].update(deletionTimestamp="t")),
        ("pod failed", lambda c, p: p["status"].update(phase="Failed")),
    ],
)
def test_a_copy_answers_only_while_provably_the_claim_asked_for(why: str, change: Any) -> None:
    claim, pod = _claim(), _pod()
    assert usable(claim, REF, POD, pod)
    change(claim, pod)
    assert not usable(claim, REF, POD, pod), why


def test_a_pod_the_watch_does_not_hold_never_vouches() -> None:
    assert not usable(_claim(), REF, POD, None)
    assert not usable(_claim(), REF, "1d1d1d1d-0000-4000-8000-00000000000d", _pod())


def test_off_it_reads_nothing_and_every_call_reads_its_claims(api: _Api) -> None:
    p = ClaimPrefetch(api, "node-a", DRIVER, enabled=False)
    p.start()
    try:
        assert not api.watching.wait(0.3)
        assert _take(p) is None and api.gets == []
    finally:
        p.stop()


def test_another_drivers_claim_is_not_kept(api: _Api) -> None:
    api.claim = _claim()
    api.claim["status"]["allocation"]["devices"]["results"] = [{"driver": "gpu.example.com"}]
    p = _started(api)
    try:
        wait_for("the prefetch", lambda: api.gets)
        assert _take(p) is None
    finally:
        p.stop()


def test_a_calls_claims_are_taken_together_once_their_reads_end(api: _Api) -> None:
    """Two claims of one call, both still being read: both answer the call."""
    api.release.clear()
    p = _started(api)
    try:
        second = _pod(version="21", claims=(REF.name, "app-nic2-q9w8e"))
        api.events.put({"type": "MODIFIED", "object": second})
        assert api.started.wait(30)
        other = _claim(uid=OTHER)
        other["metadata"]["name"] = "app-nic2-q9w8e"
        api.by_name["app-nic2-q9w8e"] = other
        refs = [REF, ClaimRef("ns", "app-nic2-q9w8e", OTHER)]
        threading.Timer(0.2, api.release.set).start()
        got = p.take(refs, Deadline.after(5), _NEVER)
        assert got == {CLAIM: _claim(), OTHER: other}
    finally:
        api.release.set()
        p.stop()


def test_a_kept_claim_and_every_pod_change_are_told_to_the_hooks(api: _Api) -> None:
    """`on_read` hears of each claim kept, with its pod (ahead.py prepares it); not of
    another driver's; `on_pods` of every change of the node's pods."""
    other = _claim(uid=OTHER)
    other["metadata"]["name"] = "theirs"
    other["status"]["allocation"]["devices"]["results"] = [{"driver": "other.example.com"}]
    api.by_name["theirs"] = other
    p = ClaimPrefetch(api, "node-a", DRIVER)
    read: list[tuple[ClaimRef, str]] = []
    changes: list[set[str]] = []
    p.on_read = lambda ref, pod: read.append((ref, pod))
    p.on_pods = changes.append
    p.start()
    try:
        assert api.watching.wait(30)
        listed = len(changes)
        assert listed >= 1  # the list
        api.events.put({"type": "ADDED", "object": _pod(claims=(REF.name, "theirs"))})
        wait_for("both read", lambda: len(api.gets) == 2)
        wait_for("the kept one told", lambda: read)
        time.sleep(0.1)
        assert read == [(REF, POD)]
        assert changes[listed:] == [set()]
        api.events.put({"type": "MODIFIED", "object": _pod(version="32", phase="Failed")})
        api.events.put({"type": "DELETED", "object": _pod(uid=OTHER, version="33")})
        wait_for("both ends told", lambda: len(changes) == listed + 3)
        assert changes[listed + 1 :] == [{POD}, {OTHER}]
    finally:
        p.stop()
