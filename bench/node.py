"""Figure 7: a real local node (localcluster: kubelet, containerd, runc): pod start with and
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
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.env import QUIET
from bench.stats import summary
from localcluster.binaries import default_binaries, missing
from localcluster.driver import install_driver_objects, start_driver
from localcluster.driverproc import DRIVER
from localcluster.node import LocalNode, NodeUnavailable
from tests.node.cluster import NodeCluster
from tests.node.scenario import plain_pod, pod, template

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


_KUBELET_CALL = re.compile(
    r'^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+)\s.*"(Calling|Done calling) '
    r'Node(Prepare|Unprepare)Resources? rpc".*?driverName="([^"]+)"'
)
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DRIVER_METRICS_PORT = 9479


def kubelet_call_durations(log_text: str) -> dict[str, list[float]]:
    """Seconds of each of our driver's prepare and unprepare calls, from the kubelet's
    own log (dra_plugin.go at verbosity 4, localcluster/nodeconfig.py): "Calling ... rpc" to
    "Done calling ... rpc" of the same claim (the first claim UID after the driver name,
    in the request and in the response)."""
    started: dict[tuple[str, str], float] = {}
    out: dict[str, list[float]] = {"NodePrepareResources": [], "NodeUnprepareResources": []}
    for line in log_text.splitlines():
        m = _KUBELET_CALL.match(line)
        uid = _UID.search(line, m.end()) if m and m.group(6) == DRIVER else None
        if m is None or uid is None:
            continue
        at = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        key = (f"Node{m.group(5)}Resources", uid.group())
        if m.group(4) == "Calling":
            started[key] = at
        elif key in started:
            out[key[0]].append((at - started.pop(key)) % 86400)  # across midnight too
    return out


def driver_phases(node: LocalNode) -> dict[str, dict[str, float]]:
    """method -> phase -> seconds, and method -> "calls" -> count, from the driver's
    /metrics (served in the node's network namespace)."""
    script = (
        "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
        f"'http://127.0.0.1:{DRIVER_METRICS_PORT}/metrics', timeout=10).read().decode())"
    )
    text = subprocess.run(
        [*node.lay.enter(), sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        if m.group(1) == "dra_driver_kubelet_call_phase_seconds_total":
            out.setdefault(labels["method"], {})[labels["phase"]] = float(m.group(3))
        elif m.group(1) == "dra_driver_kubelet_call_seconds_count":
            out.setdefault(labels["method"], {})["calls"] = float(m.group(3))
        elif m.group(1) == "dra_driver_kubelet_call_seconds_sum":
            out.setdefault(labels["method"], {})["handler"] = float(m.group(3))
        elif m.group(1) == "dra_driver_injection_mode" and float(m.group(3)) == 1:
            out["injection"] = {labels["mode"]: 1.0}
        elif m.group(1) == "dra_driver_prepared_ahead_total":
            out.setdefault("ahead", {})[labels["result"]] = float(m.group(3))
    return out


def phases_delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """Mean milliseconds per call of each phase between two scrapes."""
    out: dict[str, Any] = {}
    for method, now in after.items():
        if method in ("injection", "ahead"):
            continue
        was = before.get(method, {})
        calls = now.get("calls", 0) - was.get("calls", 0)
        if calls <= 0:
            continue
        out[method] = {
            name: round((value - was.get(name, 0.0)) / calls * 1e3, 3)
            for name, value in sorted(now.items())
            if name != "calls"
        } | {"calls": int(calls)}
    return out


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


class NodeSkipped(Exception):
    """The local node cannot start on this machine (the reason is the message)."""


@contextmanager
def running_node() -> Iterator[LocalNode]:
    """A started local node with the driver's objects installed, stopped afterwards;
    NodeSkipped when it cannot start here."""
    if problems := missing(default_binaries()):
        raise NodeSkipped("the local node cannot start here: " + "; ".join(problems))
    name = f"dratest-node-{uuid.uuid4().hex[:6]}"
    node = LocalNode(name, f"/tmp/{name}")
    try:
        node.start()
    except NodeUnavailable as e:
        raise NodeSkipped(f"the local node cannot start here: {e}") from None
    try:
        install_driver_objects(node)
        yield node
    finally:
        node.stop()


def node_figures(pods: int) -> dict[str, Any]:
    """Start-up latency with and without a claim, and the kubelet's DRA histogram."""
    try:
        with running_node() as node:
            return _figures(node, pods)
    except NodeSkipped as e:
        return {"skipped": str(e)}


def _figures(node: LocalNode, pods: int) -> dict[str, Any]:
    start_driver(node, args=(*QUIET, "--metrics-addr", f"127.0.0.1:{DRIVER_METRICS_PORT}"))
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
    phases_before = driver_phases(node)
    log_mark = (node.lay.logs / "kubelet.log").stat().st_size
    plain, claimed, gone_plain, gone_claimed = [], [], [], []
    for i in range(pods):
        plain.append(_time_to_running(cluster, ns, plain_pod(f"plain{i}")))
        gone_plain.append(_time_to_gone(cluster, ns, f"plain{i}"))
        claimed.append(_time_to_running(cluster, ns, pod(f"claim{i}", ["veth"])))
        gone_claimed.append(_time_to_gone(cluster, ns, f"claim{i}"))
    time.sleep(1)  # the last unprepare lands in the histogram
    after = parse_histograms(node.kubelet.metrics())
    phases_after = driver_phases(node)
    phases = phases_delta(phases_before, phases_after)
    with (node.lay.logs / "kubelet.log").open(errors="replace") as f:
        f.seek(log_mark)
        per_call = kubelet_call_durations(f.read())
    kubelet = {
        method: histogram_delta(before.get(method, {}), after[method])
        for method in ("NodePrepareResources", "NodeUnprepareResources")
        if method in after
    }
    for method, seconds in per_call.items():
        if method in kubelet and seconds:
            kubelet[method]["from_log"] = summary(seconds)
    return {
        "pods": pods,
        "driver_phases_ms": phases,
        "injection": next(iter(phases_after.get("injection", {"?": 1.0}))),
        "start_plain": summary(plain),
        "start_with_claim": summary(claimed),
        "delete_plain": summary(gone_plain),
        "delete_with_claim": summary(gone_claimed),
        "kubelet": kubelet,
        "node_start_s": round(node.timings["start_total"], 2),
    }
