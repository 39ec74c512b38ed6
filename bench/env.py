"""A benchmark environment: a namespace, the API stand-in, the real daemon, claim builders."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import netns
from tests.support.driverproc import DriverProcess
from tests.support.fakeapi import FakeApi, allocated_claim, opaque

QUIET = ("--publish-interval", "600", "--log-level", "warning")


class Env:
    """One namespace standing for the node, the API stand-in inside it, driver processes."""

    def __init__(self, ns: str, root: Path, fake: FakeApi, url: str) -> None:
        self.ns, self.root, self.fake, self.url = ns, root, fake, url
        self.kubeconfig = fake.kubeconfig(url, root / "kubeconfig")
        self.drivers: list[DriverProcess] = []

    def driver(self, *args: str, wait: bool = True) -> DriverProcess:
        """Start `dra-driver run` with the bench's quiet defaults plus `args`."""
        proc = DriverProcess(self.root, self.ns, self.kubeconfig, args=(*QUIET, *args))
        self.drivers.append(proc)
        return proc.start(wait=wait)

    def claim(
        self, netdev: dict[str, Any], device: str = "netdev-virtual", share: bool = True
    ) -> dict[str, Any]:
        """Add an allocated claim with this netdev config to the API; return it."""
        result: dict[str, Any] = {"request": "nic", "pool": "node-a", "device": device}
        if share:
            result["shareID"] = str(uuid.uuid4())
        claim = allocated_claim(
            f"c-{uuid.uuid4().hex[:10]}",
            [result],
            config=[opaque({"type": "netdev", "netdev": netdev})],
        )
        self.fake.add_claim(claim)
        return claim


@contextmanager
def environment(tag: str) -> Iterator[Env]:
    """Set up, yield, and tear everything down (namespace, processes, files)."""
    ns = netns.create(f"bench-{tag}")
    root = Path(tempfile.mkdtemp(prefix="drab-", dir="/var/tmp"))
    fake = FakeApi()
    fake.add_node("node-a")
    env = None
    try:
        with fake.serving(ns) as url:
            env = Env(ns, root, fake, url)
            yield env
    finally:
        for proc in env.drivers if env else []:
            if proc.proc is not None:
                proc.stop()
        netns.delete(ns)
        shutil.rmtree(root, ignore_errors=True)


def rss_kb(pid: int) -> int:
    """Resident set size of a process in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise LookupError(pid)
