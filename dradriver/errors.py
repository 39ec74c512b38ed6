"""Exceptions the driver raises; each message is written for a cluster operator."""

from __future__ import annotations


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
