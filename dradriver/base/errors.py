"""Exceptions the driver raises; each message is written for a cluster operator."""

from __future__ import annotations

import errno
from pathlib import Path


class DriverError(Exception):
    """Base of every error the driver reports per claim instead of crashing."""


class ConfigError(DriverError):
    """An opaque claim config is invalid; `issues` are (JSON path, reason) pairs."""

    def __init__(self, message: str, path: str = "$") -> None:
        self.issues: list[tuple[str, str]] = [(path, message)]
        super().__init__(f"{path}: {message}")

    @classmethod
    def many(cls, issues: list[tuple[str, str]]) -> ConfigError:
        """One error carrying several (path, reason) issues, all in its message."""
        err = cls(issues[0][1], issues[0][0])
        err.issues = list(issues)
        err.args = ("; ".join(f"{p}: {m}" for p, m in issues),)
        return err

    @property
    def path(self) -> str:
        """JSON path of the first bad field."""
        return self.issues[0][0]


class ClaimError(DriverError):
    """The ResourceClaim cannot be prepared as it stands in the API (replaced, unallocated...)."""


class DeviceError(DriverError):
    """A handler could not create, claim or release the kernel object behind a device."""


class RegistryError(DriverError):
    """Handler plugins conflict or are missing; raised at start-up."""


class StorageError(DriverError):
    """A file the driver keeps (CDI spec, allocation record) cannot be written or read."""


def storage_error(exc: OSError) -> StorageError:
    """An OSError on one of the driver's files, as a message an operator can act on."""
    where = exc.filename or "one of the driver's files"
    folder = str(Path(where).parent) if exc.filename else "the CDI or state directory"
    actions = {
        errno.ENOSPC: f"the filesystem holding {folder} is full: free space on it",
        errno.EDQUOT: f"the disk quota of {folder} is exhausted: raise it or free space",
        errno.EROFS: f"{folder} is on a read-only filesystem: mount it read-write "
        "(the DaemonSet's hostPath volume)",
        errno.EACCES: f"the driver may not write in {folder}: check its owner and mode",
        errno.EPERM: f"the driver may not write in {folder}: check its owner, mode and "
        "attributes (chattr)",
        errno.EIO: f"the disk holding {folder} reports I/O errors: check the node's disk",
        errno.EMFILE: "the driver has too many open files: raise its file limit",
        errno.ENFILE: "the node has too many open files",
    }
    action = actions.get(exc.errno or 0, "check the directory and the disk")
    return StorageError(f"{where}: {exc.strerror} (errno {exc.errno}); {action}")
