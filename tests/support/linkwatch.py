"""Every link creation and deletion in a namespace, as the kernel announces them.

Polling `ip link` can miss a link that is deleted and made again between two polls; the
kernel's RTM_NEWLINK/RTM_DELLINK multicast cannot. Used to prove that a link handed out
by one driver instance is never replaced behind the kubelet's back by another.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support import netns

_RTMGRP_LINK = 1
_RTM_NEWLINK, _RTM_DELLINK = 16, 17
_IFLA_IFNAME = 3
_NLMSG_HDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_RTATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class LinkEvent:
    """One announcement: a link appeared or changed ("new") or was deleted ("del")."""

    at: float  # time.monotonic() when read
    kind: str
    index: int
    name: str


class LinkWatch:
    """Collects link events of one namespace from a background thread."""

    def __init__(self, ns: str) -> None:
        with netns.inside(ns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._sock.bind((0, _RTMGRP_LINK))
        self._sock.settimeout(0.2)
        self.events: list[LinkEvent] = []
        self.overflowed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:  # ENOBUFS: events were lost; a test must not trust this run
                self.overflowed = True
                continue
            self.events.extend(_parse(data, time.monotonic()))

    def created_names(self) -> set[str]:
        """Names of the links created (or changed) while watched."""
        return {e.name for e in self.events if e.kind == "new"}

    def created(self, name: str) -> set[int]:
        """Every interface index that link `name` has had while watched."""
        return {e.index for e in self.events if e.name == name and e.kind == "new"}

    def deleted_after(self, name: str, since: float) -> list[LinkEvent]:
        """Deletions of link `name` read after monotonic time `since`."""
        return [e for e in self.events if e.name == name and e.kind == "del" and e.at > since]

    def close(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


@contextmanager
def watching(ns: str) -> Iterator[LinkWatch]:
    """Watch the links of `ns` for the duration of the block."""
    watch = LinkWatch(ns)
    watch._thread.start()
    try:
        yield watch
    finally:
        time.sleep(0.3)  # let the last events arrive
        watch.close()


def _parse(data: bytes, at: float) -> Iterator[LinkEvent]:
    offset = 0
    while offset + _NLMSG_HDR.size <= len(data):
        length, kind, _, _, _ = _NLMSG_HDR.unpack_from(data, offset)
        if length < _NLMSG_HDR.size:
            return
        if kind in (_RTM_NEWLINK, _RTM_DELLINK):
            body = offset + _NLMSG_HDR.size
            _, _, index, _, _ = _IFINFOMSG.unpack_from(data, body)
            name = _ifname(data, body + _IFINFOMSG.size, offset + length)
            yield LinkEvent(at, "new" if kind == _RTM_NEWLINK else "del", index, name)
        offset += (length + 3) & ~3


def _ifname(data: bytes, start: int, end: int) -> str:
    while start + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, start)
        if length < _RTATTR.size:
            break
        if kind == _IFLA_IFNAME:
            return data[start + _RTATTR.size : start + length].split(b"\0", 1)[0].decode()
        start += (length + 3) & ~3
    return ""
