"""Markers (root, kernel features, kinds), the per-kind summary and the leftover check."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import hosttools, kernel, netns, pcinics
from tests.support.driverproc import RUNNING

_kinds: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
_skip_reasons: dict[str, str] = {}
_baseline: dict[str, set[str]] = {}

# Inside the kernel-VM tier (hack/vm/run.py sets DRA_KERNEL_VM=1) these features must be
# there: a skip would hide exactly what the tier exists to prove.
IN_KERNEL_VM = os.environ.get("DRA_KERNEL_VM") == "1"
VM_FEATURES = {
    "veth", "macvlan", "ipvlan", "vlan", "dummy", "bridge", "rdma", "igb-sriov", "e1000e",
}  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kind(name, fabricated=False): exercises the handler of one device kind; "
        "fabricated=True when the hardware side is a fabricated sysfs tree",
    )


def _host_links() -> set[str]:
    out = hosttools.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(": ")[1].split("@")[0] for line in out.splitlines() if ": " in line}


def pytest_sessionstart(session: pytest.Session) -> None:
    if IN_KERNEL_VM:  # the emulated NICs' links come with their drivers, not from a test
        pcinics.load_drivers()
    if os.geteuid() == 0 and hosttools.missing("ip") is None:
        _baseline["links"] = _host_links()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("root") or item.get_closest_marker("kernel"):
        if os.geteuid() != 0:
            pytest.skip("needs root (network namespaces and netlink)")
        hosttools.require("ip")
    for mark in item.iter_markers("kernel"):
        reason = kernel.missing(mark.args[0])
        if reason and IN_KERNEL_VM and mark.args[0] in VM_FEATURES:
            pytest.fail(f"the kernel-VM tier must exercise {mark.args[0]}: {reason}")
        if reason:
            for kind in item.iter_markers("kind"):
                _skip_reasons[kind.args[0]] = reason
            pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call" or (report.when == "setup" and report.skipped):
        outcome = "passed" if report.passed else "skipped" if report.skipped else "failed"
        for kind in item.iter_markers("kind"):
            fake = "fabricated-" if kind.kwargs.get("fabricated") else ""
            _kinds[kind.args[0]][fake + outcome].add(item.nodeid)
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per device kind: exercised for real, on fabricated sysfs only, or skipped."""
    if not _kinds:
        return
    tr = terminalreporter
    tr.section("device kinds")
    for kind in sorted(_kinds):
        o = _kinds[kind]
        real = len(o["passed"]) + len(o["failed"])
        fabricated = len(o["fabricated-passed"]) + len(o["fabricated-failed"])
        failed = len(o["failed"]) + len(o["fabricated-failed"])
        if real:
            line = f"exercised for real ({real} tests, {fabricated} on fabricated sysfs)"
        elif fabricated:
            line = f"no real device here: {fabricated} tests on fabricated sysfs or validation"
            if kind in _skip_reasons:
                line += f"; real test skipped: {_skip_reasons[kind]}"
        else:
            line = f"skipped: {_skip_reasons.get(kind, 'every test skipped')}"
        if failed:
            line += f", {failed} FAILED"
        tr.write_line(f"{kind:<12} {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.geteuid() != 0 or not _baseline:
        return
    # Only this session's namespaces: another test run may be going on beside this one.
    left_ns = sorted(set(netns.ours()) & netns.CREATED)
    left_links = sorted(_host_links() - _baseline["links"])
    left_procs = sorted(pid for pid in RUNNING if Path(f"/proc/{pid}").exists())
    if left_ns or left_links or left_procs:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"LEFTOVERS after the test session: namespaces={left_ns} links={left_links} "
            f"driver pids={left_procs}",
            red=True,
        )
        for ns in left_ns:
            netns.delete(ns)
        for link in left_links:
            hosttools.run(["ip", "link", "del", link], capture_output=True, check=False)
        for pid in left_procs:
            os.kill(pid, 9)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def ns() -> Iterator[str]:
    """A throw-away network namespace, deleted after the test."""
    name = netns.create()
    try:
        yield name
    finally:
        netns.delete(name)


@pytest.fixture
def in_ns(ns: str) -> Iterator[str]:
    """Run the test's thread inside a throw-away namespace."""
    with netns.inside(ns):
        yield ns
