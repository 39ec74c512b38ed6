"""Claims prepared before the kubelet asks: the prepare made as soon as a claim is read
ahead (`--claim-prefetch prepare`).

The kubelet calls NodePrepareResources after it has mounted the pod's volumes, right
before it creates the pod's sandbox: a hundred milliseconds or more after the binding
that made the driver read the claim (prefetch.py). The driver prepares the claim then,
on a worker of its own, exactly as the kubelet's call would: from the copy `usable`
accepts, under the same lock, with the same record, which also names the pod it was
prepared for, in a mark file (`ahead/<claim UID>` in the state directory, written before
the claim's journal). The kubelet's call then finds the claim prepared and answers from
its record.

The mark is the only truth, shared by every instance on the node (a rolling update)
and kept across restarts: the kubelet's call removes it, under the serialisation lock,
before it answers; from then on the claim is the kubelet's. A call for a claim
whose pod is no longer alive does not take the prepared claim: it is released and
prepared again from a GET, as without prefetching. The kubelet never unprepares a claim
it did not ask for, so while the mark is there the claim is the driver's to release:
when its pod is deleted, or Succeeded or Failed, the driver unprepares it, after
reading the mark again under the lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, Protocol

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.claims.budget import Deadline
from dradriver.claims.fetch import Early
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import PREPARED
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

BUDGET = 10.0  # longest an ahead prepare or a release waits for the lock
RETRY = 5.0  # a release that failed (a lock busy past BUDGET, a file error) is tried again
SWEEP = 600.0  # every mark on disk is looked at this often, besides the pod watch's events
_NEVER: Future[None] = Future()  # nothing abandons a worker's wait

Pods = Callable[[], Mapping[str, Mapping[str, Any]] | None]  # the pod watch's copy, by UID


def done(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod will never run (again): gone from the node, Succeeded or Failed."""
    return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def alive(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod still runs: known, not being deleted, not done."""
    return (
        pod is not None
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and (not done(pod))
    )


class AheadBook:
    """Which claims may be prepared ahead and not asked for: candidates for a release
    (the records' marks decide), and the pod watch's view of their pods."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        """Empty, with no pod watch: every pod counts as not running."""
        self._mu = threading.Lock()
        self._candidates: dict[str, str] = {}  # claim UID -> pod UID
        self._metrics = metrics
        self.pods: Pods = lambda: None

    def load(self, records: RecordStore) -> None:
        """Take up the marks of prepared claims (at start, under the lock); remove those
        of claims without a prepared record (a prepare ahead cut short, rolled back)."""
        try:
            uids = records.ahead_claims()
        except OSError as exc:
            event(log, logging.ERROR, "the marks of claims prepared ahead cannot be read",
                  error=exc)  # fmt: skip
            return
        for uid in uids:
            try:
                pod, record = records.ahead_pod(uid), records.load(uid)
                if pod is not None and record is not None and record.phase == PREPARED:
                    with self._mu:
                        self._candidates[uid] = pod
                elif record is None or record.phase != PREPARED:
                    records.unmark_ahead(uid)
            except (OSError, DriverError) as exc:  # reported where the record is loaded
                event(log, logging.WARNING, "a claim's mark cannot be read", claim=uid,
                      error=exc)  # fmt: skip

    def preparing(self, uid: str, pod_uid: str, records: RecordStore) -> None:
        """A claim is about to be prepared ahead for `pod_uid` (under the lock)."""
        records.mark_ahead(uid, pod_uid)
        with self._mu:
            self._candidates[uid] = pod_uid

    def released(self, uid: str, records: RecordStore) -> None:
        """The claim was unprepared, or its prepare undone (under the lock)."""
        records.unmark_ahead(uid)
        self.forget(uid)

    def candidates(self) -> dict[str, str]:
        """Claim UID -> pod UID of the claims that may still be prepared ahead."""
        with self._mu:
            return dict(self._candidates)

    def forget(self, uid: str) -> None:
        """The claim was unprepared, or the kubelet took it."""
        with self._mu:
            self._candidates.pop(uid, None)

    def refusal(self, uid: str, records: RecordStore) -> str | None:
        """Why the kubelet's call may not answer from a claim prepared ahead (its pod no
        longer runs, or the pod watch cannot say), or None (under the lock)."""
        pod = records.ahead_pod(uid)
        if pod is None:
            return None
        pods = self.pods()
        if pods is not None and alive(pods.get(pod)):
            return None
        return f"it was prepared ahead for pod {pod}, which the driver does not see running"

    def hand_over(self, uid: str, records: RecordStore, count: bool = True) -> None:
        """The kubelet's call answers from a claim prepared ahead: remove the mark (under
        the lock, before the answer); the claim is the kubelet's from now on."""
        if not records.unmark_ahead(uid, tidy=False):
            return
        self.forget(uid)
        if self._metrics is not None and count:
            self._metrics.prepared_ahead.labels("used").inc()


