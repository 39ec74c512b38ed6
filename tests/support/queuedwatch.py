"""A watch whose events a test puts on a queue: None ends it, an exception fails it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any


class QueuedWatch:
    """Stands for kubeapi.Watch: `events` yields what the queue holds until closed."""

    def __init__(self, events: queue.Queue[Any]) -> None:
        """Follow `events`."""
        self._events = events
        self.closed = threading.Event()

    def events(self) -> Iterator[dict[str, Any]]:
        """The queued events, until None (the server ends the watch) or `close`."""
        while not self.closed.is_set():
            try:
                ev = self._events.get(timeout=0.05)
            except queue.Empty:
                continue
            if ev is None:
                return
            if isinstance(ev, Exception):
                raise ev
            yield ev

    def close(self) -> None:
        """End the watch from any thread."""
        self.closed.set()

    def release(self) -> None:
        """Drop the watch."""
        self.closed.set()
