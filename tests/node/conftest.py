"""Fixtures of the node tier: one local node for the session (a real kubelet,
containerd and runc, see localcluster/node.py), drivers started on it per test, and a
Kubernetes namespace per test.

Teardown runs on failure and on Ctrl-C too: a test's namespace is deleted while a
driver runs (so the kubelet can unprepare its pods' claims), its drivers are stopped
and their pods deleted, and at the end of the session the node is stopped and swept
(processes, shims, mounts, cgroups, namespaces, files). The node's network namespace
is registered with tests/conftest.py's leftover check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.apiclient import dns_label
from localcluster.binaries import default_binaries, missing
from localcluster.driver import HostDriver, install_driver_objects
from localcluster.node import LocalNode
from localcluster.sweep import sweep_abandoned
from tests.support import netns
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .leftovers import driver_state

PREFIX = "dratest-node-"
_timings: dict[str, float] = {}  # of the session's node, for the terminal summary
# `make test-node` sets it: there a node that cannot start is a failure, not a skip.
REQUIRED = os.environ.get("DRA_NODE_REQUIRED") == "1"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remove what killed runs of this tier left (only nodes whose owner is gone)."""
    if os.geteuid() == 0:
        for workdir in Path("/tmp").glob(f"{PREFIX}*"):
            sweep_abandoned(workdir)


@pytest.fixture(scope="session")
def node() -> Iterator[LocalNode]:
    """The session's node, Ready, with deploy/'s driver objects applied."""
    problems = missing(default_binaries())
    if problems:
        message = "the local node cannot start: " + "; ".join(problems)
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    name = f"{PREFIX}{uuid.uuid4().hex[:6]}"
    netns.CREATED.add(name)  # tests/conftest.py checks that it is gone at the end
    n = LocalNode(name, Path("/tmp") / name)
    try:
        with n:
            install_driver_objects(n)
            yield n
    finally:
        _timings.update(n.timings)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The node's bring-up and teardown times (CI prints them)."""
    if _timings:
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in _timings.items())
        terminalreporter.write_line(f"local node: {parts}")


@pytest.fixture(scope="session")
def cluster(node: LocalNode) -> NodeCluster:
    return NodeCluster(node)


class Drivers:
    """The drivers a test started (each with its own pod), stopped at its end."""

    def __init__(self, node: LocalNode) -> None:
        self.node = node
        self.started: list[HostDriver] = []

    def start(self, *args: str, wait: bool = True, **identity: Any) -> HostDriver:
        """A new driver instance (a new pod, as a new DaemonSet pod would be);
        `identity`: HostDriver's namespace, service_account and daemonset_env."""
        d = HostDriver(self.node, args, **identity)
        self.started.append(d)
        return d.start(wait=wait)

    def running(self) -> list[HostDriver]:
        return [d for d in self.started if d.proc and d.proc.proc and d.proc.proc.poll() is None]

    def ensure_running(self) -> None:
        """Restart the newest driver if none runs: the kubelet needs one to unprepare."""
        if self.started and not self.running():
            self.started[-1].start()

    def remove_all(self) -> None:
        """SIGTERM every running one at once (each takes a few seconds to stop), then
        wait for each and delete its pod."""
        for d in self.running():
            d.signal(signal.SIGTERM)
        for d in reversed(self.started):
            d.remove()
        self.started.clear()

    def logs(self) -> str:
        return "\n".join(f"--- driver pod {d.pod_name} ---\n{d.log()}" for d in self.started)


@pytest.fixture
def drivers(node: LocalNode) -> Iterator[Drivers]:
    """Start drivers with `drivers.start(*args)`; all are removed after the test."""
    ds = Drivers(node)
    try:
        yield ds
    finally:
        ds.remove_all()


@pytest.fixture
def node_sysfs(node: LocalNode) -> Iterator[Path]:
    """A sysfs mounted from the node's network namespace, for `--sysfs-root`: the node's
    mount namespace shares the machine's /sys, whose /sys/class/net lists the machine's
    interfaces, where a DaemonSet pod on a real node sees its node's. Unmounted at the end."""
    path = node.lay.workdir / "node-sys"
    path.mkdir(exist_ok=True)
    subprocess.run([*node.lay.enter(), "mount", "-t", "sysfs", "sysfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run([*node.lay.enter(), "umount", str(path)], check=False)


@pytest.fixture
def driver(drivers: Drivers) -> HostDriver:
    """One driver with the default settings, registered with the kubelet."""
    return drivers.start()


def _label(text: str) -> str:
    return f"{dns_label(text)[:50].rstrip('-')}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def kns(cluster: NodeCluster, drivers: Drivers, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace for one test, deleted after it (and waited for: the kubelet
    finishes its pods, the claims are released) while a driver still runs."""
    name = _label(f"t-{request.node.name}")
    cluster.create_namespace(name)
    try:
        yield name
    finally:
        drivers.ensure_running()
        cluster.remove_namespace(name)
        # Every claim unprepared: the next test starts on a node holding nothing.
        lay = cluster.local.lay
        wait_for(
            "the driver to hold no claim on the node",
            lambda: not driver_state(lay).records,
            30,
            log=lambda: f"{driver_state(lay)}\n{drivers.logs()[-4000:]}",
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure: the test's pods, the driver logs, the node's log tails."""
    report = yield
    if report.failed:
        try:
            _attach_diagnostics(item, report)
        except Exception as e:  # a broken cluster must not hide the failure itself
            report.sections.append(("diagnostics", f"could not collect: {e!r}"))
    return report


def _attach_diagnostics(item: pytest.Item, report: pytest.TestReport) -> None:
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    c, ns = funcargs.get("cluster"), funcargs.get("kns")
    if isinstance(c, NodeCluster) and isinstance(ns, str):
        pods = [c.describe_pod(ns, p["metadata"]["name"]) for p in c.pods(ns)]
        report.sections.append(("pods", "\n".join(pods)))
    ds = funcargs.get("drivers")
    if isinstance(ds, Drivers):
        report.sections.append(("driver logs", ds.logs()[-20000:]))
    n = funcargs.get("node") or (c.local if isinstance(c, NodeCluster) else None)
    if isinstance(n, LocalNode):
        report.sections.append(("node logs", n.logs(30)))
