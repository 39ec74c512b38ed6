"""The one place that talks rtnetlink: links, addresses, VF settings, errors.

Handlers and the core call the module functions below. Every kernel error becomes a
`NetlinkError` (a DeviceError) that keeps the errno as data and says which operation on
which interface failed, in one format: `<what>: <strerror> (errno <n>)`, followed by
`: <the kernel's message>` when the kernel explains (extended ack).

The functions delegate to one `Kernel` backend: our own rtnetlink client on the real
kernel (`dradriver.kernel.rtnl`), or a fake one (`use`) so the prepare state machine can be
tested without root.

A pod's network namespace (the NRI mode) is reached with `inside(path)`: the calling
thread enters it (its socket reopened there) for the block and comes back even on an
error; links move between namespaces with `move`, RDMA devices with `rdma_move`.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, Unpack

from dradriver.base.errors import DeviceError
from dradriver.base.log import event

# The kernel objects, re-exported: the facade is what handlers import.
from dradriver.kernel.objects import ARPHRD_ETHER as ARPHRD_ETHER
from dradriver.kernel.objects import ARPHRD_INFINIBAND as ARPHRD_INFINIBAND
from dradriver.kernel.objects import CreateAttrs as CreateAttrs
from dradriver.kernel.objects import Link as Link
from dradriver.kernel.objects import LinkAttrs as LinkAttrs
from dradriver.kernel.objects import NetlinkError as NetlinkError
from dradriver.kernel.objects import Route as Route
from dradriver.kernel.objects import VfSettings as VfSettings
from dradriver.kernel.rtnl.client import RtnlKernel
from dradriver.kernel.rtnl.events import LinkEvents

log = logging.getLogger(__name__)


class Kernel(Protocol):
    """What the driver asks of the kernel; errors are NetlinkError."""

    def links(self) -> list[Link]:
        """Every interface in the current network namespace."""

    def find(self, name: str) -> Link | None:
        """The interface called `name`, or None."""

    def create(self, name: str, kind: str, attrs: CreateAttrs) -> None:
        """Create a down link (`attrs`: link, peer, mode, pkey per kind)."""

    def set(self, index: int, attrs: LinkAttrs) -> None:
        """Change ifname, mtu, address, ifalias, state, master or namespace of one interface."""

    def delete(self, name: str) -> None:
        """Delete the interface called `name`."""

    def delete_index(self, index: int) -> None:
        """Delete the interface with this index."""

    def addresses(self, index: int) -> list[tuple[str, int]]:
        """(address, prefix length) of every global-scope address on one interface."""

    def all_addresses(self) -> list[tuple[int, str, int]]:
        """(interface index, address, prefix length) of every address, any scope."""

    def routes(self) -> list[Route]:
        """Every route of every table, both families."""

    def add_address(self, index: int, address: str, prefixlen: int) -> None:
        """Add a permanent, global-scope address."""

    def delete_address(self, index: int, address: str, prefixlen: int) -> None:
        """Remove an address."""

    def vf_settings(self, pf_index: int, vf: int) -> VfSettings | None:
        """The PF's view of one of its VFs, None if the PF reports no such VF."""

    def set_vf(self, pf_index: int, vf: int, settings: VfSettings) -> None:
        """Set the given (non-None) settings of one VF through its PF."""

    def limit_rate(self, index: int, rate: int) -> None:
        """Limit what one interface sends to `rate` bits per second (a root tbf qdisc)."""

    def redirect_ingress(self, index: int, target: int) -> None:
        """Send what one interface receives out of interface `target` (an ifb) instead."""

    def close(self) -> None:
        """Release this thread's resources (before it changes namespace or ends)."""

    def enter(self, netns: str) -> None:
        """Move this thread into the network namespace at path `netns` (checked)."""

    def leave(self) -> None:
        """Bring this thread back to the namespace it was in before `enter`."""

    def has_netns(self, netns: str) -> bool:
        """Whether `netns` is (still) a network namespace."""

    def move(self, index: int, netns: str | None, ifname: str) -> None:
        """Move a link into the namespace at `netns` (None: the one this thread left in
        `enter`), named `ifname` there, in one request."""

    def add_route(
        self, index: int, destination: str, gateway: str | None, metric: int | None
    ) -> None:
        """Add a route via one interface (main table)."""

    def write_sysctl(self, path: str, value: str) -> None:
        """Write /proc/sys/<path> as this thread sees it (its network namespace)."""

    def has_sysctl(self, path: str) -> bool:
        """Whether /proc/sys/<path> exists for this thread and may be written."""

    def rdma_devices(self) -> list[str]:
        """RDMA devices this thread's namespace sees."""

    def rdma_move(self, name: str, netns: str | None) -> None:
        """Move an RDMA device into the namespace at `netns` (None: as for `move`)."""

    def rdma_exclusive(self) -> bool:
        """Whether RDMA devices are in exclusive netns mode."""


