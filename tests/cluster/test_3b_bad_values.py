"""A chart value that cannot work on this cluster ends in a message an operator finds:
a virtual parent no node has is a warning in the driver's log at start; with a kubelet
registry directory the kubelet does not watch, the new driver pods never become Ready,
`kubectl describe` shows the readiness probe's message naming the value, the driver's
log says what is wrong, nothing crash-loops, and the old pods keep serving
(maxUnavailable 0) until the value is fixed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster.helmrelease import NAMESPACE, operator_values
from tests.support.waiting import wait_for

from .chart import ChartCluster

WRONG = "/var/lib/kubelet-elsewhere/plugins_registry"


@pytest.fixture
def wrong_registry(chart: ChartCluster) -> Iterator[set[str]]:
    """The driver pods before the upgrade to the wrong value."""
    chart.wait_rollout()
    old = {p["metadata"]["name"] for p in chart.driver_pods()}
    values = operator_values(chart.image)
    values["hostPaths"]["kubeletRegistryDir"] = WRONG
    values["settings"] = {"virtualParents": ["eth0", "eth9"]}  # no node has an eth9
    chart.release.install(values, upgrade=True)
    try:
        yield old
    finally:
        chart.release.install(operator_values(chart.image), upgrade=True)
        chart.wait_rollout()


def test_a_wrong_kubelet_registry_dir_is_reported_and_the_old_pods_keep_serving(
    chart: ChartCluster, wrong_registry
):
    old = wrong_registry

    def new_pod() -> dict | None:
        pods = [p for p in chart.driver_pods() if p["metadata"]["name"] not in old]
        return pods[0] if pods else None

    pod = wait_for("a driver pod with the wrong value", new_pod, 60, log=chart.describe_drivers)
    name = pod["metadata"]["name"]

    def told() -> list[str] | None:
        messages = [
            e.get("message", "")
            for e in chart.api.events(NAMESPACE, name)
            if e.get("reason") == "Unhealthy"
        ]
        return [m for m in messages if "hostPaths.kubeletRegistryDir" in m] or None

    [message, *_] = wait_for("the readiness probe's message", told, 60, log=chart.describe_drivers)
    assert "has not registered the driver" in message
    described = chart.kubectl("-n", NAMESPACE, "describe", "pod", name).stdout
    assert "hostPaths.kubeletRegistryDir" in described

    def logged() -> str | None:
        log = chart.driver_log(chart.api.pod(NAMESPACE, name))
        lines = [line for line in log.splitlines() if "has not registered the driver" in line]
        return lines[0] if lines else None

    line = wait_for("the driver's error", logged, 60)
    assert "level=error" in line and f"registry={WRONG}" in line
    log = chart.driver_log(chart.api.pod(NAMESPACE, name))
    [warning] = [ln for ln in log.splitlines() if "matches --virtual-parents pattern" in ln]
    assert "level=warning" in warning and "pattern=eth9" in warning and "eth0" in warning
    pod = chart.api.pod(NAMESPACE, name)
    [status] = pod["status"]["containerStatuses"]
    assert not status["ready"] and status["restartCount"] == 0, status  # no crash loop
    # The old pods still run, Ready: no node lost its driver.
    running = {
        p["metadata"]["name"] for p in chart.driver_pods() if p["status"].get("phase") == "Running"
    }
    assert old <= running
