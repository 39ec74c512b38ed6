"""Bandwidth across nodes: with 200M per node (a `helm upgrade` of the setting, rolled out
by the DaemonSet), two pods asking for 150M each run one per node, each node limiting
its pod's veth to 150M both ways; a third waits with the scheduler's reason and runs
where the first one was once it is gone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from localcluster.helmrelease import operator_values
from localcluster.podnet import via_exec
from tests.node.scenario import pod, template
from tests.support import hosttools
from tests.support.waiting import wait_for

from .chart import ChartCluster

OFFERED, ASKED = "200M", "150M"


def _offered(chart: ChartCluster, node: str) -> str | None:
    device = chart.api.devices(node).get("netdev-virtual") or {}
    return ((device.get("capacity") or {}).get("bandwidth") or {}).get("value")


def _limits(chart: ChartCluster, node: str) -> list[int]:
    """The rates (bits per second) of the token buckets on the node's links."""
    shown = hosttools.run(
        ["ip", "netns", "exec", chart.node(node).lay.netns, "tc", "-j", "qdisc", "show"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(
        int(q["options"]["rate"]) * 8 for q in json.loads(shown.stdout) if q["kind"] == "tbf"
    )


@pytest.fixture
def bandwidth(chart: ChartCluster) -> Iterator[None]:
    values = operator_values(chart.image, virtualBandwidth=OFFERED, bandwidthStep="10M")
    with chart.installed(values):
        for node in chart.node_names:
            wait_for(
                f"{node} to offer {OFFERED}",
                lambda n=node: _offered(chart, n) == OFFERED,
                60,
            )
        yield


def test_each_node_runs_what_its_bandwidth_holds_and_limits_it(chart: ChartCluster, bandwidth, kns):
    veth = template("veth", {"kind": "veth", "interfaceName": "net1"})
    [request] = veth["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["capacity"] = {"requests": {"bandwidth": ASKED}}
    chart.api.apply(veth, kns)
    for name in ("b1", "b2"):
        chart.api.apply(pod(name, ["veth"]), kns)
    for name in ("b1", "b2"):
        chart.api.wait_running(kns, name)
        assert "net1" in via_exec(chart.kubectl, kns, name, "app")
    placed = {chart.api.pod(kns, name)["spec"]["nodeName"] for name in ("b1", "b2")}
    assert placed == set(chart.node_names), "150M + 150M fit no node of 200M"
    for node in chart.node_names:  # the host end of its pod's veth, and the ifb behind it
        assert _limits(chart, node) == [150_000_000, 150_000_000], node

    chart.api.apply(pod("b3", ["veth"]), kns)

    def unschedulable() -> dict | None:
        cond = chart.api.condition(chart.api.pod(kns, "b3"), "PodScheduled")
        return cond if cond and cond["status"] == "False" else None

    cond = wait_for("b3 to be found unschedulable", unschedulable, 60)
    assert "cannot allocate all claims" in cond["message"], cond

    freed = chart.api.pod(kns, "b1")["spec"]["nodeName"]
    chart.api.delete_and_wait(kns, "b1")
    chart.api.wait_running(kns, "b3")
    assert chart.api.pod(kns, "b3")["spec"]["nodeName"] == freed
    # b1's links go a moment after its unprepare (the link reaper's delay).
    wait_for(
        "b3's limits alone on its node",
        lambda: _limits(chart, freed) == [150_000_000, 150_000_000],
        30,
        log=lambda: str(_limits(chart, freed)),
    )
