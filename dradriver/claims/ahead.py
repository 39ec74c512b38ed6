"""Claims prepared before the kubelet asks: the prepare made as soon as a claim is read
ahead (`--claim-prefetch prepare`).

The kubelet calls NodePrepareResources after it has mounted the pod's volumes, right
before it creates the pod's sandbox: a hundred milliseconds or more after the binding
that made the driver read the claim (prefetch.py). The driver prepares the claim then,
on a worker of its own, exactly as the kubelet's call would: from the copy `usable`
accepts, under the same lock, with the same record, which also names the pod it was
prepared for (`preparedAhead`). The kubelet's call then finds the claim prepared and
answers from its record.

The kubelet never unprepares a claim it did not ask for, so until it asks the claim is
the driver's to release: when its pod is deleted, or Succeeded or Failed, the driver
unprepares it itself. When the kubelet asks, the record's mark is dropped after the
answer. A call for a claim whose pod is no longer alive does not take the prepared
claim: it is released and prepared again from a GET, as without prefetching.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, Protocol

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.claims.budget import CallGate, Deadline
from dradriver.claims.fetch import Early
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import PREPARED, ClaimRecord
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

AHEAD = "preparedAhead"  # a record's field: the UID of the pod it was prepared ahead for
BUDGET = 10.0  # longest an ahead prepare, a release or a mark's drop waits for the lock
SETTLE = 0.05  # a mark is dropped this long after the kubelet asked: off its call
_NEVER: Future[None] = Future()  # nothing abandons a worker's wait


def done(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod will never run (again): gone from the node, Succeeded or Failed."""
    return pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class AheadBook:
    """The claims prepared ahead that the kubelet has not asked for, in memory (from the
    records' marks at start). `asked` and `pending` are consulted under the serialisation
    lock, so a release and the kubelet's call never both act on one claim."""

    def __init__(self) -> None:
        """Empty; `pod_alive` tells whether a pod still runs (None: no pod watch)."""
        self._mu = threading.Lock()
        self._pending: dict[str, tuple[ClaimRef, str]] = {}  # claim UID -> (ref, pod UID)
        self.pod_alive: Callable[[str], bool] | None = None
        self.on_asked: Callable[[str], None] | None = None  # a mark to drop

    def load(self, records: Iterable[ClaimRecord]) -> None:
        """Take up the marks of the records kept across a restart."""
        for record in records:
            if record.phase == PREPARED and record.extra.get(AHEAD):
                self.prepared(record.claim, str(record.extra[AHEAD]))

    def prepared(self, ref: ClaimRef, pod_uid: str) -> None:
        """A claim was just prepared ahead for `pod_uid`."""
        with self._mu:
            self._pending[ref.uid] = (ref, pod_uid)

    def pending(self, uid: str) -> bool:
        """Whether the claim is prepared ahead and not asked for."""
        with self._mu:
            return uid in self._pending

    def pending_claims(self) -> list[tuple[ClaimRef, str]]:
        """(ref, pod UID) of every claim prepared ahead and not asked for."""
        with self._mu:
            return list(self._pending.values())

    def forget(self, uid: str) -> None:
        """The claim was unprepared."""
        with self._mu:
            self._pending.pop(uid, None)

    def kubelet_asks(self, record: ClaimRecord) -> str | None:
        """The kubelet asks for a prepared claim: None when the record is its answer, or
        why not (prepared ahead for a pod that no longer runs: prepare it again)."""
        pod_uid = record.extra.get(AHEAD)
        if not pod_uid:
            return None
        with self._mu:
            if record.claim.uid not in self._pending:
                return None  # asked before: its mark is being dropped
            alive = self.pod_alive
            if alive is not None and not alive(str(pod_uid)):
                del self._pending[record.claim.uid]
                return f"it was prepared ahead for pod {pod_uid}, which no longer runs"
            del self._pending[record.claim.uid]
        if self.on_asked is not None:
            self.on_asked(record.claim.uid)
        return None


