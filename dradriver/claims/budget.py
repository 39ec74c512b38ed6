"""A kubelet call's budget, the serialisation lock taken within it, and draining at shutdown.

The kubelet gives each NodePrepareResources / NodeUnprepareResources call a 45 s gRPC
deadline. A call's budget is two thirds of what that deadline leaves, at most
`--call-budget`; the rest is for the answer's way back and for the one claim whose work
had begun when the budget ran out. Everything a call waits for (the API, the lock) is
bounded by its budget.

A prepare holds the lock alone. Unprepares share it: each works on claims of its own
(state is per claim on disk), so the kubelet's unprepares of a block of pods deleted at
once overlap their file and kernel waits instead of queueing behind each other.

On SIGTERM the daemon drains the gate: calls stop waiting for the API and for the lock,
refuse the claims they have not begun and finish the one they are working on; only when
no call is left does the daemon let go of the lock, so a new instance never works beside
an old one that is still changing the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

DEFAULT_CALL_BUDGET = 30.0
DEADLINE_SHARE = 2 / 3  # of what the caller's gRPC deadline leaves
SHUTTING_DOWN = (
    "this driver instance is shutting down and did not start on the claim; the kubelet "
    "retries (on the new instance during a rolling update)"
)
_LOCK_POLL = 0.05  # seconds between looks at the budget and at shutdown while waiting


def call_budget(time_remaining: float | None, cap: float) -> float:
    """The budget of one call: a share of what the caller's deadline leaves, at most `cap`."""
    if time_remaining is None:
        return cap
    return max(0.0, min(cap, time_remaining * DEADLINE_SHARE))


@dataclass(frozen=True)
class Deadline:
    """When a call's budget runs out (monotonic clock)."""

    budget: float
    at: float

    @classmethod
    def after(cls, budget: float) -> Deadline:
        """The deadline `budget` seconds from now."""
        return cls(budget, time.monotonic() + budget)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        """Whether the budget is used up."""
        return time.monotonic() >= self.at

    def describe(self) -> str:
        """The budget as errors name it."""
        return f"this call's budget of {round(self.budget, 1):g} s"


def _not_free(deadline: Deadline) -> str:
    return (
        f"the serialisation lock was not free within {deadline.describe()} "
        "(another call, or another instance of the driver, holds it); "
        "the kubelet retries"
    )


class CallLock(Protocol):
    """The serialisation lock: a thread lock plus flock across instances (kubelet/sockets)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock, waiting at most `timeout` seconds; whether it was taken."""

    def release(self) -> None:
        """Let go of the lock."""


class CallGate:
    """Counts the calls in flight, takes the lock within a call's budget, and drains."""

    def __init__(self, lock: CallLock | None = None) -> None:
        """Guard `lock` (a plain thread lock when none is given: one process alone)."""
        self.lock: CallLock = lock or threading.Lock()
        self.abandon: Future[None] = Future()  # completes when draining starts
        self._calls = 0
        self._idle = threading.Condition()
        # Calls holding the lock together (acquire_shared); one of them takes it for the
        # group, the last one out lets go; while a call waits to hold it alone, no shared
        # call joins or takes it, so a stream of shared calls never keeps it out.
        self._group = threading.Condition()
        self._sharing = 0
        self._taking = False
        self._alone = 0

    @property
    def draining(self) -> bool:
        """Whether shutdown has begun."""
        return self.abandon.done()

    def busy(self) -> bool:
        """Whether a call is in flight."""
        with self._idle:
            return self._calls > 0

    @contextmanager
    def call(self) -> Iterator[None]:
        """Count one call in flight for the duration of the block."""
        with self._idle:
            self._calls += 1
        try:
            yield
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def acquire(self, deadline: Deadline) -> str | None:
        """Take the lock alone within the budget: None when taken, else why not (the
        error)."""
        with self._group:
            self._alone += 1
        try:
            return self._take(deadline)
        finally:
            with self._group:
                self._alone -= 1
                self._group.notify_all()

    def release(self) -> None:
        """Let go of the lock taken alone."""
        self.lock.release()

    def acquire_shared(self, deadline: Deadline) -> str | None:
        """Take the lock within the budget together with the other calls that share it
        (unprepares: each works on claims of its own), joining them when they hold it;
        never while a call waits to hold it alone: None when taken, else why not."""
        with self._group:
            while True:
                if self.draining:
                    return SHUTTING_DOWN
                if self._sharing and not self._alone:
                    self._sharing += 1
                    return None
                if not (self._sharing or self._taking or self._alone):
                    self._taking = True  # this call takes the lock for a new group
                    break
                if deadline.expired():
                    return _not_free(deadline)
                self._group.wait(min(_LOCK_POLL, deadline.remaining()))
        refusal = self._take(deadline)
        with self._group:
            self._taking = False
            if refusal is None:
                self._sharing = 1
            self._group.notify_all()
        return refusal

    def release_shared(self) -> None:
        """Leave the group; the last one out lets go of the lock."""
        with self._group:
            self._sharing -= 1
            if not self._sharing:
                self.lock.release()
            self._group.notify_all()

    def _take(self, deadline: Deadline) -> str | None:
        while not self.draining:
            if self.lock.acquire(timeout=min(_LOCK_POLL, deadline.remaining())):
                if not self.draining:
                    return None
                self.lock.release()
                break
            if deadline.expired():
                return _not_free(deadline)
        return SHUTTING_DOWN

    def stop_reason(self, deadline: Deadline) -> str | None:
        """Why the next claim of a call must not be begun, if it must not."""
        if self.draining:
            return SHUTTING_DOWN
        if deadline.expired():
            return (
                f"not started: {deadline.describe()} was used up before its turn; "
                "the kubelet retries"
            )
        return None

    def drain(self, timeout: float) -> bool:
        """Refuse what calls have not begun and wait up to `timeout` seconds for the calls
        in flight to end; whether they did (then no thread holds the lock)."""
        if not self.abandon.done():
            self.abandon.set_result(None)
        with self._idle:
            return self._idle.wait_for(lambda: self._calls == 0, timeout)


class Chosen:
    """A setting chosen once after the kubelet is served (the injection mode): calls
    wait for it within their budget, and not past shutdown."""

    def __init__(self, value: str) -> None:
        """Chosen already as `value` until `pending`."""
        self.value = value
        self._chosen = threading.Event()
        self._chosen.set()

    def pending(self) -> None:
        """Calls wait from now until `choose`."""
        self._chosen.clear()

    def choose(self, value: str) -> None:
        """Set the value and let the waiting calls go on."""
        self.value = value
        self._chosen.set()

    def wait(self, deadline: Deadline, abandon: Future[None], limit: float) -> bool:
        """Whether it is chosen within `limit` seconds and the budget, before shutdown."""
        give_up = time.monotonic() + min(limit, deadline.remaining())
        while not self._chosen.wait(0.05):
            if abandon.done() or time.monotonic() >= give_up:
                return False
        return True
