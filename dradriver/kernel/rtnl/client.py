"""The real kernel behind dradriver.kernel.netlink: one NETLINK_ROUTE socket per thread.

The only module of the driver that opens sockets to the kernel. A request gets a
sequence number; replies with another one (left from a request that timed out) are
skipped. Every wait is bounded by the socket timeout: no answer in time is an ETIMEDOUT
NetlinkError, and the socket is replaced. Dumps interrupted by a concurrent change
(NLM_F_DUMP_INTR) are asked again, and so is an answer larger than the buffer (which
grows). The kernel's extended-ack message, when it gives one, ends the error's text.

A thread may `enter` a pod's network namespace (the NRI mode): its socket is closed
first and reopens there on the next request, and again back home on `leave`. Sysctls
and RDMA devices (dradriver.kernel.rdmanl) are those of the thread's namespace too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from dradriver.base.log import event
from dradriver.kernel import nsfs, rdmanl
from dradriver.kernel.objects import CreateAttrs, Link, LinkAttrs, NetlinkError, Route, VfSettings
from dradriver.kernel.rtnl import addresses, links, routes, tc, wire

log = logging.getLogger(__name__)
PROC_SYS = Path("/proc/sys")

TIMEOUT = 10.0  # seconds a request may wait for the kernel's answer
DUMP_ATTEMPTS = 10  # tries of a dump that a concurrent change keeps interrupting
BUFFER = 32768  # bytes; the kernel fills dump datagrams up to our buffer, at most 32 KiB
# Extended acks (4.12), errors without the request echoed (4.3), filtered dumps (4.20;
# without it we filter ourselves).
_OPTIONS = (wire.NETLINK_EXT_ACK, wire.NETLINK_CAP_ACK, wire.NETLINK_GET_STRICT_CHK)
_NOT_FOUND = (errno.ENODEV, errno.ENOENT, errno.EINVAL, errno.ERANGE)  # EINVAL, ERANGE: bad name


class Reply(Enum):
    """What ends a request: an acknowledgement, the one answer, or the end of a dump."""

    ACK = "ack"
    ONE = "one"
    DUMP = "dump"


class _Retry(Exception):
    """Ask again: the dump was interrupted, or a datagram did not fit the buffer."""


def open_socket() -> socket.socket:
    """A NETLINK_ROUTE socket of the calling thread's namespace, connected to the kernel."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        for option in _OPTIONS:  # each one a kernel may lack (ENOPROTOOPT): go without
            with contextlib.suppress(OSError):
                sock.setsockopt(wire.SOL_NETLINK, option, 1)
        sock.connect((0, 0))  # only the kernel's messages reach this socket
    except BaseException:
        sock.close()
        raise
    return sock


class Connection:
    """One open NETLINK_ROUTE socket and its sequence numbers."""

    def __init__(self, timeout: float, opener: Callable[[], socket.socket] = open_socket) -> None:
        self.timeout = timeout
        self.pid = os.getpid()
        self.seq = 0
        self.broken = False  # replies may be late or lost: not to be used again
        self.buffer = bytearray(BUFFER)
        self.opener = opener
        self.sock = opener()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def request(self, request: wire.Request, reply: Reply, what: str) -> list[bytes]:
        """Send one request and collect the bodies of its answer; errors are NetlinkError."""
        kind, flags, body = request
        for _ in range(DUMP_ATTEMPTS):
            self.seq = self.seq % 0xFFFFFFFF + 1
            try:
                self.sock.send(wire.message(kind, flags, self.seq, body))
                return self._collect(self.seq, reply, what)
            except _Retry:
                continue
            except (TimeoutError, BlockingIOError):
                self.broken = True
                raise NetlinkError(
                    what, errno.ETIMEDOUT, f"no answer from the kernel within {self.timeout:g} s"
                ) from None
            except OSError as exc:  # ENOBUFS: replies were lost
                self.broken = True
                raise NetlinkError(what, exc.errno or errno.EIO) from None
        raise NetlinkError(what, errno.EINTR, f"dump interrupted {DUMP_ATTEMPTS} times in a row")

    def _collect(self, seq: int, reply: Reply, what: str) -> list[bytes]:
        deadline = time.monotonic() + self.timeout
        out: list[bytes] = []
        interrupted = False
        view = memoryview(self.buffer)
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            size = self.sock.recv_into(self.buffer, 0, socket.MSG_TRUNC)
            if size > len(self.buffer):  # the datagram was cut: make room, ask again
                if reply is Reply.ACK:  # a change is not asked twice (acks are small)
                    self.broken = True
                    raise NetlinkError(what, errno.EMSGSIZE)
                self.buffer = bytearray(wire.align(size))
                if reply is Reply.DUMP:  # its end may be lost with it: a new socket
                    self.sock.close()  # ends the kernel's dump, one per socket at a time
                    self.sock = self.opener()
                raise _Retry
            for msg in wire.split(bytes(view[:size])):
                if msg.seq != seq or msg.type == wire.NLMSG_NOOP:
                    continue  # an answer to an earlier request
                if msg.type == wire.NLMSG_OVERRUN:
                    self.broken = True
                    raise NetlinkError(what, errno.ENOBUFS)
                if msg.type in (wire.NLMSG_ERROR, wire.NLMSG_DONE):
                    code, detail = wire.error(msg)
                    if code:
                        raise NetlinkError(what, code, detail)
                    if interrupted:
                        raise _Retry
                    return out
                interrupted |= bool(msg.flags & wire.NLM_F_DUMP_INTR)
                out.append(msg.body)
                if reply is Reply.ONE:
                    return out


