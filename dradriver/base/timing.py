"""Where a kubelet call's time goes: named phases, timed exclusively, per call.

`timed_call()` starts a clock for the calling thread's kubelet call; `phase(name)` charges
the time spent in a block to `name`. A phase entered inside another pauses the outer one,
so the phases of a call add up to the call's time; time outside any phase is charged to
"other". Without a clock (start-up reconciliation, tests), `phase` costs one lookup.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

OTHER = "other"  # time of a call spent outside any named phase


class PhaseClock:
    """The seconds each phase of one call took so far."""

    def __init__(self) -> None:
        """Start the clock now, in no phase."""
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self._stack = [OTHER]
        self._since = self.started

    def _switch(self) -> None:
        now = time.perf_counter()
        top = self._stack[-1]
        self.seconds[top] = self.seconds.get(top, 0.0) + now - self._since
        self._since = now

    def enter(self, name: str) -> None:
        """Charge the time from now on to `name`."""
        self._switch()
        self._stack.append(name)

    def leave(self) -> None:
        """Charge the time from now on to the phase entered before the current one."""
        self._switch()
        if len(self._stack) > 1:
            self._stack.pop()

    def stop(self) -> None:
        """Close the open phase; `total` is then the call's whole time."""
        self._switch()
        self._stack[1:] = []

    @property
    def total(self) -> float:
        """Seconds from the start to the last phase change (to `stop`, once stopped)."""
        return self._since - self.started


_clock: ContextVar[PhaseClock | None] = ContextVar("dradriver_phase_clock", default=None)


@contextmanager
def timed_call() -> Iterator[PhaseClock]:
    """Time the phases of the kubelet call this thread runs (stopped on leaving)."""
    clock = PhaseClock()
    token = _clock.set(clock)
    try:
        yield clock
    finally:
        clock.stop()
        _clock.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the time spent in this block to phase `name` of the current call."""
    clock = _clock.get()
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.leave()
