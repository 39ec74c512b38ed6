"""The one poll-until helper: a local cluster and the tests wait for anything
asynchronous with it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 30,
    *,
    interval: float = 0.1,
    log: Callable[[], str] | None = None,
) -> T:
    """Poll `probe` until it returns something truthy and return that; fail after `timeout`.

    Polls quickly at first, backing off to `interval`; `log` (e.g. a driver's log) is
    appended to the failure message.
    """
    deadline = time.monotonic() + timeout
    delay = min(0.02, interval)
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{log()}" if log else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(delay)
        delay = min(delay * 1.5, interval)