def _backend() -> Kernel:
    global _kernel  # noqa: PLW0603 - the one process-wide backend
    with _lock:
        if _kernel is None:
            _kernel = RtnlKernel()
        return _kernel


_kernel: Kernel | None = None
_lock = threading.Lock()


def use(kernel: Kernel | None) -> Kernel | None:
    """Swap the kernel backend (tests); None restores the real one. Returns the previous."""
    global _kernel
    with _lock:
        previous, _kernel = _kernel, kernel
    return previous


def link_events() -> LinkEvents:
    """A subscription to this namespace's link events (OSError where there is none)."""
    return LinkEvents()


def links() -> list[Link]:
    """Every interface in the current network namespace."""
    return (_kernel or _backend()).links()


def find(name: str) -> Link | None:
    """The interface called `name`, or None."""
    return (_kernel or _backend()).find(name)


def require(name: str, role: str) -> Link:
    """The interface called `name`, or a DeviceError saying it does not exist."""
    link = find(name)
    if link is None:
        raise DeviceError(f"{role} interface {name} does not exist on this node")
    return link


def create(name: str, kind: str, what: str, **attrs: Unpack[CreateAttrs]) -> None:
    """Create a down link called `name`; `what` names it in errors."""
    try:
        (_kernel or _backend()).create(name, kind, attrs)
    except NetlinkError as exc:
        raise exc.about(f"create {what} {name}") from None


def set_link(link: Link | int, what: str, **attrs: Unpack[LinkAttrs]) -> None:
    """Change attributes (ifname, mtu, address, ifalias, state, master, net_ns_fd) of one
    interface."""
    index = link if isinstance(link, int) else link.index
    try:
        (_kernel or _backend()).set(index, attrs)
    except NetlinkError as exc:
        raise exc.about(what) from None


def delete(name: str) -> bool:
    """Delete the interface called `name`; False if it was already gone."""
    try:
        (_kernel or _backend()).delete(name)
    except NetlinkError as exc:
        if exc.errno in (errno.ENODEV, errno.ENOENT):
            return False
        raise exc.about(f"delete interface {name}") from None
    return True


def delete_index(index: int, what: str) -> bool:
    """Delete the interface with this index; False if it was already gone."""
    try:
        (_kernel or _backend()).delete_index(index)
    except NetlinkError as exc:
        if exc.errno in (errno.ENODEV, errno.ENOENT):
            return False
        raise exc.about(what) from None
    return True


def addresses(index: int) -> list[tuple[str, int]]:
    """(address, prefix length) of every global-scope address on one interface."""
    try:
        return (_kernel or _backend()).addresses(index)
    except NetlinkError as exc:
        raise exc.about(f"list addresses of interface {index}") from None


def all_addresses() -> list[tuple[int, str, int]]:
    """(interface index, address, prefix length) of every address in the namespace."""
    try:
        return (_kernel or _backend()).all_addresses()
    except NetlinkError as exc:
        raise exc.about("list the node's addresses") from None


def routes() -> list[Route]:
    """Every route of every table in the namespace, both families."""
    try:
        return (_kernel or _backend()).routes()
    except NetlinkError as exc:
        raise exc.about("list the node's routes") from None


def add_address(
    index: int, address: str, prefixlen: int, ifname: str, exist_ok: bool = False
) -> None:
    """Add a permanent, global-scope address (runc re-adds those inside the container)."""
    try:
        (_kernel or _backend()).add_address(index, address, prefixlen)
    except NetlinkError as exc:
        if not (exist_ok and exc.errno == errno.EEXIST):
            raise exc.about(f"add address {address}/{prefixlen} to {ifname}") from None


def delete_address(index: int, address: str, prefixlen: int) -> None:
    """Remove an address; no error if it is already gone."""
    try:
        (_kernel or _backend()).delete_address(index, address, prefixlen)
    except NetlinkError as exc:
        if exc.errno not in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ENODEV):
            raise exc.about(f"remove address {address}/{prefixlen}") from None


