"""Throw-away network namespaces for tests, and running code inside one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from localcluster.netns import inside
from tests.support.hosttools import run

__all__ = ["CREATED", "create", "delete", "fd", "inside", "ip", "ip_host", "ours"]

PREFIX = "dratest-"
CREATED: set[str] = set()  # namespaces this test session made (checked at its end)


def create(tag: str = "") -> str:
    """A new namespace `dratest-<tag>-<random>` with loopback up."""
    name = f"{PREFIX}{tag + '-' if tag else ''}{uuid.uuid4().hex[:8]}"
    run(["ip", "netns", "add", name], check=True)
    CREATED.add(name)
    run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    return name


def delete(name: str) -> None:
    """Delete a namespace (its virtual links die with it)."""
    run(["ip", "netns", "del", name], check=False, capture_output=True)


def ours() -> list[str]:
    """Test namespaces currently present."""
    out = run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def fd(name: str) -> int:
    """An open file descriptor of namespace `name` (caller closes it)."""
    return os.open(Path("/run/netns") / name, os.O_RDONLY)


def ip(name: str, *args: str) -> str:
    """`ip -n <name> ...` output; raises on failure."""
    return run(["ip", "-n", name, *args], check=True, capture_output=True, text=True).stdout


def ip_host(*args: str) -> str:
    """`ip ...` in the host namespace; raises on failure."""
    return run(["ip", *args], check=True, capture_output=True, text=True).stdout
