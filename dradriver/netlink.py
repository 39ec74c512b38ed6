"""The one place that talks rtnetlink (pyroute2): link lookup, tagging, deletion, errors.

Handlers and start-up reconciliation use these functions instead of pyroute2 directly,
so every kernel error becomes a DeviceError naming the interface and the operation.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_GETLINK

from dradriver.errors import DeviceError
from dradriver.log import event

log = logging.getLogger(__name__)
T = TypeVar("T")
_local = threading.local()


@dataclass(frozen=True)
class Link:
    """The facts about one interface that the driver looks at."""

    index: int
    name: str
    kind: str | None
    alias: str | None
    mtu: int
    address: str | None
    up: bool
    link_type: int  # ARPHRD_*: 1 Ethernet, 32 InfiniBand


# pyroute2 0.9.7 leaves state behind on an IPRoute socket with every request (about
# 1.6 KB of resident memory per request, measured; none once the socket is reopened), so
# a thread's socket is replaced after this many requests (a reopen costs ~0.6 ms).
RECYCLE_AFTER = 200


def ipr() -> Any:
    """This thread's rtnetlink socket, opened on first use in the current network namespace."""
    sock = getattr(_local, "ipr", None)
    uses = getattr(_local, "uses", 0) + 1
    if sock is not None and uses > RECYCLE_AFTER:
        sock.close()
        sock = None
    if sock is None or getattr(_local, "pid", None) != os.getpid():
        sock, uses = IPRoute(), 1
        _local.ipr, _local.pid = sock, os.getpid()
    _local.uses = uses
    return sock


def close() -> None:
    """Close this thread's socket (e.g. before the thread changes network namespace)."""
    sock = getattr(_local, "ipr", None)
    if sock is not None:
        sock.close()
        _local.ipr = None


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one netlink operation; turn a kernel error into a DeviceError saying `what`."""
    try:
        return fn()
    except NetlinkError as exc:
        raise DeviceError(f"{what}: {os.strerror(exc.code)} (errno {exc.code})") from exc


def is_errno(exc: BaseException, code: int) -> bool:
    """Whether `exc` (or the NetlinkError behind it) carries the errno `code`."""
    cause = exc if isinstance(exc, NetlinkError) else exc.__cause__
    return isinstance(cause, NetlinkError) and cause.code == code


def _to_link(msg: Any) -> Link:
    return Link(
        index=msg["index"],
        name=msg.get("ifname"),
        kind=msg.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) if msg.get("IFLA_LINKINFO") else None,
        alias=msg.get("IFLA_IFALIAS"),
        mtu=msg.get("mtu"),
        address=msg.get("address"),
        up=bool(msg["flags"] & 1),
        link_type=msg["ifi_type"],
    )


def links() -> list[Link]:
    """Every interface in the current network namespace."""
    return [_to_link(m) for m in call("list interfaces", lambda: ipr().get_links())]


def find(name: str) -> Link | None:
    """The interface called `name`, or None."""
    try:
        # Without NLM_F_ACK: pyroute2's "get" asks for an ACK after the reply, and the
        # ACK, arriving after the request is done, stays queued on the socket forever.
        msgs = ipr().link((RTM_GETLINK, NLM_F_REQUEST), ifname=name)
    except NetlinkError as exc:
        if exc.code in (errno.ENODEV, errno.ENOENT, errno.EINVAL):
            return None
        raise DeviceError(f"look up interface {name}: {os.strerror(exc.code)}") from exc
    return _to_link(msgs[0])


def require(name: str, role: str) -> Link:
    """The interface called `name`, or a DeviceError saying it does not exist."""
    link = find(name)
    if link is None:
        raise DeviceError(f"{role} interface {name} does not exist on this node")
    return link


def set_link(link: Link | int, what: str, **attrs: Any) -> None:
    """Change attributes (ifname, mtu, address, ifalias, state, master) of one interface."""
    index = link if isinstance(link, int) else link.index
    call(what, lambda: ipr().link("set", index=index, **attrs))


def delete(name: str) -> bool:
    """Delete the interface called `name`; False if it was already gone."""
    try:
        ipr().link("del", ifname=name)
    except NetlinkError as exc:
        if exc.code in (errno.ENODEV, errno.ENOENT):
            return False
        raise DeviceError(f"delete interface {name}: {os.strerror(exc.code)}") from exc
    return True


def addresses(index: int) -> list[tuple[str, int]]:
    """(address, prefix length) of every global-scope address on one interface."""
    msgs = call("list addresses", lambda: ipr().get_addr(index=index))
    return [(m.get("address"), m["prefixlen"]) for m in msgs if m["scope"] == 0]


def delete_address(index: int, address: str, prefixlen: int) -> None:
    """Remove an address; no error if it is already gone."""
    try:
        ipr().addr("del", index=index, address=address, prefixlen=prefixlen)
    except NetlinkError as exc:
        if exc.code not in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ENODEV):
            raise DeviceError(
                f"remove address {address}/{prefixlen}: {os.strerror(exc.code)}"
            ) from exc


def add_address(
    index: int, address: str, prefixlen: int, ifname: str, exist_ok: bool = False
) -> None:
    """Add a permanent, global-scope address (runc re-adds those inside the container)."""
    try:
        ipr().addr("add", index=index, address=address, prefixlen=prefixlen)
    except NetlinkError as exc:
        if not (exist_ok and exc.code == errno.EEXIST):
            raise DeviceError(
                f"add address {address}/{prefixlen} to {ifname}: "
                f"{os.strerror(exc.code)} (errno {exc.code})"
            ) from exc


@contextmanager
def rollback() -> Iterator[list[Callable[[], object]]]:
    """Collect undo steps; run them newest first if the block raises, then re-raise."""
    steps: list[Callable[[], object]] = []
    try:
        yield steps
    except BaseException:
        for step in reversed(steps):
            try:
                step()
            except Exception as exc:  # keep undoing; the original error is re-raised
                event(log, logging.ERROR, "rollback step failed", error=exc)
        raise