def vf_settings(pf: Link, vf: int) -> VfSettings | None:
    """The settings of VF `vf` as its PF reports them."""
    try:
        return (_kernel or _backend()).vf_settings(pf.index, vf)
    except NetlinkError as exc:
        raise exc.about(f"read VF {vf} settings of {pf.name}") from None


def set_vf(pf: Link, vf: int, what: str, settings: VfSettings) -> None:
    """Set the non-None `settings` of VF `vf` through its PF."""
    try:
        (_kernel or _backend()).set_vf(pf.index, vf, settings)
    except NetlinkError as exc:
        raise exc.about(what) from None


def limit_rate(link: Link, rate: int) -> None:
    """Limit what `link` sends to `rate` bits per second."""
    try:
        (_kernel or _backend()).limit_rate(link.index, rate)
    except NetlinkError as exc:
        raise exc.about(f"limit {link.name} to {rate} bit/s") from None


def redirect_ingress(link: Link, target: Link) -> None:
    """Send what `link` receives out of `target` instead (where its limit applies)."""
    try:
        (_kernel or _backend()).redirect_ingress(link.index, target.index)
    except NetlinkError as exc:
        raise exc.about(f"redirect what {link.name} receives to {target.name}") from None


def close() -> None:
    """Release this thread's socket (e.g. before the thread changes network namespace)."""
    if _kernel is not None:
        _kernel.close()


@contextmanager
def inside(netns: str) -> Iterator[None]:
    """Run the block with this thread inside the network namespace at `netns` (a path
    the runtime reported; it must be a network namespace), back where it was after it,
    even on an error. Not nested."""
    kernel = _kernel or _backend()
    try:
        kernel.enter(netns)
    except NetlinkError as exc:
        raise exc.about(f"enter the pod's network namespace {netns}") from None
    except OSError as exc:  # the path: gone, not a namespace
        raise DeviceError(f"cannot enter the pod's network namespace: {exc.strerror}") from None
    try:
        yield
    finally:
        kernel.leave()


def netns_exists(netns: str) -> bool:
    """Whether the path `netns` is (still) a network namespace (a sandbox torn down
    leaves none)."""
    return bool(netns) and (_kernel or _backend()).has_netns(netns)


def move(link: Link, netns: str | None, ifname: str, what: str) -> None:
    """Move `link` into the namespace at path `netns` (None: back to the namespace this
    thread left with `inside`) under the name `ifname`, in one request."""
    try:
        (_kernel or _backend()).move(link.index, netns, ifname)
    except NetlinkError as exc:
        raise exc.about(what) from None
    except OSError as exc:
        raise DeviceError(f"{what}: {exc.strerror}") from None


def add_route(link: Link, destination: str, gateway: str | None, metric: int | None) -> None:
    """Add a route to `destination` via `link` (and `gateway`), main table."""
    try:
        (_kernel or _backend()).add_route(link.index, destination, gateway, metric)
    except NetlinkError as exc:
        via = f" via {gateway}" if gateway else ""
        raise exc.about(f"add route {destination}{via} dev {link.name}") from None


def set_sysctl(path: str, value: str) -> None:
    """Write /proc/sys/<path> (slash-separated) as this thread sees it."""
    try:
        (_kernel or _backend()).write_sysctl(path, value)
    except OSError as exc:
        code = exc.errno or errno.EIO
        raise NetlinkError(f"write {value} to /proc/sys/{path}", code) from None


def has_sysctl(path: str) -> bool:
    """Whether /proc/sys/<path> exists for this thread and may be written."""
    return (_kernel or _backend()).has_sysctl(path)


def rdma_devices() -> list[str]:
    """RDMA devices this thread's namespace sees."""
    try:
        return (_kernel or _backend()).rdma_devices()
    except OSError as exc:
        raise NetlinkError("list RDMA devices", exc.errno or errno.EIO) from None


def rdma_move(name: str, netns: str | None, what: str) -> None:
    """Move an RDMA device into the namespace at `netns` (None: as for `move`)."""
    try:
        (_kernel or _backend()).rdma_move(name, netns)
    except OSError as exc:
        raise NetlinkError(what, exc.errno or errno.EIO) from None


def rdma_exclusive() -> bool:
    """Whether the node's RDMA devices are in exclusive netns mode (False: no RDMA)."""
    try:
        return (_kernel or _backend()).rdma_exclusive()
    except OSError:
        return False


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
