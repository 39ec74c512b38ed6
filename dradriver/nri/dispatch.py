"""Runs the core's handlers off the reader thread, on few threads, one pod at a time.

The runtime sends one request at a time and waits for it, so one worker normally does.
A handler that outlives its call's deadline keeps its thread (Python cannot stop it);
meanwhile the runtime has had its answer and goes on, so a second worker serves the
next pods. Calls for one pod never overlap and run in the order they arrived.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass
class _Slot:
    lock: threading.Lock
    users: int = 0


class PodLocks:
    """One lock per pod key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._slots: dict[str, _Slot] = {}

    def acquire(self, key: str, timeout: float) -> bool:
        """Take the pod's lock, waiting at most `timeout` seconds; True if taken."""
        with self._guard:
            slot = self._slots.setdefault(key, _Slot(threading.Lock()))
            slot.users += 1
        if slot.lock.acquire(timeout=max(0.0, timeout)):
            return True
        self._leave(key, slot)
        return False

    def release(self, key: str) -> None:
        """Give the pod's lock back."""
        with self._guard:
            slot = self._slots[key]
        slot.lock.release()
        self._leave(key, slot)

    def _leave(self, key: str, slot: _Slot) -> None:
        with self._guard:
            slot.users -= 1
            if slot.users == 0:
                del self._slots[key]

    def __contains__(self, key: object) -> bool:
        with self._guard:
            return key in self._slots


Outcome = Callable[[BaseException | None], None]  # called with None on success


class HandlerRunner:
    """Runs handler calls on at most `max_threads` threads, ordered per pod key."""

    def __init__(self, max_threads: int = 2, late_wait: float = 60.0) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, not {max_threads}")
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="nri-handler")
        self._locks = PodLocks()
        self._late_wait = late_wait

    def submit(
        self,
        key: str,
        fn: Callable[[], None],
        deadline: float,
        outcome: Outcome,
        *,
        run_late: bool = False,
        skipped: Callable[[str], None] | None = None,
    ) -> None:
        """Run `fn` after the pod's earlier calls; report through `outcome`.

        A call still waiting for its pod at `deadline` is skipped (`skipped` says why)
        unless `run_late`: then it waits up to `late_wait` more, and runs when it can.
        """

        def job() -> None:
            wait = deadline - time.monotonic() + (self._late_wait if run_late else 0.0)
            if not self._locks.acquire(key, wait):
                if skipped:
                    skipped("an earlier call for this pod is still running")
                return
            try:
                if not run_late and time.monotonic() >= deadline:
                    if skipped:
                        skipped("its deadline passed before a thread was free")
                    return
                try:
                    fn()
                except Exception as exc:
                    outcome(exc)
                else:
                    outcome(None)
            finally:
                self._locks.release(key)

        try:
            self._pool.submit(job)
        except RuntimeError:  # shut down: the plugin is stopping
            if skipped:
                skipped("the plugin is stopping")

    def busy(self, key: str) -> bool:
        """Whether a call for this pod is running or waiting to run."""
        return key in self._locks

    def shutdown(self) -> None:
        """Stop taking work; queued calls are dropped, running ones finish on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
