"""Host commands the tests run, probed once: a missing one names the package that has it.

A test that needs a command calls `require(name)` (skips with the reason) or `run([...])`
(fails with the reason), never `subprocess.run` of a bare name that may not exist: on a
fresh machine that would be a `FileNotFoundError` naming nothing a user can install.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

# Debian package of each command the tests use.
PACKAGES = {
    "ip": "iproute2",
    "rdma": "iproute2",
    "tc": "iproute2",
    "modprobe": "kmod",
    "make": "make",
    "cc": "gcc",
    "pgrep": "procps",
    "mount": "mount",
    "umount": "mount",
    "dd": "coreutils",
    "go": "golang (or Go from go.dev in /usr/local/go/bin)",
    "iperf3": "iperf3",
}


class MissingTool(RuntimeError):
    """A host command the tests need is not installed."""


def missing(name: str) -> str | None:
    """None if `name` is on PATH, else why not, naming the package that provides it."""
    if shutil.which(name):
        return None
    package = PACKAGES.get(name)
    hint = f" (Debian package {package})" if package else ""
    return f"the `{name}` command is not installed{hint}"


def require(name: str) -> str:
    """The path of command `name`; skip the calling test, with the reason, when it is missing."""
    reason = missing(name)
    if reason is not None:
        pytest.skip(reason)
    return str(shutil.which(name))


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv)`, raising MissingTool (naming the package) if argv[0] is missing."""
    reason = missing(argv[0])
    if reason is not None:
        raise MissingTool(reason)
    return subprocess.run(argv, **kwargs)
