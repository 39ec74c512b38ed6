"""Socket paths (with rolling-update names) and the lock that serialises instances."""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from dradriver.settings import Settings

_MAX_SOCKET_PATH = 105  # sun_path holds 107 bytes, but gRPC refuses paths over 105


@dataclass(frozen=True)
class SocketPaths:
    """Where this instance listens, and the lock file shared by all instances."""

    registration: Path
    service: Path
    lock: Path


def socket_paths(settings: Settings) -> SocketPaths:
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


class SerializeLock:
    """Serialises prepare/unprepare across threads and across driver instances (flock)."""

    def __init__(self, path: Path) -> None:
        """Open (creating) the lock file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._thread_lock = threading.Lock()

    def __enter__(self) -> SerializeLock:
        self._thread_lock.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def close(self) -> None:
        """Close the lock file."""
        os.close(self._fd)
