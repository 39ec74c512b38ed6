"""Link events: a socket in rtnetlink's link multicast group, to wake a watcher whenever
a link is added, removed or changed. The events' content is never parsed: a watcher reads
the state it cares about again."""

from __future__ import annotations

import socket
from types import TracebackType

RTMGRP_LINK = 1  # <linux/rtnetlink.h>
_CHUNK = 65536


class LinkEvents:
    """A subscription to the link events of the current network namespace."""

    def __init__(self) -> None:
        """Subscribe; raises OSError where rtnetlink cannot be opened."""
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        try:
            self._sock.bind((0, RTMGRP_LINK))
        except OSError:
            self._sock.close()
            raise

    def wait(self, timeout: float) -> bool:
        """Whether an event came within `timeout` seconds (lost events count as one)."""
        self._sock.settimeout(timeout)
        try:
            self._sock.recv(_CHUNK)
        except TimeoutError:
            return False
        except OSError:  # ENOBUFS: a burst overflowed the queue; something did change
            pass
        return True

    def drain(self) -> None:
        """Discard the events queued so far."""
        self._sock.setblocking(False)
        try:
            while True:
                self._sock.recv(_CHUNK)
        except OSError:  # EAGAIN: empty; ENOBUFS: dropped, fine
            pass

    def close(self) -> None:
        """Unsubscribe."""
        self._sock.close()

    def __enter__(self) -> LinkEvents:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
