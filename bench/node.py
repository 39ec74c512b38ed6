"""Figure 7: the real node of tests/node (kubelet, containerd, runc): pod start with and
without a network claim, and prepare/unprepare as the kubelet itself measures them.

Pods start one after another (each alone on the node), alternating with and without
a claim so that drift hits both alike; both have the init container the examples use
(the one that references the claim), so the difference is the claim's own cost.
create -> Running is timed by polling the API (~10 ms resolution). The kubelet's
histogram `dra_grpc_operations_duration_seconds` is read from its /metrics before and
after; the figures come from the difference.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from bench.env import QUIET
from bench.stats import summary
from tests.node.binaries import default_binaries, missing
from tests.node.cluster import NodeCluster
from tests.node.driver import install_driver_objects, start_driver
from tests.node.localnode import LocalNode, NodeUnavailable
from tests.node.scenario import plain_pod, pod, template
from tests.support.driverproc import DRIVER

METRIC = "dra_grpc_operations_duration_seconds"
_SAMPLE = re.compile(r"^(\w+)\{(.*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_histograms(text: str, metric: str = METRIC) -> dict[str, dict[str, Any]]:
    """method -> {"buckets": {le: cumulative count}, "sum": s, "count": n} for `metric`
    samples of our driver, summed over gRPC status codes."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or not m.group(1).startswith(metric):
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        if labels.get("driver_name") != DRIVER:
            continue
        method = labels.get("method_name", "").rsplit("/", 1)[-1]
        h = out.setdefault(method, {"buckets": {}, "sum": 0.0, "count": 0.0})
        value = float(m.group(3))
        suffix = m.group(1)[len(metric) :]
        if suffix == "_bucket":
            le = float(labels["le"])
            h["buckets"][le] = h["buckets"].get(le, 0.0) + value
        elif suffix == "_sum":
            h["sum"] += value
        elif suffix == "_count":
            h["count"] += value
    return out


def histogram_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Mean and bucket-bounded quantiles of the observations between two scrapes."""
    count = after["count"] - before.get("count", 0)
    if count <= 0:
        return {"n": 0}
    total = after["sum"] - before.get("sum", 0.0)
    buckets = sorted(
        (le, n - before.get("buckets", {}).get(le, 0.0)) for le, n in after["buckets"].items()
    )

    def bound(q: float) -> float:
        """Upper bound of the bucket holding the q-quantile (what buckets can tell)."""
        for le, cumulative in buckets:
            if cumulative >= q * count:
                return le
        return float("inf")

    return {
        "n": int(count),
        "mean_ms": total / count * 1e3,
        "p50_at_most_ms": bound(0.5) * 1e3,
        "p99_at_most_ms": bound(0.99) * 1e3,
        "smallest_bucket_ms": buckets[0][0] * 1e3 if buckets else None,
    }


def _time_to_running(cluster: NodeCluster, ns: str, obj: dict[str, Any]) -> float:
    name = obj["metadata"]["name"]
    start = time.perf_counter()
    cluster.apply(obj, ns)
    deadline = start + 120
    while time.perf_counter() < deadline:
        if (cluster.pod(ns, name).get("status") or {}).get("phase") == "Running":
            return time.perf_counter() - start
        time.sleep(0.005)
    raise TimeoutError(
        f"pod {ns}/{name} not Running after 120 s:\n{cluster.describe_pod(ns, name)}"
    )


def _time_to_gone(cluster: NodeCluster, ns: str, name: str) -> float:
    start = time.perf_counter()
    cluster.delete_and_wait(ns, name, timeout=120)
    return time.perf_counter() - start


def node_figures(pods: int) -> dict[str, Any]:
    """Start-up latency with and without a claim, and the kubelet's DRA histogram."""
    if problems := missing(default_binaries()):
        return {"skipped": "the local node cannot start here: " + "; ".join(problems)}
    name = f"dratest-node-{uuid.uuid4().hex[:6]}"
    node = LocalNode(name, f"/tmp/{name}")
    try:
        node.start()
    except NodeUnavailable as e:
        return {"skipped": f"the local node cannot start here: {e}"}
    try:
        install_driver_objects(node)
        start_driver(node, args=QUIET)
        cluster = NodeCluster(node)
        ns = "bench"
        cluster.create_namespace(ns)
        cluster.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), ns)
        assert node.kubelet is not None
        # One warm-up pair: the first pod pays for unpacking the image.
        for warm in (plain_pod("warm0"), pod("warm1", ["veth"])):
            _time_to_running(cluster, ns, warm)
            _time_to_gone(cluster, ns, warm["metadata"]["name"])
        before = parse_histograms(node.kubelet.metrics())
        plain, claimed, gone_plain, gone_claimed = [], [], [], []
        for i in range(pods):
            plain.append(_time_to_running(cluster, ns, plain_pod(f"plain{i}")))
            gone_plain.append(_time_to_gone(cluster, ns, f"plain{i}"))
            claimed.append(_time_to_running(cluster, ns, pod(f"claim{i}", ["veth"])))
            gone_claimed.append(_time_to_gone(cluster, ns, f"claim{i}"))
        time.sleep(1)  # the last unprepare lands in the histogram
        after = parse_histograms(node.kubelet.metrics())
        kubelet = {
            method: histogram_delta(before.get(method, {}), after[method])
            for method in ("NodePrepareResources", "NodeUnprepareResources")
            if method in after
        }
        return {
            "pods": pods,
            "start_plain": summary(plain),
            "start_with_claim": summary(claimed),
            "delete_plain": summary(gone_plain),
            "delete_with_claim": summary(gone_claimed),
            "kubelet": kubelet,
            "node_start_s": round(node.timings["start_total"], 2),
        }
    finally:
        node.stop()
