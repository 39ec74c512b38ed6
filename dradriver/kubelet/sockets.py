"""Socket paths (with rolling-update names) and the lock that serialises instances."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

_MAX_SOCKET_PATH = 105  # sun_path holds 107 bytes, but gRPC refuses paths over 105


@dataclass(frozen=True)
class SocketPaths:
    """Where this instance listens, and the lock file shared by all instances."""

    registration: Path
    service: Path
    lock: Path


class Placement(Protocol):
    """The settings that place the sockets (the daemon's Settings has them)."""

    @property
    def driver_name(self) -> str: ...
    @property
    def pod_uid(self) -> str | None: ...
    @property
    def kubelet_registry_dir(self) -> Path: ...
    @property
    def plugin_dir(self) -> Path: ...


def socket_paths(settings: Placement) -> SocketPaths:
    """Paths for this instance: per-pod-UID names when rolling updates are enabled."""
    driver, uid = settings.driver_name, settings.pod_uid
    reg_name = f"{driver}-{uid}-reg.sock" if uid else f"{driver}-reg.sock"
    svc_name = f"dra-{uid}.sock" if uid else "dra.sock"
    return SocketPaths(
        registration=_fit(settings.kubelet_registry_dir / reg_name),
        service=_fit(settings.plugin_dir / svc_name),
        lock=settings.plugin_dir / "serialize.lock",
    )


def _fit(path: Path) -> Path:
    """Shorten a socket file name with a hash when the path exceeds the unix limit."""
    if len(str(path).encode()) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(path.name.encode()).hexdigest()[:12]
    short = path.with_name(f"{digest}{'-reg' if path.name.endswith('-reg.sock') else ''}.sock")
    if len(str(short).encode()) > _MAX_SOCKET_PATH:
        raise SystemExit(f"socket directory {path.parent} is too long for a unix socket path")
    return short


def remove_stale_socket(path: Path) -> bool:
    """Remove a socket left by an earlier run; refuse to remove anything else."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        raise SystemExit(f"{path} exists and is not a socket; refusing to remove it")
    path.unlink()
    return True


_FLOCK_POLL = (0.001, 0.02)  # first and longest pause between tries of a busy flock


class SerializeLock:
    """Serialises prepare/unprepare across threads and across driver instances (flock).

    The file lock is held exactly while a thread holds the thread lock, and the file is
    closed (which drops the flock) only when no thread does: an instance that is shutting
    down never lets a new one in while it still works.
    """

    def __init__(self, path: Path) -> None:
        """Open (creating) the lock file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._thread_lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take both locks, waiting at most `timeout` seconds (-1: no limit); whether taken."""
        if not blocking:
            timeout = 0
        deadline = None if timeout < 0 else time.monotonic() + timeout
        if not self._thread_lock.acquire(timeout=-1 if timeout < 0 else timeout):
            return False
        try:
            pause = _FLOCK_POLL[0]
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except OSError as exc:  # another instance holds it
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._thread_lock.release()
                    return False
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, _FLOCK_POLL[1])
        except BaseException:
            self._thread_lock.release()
            raise

    def release(self) -> None:
        """Let go of both locks."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def __enter__(self) -> SerializeLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def close(self, timeout: float = 5.0) -> bool:
        """Close the lock file once no thread holds the lock (waiting at most `timeout`
        seconds); whether it was closed. If not, the file stays open (and locked by that
        thread) until the process ends: the kernel drops the flock when it exits."""
        if not self._thread_lock.acquire(timeout=timeout):
            return False
        os.close(self._fd)
        return True
