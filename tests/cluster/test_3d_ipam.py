"""Addresses from one cluster-wide pool on two real nodes (the chart's ipam.pools): a
Deployment of 20 macvlan pods gets 20 distinct addresses on both nodes; a pod on one node
pings a pod on the other over the claimed interfaces; a driver killed (SIGKILL) while
the Deployment grows loses no address and hands none out twice; scaled down and up
again, the pods still hold distinct addresses, taken from those released."""

from __future__ import annotations

import ipaddress
import os
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.helmrelease import operator_values
from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

from .chart import ChartCluster
from .test_5_recovery import driver_pid, restarts

POOL = {"name": "pods", "ranges": ["203.0.113.0/26"], "gateway": "203.0.113.1", "blockSize": 16}
APP = "pooled"


@pytest.fixture
def pool(chart: ChartCluster) -> Iterator[None]:
    with chart.installed(operator_values(chart.image) | {"ipam": {"pools": [POOL]}}):
        yield


def _deployment(replicas: int) -> dict[str, Any]:
    spec = pod("x", [APP])["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {"metadata": {"labels": {"app": APP}}, "spec": spec},
        },
    }


def _running(chart: ChartCluster, kns: str, replicas: int) -> list[dict[str, Any]] | None:
    """The Deployment's pods once exactly `replicas` run and no other is left."""
    pods = chart.api.pods(kns, f"app={APP}")
    ok = len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok and not any(p["metadata"].get("deletionTimestamp") for p in pods) else None


def _addresses(chart: ChartCluster, kns: str) -> dict[str, str]:
    """address -> claim, of every claim of the namespace reserved for a pod that exists (a
    claim whose pod went keeps its last status until it is deleted)."""
    out: dict[str, str] = {}
    pods = {p["metadata"]["uid"] for p in chart.api.pods(kns, f"app={APP}")}
    for claim in chart.api.claims(kns):
        held = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
        if claim["metadata"].get("deletionTimestamp") or not held & pods:
            continue
        for device in (claim.get("status") or {}).get("devices") or []:
            for cidr in (device.get("networkData") or {}).get("ips") or []:
                assert cidr not in out, f"{cidr} of {claim['metadata']['name']} is {out[cidr]}'s"
                out[cidr] = claim["metadata"]["name"]
    return out


def _scale(chart: ChartCluster, kns: str, replicas: int) -> dict[str, str]:
    chart.api.apply(_deployment(replicas), kns)
    pods = wait_for(f"{replicas} {APP} pods running", lambda: _running(chart, kns, replicas), 240)
    names = {c["metadata"]["name"] for c in chart.api.claims(kns)}
    for p in pods:  # every pod's claim reports its address
        wait_for(
            f"{p['metadata']['name']}'s address",
            lambda p=p: (
                len(
                    [
                        a
                        for a, c in _addresses(chart, kns).items()
                        if c.startswith(p["metadata"]["name"])
                    ]
                )
                == 1
            ),
            30,
        )
    got = _addresses(chart, kns)
    assert set(got.values()) <= names
    return got


def test_one_pool_gives_pods_on_both_nodes_distinct_addresses(chart: ChartCluster, pool, kns):
    netdev = {
        "kind": "macvlan",
        "parent": "eth0",
        "interfaceName": "net1",
        "ipam": {"pool": "pods"},
    }
    chart.api.apply(template(APP, netdev), kns)
    got = _scale(chart, kns, 20)
    assert len(got) == 20
    network = ipaddress.ip_network(POOL["ranges"][0])
    assert all(ipaddress.ip_interface(a).ip in network for a in got)
    assert "203.0.113.1/26" not in got  # the gateway
    pods = _running(chart, kns, 20) or []
    placed = Counter(p["spec"]["nodeName"] for p in pods)
    assert set(placed) == set(chart.node_names), placed

    # A pod on one node reaches a pod on the other over their pool addresses.
    by_node = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    src, dst = (by_node[n] for n in chart.node_names)
    [dst_address] = [a for a, c in got.items() if c.startswith(dst)]
    res = chart.kubectl(
        "exec", "-n", kns, src, "-c", "app", "--",
        "ping", "-c", "1", "-W", "5", "-I", "net1", dst_address.split("/")[0],
        check=False,
    )  # fmt: skip
    assert res.returncode == 0 and "1 packets received" in res.stdout, (res.stdout, res.stderr)

    # A driver killed while the Deployment grows: no address lost, none given twice.
    victim = chart.node_names[0]
    before = restarts(chart, victim)
    chart.api.apply(_deployment(30), kns)
    os.kill(driver_pid(chart, victim), signal.SIGKILL)
    wait_for("the killed driver restarted", lambda: restarts(chart, victim) > before, 60)
    assert len(_scale(chart, kns, 30)) == 30

    # Down and up again: the pods left keep theirs, the new ones get distinct ones.
    kept = _scale(chart, kns, 10)
    assert len(kept) == 10
    again = _scale(chart, kns, 20)
    assert len(again) == 20 and set(kept.items()) <= set(again.items())
