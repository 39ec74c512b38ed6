"""The cluster network itself: each node's pods get addresses from that node's own
range, and a pod on one node reaches a pod on the other over it."""

from __future__ import annotations

import ipaddress

from tests.node.scenario import pod

from .chart import ChartCluster, pinned


def test_pods_on_different_nodes_reach_each_other(chart: ChartCluster, kns: str):
    for node in chart.node_names:
        chart.api.apply(pinned(pod(f"p-{node}", []), node), kns)
    ips = {}
    for node in chart.node_names:
        running = chart.api.wait_running(kns, f"p-{node}")
        ip = ipaddress.ip_address(running["status"]["podIP"])
        assert ip in ipaddress.ip_network(chart.node(node).lay.pod_subnet), (node, ip)
        ips[node] = str(ip)
    a, b = chart.node_names
    for src, dst in ((a, b), (b, a)):
        res = chart.kubectl(
            "exec", "-n", kns, f"p-{src}", "--", "ping", "-c", "1", "-W", "5", ips[dst], check=False
        )
        assert res.returncode == 0, (src, dst, res.stdout, res.stderr)
        assert "1 packets received" in res.stdout, res.stdout
