"""Fetching the ResourceClaims of a kubelet call: side by side, outside the lock, in budget.

A call has a budget (budget.py). The claims of a batch are fetched concurrently by a few workers,
each GET bounded by what is left of the budget; a claim not fetched in time gets an
error naming it, the API server and the budget, and the kubelet retries. Fetching never
happens under the serialisation lock, so a slow API server delays only the calls that
need it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.errors import ClaimError, DriverError
from dradriver.base.metrics import Metrics
from dradriver.claims.budget import SHUTTING_DOWN, Deadline
from dradriver.contract.hookspecs import ClaimRef

FETCH_WORKERS = 4  # at most; started as batches need them (each keeps its own connection)
_GRACE = 1.0  # a GET may outlive the budget by this much, so the budget's error wins

# The claims read before the call (prefetch.py) that are provably the ones it names, by UID.
Early = Callable[[Sequence[ClaimRef], Deadline, "Future[None]"], "dict[str, dict[str, Any]]"]


class ClaimSource(Protocol):
    """Where ResourceClaims come from (the API server)."""

    @property
    def server(self) -> str:
        """The API server's URL, as errors name it."""

    def get_claim(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any]:
        """The ResourceClaim object as JSON, within `timeout` seconds if given."""


@dataclass(frozen=True)
class Fetched:
    """One claim's GET: the object, or the error that is that claim's answer."""

    claim: dict[str, Any] | None = None
    error: Exception | None = None  # a DriverError, or a bug (reported as one)

    def get(self) -> dict[str, Any]:
        """The claim object; raises the fetch's error."""
        if self.error is not None:
            raise self.error
        assert self.claim is not None
        return self.claim


class ClaimFetcher:
    """GETs the claims of a batch concurrently, each within the call's budget.

    The workers are daemon threads: a GET hanging on a dead API server must not keep a
    process that is shutting down alive (the call that waited for it has answered).
    """

    def __init__(
        self,
        api: ClaimSource,
        workers: int = FETCH_WORKERS,
        early: Early | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """Nothing runs until the first fetch. A claim `early` has is not fetched;
        `metrics` counts where each claim came from."""
        self.api = api
        self.early = early
        self._metrics = metrics
        self._workers = workers
        self._queue: queue.SimpleQueue[tuple[ClaimRef, Deadline, Future[Fetched]]] = (
            queue.SimpleQueue()
        )
        self._started = 0
        self._idle = 0
        self._start_lock = threading.Lock()

    def fetch(
        self, refs: Sequence[ClaimRef], deadline: Deadline, abandon: Future[None]
    ) -> dict[str, Fetched]:
        """Each claim's object or error, by UID; returns by the deadline or when
        `abandon` completes (shutdown), whichever comes first."""
        out: dict[str, Fetched] = {}
        if self.early is not None and refs:
            out = {uid: Fetched(c) for uid, c in self.early(refs, deadline, abandon).items()}
            refs = [ref for ref in refs if ref.uid not in out]
        self._count("prefetched", len(out))
        self._count("get", len(refs))
        if not refs:
            return out
        self._start(len(refs))
        futures: dict[Future[Fetched], ClaimRef] = {}
        for ref in refs:
            future: Future[Fetched] = Future()
            self._queue.put((ref, deadline, future))
            futures[future] = ref
        pending: set[Future[Any]] = set(futures)
        while pending and not abandon.done():
            left = deadline.remaining()
            if left <= 0:
                break
            _, pending = wait({*pending, abandon}, timeout=left, return_when=FIRST_COMPLETED)
            pending.discard(abandon)
        for future, ref in futures.items():
            if future.done():
                out[ref.uid] = future.result()
            else:
                future.cancel()  # if not started yet, it never will be
                out[ref.uid] = Fetched(error=self._late(abandon, deadline))
        return out

    def _count(self, source: str, claims: int) -> None:
        if self._metrics is not None and claims:
            self._metrics.claim_reads.labels(source).inc(claims)

    def _late(self, abandon: Future[None], deadline: Deadline) -> DriverError:
        if abandon.done():
            return ClaimError(SHUTTING_DOWN)
        return ClaimError(
            f"the API server {self.api.server} did not answer the GET of the ResourceClaim "
            f"within {deadline.describe()}; the kubelet retries"
        )

    def _get(self, ref: ClaimRef, deadline: Deadline) -> Fetched:
        left = deadline.remaining()
        if left <= 0:
            return Fetched(error=self._late(_NEVER, deadline))
        try:
            return Fetched(self.api.get_claim(ref.namespace, ref.name, timeout=left + _GRACE))
        except ApiError as exc:
            server = self.api.server
            if exc.status == 404:
                return Fetched(error=ClaimError(f"not found in the API server {server} (deleted?)"))
            where = "" if exc.status == 0 else f" from the API server {server}"
            return Fetched(error=ClaimError(f"cannot read the ResourceClaim{where}: {exc}"))
        except DriverError as exc:
            return Fetched(error=exc)

    def _start(self, claims: int) -> None:
        """Reserve workers for `claims` more GETs, starting new ones beyond those free, up
        to the limit (a node whose calls carry one claim each keeps one worker, one
        connection). `_idle` is the workers free minus the GETs queued for them."""
        with self._start_lock:
            wanted = min(claims - self._idle, self._workers - self._started)
            for _ in range(max(wanted, 0)):
                name = f"claim-get-{self._started}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
                self._started += 1
                self._idle += 1
            self._idle -= claims

    def _work(self) -> None:
        while True:
            ref, deadline, future = self._queue.get()
            try:
                self._serve(ref, deadline, future)
            finally:
                with self._start_lock:
                    self._idle += 1

    def _serve(self, ref: ClaimRef, deadline: Deadline, future: Future[Fetched]) -> None:
        """Answer one queued GET (unless its call gave up on it already)."""
        if not future.set_running_or_notify_cancel():  # cancelled: the call is over
            return
        try:
            future.set_result(self._get(ref, deadline))
        except Exception as exc:  # a bug: that claim's error, never a dead worker
            future.set_result(Fetched(error=exc))


_NEVER: Future[None] = Future()  # an `abandon` that never completes
