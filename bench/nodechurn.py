"""Resident memory over pod churn on a real local node (localcluster: kubelet, containerd
with NRI, runc), the driver started as the node tier starts it (NRI mode, its defaults).

Pods with one veth claim each (a ResourceClaimTemplate) go through the node in waves of
`wave`: all created, waited Running, deleted, waited gone (and their generated claims
too). Between waves the node holds nothing, so the driver's RSS is read there, at 0 and
every `every` pods. At the end, what the driver left on the node (links, CDI specs,
records, pod network namespaces) is counted. Measured, never asserted.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.env import rss_kb
from bench.node import NodeSkipped, running_node
from localcluster.driver import start_driver
from localcluster.node import LocalNode
from localcluster.waiting import wait_for
from tests.node.cluster import NodeCluster
from tests.node.leftovers import driver_state
from tests.node.scenario import pod, template
from tests.support.runtime import links_in

NS = "churn"
TEMPLATE = "veth"
WAIT = 180.0  # per wave: create -> all Running, delete -> all gone
WARM = 200  # pods after which the curve is read for a slope (threads started on demand)


def _status_kb(pid: int, field: str) -> int:
    """One numeric field of /proc/<pid>/status (VmHWM, Threads, ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


def _sample(pid: int, pods: int, seconds: float) -> dict[str, Any]:
    return {
        "pods": pods,
        "rss_kb": rss_kb(pid),
        "hwm_kb": _status_kb(pid, "VmHWM"),
        "threads": _status_kb(pid, "Threads"),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "seconds": round(seconds, 1),
    }


def _wave(cluster: NodeCluster, names: list[str]) -> None:
    """Create the pods, wait until all run, delete them, wait until they and their
    claims are gone (one LIST per poll, not one GET per pod)."""
    for name in names:
        cluster.apply(pod(name, [TEMPLATE]), NS)

    def running() -> bool:
        phases = {
            p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in cluster.pods(NS)
        }
        return all(phases.get(n) == "Running" for n in names)

    def describe() -> str:
        return "\n".join(cluster.describe_pod(NS, n) for n in names)

    wait_for(f"pods {names[0]}.. to run", running, WAIT, interval=0.05, log=describe)
    for name in names:
        cluster.delete_pod(NS, name)
    wait_for(f"pods {names[0]}.. to go", lambda: not cluster.pods(NS), WAIT, interval=0.05)
    wait_for("their claims to go", lambda: not cluster.claims(NS), WAIT, interval=0.05)


def _pod_netns(node: LocalNode) -> int:
    """Network namespaces the runtime keeps mounted for pods on the node."""
    d = node.lay.private_dir("/run") / "netns"
    return len(list(d.iterdir())) if d.is_dir() else 0


def _leftovers(node: LocalNode, links_before: int) -> dict[str, Any]:
    """What the driver and the runtime left once every pod went: counts."""
    lay = node.lay

    def clean() -> bool:
        s = driver_state(lay)
        return not (s.records or s.specs or s.links or s.untagged)

    # An unprepare deletes its links after its answer: give the last ones time.
    with contextlib.suppress(AssertionError):
        wait_for("no link, spec or record of the driver", clean, 30)
    state = driver_state(lay)
    return {
        "records": len(state.records),
        "specs": len(state.specs),
        "tagged_links": len(state.links),
        "untagged_links": len(state.untagged),
        "node_links_added": len(links_in(lay.netns)) - links_before,
        "pod_netns": _pod_netns(node),
    }


def node_churn(pods: int, every: int = 100, wave: int = 10) -> dict[str, Any]:
    """`pods` pods with a veth claim each, `wave` at a time; the driver's RSS at 0 and
    every `every` pods, the node's leftovers at the end."""
    try:
        with running_node() as node:
            return _churn(node, pods, every, wave)
    except NodeSkipped as e:
        return {"skipped": str(e)}


def _churn(node: LocalNode, pods: int, every: int, wave: int) -> dict[str, Any]:
    driver = start_driver(node)  # the node tier's driver: its defaults, NRI mode
    proc = driver.process.proc
    assert proc is not None
    pid = proc.pid  # nsenter execs the interpreter: this is the daemon itself
    cluster = NodeCluster(node)
    cluster.create_namespace(NS)
    cluster.apply(template(TEMPLATE, {"kind": "veth", "interfaceName": "net1"}), NS)
    _wave(cluster, ["warm0"])  # the first pod pays for unpacking the image
    links_before = len(links_in(node.lay.netns))
    started = time.monotonic()
    samples = [_sample(pid, 0, 0.0)]
    done = 0
    while done < pods:
        size = min(wave, pods - done)
        _wave(cluster, [f"p{done + i}" for i in range(size)])
        done += size
        if done % every == 0 or done == pods:
            samples.append(_sample(pid, done, time.monotonic() - started))
            print(f"bench: node-churn {samples[-1]}", file=sys.stderr, flush=True)
    seconds = time.monotonic() - started
    return {
        "pods": pods,
        "wave": wave,
        "samples": samples,
        "growth_kb": samples[-1]["rss_kb"] - samples[0]["rss_kb"],
        "seconds": round(seconds, 1),
        "per_pod_ms": round(seconds / pods * 1e3, 1),
        "leftovers": _leftovers(node, links_before),
        "driver_exited": proc.poll(),
    }


def growth_per_100(samples: list[dict[str, Any]], warm: int) -> float | None:
    """kB per 100 pods from the sample at `warm` pods on: the least-squares slope (one
    sample's allocator noise, tens of kB, moves two end points more than a line)."""
    after = [s for s in samples if s["pods"] >= warm]
    if len(after) < 3:
        return None
    fit = statistics.linear_regression([s["pods"] for s in after], [s["rss_kb"] for s in after])
    return fit.slope * 100


def rows(figures: dict[str, Any] | None) -> list[str]:
    """The table's rows: the RSS curve, its slope after warm-up, the leftovers."""
    if not figures:
        return []
    if "skipped" in figures:
        return [f"| real node pod churn | skipped: {figures['skipped']} | | | |"]
    samples = figures["samples"]
    at = "/".join(str(s["pods"]) for s in samples)
    curve = " / ".join(f"{s['rss_kb'] / 1024:.2f}" for s in samples)
    warm = WARM if figures["pods"] >= 2 * WARM else 0
    slope = growth_per_100(samples, warm)
    left = ", ".join(f"{k} {v}" for k, v in figures["leftovers"].items())
    return [
        f"| real node pod churn ({figures['wave']} at a time), driver RSS at {at} pods (MB) "
        f"| {curve} ({figures['growth_kb']:+d} kB) | | | flat |",
        f"| real node pod churn: growth per 100 pods from pod {warm} (kB), per pod (ms) | "
        f"{'' if slope is None else f'{slope:+.0f}'}, {figures['per_pod_ms']:.0f} | | | |",
        f"| real node pod churn: left on the node after the last pod | {left} | | | none |",
    ]