class AheadPreparer(Protocol):
    """What preparing ahead needs of the Preparer."""

    gate: CallGate
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
    """The worker that prepares claims as they are read ahead, releases those whose pod
    is done before the kubelet asked, and drops the marks of those it asked for."""

    def __init__(
        self,
        preparer: AheadPreparer,
        take: Early,
        pod: Callable[[str], Mapping[str, Any] | None],
        in_step: Callable[[], bool],
        metrics: Metrics | None = None,
        prepare_new: bool = True,
    ) -> None:
        """`take` hands out the copies read ahead (prefetch.py), `pod` is the pod watch's
        copy of a pod and `in_step` whether that copy follows the API server; without
        `prepare_new` (--claim-prefetch read) only the claims prepared ahead by an earlier
        run are looked after."""
        self._preparer = preparer
        self._take = take
        self._pod = pod
        self._in_step = in_step
        self._metrics = metrics
        self._prepare_new = prepare_new
        self._jobs: queue.SimpleQueue[tuple[float, Callable[[], None]] | None] = queue.SimpleQueue()
        self._releasing: set[str] = set()
        self._starting = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._work, name="prepare-ahead", daemon=True)
        preparer.ahead.pod_alive = self._alive
        preparer.ahead.on_asked = self._asked

    def stop(self) -> None:
        """End the worker after the jobs queued (a job after the driver's drain is
        refused by its gate; the worker is a daemon thread)."""
        with self._starting:
            self._stopped = True
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(BUDGET)

    def claim_read(self, ref: ClaimRef, pod_uid: str) -> None:
        """A claim of a pod bound here was read ahead: prepare it (prefetch's hook)."""
        if self._prepare_new:
            self._later(0.0, partial(self._prepare, ref, pod_uid))

    def pods_changed(self) -> None:
        """Release the claims prepared ahead whose pod is done (the pod watch's hook)."""
        if not self._in_step():
            return
        for ref, pod_uid in self._preparer.ahead.pending_claims():
            if ref.uid not in self._releasing and done(self._pod(pod_uid)):
                self._releasing.add(ref.uid)
                self._later(0.0, partial(self._release, ref))

    def _alive(self, pod_uid: str) -> bool:
        pod = self._pod(pod_uid)
        if pod is None and not self._in_step():
            return False  # not known: the call reads the claim itself
        return (
            pod is not None
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (not done(pod))
        )

    def _asked(self, uid: str) -> None:
        self._count("used")
        self._later(SETTLE, partial(self._drop_mark, uid))

    def _later(self, delay: float, job: Callable[[], None]) -> None:
        with self._starting:
            if self._stopped:
                return
            if not self._thread.is_alive():
                self._thread.start()  # with the first job
        self._jobs.put((time.monotonic() + delay, job))

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            due, job = item
            time.sleep(max(0.0, due - time.monotonic()))
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
        if self._preparer.ahead.pending(ref.uid):
            self._count("prepared")
            event(log, logging.INFO, "prepared ahead", claim=ref.uid, ref=str(ref), pod=pod_uid)
        elif getattr(outcome.get(ref.uid), "error", None):
            self._count("failed")  # the kubelet's call prepares it again and says why
        self.pods_changed()  # the pod may have gone while it was prepared

    def _release(self, ref: ClaimRef) -> None:
        try:
            outcome = self._preparer.unprepare(
                [ref], BUDGET, only=lambda r: self._preparer.ahead.pending(r.uid)
            )
        finally:
            self._releasing.discard(ref.uid)
        if getattr(outcome.get(ref.uid), "error", None):
            return  # logged by the unprepare; the next pod event tries again
        self._count("released")
        event(log, logging.INFO, "released a claim prepared ahead: its pod is done", claim=ref.uid)

    def _drop_mark(self, uid: str) -> None:
        """Rewrite the record without its mark: the kubelet owns the claim now."""
        gate, records = self._preparer.gate, self._preparer.records
        with gate.call():
            if gate.acquire(Deadline.after(BUDGET)) is not None:
                return  # stopping: the next start takes the mark up again
            try:
                record = records.load(uid)
                if record is not None and record.extra.pop(AHEAD, None) is not None:
                    records.save(record, durable=False)
            except (OSError, DriverError) as exc:
                event(log, logging.WARNING, "dropping a claim's ahead mark failed", claim=uid,
                      error=exc)  # fmt: skip
            finally:
                gate.release()
