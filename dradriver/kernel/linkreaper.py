"""Links deleted after unprepare has answered, so the kernel's wait stays off the kubelet's clock.

Deleting a link makes the kernel wait for RCU: ~15 ms per link here, 40-50 ms while the
pod's network namespace is being destroyed (which deletes a veth pair by itself, a
moment after the kubelet calls unprepare). So an unprepare collects the links its
handlers would delete (`collecting`; handlers call `defer` through the kit) and, once its
record is gone, hands them to the reaper, which deletes each `delay` seconds later if it
is still there, still carries the same owner tag, and its claim has not been prepared
again meanwhile (by this instance or another one: the check runs under the serialisation
lock, and the deletion is by interface index, so a link made again under the same name
is never hit). A rollback deletes at once.

A crash loses the queue: the links are tagged and their claim has no record, so start-up
reconciliation deletes them. At shutdown the queue is worked off at once (`drain`).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.kernel import netlink

log = logging.getLogger(__name__)

DEFAULT_DELAY = 1.0  # seconds between an unprepare's answer and the deletion of its links
LOCK_WAIT = 5.0  # how long one deletion waits for the serialisation lock before a retry


class Lock(Protocol):
    """The serialisation lock (dradriver.kubelet.sockets.SerializeLock or a thread lock)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock, waiting at most `timeout` seconds; whether it was taken."""

    def release(self) -> None:
        """Let go of the lock."""


@dataclass(frozen=True)
class Doomed:
    """Links of one claim to delete if still there and still tagged `alias`."""

    claim_uid: str
    names: tuple[str, ...]
    alias: str


_collected: ContextVar[list[tuple[tuple[str, ...], str]] | None] = ContextVar(
    "dradriver_doomed_links", default=None
)


@contextmanager
def collecting() -> Iterator[list[tuple[tuple[str, ...], str]]]:
    """Within this block (an unprepare), `defer` collects links instead of refusing;
    the caller hands what was collected to a reaper once the claim is released."""
    links: list[tuple[tuple[str, ...], str]] = []
    token = _collected.set(links)
    try:
        yield links
    finally:
        _collected.reset(token)


def defer(names: Sequence[str], alias: str) -> bool:
    """Collect links for a deletion after the answer; False outside an unprepare (the
    caller then deletes them at once)."""
    links = _collected.get()
    if links is None:
        return False
    links.append((tuple(names), alias))
    return True


class LinkReaper:
    """Deletes collected links when due, from one background thread."""

    def __init__(
        self, lock: Lock, released: Callable[[str], bool], delay: float = DEFAULT_DELAY
    ) -> None:
        """`lock` is held while a link is checked (not while the kernel deletes it);
        `released(claim_uid)` says whether the claim still has no record. Nothing runs
        until the first link is queued."""
        self.delay = delay
        self._lock = lock
        self._released = released
        self._queue: list[tuple[float, int, Doomed]] = []  # heap by due time
        self._count = 0
        self._cond = threading.Condition()
        self._working = 0  # entries taken off the queue and not yet done
        self._thread: threading.Thread | None = None

    def delete_later(self, claim_uid: str, links: Sequence[tuple[tuple[str, ...], str]]) -> None:
        """Queue the collected links of a released claim."""
        if not links:
            return
        due = time.monotonic() + self.delay
        with self._cond:
            for names, alias in links:
                self._count += 1
                heapq.heappush(self._queue, (due, self._count, Doomed(claim_uid, names, alias)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="link-reaper", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> int:
        """How many claims' links wait to be deleted (or are being deleted)."""
        with self._cond:
            return len(self._queue) + self._working

    def drain(self, timeout: float) -> int:
        """Delete everything queued now, in the calling thread (shutdown, tests), within
        `timeout` seconds; how many claims' links were left undone."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            with self._cond:
                if left <= 0 or not (self._queue or self._working):
                    return len(self._queue) + self._working
                if not self._queue:  # the thread is on the last one
                    self._cond.wait(left)
                    continue
                doomed = self._take()
            self._work(doomed, left)

    def _run(self) -> None:
        while True:
            with self._cond:
                doomed = self._next()
            try:
                self._work(doomed, LOCK_WAIT)
            except Exception as exc:  # a bug: never let the thread die; start-up deletes
                self._failed(doomed, exc)

    def _take(self) -> Doomed:
        """Take the first entry off the queue. Called with the condition held."""
        self._working += 1
        return heapq.heappop(self._queue)[2]

    def _work(self, doomed: Doomed, lock_wait: float) -> None:
        try:
            if not self._reap(doomed, lock_wait):  # the lock was busy: again, soon
                with self._cond:
                    self._count += 1
                    due = time.monotonic() + 0.1
                    heapq.heappush(self._queue, (due, self._count, doomed))
        finally:
            with self._cond:
                self._working -= 1
                self._cond.notify_all()

    def _next(self) -> Doomed:
        """The next due entry, waiting for it. Called with the condition held."""
        while True:
            now = time.monotonic()
            if self._queue and self._queue[0][0] <= now:
                return self._take()
            self._cond.wait(self._queue[0][0] - now if self._queue else None)

    def _reap(self, doomed: Doomed, lock_wait: float) -> bool:
        """Delete one claim's links that are still its own; False if the lock was busy."""
        if not self._lock.acquire(timeout=max(0.0, lock_wait)):
            return False
        try:
            if not self._released(doomed.claim_uid):
                return True  # prepared again: that prepare owns whatever has the names
            indexes = []
            for name in doomed.names:
                link = netlink.find(name)
                if link is not None and link.alias in (doomed.alias, None, ""):
                    indexes.append((name, link.index))
        except DriverError as exc:
            self._failed(doomed, exc)
            return True
        finally:
            self._lock.release()
        for name, index in indexes:  # by index: a link made again by name is another one
            try:
                netlink.delete_index(index, f"delete interface {name}")
            except DriverError as exc:
                self._failed(doomed, exc)
        return True

    @staticmethod
    def _failed(doomed: Doomed, exc: Exception) -> None:
        event(
            log,
            logging.ERROR,
            "deleting an unprepared claim's interfaces failed (start-up deletes them)",
            claim=doomed.claim_uid,
            interfaces=",".join(doomed.names),
            error=exc,
        )
