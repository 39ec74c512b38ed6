"""Runs the core's handlers off the reader thread, on few threads, one pod at a time.

Each pod has a queue: its calls run one after the other in the order they came, and a
waiting call holds no thread. The runtime sends one request at a time and waits for
it, so one worker normally does; a handler that outlives its call's deadline keeps
its thread (Python cannot stop it) while a second worker serves the other pods.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

Outcome = Callable[[BaseException | None], None]  # called with None on success
Skipped = Callable[[str], None]  # called with the reason a call did not run


@dataclass
class _Job:
    fn: Callable[[], None]
    deadline: float
    outcome: Outcome
    run_late: bool
    skipped: Skipped | None


class HandlerRunner:
    """Runs handler calls on at most `max_threads` threads, in order per pod key."""

    def __init__(self, max_threads: int = 2) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, not {max_threads}")
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="nri-handler")
        self._guard = threading.Lock()
        self._queues: dict[str, deque[_Job]] = {}
        self._closed = False

    def busy(self, key: str) -> bool:
        """Whether a call for this pod is running or waiting to run."""
        with self._guard:
            return key in self._queues

    def submit(
        self,
        key: str,
        fn: Callable[[], None],
        deadline: float,
        outcome: Outcome,
        *,
        run_late: bool = False,
        skipped: Skipped | None = None,
    ) -> None:
        """Run `fn` after the pod's earlier calls; report through `outcome`.

        A call that cannot start by `deadline` (monotonic) is skipped, `skipped` saying
        why, unless `run_late`: then it runs whenever its turn comes.
        """
        job = _Job(fn, deadline, outcome, run_late, skipped)
        with self._guard:
            if self._closed:
                queue = None
            elif key in self._queues:
                self._queues[key].append(job)
                return
            else:
                queue = self._queues[key] = deque([job])
        if queue is not None:
            try:
                self._pool.submit(self._drain, key, queue)
                return
            except RuntimeError:  # shut down meanwhile
                with self._guard:
                    self._queues.pop(key, None)
        _skip(job, "the plugin is stopping")

    def _drain(self, key: str, queue: deque[_Job]) -> None:
        while True:
            with self._guard:
                job = queue[0]
                closed = self._closed
            report: Callable[[], None]
            if closed:
                report = _skipper(job, "the plugin is stopping")
            elif not job.run_late and time.monotonic() >= job.deadline:
                report = _skipper(job, "its deadline passed before it could start")
            else:
                try:
                    job.fn()
                except Exception as exc:
                    report = _reporter(job, exc)
                else:
                    report = _reporter(job, None)
            with self._guard:  # done before the answer goes out: the pod is not busy then
                queue.popleft()
                last = not queue
                if last:
                    del self._queues[key]
            report()
            if last:
                return

    def shutdown(self) -> None:
        """Stop taking work; waiting calls are dropped, running ones finish on their own."""
        with self._guard:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


def _skip(job: _Job, reason: str) -> None:
    if job.skipped:
        job.skipped(reason)


def _skipper(job: _Job, reason: str) -> Callable[[], None]:
    return lambda: _skip(job, reason)


def _reporter(job: _Job, exc: BaseException | None) -> Callable[[], None]:
    return lambda: job.outcome(exc)