class RtnlKernel:
    """dradriver.kernel.netlink's Kernel protocol over our own rtnetlink messages."""

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self._local = threading.local()

    def _ask(self, request: wire.Request, reply: Reply, what: str) -> list[bytes]:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.pid != os.getpid():  # a forked child: its own socket
            conn.close()
            conn = None
        if conn is None:
            try:
                conn = self._local.conn = Connection(self.timeout)
            except OSError as exc:
                what = f"{what} (open a netlink socket)"
                raise NetlinkError(what, exc.errno or errno.EIO) from None
        try:
            return conn.request(request, reply, what)
        finally:
            if conn.broken:
                self.close()

    def close(self) -> None:
        """Close this thread's socket (it reopens on the next request)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def links(self) -> list[Link]:
        """Every interface in the current network namespace."""
        return [links.parse(b) for b in self._ask(links.dump(), Reply.DUMP, "list interfaces")]

    def find(self, name: str) -> Link | None:
        """The interface called `name`, or None."""
        try:
            found = self._ask(links.get(name), Reply.ONE, f"look up interface {name}")
        except NetlinkError as exc:
            if exc.errno in _NOT_FOUND:
                return None
            raise
        return links.parse(found[0]) if found else None

    def create(self, name: str, kind: str, attrs: CreateAttrs) -> None:
        """Create a down link."""
        self._ask(links.create(name, kind, attrs), Reply.ACK, f"create {kind} {name}")

    def set(self, index: int, attrs: LinkAttrs) -> None:
        """Change link attributes."""
        what = f"change interface {index} ({', '.join(sorted(attrs))})"
        self._ask(links.change(index, attrs), Reply.ACK, what)

    def delete(self, name: str) -> None:
        """Delete a link."""
        self._ask(links.delete(name), Reply.ACK, f"delete interface {name}")

    def delete_index(self, index: int) -> None:
        """Delete a link by index."""
        self._ask(links.delete(index=index), Reply.ACK, f"delete interface {index}")

    def _addresses(self, index: int) -> list[addresses.Address]:
        what = f"list addresses of interface {index}" if index else "list addresses"
        found = (addresses.parse(b) for b in self._ask(addresses.dump(index), Reply.DUMP, what))
        return [a for a in found if a is not None and (not index or a.index == index)]

    def addresses(self, index: int) -> list[tuple[str, int]]:
        """Global-scope addresses of one link."""
        return [
            (a.address, a.prefixlen)
            for a in self._addresses(index)
            if a.scope == addresses.RT_SCOPE_UNIVERSE
        ]

    def all_addresses(self) -> list[tuple[int, str, int]]:
        """Every address of every link, any scope."""
        return [(a.index, a.address, a.prefixlen) for a in self._addresses(0)]

    def routes(self) -> list[Route]:
        """Every route of every table, both families."""
        found = (routes.parse(b) for b in self._ask(routes.dump(), Reply.DUMP, "list routes"))
        return [r for r in found if r is not None]

    def add_address(self, index: int, address: str, prefixlen: int) -> None:
        """Add a permanent, global-scope address."""
        what = f"add address {address}/{prefixlen} to interface {index}"
        self._ask(addresses.add(index, address, prefixlen), Reply.ACK, what)

    def delete_address(self, index: int, address: str, prefixlen: int) -> None:
        """Remove an address."""
        what = f"remove address {address}/{prefixlen} from interface {index}"
        self._ask(addresses.delete(index, address, prefixlen), Reply.ACK, what)

    def vf_settings(self, pf_index: int, vf: int) -> VfSettings | None:
        """One VF's settings from its PF's IFLA_VFINFO_LIST."""
        what = f"read VF {vf} of interface {pf_index}"
        found = self._ask(links.get(index=pf_index, vfs=True), Reply.ONE, what)
        return links.parse_vf(found[0], vf) if found else None

    def set_vf(self, pf_index: int, vf: int, settings: VfSettings) -> None:
        """Set a VF's settings through its PF."""
        what = f"set VF {vf} of interface {pf_index}"
        self._ask(links.set_vf(pf_index, vf, settings), Reply.ACK, what)

    def limit_rate(self, index: int, rate: int) -> None:
        """Limit what one interface sends to `rate` bits per second."""
        self._ask(tc.tbf(index, rate), Reply.ACK, f"limit interface {index} to {rate} bit/s")

    def redirect_ingress(self, index: int, target: int) -> None:
        """Send what one interface receives out of interface `target` instead."""
        what = f"redirect what interface {index} receives to interface {target}"
        self._ask(tc.ingress(index), Reply.ACK, what)
        self._ask(tc.redirect(index, target), Reply.ACK, what)

    # -- namespaces (a socket stays in the namespace it was opened in) ---------------

    def enter(self, netns: str) -> None:
        """Move this thread into the network namespace at `netns`."""
        if getattr(self._local, "home", None) is not None:
            raise RuntimeError("already inside a network namespace on this thread")
        target = nsfs.open_netns(netns)
        try:
            home = nsfs.current_netns()
        except BaseException:
            os.close(target)
            raise
        try:
            self.close()
            nsfs.setns(target)
        except BaseException:
            os.close(home)
            raise
        finally:
            os.close(target)
        self._local.home = home

    def leave(self) -> None:
        """Back to the namespace this thread left in `enter`."""
        home = getattr(self._local, "home", None)
        if home is None:
            return
        self.close()
        try:
            nsfs.setns(home)
        except OSError as exc:
            # A thread stuck in a pod's namespace would act on the wrong links from now
            # on. It cannot happen short of a kernel bug; the driver is crash-safe, so
            # it stops rather than go on there.
            event(log, logging.CRITICAL, "cannot return to the node's network namespace", error=exc)
            os._exit(70)
        os.close(home)
        self._local.home = None

    def has_netns(self, netns: str) -> bool:
        """Whether the path is a network namespace now."""
        try:
            os.close(nsfs.open_netns(netns))
        except OSError:
            return False
        return True

    def _target(self, netns: str | None) -> tuple[int, bool]:
        """A descriptor for `netns` (None: home) and whether the caller must close it."""
        if netns is None:
            home = getattr(self._local, "home", None)
            if home is None:
                raise NetlinkError("no namespace to return to", errno.EINVAL)
            return int(home), False
        return nsfs.open_netns(netns), True

    def move(self, index: int, netns: str | None, ifname: str) -> None:
        """Move and rename a link in one request (as runc does)."""
        fd, owned = self._target(netns)
        try:
            self.set(index, {"net_ns_fd": fd, "ifname": ifname})
        finally:
            if owned:
                os.close(fd)

    def add_route(
        self, index: int, destination: str, gateway: str | None, metric: int | None
    ) -> None:
        """Add a route (main table, protocol static)."""
        via = f" via {gateway}" if gateway else ""
        what = f"add route {destination}{via} dev {index}"
        try:
            request = routes.add(index, destination, gateway, metric)
        except ValueError as exc:
            raise NetlinkError(what, errno.EINVAL, str(exc)) from None
        self._ask(request, Reply.ACK, what)

    def write_sysctl(self, path: str, value: str) -> None:
        """Write a sysctl file (this thread's namespace decides which one it is)."""
        with open(PROC_SYS / path, "w") as f:
            f.write(value)

    def has_sysctl(self, path: str) -> bool:
        """Whether the sysctl file exists and may be written (mc_forwarding may not)."""
        try:
            mode = (PROC_SYS / path).stat().st_mode
        except OSError:
            return False
        return stat.S_ISREG(mode) and bool(mode & stat.S_IWUSR)

    def rdma_devices(self) -> list[str]:
        """RDMA devices of this thread's namespace."""
        return sorted(rdmanl.devices())

    def rdma_move(self, name: str, netns: str | None) -> None:
        """Move an RDMA device between namespaces (exclusive netns mode)."""
        fd, owned = self._target(netns)
        try:
            rdmanl.move(name, fd)
        finally:
            if owned:
                os.close(fd)

    def rdma_exclusive(self) -> bool:
        """Whether the RDMA subsystem is in exclusive netns mode."""
        return rdmanl.exclusive()
