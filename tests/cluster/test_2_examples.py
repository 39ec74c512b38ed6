"""deploy/deployment.yaml and deploy/multi-nic-deployment.yaml, as a user applies them
(adapted to this kernel where it lacks a link kind, localcluster/examples.py), each
Deployment once per node: every pod of a virtual-network example Running, on both
nodes, its interfaces checked inside the pod by the checker users run
(deploy/network-check.py) and their MACs by exec."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.chartdemo import kubectl_command
from localcluster.examples import Examples, write_examples
from localcluster.manifests import DEPLOY
from localcluster.podnet import via_exec

from .chart import ChartCluster

HARDWARE = {"rdma-devices", "roce-devices", "network-devices"}


def network_check(
    chart: ChartCluster, mode: str, files: list[Path]
) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        str(DEPLOY / "network-check.py"),
        "--kubectl",
        kubectl_command(chart.local),
    ]
    return subprocess.run(
        [*argv, "--timeout", "180", mode, *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def examples(chart: ChartCluster, tmp_path: Path) -> Iterator[Examples]:
    ex = write_examples(tmp_path, nodes=len(chart.node_names))
    try:
        yield ex
    finally:
        for path in ex.files:
            chart.kubectl(
                "delete", "--ignore-not-found", "--wait=true", "-f", str(path), check=False
            )
        chart.wait_nothing_held(120)


def _virtual(ex: Examples) -> dict[str, dict]:
    """The example Deployments whose claims are all virtual-network ones."""
    classes = {}
    for doc in ex.docs:
        if doc["kind"] == "ResourceClaimTemplate":
            reqs = doc["spec"]["spec"]["devices"]["requests"]
            classes[doc["metadata"]["name"]] = {r["exactly"]["deviceClassName"] for r in reqs}
    out = {}
    for dep in ex.deployments():
        claims = dep["spec"]["template"]["spec"].get("resourceClaims") or []
        used = set().union(
            *(classes.get(c.get("resourceClaimTemplateName"), set()) for c in claims)
        )
        if used and not used & HARDWARE:
            out[dep["metadata"]["name"]] = dep
    return out


def test_the_examples_run_on_both_nodes_with_their_interfaces(
    chart: ChartCluster, examples: Examples
):
    for path in examples.files:
        chart.api.apply(path)
    waited = network_check(chart, "wait", examples.files)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    checked = network_check(chart, "check", examples.files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    virtual = _virtual(examples)
    assert {"dummy-net1", "macvlan-data0", "multi-nic"} <= set(virtual), sorted(virtual)
    for name, dep in virtual.items():
        labels = dep["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        pods = chart.api.pods("default", selector)
        nodes = sorted(p["spec"]["nodeName"] for p in pods if p["status"].get("phase") == "Running")
        assert nodes == sorted(chart.node_names), (name, nodes)
        container = dep["spec"]["template"]["spec"]["containers"][0]["name"]
        for p in pods:
            seen = via_exec(chart.kubectl, "default", p["metadata"]["name"], container)
            ours = {n: i for n, i in seen.items() if n not in ("lo", "eth0")}
            assert ours, (name, seen)
            for iface in ours.values():
                first = int(iface.mac.split(":")[0], 16)
                assert first & 1 == 0 and iface.mac != "00:00:00:00:00:00", iface
    oks = [line for line in checked.stdout.splitlines() if line.startswith("ok ")]
    assert len(oks) >= 2 * len(virtual), checked.stdout
