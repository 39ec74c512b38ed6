"""Chart values that cannot work on this cluster end in messages an operator finds in
the driver pod's log and in `kubectl describe pod`, and never in a crash loop:

- a kubelet registry directory the kubelet does not watch: the new driver pods never
  become Ready (the readiness probe's message names the value), and the old pods keep
  serving (maxUnavailable 0) until the value is fixed;
- a virtual parent no node has: a warning and an Event naming the pattern and the value;
- DeviceClasses that select another driver name (the chart's own classes off, the
  operator's with a typo): a warning and an Event naming the driver and the classes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster.helmrelease import NAMESPACE, operator_values
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .chart import ChartCluster

WRONG = "/var/lib/kubelet-elsewhere/plugins_registry"
TYPO = "dra.example.org"  # the operator's DeviceClass names this, the driver is dra.example.com
REASONS = ("AllowListUnmatched", "NoDeviceClass", "NotRegistered")  # the driver's Events
OPERATORS_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "operator-nics"},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{TYPO}"'}}]},
}


@pytest.fixture
def wrong_registry(chart: ChartCluster) -> Iterator[set[str]]:
    """The driver pods before the upgrade to the wrong value."""
    chart.wait_rollout()
    old = {p["metadata"]["name"] for p in chart.driver_pods()}
    values = operator_values(chart.image)
    values["hostPaths"]["kubeletRegistryDir"] = WRONG
    values["settings"] = {"virtualParents": ["eth0", "eth9"]}  # no node has an eth9
    values["deviceClasses"] = {
        name: {"enabled": False}
        for name in ("networkDevices", "virtualNetwork", "rdmaDevices", "roceDevices")
    }
    chart.api.apply(OPERATORS_CLASS)
    try:
        chart.release.install(values, upgrade=True)
        yield old
    finally:
        chart.api.delete("/apis/resource.k8s.io/v1/deviceclasses/operator-nics")
        chart.release.install(operator_values(chart.image), upgrade=True)
        chart.wait_rollout()


def test_values_that_cannot_work_are_reported_and_the_old_pods_keep_serving(
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

    # Each as a Warning Event on the driver pod, which `kubectl describe` shows.
    def warned() -> dict[str, str] | None:
        found = {
            e["reason"]: e.get("message", "")
            for e in chart.api.events(NAMESPACE, name)
            if e.get("type") == "Warning" and e.get("reason") != "Unhealthy"
        }
        return found if set(REASONS) <= set(found) else None

    events = wait_for("the driver's Events", warned, 60, log=chart.describe_drivers)
    assert "--virtual-parents pattern" in events["AllowListUnmatched"]
    assert "pattern: eth9; value: settings.virtualParents" in events["AllowListUnmatched"]
    assert f"no DeviceClass selects driver {DRIVER}" in events["NoDeviceClass"]
    assert f"classes: {TYPO} (operator-nics)" in events["NoDeviceClass"]
    assert "hostPaths.kubeletRegistryDir" in events["NotRegistered"]
    described = chart.kubectl("-n", NAMESPACE, "describe", "pod", name).stdout
    for reason in REASONS:
        assert reason in described, described
    log = chart.driver_log(chart.api.pod(NAMESPACE, name))
    [line] = [ln for ln in log.splitlines() if "no DeviceClass selects driver" in ln]
    assert "level=warning" in line and f'classes="{TYPO} (operator-nics)"' in line
    pod = chart.api.pod(NAMESPACE, name)
    [status] = pod["status"]["containerStatuses"]
    assert not status["ready"] and status["restartCount"] == 0, status  # no crash loop
    # The old pods still run, Ready: no node lost its driver.
    running = {
        p["metadata"]["name"] for p in chart.driver_pods() if p["status"].get("phase") == "Running"
    }
    assert old <= running
