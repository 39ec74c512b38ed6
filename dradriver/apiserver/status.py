"""ResourceClaim status.devices: written in the background after a successful prepare.

A write starts a moment (SETTLE) after the prepare queued it, once the kubelet's call has
been answered. A write that fails (a conflict, a server error, the API down) is tried again with a
jittered exponential back-off, until it is written, the claim is gone (404) or it is
unprepared (its record is gone). Pending writes are one per claim UID and bounded in
number; an idempotent re-prepare queues the write again if this process has not written
it, which covers writes that a restart dropped.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.state.records import ClaimRecord

log = logging.getLogger(__name__)

MAX_PENDING = 4096  # claims whose status waits to be written
# A new write waits this long, so that it does not compete for the interpreter with the
# rest of the kubelet call that prepared the claim (its answer is not sent yet).
SETTLE = 0.05
BACKOFF = (0.5, 60.0)  # first and longest pause between tries of one claim, in seconds
# Claims whose status this process wrote, remembered so that a re-prepare does not write
# it again (forgetting one costs one more write). Kept as hashes of the UIDs: ~60 bytes
# each instead of ~180.
_WRITTEN_REMEMBERED = 1024


class StatusApi(Protocol):
    """The API call the writer needs."""

    def apply_claim_status(
        self, namespace: str, name: str, body: Mapping[str, Any], manager: str
    ) -> None:
        """Server-side apply a claim status."""


def status_body(record: ClaimRecord, driver: str, node_name: str, now: float) -> dict[str, Any]:
    """The server-side-apply body of a claim's status.devices entries for our devices."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    devices = []
    for d in record.devices:
        entry: dict[str, Any] = {
            "driver": driver,
            "pool": d.pool,
            "device": d.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Prepared",
                    "message": f"prepared by {driver} on node {node_name}",
                    "lastTransitionTime": stamp,
                }
            ],
        }
        if d.share_id:
            entry["shareID"] = d.share_id
        if d.network_data:
            nd = {k: v for k, v in d.network_data.items() if v}
            if nd:
                entry["networkData"] = nd
        devices.append(entry)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": record.claim.name, "namespace": record.claim.namespace},
        "status": {"devices": devices},
    }


@dataclass
class _Pending:
    record: ClaimRecord
    attempts: int = 0
    due: float = 0.0  # time.monotonic() of the next try


class StatusWriter:
    """A background thread that applies claim statuses, retrying until each is written."""

    def __init__(
        self,
        api: StatusApi,
        driver: str,
        node_name: str,
        metrics: Metrics | None = None,
        still_prepared: Callable[[str], bool] = lambda uid: True,
        backoff: tuple[float, float] = BACKOFF,
        max_pending: int = MAX_PENDING,
        settle: float = SETTLE,
    ) -> None:
        """Prepare the queue; `start` launches the thread. `still_prepared(uid)` says
        whether the claim still has its record (an unprepared claim's write is dropped)."""
        self._api = api
        self._driver = driver
        self._node = node_name
        self._metrics = metrics
        self._still_prepared = still_prepared
        self._backoff = backoff
        self._max = max_pending
        self._settle = settle
        self._pending: dict[str, _Pending] = {}
        self._written: dict[int, None] = {}  # hash(claim UID), oldest first
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)

    def start(self) -> None:
        """Start writing queued statuses."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the write in progress (waiting up to `timeout`); log what is left."""
        with self._cond:
            self._stopping = True
            left = len(self._pending)
            self._cond.notify_all()
        self._thread.join(timeout)
        if left:
            event(
                log,
                logging.WARNING,
                "claim statuses not written at shutdown: written when the claims are "
                "prepared again",
                pending=left,
            )

    def submit(self, record: ClaimRecord) -> None:
        """Queue a status write (one per claim: a newer record replaces a queued one);
        if too many are queued the write is dropped, logged and counted."""
        uid = record.claim.uid
        with self._cond:
            self._written.pop(hash(uid), None)
            entry = self._pending.get(uid)
            if entry is not None:
                entry.record = record  # keeps its back-off: never more tries than one claim
                return
            if len(self._pending) >= self._max:
                full = True
            else:
                full = False
                self._pending[uid] = _Pending(record, due=time.monotonic() + self._settle)
                self._cond.notify_all()
        if full:
            self._failed(record, f"{self._max} status writes are queued already; dropped")

    def resubmit(self, record: ClaimRecord) -> None:
        """Queue the status of an idempotent re-prepare, unless this process wrote it."""
        with self._cond:
            if hash(record.claim.uid) in self._written:
                return
        self.submit(record)

    def pending(self) -> int:
        """How many claims wait for their status to be written."""
        with self._cond:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._cond:
                entry = self._next_due()
                if entry is None:
                    return
            self._write(entry)

    def _next_due(self) -> _Pending | None:
        """The next write whose time has come (taken out of the queue); None when stopping.
        Called with the condition held."""
        while not self._stopping:
            now = time.monotonic()
            entry = min(self._pending.values(), key=lambda e: e.due, default=None)
            if entry is not None and entry.due <= now:
                del self._pending[entry.record.claim.uid]
                return entry
            self._cond.wait(None if entry is None else entry.due - now)
        return None

    def _write(self, entry: _Pending) -> None:
        record = entry.record
        uid = record.claim.uid
        if not self._still_prepared(uid):
            event(log, logging.INFO, "claim unprepared: its status is not written", claim=uid)
            return
        body = status_body(record, self._driver, self._node, time.time())
        try:
            self._api.apply_claim_status(
                record.claim.namespace, record.claim.name, body, self._driver
            )
        except ApiError as exc:
            if exc.status == 404:
                event(log, logging.INFO, "claim gone: its status is not written", claim=uid)
                return
            self._retry(entry, exc)
            return
        except Exception as exc:  # never let the writer thread die
            self._retry(entry, exc)
            return
        with self._cond:
            self._written[hash(uid)] = None
            while len(self._written) > _WRITTEN_REMEMBERED:
                del self._written[next(iter(self._written))]

    def _retry(self, entry: _Pending, exc: Exception) -> None:
        """Queue the write again after a jittered back-off (unless a newer one is queued)."""
        first, longest = self._backoff
        delay = min(longest, first * 2**entry.attempts) * random.uniform(0.5, 1.0)
        entry.attempts += 1
        self._failed(entry.record, str(exc), attempt=entry.attempts, retry_in=round(delay, 2))
        with self._cond:
            newer = self._pending.get(entry.record.claim.uid)
            if newer is not None:
                newer.attempts, newer.due = entry.attempts, time.monotonic() + delay
            else:
                entry.due = time.monotonic() + delay
                self._pending[entry.record.claim.uid] = entry
            self._cond.notify_all()

    def _failed(self, record: ClaimRecord, reason: str, **fields: Any) -> None:
        event(
            log,
            logging.ERROR,
            "writing claim status failed",
            claim=record.claim.uid,
            ref=str(record.claim),
            error=reason,
            **fields,
        )
        if self._metrics:
            self._metrics.status_failures.inc()
