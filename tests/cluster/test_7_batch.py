"""The driver pod's limits under load: a batch of 128 claims on one node (8 pods of 16
NIC claims each, created within seconds) is prepared within the DaemonSet's 128 Mi memory
limit and its read-only root file system, the container never restarting; its peak
memory comes from its own cgroup. The metrics endpoint, enabled through the chart's
values, is scraped from the pod and counts the batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.helmrelease import NAMESPACE, operator_values
from localcluster.namespaces import cgroup_mounts
from localcluster.podnet import via_exec
from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

from .chart import ChartCluster, pinned

PODS, CLAIMS = 8, 16  # 128 claims: every slot of the node's netdev-virtual device
METRICS_PORT = 9400
LIMIT = 128 * 1024 * 1024


@pytest.fixture
def metrics_on(chart: ChartCluster) -> Iterator[None]:
    with chart.installed(operator_values(chart.image, metricsAddr=f":{METRICS_PORT}")):
        yield


def memory_cgroup(chart: ChartCluster, node: str) -> Path:
    """The memory cgroup of the driver container on `node`."""
    p = chart.driver_pod(node)
    [status] = p["status"]["containerStatuses"]
    container = status["containerID"].split("://")[1]
    root = chart.node(node).lay.cgroup_root.lstrip("/")
    for mountpoint, options in cgroup_mounts():
        if "memory" in options:
            [found] = (mountpoint / root).glob(
                f"kubepods*/**/pod{p['metadata']['uid']}/{container}"
            )
            return found
    raise LookupError("no memory cgroup hierarchy (cgroup v1 here)")


def scrape(chart: ChartCluster, node: str) -> str:
    name = chart.driver_pod(node)["metadata"]["name"]
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:{METRICS_PORT}/proxy/metrics"
    return str(chart.api.get(path))


def counter(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_128_claim_batch_within_the_memory_limit_and_read_only_root(
    chart: ChartCluster, metrics_on, kns: str, figures
):
    node = chart.node_names[0]
    cgroup = memory_cgroup(chart, node)
    assert int((cgroup / "memory.limit_in_bytes").read_text()) == LIMIT
    (cgroup / "memory.max_usage_in_bytes").write_text("0")  # the peak from here on
    allocated = [
        f"{c['metadata']['namespace']}/{c['metadata']['name']}"
        for c in chart.api.get("/apis/resource.k8s.io/v1/resourceclaims")["items"]
        if (c.get("status") or {}).get("allocation")
    ]
    assert not allocated, f"claims of earlier tests still allocated: {allocated}"
    before = scrape(chart, node)
    names = [f"nic{i}" for i in range(1, CLAIMS + 1)]
    for i, name in enumerate(names, 1):
        chart.api.apply(
            template(name, {"kind": "veth", "interfaceName": f"net{i}", "mtu": 1400}), kns
        )
    # Each pod once the scheduler has bound the one before (a second or so apart: their
    # prepares still overlap). Created all at once, kube-scheduler (v1.36.3 sometimes,
    # v1.37.2 every time here) counts a claim whose allocation it is writing twice
    # against netdev-virtual's 128 slots, rejects a pod that fits with "cannot allocate
    # all claims", and does not retry it for 5 minutes.
    for n in range(1, PODS + 1):
        chart.api.apply(pinned(pod(f"b{n}", names), node), kns)
        wait_for(
            f"pod b{n} bound",
            lambda n=n: chart.api.get(f"/api/v1/namespaces/{kns}/pods/b{n}")["spec"].get(
                "nodeName"
            ),
            120,
        )
    for n in range(1, PODS + 1):
        chart.api.wait_running(kns, f"b{n}", 240)
    peak = int((cgroup / "memory.max_usage_in_bytes").read_text())
    figures["128-claim batch: driver peak memory"] = f"{peak / 2**20:.1f} MiB of 128 MiB"
    for n in range(1, PODS + 1):
        seen = via_exec(chart.kubectl, kns, f"b{n}", "app")
        assert {f"net{i}" for i in range(1, CLAIMS + 1)} <= set(seen), sorted(seen)
    [status] = chart.driver_pod(node)["status"]["containerStatuses"]
    assert status["restartCount"] == 0 and not status.get("lastState"), status
    assert peak < LIMIT
    log = chart.driver_log(chart.driver_pod(node))
    assert "Read-only file system" not in log and "Errno 30" not in log
    assert len(chart.held(node).records) == PODS * CLAIMS
    after = scrape(chart, node)
    prepared = counter(after, "dra_driver_operations_total", operation="prepare")
    assert (
        prepared - counter(before, "dra_driver_operations_total", operation="prepare")
        >= PODS * CLAIMS
    )
    assert counter(after, "dra_driver_prepared_claims") == PODS * CLAIMS
