"""Network namespaces as files: open one by path (checked), and switch a thread into it.

A pod sandbox's network namespace is a bind mount of an nsfs inode, at a path the
container runtime reports (`/var/run/netns/cni-<id>`). The path is opened and the file
asked what it is (`NS_GET_NSTYPE`): only a network namespace is accepted, so a path that
is gone (the sandbox was torn down and the mount removed) or names anything else is an
error naming the path, never a namespace entered by mistake.

`setns` changes the namespace of the calling thread only; the thread's netlink socket
must be reopened afterwards (a socket stays in the namespace it was created in).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3): the CLONE_NEW* type of a namespace file
_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    """A path that is not (or no longer) a network namespace, or a failed switch."""


def open_netns(path: str) -> int:
    """An O_RDONLY descriptor of the network namespace at `path` (absolute)."""
    if not path.startswith("/") or "\0" in path:
        raise NamespaceError(errno.EINVAL, f"network namespace path {path!r} is not absolute")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise NamespaceError(
            exc.errno, f"network namespace {path}: {exc.strerror} (is the pod sandbox gone?)"
        ) from None
    try:
        kind = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError:  # not an nsfs file: ENOTTY
        kind = -1
    if kind != CLONE_NEWNET:
        os.close(fd)
        raise NamespaceError(
            errno.EINVAL,
            f"{path} is not a network namespace (its mount is gone, or it is another file)",
        )
    return fd


def current_netns() -> int:
    """A descriptor of the calling thread's own network namespace."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace `fd`."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise NamespaceError(code, f"setns: {os.strerror(code)}")


def same(fd: int, other: int) -> bool:
    """Whether two namespace descriptors name the same namespace."""
    a, b = os.fstat(fd), os.fstat(other)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
