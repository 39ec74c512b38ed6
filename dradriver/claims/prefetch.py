"""Claims read before the kubelet asks: those made for the pods bound to this node.

The kubelet reads a pod's claims itself and then calls NodePrepareResources; a GET inside
the call was most of its time. The driver watches the node's Pods instead, and when one
is bound here it GETs the claims made from the pod's templates (the names in
`status.resourceClaimStatuses`) at the pod event's resourceVersion: from the API server's
cache, never older than the binding, so already allocated and reserved for the pod.
Pods already bound when the pod list is made (at start, after a lost watch) are not
read ahead: a restart would read every claim of the node.

A copy answers one call at most, and only when `usable` finds it is the claim asked
for, made for the pod it was read for, reserved for that pod, allocated, and the pod is
still on the node, not being deleted and not done. While the pod is in reservedFor the
allocation cannot change (docs/architecture.md, "Claims read before the kubelet asks",
has the argument and its one limit). Anything else is read with a GET in the call.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import Watch
from dradriver.apiserver.watchcopy import LISTED, WatchedCopy, by_uid
from dradriver.base.log import event
from dradriver.claims.budget import Deadline
from dradriver.contract.hookspecs import ClaimRef

log = logging.getLogger(__name__)
_NOTHING: Future[dict[str, Any] | None] = Future()  # what a used entry keeps
_NOTHING.set_result(None)

WORKERS = 2
GET_TIMEOUT = 5.0  # a GET at a resourceVersion waits for the cache to reach it (up to 3 s)
WAIT = 1.0  # longest a call waits for a GET in flight before it makes its own
_DONE = ("Succeeded", "Failed")


class PrefetchApi(Protocol):
    """The API calls prefetching needs."""

    def list_pods_at(self, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """The Pods bound to the node, and the list's resourceVersion."""

    def watch_pods(self, node_name: str, version: str, seconds: int) -> Watch:
        """A watch of the node's Pods from `version`."""

    def get_claim(
        self, namespace: str, name: str, timeout: float | None = None, version: str | None = None
    ) -> dict[str, Any]:
        """A ResourceClaim, at `version` or later."""


@dataclass
class _Entry:
    """One claim read (or being read) for one pod."""

    pod_uid: str
    claim: Future[dict[str, Any] | None] = field(default_factory=Future)
    used: bool = False  # a copy answers one call at most


