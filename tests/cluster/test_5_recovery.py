"""The kubelet's own recovery of the driver: a driver process frozen (SIGSTOP) is
restarted by its liveness probe, a driver container killed is restarted, a driver pod
deleted is replaced by the DaemonSet. Each time, on both nodes, a claim prepared before
keeps its pod's NIC and unprepares cleanly, and a new pod gets one. A flood of
connections to the liveness port restarts nothing."""

from __future__ import annotations

import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from localcluster.helmrelease import NAMESPACE
from localcluster.namespaces import cgroup_mounts
from localcluster.podnet import via_exec
from tests.node.scenario import pod, template
from tests.support import netns
from tests.support.waiting import wait_for

from .chart import ChartCluster, driver_container, pinned

# The chart's probe: a failure every 10 s, 3 in a row, each up to 5 s: under a minute.
PROBE_RESTART = 90.0
PROBE_PORT = 51515  # the chart's settings.healthcheckPort


def driver_pid(chart: ChartCluster, node: str) -> int:
    """The pid of `dra-driver run` in the driver container of `node` (from its cgroup)."""
    p = chart.driver_pod(node)
    [status] = p["status"]["containerStatuses"]
    container = status["containerID"].split("://")[1]
    root = chart.node(node).lay.cgroup_root.lstrip("/")
    for mountpoint, _ in cgroup_mounts():
        for procs in (mountpoint / root).glob(
            f"kubepods*/**/pod{p['metadata']['uid']}/{container}/cgroup.procs"
        ):
            for pid in procs.read_text().split():
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if any(b"dra-driver" in part for part in cmdline[:2]):
                    return int(pid)
    raise LookupError(f"no driver process in {p['metadata']['name']} on {node}")


def restarts(chart: ChartCluster, node: str) -> int:
    [status] = chart.driver_pod(node)["status"]["containerStatuses"]
    return int(status["restartCount"])


def _with_disruption(
    chart: ChartCluster,
    kns: str,
    disrupt: Callable[[str], Any],
    recovered: Callable[[str, Any], bool],
    timeout: float,
) -> None:
    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1", "mtu": 1300}), kns)
    for node in chart.node_names:
        chart.api.apply(pinned(pod(f"before-{node}", ["veth"]), node), kns)
    for node in chart.node_names:
        chart.api.wait_running(kns, f"before-{node}")
    old = {node: driver_container(chart.driver_pod(node)) for node in chart.node_names}
    tokens = {node: disrupt(node) for node in chart.node_names}
    for node in chart.node_names:
        wait_for(
            f"the driver on {node} to recover",
            lambda n=node: recovered(n, tokens[n]),
            timeout,
            log=chart.describe_drivers,
        )
        # Ready again, in its new container: a status can count the restart while its
        # Ready is still the old container's, and a pod placed then meets the old
        # driver's socket, which the kubelet retries only a minute or more later.
        chart.driver_pod(node, replacing=old[node])
    for node in chart.node_names:
        assert via_exec(chart.kubectl, kns, f"before-{node}", "app")["net1"].mtu == 1300
        chart.api.apply(pinned(pod(f"after-{node}", ["veth"]), node), kns)
    for node in chart.node_names:
        chart.api.wait_running(kns, f"after-{node}")
        assert via_exec(chart.kubectl, kns, f"after-{node}", "app")["net1"].mtu == 1300
        chart.api.delete_and_wait(kns, f"before-{node}")
    for node in chart.node_names:
        held = chart.held(node)
        assert len(held.records) == 1, (node, held)  # only the after- pod's claim


def test_a_frozen_driver_is_restarted_by_its_liveness_probe(chart: ChartCluster, kns: str):
    def freeze(node: str) -> int:
        before = restarts(chart, node)
        os.kill(driver_pid(chart, node), signal.SIGSTOP)
        return before

    _with_disruption(
        chart, kns, freeze, lambda n, before: restarts(chart, n) > before, PROBE_RESTART
    )
    for node in chart.node_names:
        pod_name = chart.driver_pod(node)["metadata"]["name"]
        reasons = {e.get("reason") for e in chart.api.events(NAMESPACE, pod_name)}
        assert "Unhealthy" in reasons, reasons


def test_a_killed_driver_container_is_restarted(chart: ChartCluster, kns: str):
    def kill(node: str) -> int:
        before = restarts(chart, node)
        os.kill(driver_pid(chart, node), signal.SIGKILL)
        return before

    _with_disruption(chart, kns, kill, lambda n, before: restarts(chart, n) > before, 60)


def test_a_deleted_driver_pod_is_replaced(chart: ChartCluster, kns: str):
    def delete(node: str) -> str:
        old = chart.driver_pod(node)["metadata"]["name"]
        chart.api.delete_pod(NAMESPACE, old)
        return old

    def replaced(node: str, old: str) -> bool:
        names = {
            p["metadata"]["name"] for p in chart.driver_pods() if p["spec"].get("nodeName") == node
        }
        return old not in names and len(names) == 1

    _with_disruption(chart, kns, delete, replaced, 90)


def test_a_flood_of_connections_to_the_probe_port_restarts_nothing(chart: ChartCluster):
    """Thousands of idle connections to the liveness port: from another host (the
    cluster network), refused, the port is on the node's loopback only; from the node
    itself, taken and dropped while the kubelet's probes go on passing. Over four probe
    periods the driver stays Ready, is never restarted and no probe fails."""
    node = chart.node_names[0]
    lay = chart.node(node).lay
    pod_name = chart.driver_pod(node)["metadata"]["name"]
    before = restarts(chart, node)
    with netns.inside(chart.local.netns), pytest.raises(ConnectionRefusedError):
        socket.create_connection((lay.node_ip, PROBE_PORT), timeout=5).close()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    held: list[socket.socket] = []
    opened = 0
    try:
        with netns.inside(lay.netns):
            end = time.monotonic() + 45  # the chart's probe: every 10 s
            while time.monotonic() < end:
                while len(held) < 2000:
                    held.append(socket.create_connection(("127.0.0.1", PROBE_PORT), timeout=10))
                    opened += 1
                for s in held[:200]:  # the oldest make room for new ones
                    s.close()
                del held[:200]
                time.sleep(1)
    finally:
        for s in held:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert opened >= 2000
    assert restarts(chart, node) == before, chart.describe_drivers()
    [status] = chart.driver_pod(node)["status"]["containerStatuses"]
    assert status["ready"], chart.describe_drivers()
    events = chart.api.events(NAMESPACE, pod_name)
    failed = [e for e in events if e.get("message", "").startswith("Liveness probe failed")]
    assert not failed, failed
