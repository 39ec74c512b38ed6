"""Fixtures of the cluster tier: one local cluster of two nodes for the session
(localcluster/cluster.py; node 1's containerd with NRI at its default, node 2's with
NRI off), the driver image (`make image`) imported into both, and the chart installed
with only the values an operator sets (chart.operator_values); a Kubernetes namespace
per test.

Teardown runs on failure and on Ctrl-C too: a test's namespace is deleted while the
driver pods run, until no node holds a claim; at the end of the session the release
is uninstalled and the cluster stopped and swept. The namespaces are registered with
tests/conftest.py's leftover check.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.apiclient import dns_label
from localcluster.binaries import default_binaries, missing
from localcluster.cluster import LocalCluster, sweep_cluster
from localcluster.driverimage import ImageUnavailable, build_driver_image
from localcluster.helmrelease import NAMESPACE, RELEASE, Release, build_helm, operator_values
from localcluster.manifests import DEPLOY
from tests.support import netns

from .chart import ChartCluster

PREFIX = "dratest-mn-"
NODES = 2
# `make test-cluster` sets it: there a cluster that cannot start is a failure, not a skip.
REQUIRED = os.environ.get("DRA_CLUSTER_REQUIRED") == "1"
_figures: dict[str, str] = {}  # for the terminal summary


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remove what killed runs of this tier left (only clusters whose owner is gone)."""
    if os.geteuid() == 0:
        for workdir in Path("/tmp").glob(f"{PREFIX}*"):
            sweep_cluster(workdir)


def _unavailable(message: str) -> None:
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def chart() -> Iterator[ChartCluster]:
    """The session's cluster with the chart installed and rolled out on every node."""
    if os.geteuid() != 0:
        _unavailable("the cluster tier needs root")
    if problems := missing(default_binaries()):
        _unavailable("the local cluster cannot start: " + "; ".join(problems))
    try:
        image, seconds = build_driver_image()
    except ImageUnavailable as e:
        _unavailable(str(e))
    _figures["image build"] = f"{seconds:.1f} s"
    helm = build_helm()
    name = f"{PREFIX}{uuid.uuid4().hex[:4]}"
    netns.CREATED.update({name, *(f"{name}-{i}" for i in range(1, NODES + 1))})
    local = LocalCluster(name, Path("/tmp") / name, nodes=NODES, nri_off=[NODES])
    with local:
        _figures.update({k: f"{v:.1f} s" for k, v in local.timings.items()})
        local.import_image(image)
        local.apply(DEPLOY / "namespace.yaml")
        release = Release(helm, local.kubeconfig, local.workdir / "helm", RELEASE, NAMESPACE)
        release.install(operator_values(image))
        c = ChartCluster(local, release, image)
        c.wait_rollout()
        try:
            yield c
        finally:
            _uninstall(c)
    _figures["teardown"] = f"{local.timings.get('teardown', 0):.1f} s"


def _uninstall(c: ChartCluster) -> None:
    """helm uninstall, unless a test did; nothing of the driver may stay on a node."""
    if c.release("status", RELEASE, "--namespace", NAMESPACE).returncode == 0:
        c.release.uninstall()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Bring-up and teardown times and the figures tests reported (CI prints them)."""
    if _figures:
        parts = ", ".join(f"{k} {v}" for k, v in _figures.items())
        terminalreporter.write_line(f"local cluster: {parts}")


@pytest.fixture
def figures() -> dict[str, str]:
    """Figures a test reports in the session summary."""
    return _figures


def _label(text: str) -> str:
    return f"{dns_label(text)[:50].rstrip('-')}-{uuid.uuid4().hex[:5]}"


@pytest.fixture
def kns(chart: ChartCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace for one test, deleted after it, until no node holds a claim."""
    name = _label(f"t-{request.node.name}")
    chart.api.create_namespace(name)
    try:
        yield name
    finally:
        chart.api.remove_namespace(name)
        chart.wait_nothing_held()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure: the test's pods, the driver pods and their logs, log tails."""
    report = yield
    if report.failed:
        try:
            _attach_diagnostics(item, report)
        except Exception as e:  # a broken cluster must not hide the failure itself
            report.sections.append(("diagnostics", f"could not collect: {e!r}"))
    return report


def _attach_diagnostics(item: pytest.Item, report: pytest.TestReport) -> None:
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    c, ns = funcargs.get("chart"), funcargs.get("kns")
    if not isinstance(c, ChartCluster):
        return
    if isinstance(ns, str):
        pods = [c.api.describe_pod(ns, p["metadata"]["name"]) for p in c.api.pods(ns)]
        report.sections.append(("pods", "\n".join(pods)))
    report.sections.append(("driver pods", c.describe_drivers()))
    logs = []
    for pod in c.driver_pods():
        res = c.kubectl("-n", NAMESPACE, "logs", pod["metadata"]["name"], "--tail=60", check=False)
        logs.append(
            f"--- {pod['metadata']['name']} on {pod['spec'].get('nodeName')} ---\n{res.stdout}"
        )
    report.sections.append(("driver logs", "\n".join(logs)))
    report.sections.append(("cluster logs", c.local.logs(25)))