def alive(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod can still run: known, not being deleted, not Succeeded or Failed."""
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def generated_claims(pod: Mapping[str, Any]) -> list[str]:
    """The names of the claims made from the pod's templates, as its status has them."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return [str(s["resourceClaimName"]) for s in statuses if s.get("resourceClaimName")]


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of every claim the pod uses: named in its spec, or made from its templates."""
    refs = (pod.get("spec") or {}).get("resourceClaims") or []
    named = [str(r["resourceClaimName"]) for r in refs if r.get("resourceClaimName")]
    return named + generated_claims(pod)


def allocated_by(claim: Mapping[str, Any], driver: str) -> bool:
    """Whether any device of the claim's allocation is `driver`'s."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return any(r.get("driver") == driver for r in results)


def usable(
    claim: Mapping[str, Any], ref: ClaimRef, pod_uid: str, pod: Mapping[str, Any] | None
) -> bool:
    """Whether a copy of a claim read for pod `pod_uid` is the claim `ref` names now
    (module docstring: why these checks are enough)."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    owned = any(
        o.get("controller") and o.get("kind") == "Pod" and o.get("uid") == pod_uid
        for o in meta.get("ownerReferences") or []
    )
    reserved = any(
        r.get("resource") == "pods" and r.get("uid") == pod_uid
        for r in status.get("reservedFor") or []
    )
    return (
        meta.get("uid") == ref.uid
        and meta.get("namespace") == ref.namespace
        and meta.get("name") == ref.name
        and owned
        and reserved
        and bool(status.get("allocation"))
        and alive(pod)
    )


class ClaimPrefetch:
    """Reads the claims of pods bound to this node as they are bound."""

    def __init__(
        self,
        api: PrefetchApi,
        node_name: str,
        driver: str,
        wait_limit: float = WAIT,
        enabled: bool = True,
    ) -> None:
        """Nothing is read until `start`; when not `enabled` (--claim-prefetch off),
        never, and every call reads its claims itself. `on_read(ref, pod UID)` hears of
        each claim kept, `on_pods(ended)` of each change of the node's pods, with the
        UIDs of the pods an event said were removed, Succeeded or Failed (ahead.py)."""
        self.on_read: Callable[[ClaimRef, str], None] | None = None
        self.on_pods: Callable[[set[str]], None] | None = None
        self._ended: set[str] = set()  # by the event being handled (the watch's thread)
        self._api = api
        self._driver = driver
        self._enabled = enabled
        self._wait = wait_limit
        self._pods = WatchedCopy(
            "Pods",
            lambda: api.list_pods_at(node_name),
            lambda version, seconds: api.watch_pods(node_name, version, seconds),
            self._prune,
            key=by_uid,
            on_event=self._pod_event,
        )
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}  # by (namespace, claim name)
        self._queue: queue.SimpleQueue[tuple[str, str, str, _Entry] | None] = queue.SimpleQueue()
        self._workers = [
            threading.Thread(target=self._work, name=f"claim-prefetch-{i}", daemon=True)
            for i in range(WORKERS)
        ]

    def start(self) -> None:
        """List and watch the node's Pods; read claims as pods are bound."""
        if not self._enabled:
            return
        for worker in self._workers:
            worker.start()
        self._pods.start()

    def stop(self) -> None:
        """End the watch and the workers."""
        if not self._enabled:
            return
        self._pods.stop()
        for _ in self._workers:
            self._queue.put(None)

    def take(
        self, refs: Sequence[ClaimRef], deadline: Deadline, abandon: Future[None]
    ) -> dict[str, dict[str, Any]]:
        """By UID, the claims of `refs` that were read ahead and are provably still the
        claims named; the others are for the call to GET. Waits once for reads still in
        flight, within the deadline and WAIT."""
        taken: list[tuple[ClaimRef, _Entry]] = []
        with self._lock:
            for ref in refs:
                entry = self._entries.get((ref.namespace, ref.name))
                if entry is not None and not entry.used:
                    entry.used = True
                    taken.append((ref, entry))
        if not taken:
            return {}
        until = time.monotonic() + min(deadline.remaining(), self._wait)
        pending: set[Future[Any]] = {e.claim for _, e in taken if not e.claim.done()}
        while pending and not abandon.done():
            left = until - time.monotonic()
            if left <= 0:
                break
            _, pending = wait({*pending, abandon}, timeout=left, return_when=FIRST_COMPLETED)
            pending.discard(abandon)
        out: dict[str, dict[str, Any]] = {}
        for ref, entry in taken:
            claim = entry.claim.result() if entry.claim.done() else None
            entry.claim = _NOTHING  # used once: the copy is not kept
            if claim is not None and usable(
                claim, ref, entry.pod_uid, self._pods.get(entry.pod_uid)
            ):
                out[ref.uid] = claim
            else:
                event(log, logging.DEBUG, "prefetched claim not used: reading it", claim=ref.uid)
        return out

    def pods(self) -> dict[str, dict[str, Any]] | None:
        """The watch's copy of the node's pods by UID (None: not in step)."""
        return self._pods.snapshot()

    def held(self) -> int:
        """How many claims are held (read, or being read) for pods on the node."""
        with self._lock:
            return len(self._entries)

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        """Read the claims of a pod bound here (once per pod); forget a pod's claims when
        it is deleted or done."""
        meta = pod.get("metadata") or {}
        uid, namespace = str(meta.get("uid", "")), str(meta.get("namespace", ""))
        if kind == "DELETED" or not alive(pod):
            self._forget({uid})
            if kind == "DELETED" or (pod.get("status") or {}).get("phase") in _DONE:
                self._ended.add(uid)
            return
        version = str(meta.get("resourceVersion", ""))
        for name in generated_claims(pod):
            with self._lock:
                known = self._entries.get((namespace, name))
                if known is not None and known.pod_uid == uid:
                    continue
                entry = self._entries[(namespace, name)] = _Entry(uid)
            if kind == LISTED:  # bound before the driver looked: not read (a restart
                entry.claim.set_result(None)  # would read every claim of the node)
            else:
                self._queue.put((namespace, name, version, entry))

    def _prune(self) -> None:
        """Forget the claims of pods no longer in the copy (gone while it was not in step)."""
        pods = self._pods.snapshot()
        if pods is None:
            return
        with self._lock:
            gone = {e.pod_uid for e in self._entries.values() if e.pod_uid not in pods}
        if gone:
            self._forget(gone)
        ended, self._ended = self._ended, set()
        if self.on_pods is not None:
            self.on_pods(ended)

    def _forget(self, pod_uids: Iterable[str]) -> None:
        uids = set(pod_uids)
        with self._lock:
            for key in [k for k, e in self._entries.items() if e.pod_uid in uids]:
                del self._entries[key]

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            namespace, name, version, entry = item
            claim: dict[str, Any] | None = None
            try:
                claim = self._api.get_claim(namespace, name, GET_TIMEOUT, version or None)
                if not allocated_by(claim, self._driver):  # another driver's: not kept
                    claim = None
            except Exception as exc:  # the call reads it itself
                event(
                    log,
                    logging.DEBUG,
                    "prefetching a claim failed",
                    ref=f"{namespace}/{name}",
                    error=exc,
                )
                claim = None
            entry.claim.set_result(claim)
            if claim is not None and self.on_read is not None:
                uid = str((claim.get("metadata") or {}).get("uid", ""))
                self.on_read(ClaimRef(namespace, name, uid), entry.pod_uid)
