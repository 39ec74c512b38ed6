"""The chart's DaemonSet as an operator sees it: one driver pod per node, Running and
Ready with its liveness probe passing, registered with its own node's kubelet,
publishing its own node's ResourceSlices and no other node's; with the token its pod
holds it cannot touch another node's slices; its log is the structured log."""

from __future__ import annotations

import time

import pytest

from localcluster.apiclient import ApiError
from localcluster.helmrelease import NAMESPACE
from tests.e2e.cluster import SLICES
from tests.support.driverproc import DRIVER

from .chart import ChartCluster, elapsed_since

# The chart's probe: initialDelaySeconds 10, periodSeconds 10.
PROBED_AFTER = 25.0


def test_one_ready_driver_pod_per_node_its_probe_passing(chart: ChartCluster):
    pods = {n: chart.driver_pod(n) for n in chart.node_names}
    started = min(p["status"]["startTime"] for p in pods.values())
    time.sleep(max(0.0, PROBED_AFTER - elapsed_since(started)))
    for node, first in pods.items():
        pod = chart.api.pod(NAMESPACE, first["metadata"]["name"])
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and "running" in status["state"], (node, status)
        assert status["restartCount"] == 0, chart.describe_drivers()
        probe = pod["spec"]["containers"][0]["livenessProbe"]
        assert probe["httpGet"] == {
            "host": "127.0.0.1", "path": "/healthz", "port": 51515, "scheme": "HTTP"
        }  # fmt: skip
        events = chart.api.events(NAMESPACE, pod["metadata"]["name"])
        # (Readiness fails until the kubelet has registered the driver: expected.)
        failed = [e for e in events if e.get("message", "").startswith("Liveness probe failed")]
        assert not failed, failed
        assert pod["status"]["podIP"] == chart.node(node).lay.node_ip  # hostNetwork
        security = pod["spec"]["containers"][0]["securityContext"]
        assert security["readOnlyRootFilesystem"] is True


def test_each_driver_registers_with_its_own_kubelet(chart: ChartCluster):
    for node in chart.node_names:
        pod = chart.driver_pod(node)
        uid = pod["metadata"]["uid"]
        metrics = chart.node(node).kubelet.metrics()  # type: ignore[union-attr]
        plugins = [
            line
            for line in metrics.splitlines()
            if line.startswith("kubelet_plugin_manager_total_plugins")
            or line.startswith("plugin_manager_total_plugins")
        ]
        assert any(f"{DRIVER}-{uid}-reg.sock" in line for line in plugins) or any(
            DRIVER in line and 'state="actual_state_of_world"' in line for line in plugins
        ), plugins
        log = chart.driver_log(pod)
        assert "registered with the kubelet" in log
        assert f"node={node}" in log


def test_each_node_has_its_own_slices_from_its_own_driver(chart: ChartCluster):
    nodes = {n: chart.api.get(f"/api/v1/nodes/{n}") for n in chart.node_names}
    slices = [s for s in chart.api.get(SLICES)["items"] if s["spec"]["driver"] == DRIVER]
    by_node: dict[str, list[str]] = {}
    for s in slices:
        node = s["spec"]["nodeName"]
        assert s["spec"]["pool"]["name"] == node, s["metadata"]["name"]
        [owner] = s["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Node", node)
        assert owner["uid"] == nodes[node]["metadata"]["uid"]
        by_node.setdefault(node, []).append(s["metadata"]["name"])
    assert sorted(by_node) == sorted(chart.node_names), by_node
    for node in chart.node_names:
        names = {
            d["name"] for s in slices if s["spec"]["nodeName"] == node for d in s["spec"]["devices"]
        }
        assert "netdev-virtual" in names


def _forbidden(call) -> str:
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.code == 403, err.value
    return str(err.value)


def test_a_driver_pods_token_cannot_touch_another_nodes_slices(chart: ChartCluster):
    mine, other = chart.node_names[0], chart.node_names[1]
    token = chart.pod_token(chart.driver_pod(mine))
    cp = chart.local.control_plane

    def as_driver(method: str, path: str, body: object = None) -> object:
        return cp.request(method, f"{path}?dryRun=All", body, token=token)

    [theirs] = chart.api.slices(other)
    [own] = chart.api.slices(mine)
    path = f"{SLICES}/{theirs['metadata']['name']}"
    changed = {**theirs, "metadata": {**theirs["metadata"], "labels": {"x": "y"}}}
    _forbidden(lambda: as_driver("PUT", path, changed))
    _forbidden(lambda: as_driver("DELETE", path))
    fresh = {k: v for k, v in theirs.items() if k != "status"}
    fresh["metadata"] = {
        "name": "forged-" + theirs["metadata"]["name"],
        "ownerReferences": theirs["metadata"]["ownerReferences"],
    }
    _forbidden(lambda: as_driver("POST", SLICES, fresh))
    # Its own node's: allowed (dry run: nothing changes).
    own_path = f"{SLICES}/{own['metadata']['name']}"
    labelled = {**own, "metadata": {**own["metadata"], "labels": {"x": "y"}}}
    as_driver("PUT", own_path, labelled)
    as_driver("DELETE", own_path)


def test_the_log_is_structured_and_names_claims(chart: ChartCluster, kns: str):
    from tests.node.scenario import pod, template

    from .chart import pinned

    node = chart.node_names[0]
    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    chart.api.apply(pinned(pod("p", ["veth"]), node), kns)
    chart.api.wait_running(kns, "p")
    [claim] = chart.api.claims(kns)
    uid = claim["metadata"]["uid"]
    log = chart.driver_log(chart.driver_pod(node))
    lines = [line for line in log.splitlines() if f"claim={uid}" in line or uid in line]
    assert lines, log[-3000:]
    for line in log.splitlines():
        assert line.startswith("ts=") and " level=" in line and " msg=" in line, line