class AheadPreparer(Protocol):
    """What preparing ahead needs of the Preparer."""

    records: RecordStore
    ahead: AheadBook

    def prepare(
        self,
        refs: Sequence[ClaimRef],
        budget: float | None = None,
        ahead: tuple[str, dict[str, Any]] | None = None,
    ) -> Mapping[str, Any]:
        """Prepare claims; `ahead`: (pod UID, claim) of a claim prepared before the call."""

    def unprepare(
        self,
        refs: Sequence[ClaimRef],
        budget: float | None = None,
        only: Callable[[ClaimRef], bool] | None = None,
    ) -> Mapping[str, Any]:
        """Unprepare claims; `only`, checked under the lock, picks those still to release."""


class PrepareAhead:
    """The worker that prepares claims as they are read ahead and releases those whose
    pod is done before the kubelet asked."""

    def __init__(
        self,
        preparer: AheadPreparer,
        take: Early,
        pods: Pods,
        metrics: Metrics | None = None,
        prepare_new: bool = True,
    ) -> None:
        """`take` hands out the copies read ahead and `pods` is the pod watch's copy
        (prefetch.py); without `prepare_new` (--claim-prefetch read) only the claims
        prepared ahead by an earlier run are looked after."""
        self._preparer = preparer
        self._take = take
        self._pods = pods
        self._metrics = metrics
        self._prepare_new = prepare_new
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._mu = threading.Lock()
        self._releasing: set[str] = set()
        self._stopped = False
        self._thread = threading.Thread(target=self._work, name="prepare-ahead", daemon=True)
        preparer.ahead.pods = pods

    def stop(self) -> None:
        """End the worker after the jobs queued (a job after the driver's drain is
        refused by its gate)."""
        with self._mu:
            self._stopped = True
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(BUDGET)

    def claim_read(self, ref: ClaimRef, pod_uid: str) -> None:
        """A claim of a pod bound here was read ahead: prepare it (prefetch's hook)."""
        if self._prepare_new:
            self._later(0.0, partial(self._prepare, ref, pod_uid))

    def pods_changed(self, ended: Iterable[str] = ()) -> None:
        """Release the claims prepared ahead whose pod is done: those this instance
        knows of, those indexed under the pods that just `ended`, and every mark on disk
        (another instance may have prepared them, and a pod may have gone while the
        watch was relisting). The pod watch's hook, after each event and each list."""
        pods = self._pods()
        if pods is None:
            return  # not in step: nothing can be said of any pod
        candidates = self._preparer.ahead.candidates()
        try:  # usually no directory at all: one failed listdir
            for uid in self._preparer.records.ahead_claims():
                if uid not in candidates and (pod_uid := self._marked(uid)) is not None:
                    candidates[uid] = pod_uid
        except OSError as exc:
            event(log, logging.WARNING, "the marks of claims prepared ahead cannot be read",
                  error=exc)  # fmt: skip
        for pod_uid in ended:
            try:
                for uid in self._preparer.records.claims_of_pod(pod_uid):
                    candidates.setdefault(uid, pod_uid)
            except OSError as exc:  # the claims this instance knows are still looked at
                event(log, logging.WARNING, "the pod index cannot be read", pod=pod_uid,
                      error=exc)  # fmt: skip
        for uid, pod_uid in candidates.items():
            if done(pods.get(pod_uid)):
                with self._mu:
                    if uid in self._releasing:
                        continue
                    self._releasing.add(uid)
                self._later(0.0, partial(self._release, uid, pod_uid))

    def _later(self, delay: float, job: Callable[[], None]) -> None:
        """Queue `job` now, or after `delay` seconds on a timer: a job waiting for its
        time never holds up the jobs behind it."""
        with self._mu:
            if self._stopped:
                return
            if not self._thread.is_alive():
                self._thread.start()  # with the first job
                self._sweep_later()
        if delay <= 0:
            self._jobs.put(job)
            return
        timer = threading.Timer(delay, self._later, (0.0, job))
        timer.daemon = True
        timer.start()

    def _sweep_later(self) -> None:
        timer = threading.Timer(SWEEP, self._sweep)
        timer.daemon = True
        timer.start()

    def _sweep(self) -> None:
        self._later(0.0, self.pods_changed)
        with self._mu:
            if not self._stopped:
                self._sweep_later()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a bug: logged; the worker goes on
                log.exception("preparing ahead failed unexpectedly")

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.prepared_ahead.labels(result).inc()

    def _prepare(self, ref: ClaimRef, pod_uid: str) -> None:
        copies = self._take([ref], Deadline.after(1.0), _NEVER)
        if ref.uid not in copies:
            return  # the kubelet's call took it first, or it is no longer usable
        outcome = self._preparer.prepare([ref], BUDGET, ahead=(pod_uid, copies[ref.uid]))
        answer = outcome.get(ref.uid)
        if getattr(answer, "error", None):
            self._count("failed")  # the kubelet's call prepares it again and says why
        elif getattr(answer, "devices", None):
            self._count("prepared")
            event(log, logging.INFO, "prepared ahead", claim=ref.uid, ref=str(ref), pod=pod_uid)
        self.pods_changed()  # the pod may have gone while it was prepared

    def _release(self, uid: str, pod_uid: str) -> None:
        """Unprepare a claim whose mark still names `pod_uid`: the kubelet has not asked
        for it and its pod is done. The mark is read again under the lock, so a release
        that meets a prepare in flight (another instance's, or this one's) waits for it
        and then decides; nothing is decided outside the lock."""
        released: list[str] = []

        def still_ahead(ref: ClaimRef) -> bool:
            if self._marked(ref.uid) != pod_uid:
                return False
            released.append(ref.uid)
            return True

        try:
            if self._marked(uid) != pod_uid:  # asked for, unprepared, or not ahead: a
                self._preparer.ahead.forget(uid)  # prepare ahead yet to mark it looks
                return  # at its pod again when done (_prepare)
            record = self._preparer.records.load(uid)  # for the claim's name only
            ref = record.claim if record is not None else ClaimRef("", "", uid)
            answer = self._preparer.unprepare([ref], BUDGET, only=still_ahead).get(uid)
        except (OSError, DriverError) as exc:
            answer, released = None, []
            event(log, logging.WARNING, "reading a claim prepared ahead failed", claim=uid,
                  error=exc)  # fmt: skip
        finally:
            with self._mu:
                self._releasing.discard(uid)
        if answer is None or getattr(answer, "error", None):
            self._later(RETRY, partial(self._retry, uid, pod_uid))  # logged by unprepare
        elif released:
            self._count("released")
            event(log, logging.INFO, "released a claim prepared ahead: its pod is done",
                  claim=uid, pod=pod_uid)  # fmt: skip
        else:
            self._preparer.ahead.forget(uid)  # asked for, unprepared, or not ahead

    def _retry(self, uid: str, pod_uid: str) -> None:
        with self._mu:
            if uid in self._releasing:
                return
            self._releasing.add(uid)
        self._release(uid, pod_uid)

    def _marked(self, uid: str) -> str | None:
        try:
            return self._preparer.records.ahead_pod(uid)
        except (OSError, DriverError):
            return None
