"""Figure 8: the driver as a kubelet meets it on a real node (localcluster: kubelet,
containerd, runc), three runs, each figure with its spread across them:

* start-up: exec to the registration socket answering GetInfo, polled from outside every
  0.1 s as a plugin watcher would find it (median of three starts per run), not the 2 ms
  poll of the `startup` section;
* resident memory (VmRSS) idle, 2 s after the kubelet registered it, and after a block
  of pods with a veth claim each was started and deleted;
* NodeUnprepareResources as the kubelet measures it (its histogram's mean) while that
  block is deleted at once, and NodePrepareResources while it starts.

Targets (issue 37): start-up <= 0.3 s, RSS <= 45 MB, unprepare mean at most the Go
original's in the same run. With BENCH_PEER_DRIVER naming its built binary (bench/peer.py)
each run measures it too, on the same node right after ours (before ours in every other
run), and the bar is its figure of that run; without, the bar is 9.6 ms, the Go original's
when it was last measured beside ours.

The driver runs from this checkout with its modules compiled first, as the image ships
them (`pip install --compile`).
"""

from __future__ import annotations

import compileall
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.env import QUIET
from bench.node import (
    DRIVER_METRICS_PORT,
    NodeSkipped,
    driver_phases,
    histogram_delta,
    parse_histograms,
    phases_delta,
    running_node,
)
from bench.peer import PeerDriver, clear_slices, peer_binary
from localcluster.binaries import REPO_ROOT
from localcluster.driver import HostDriver, start_driver
from localcluster.driverproc import until_answering
from localcluster.node import LocalNode
from tests.node.cluster import NodeCluster
from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

POLL = 0.1  # seconds between GetInfo attempts from outside
STARTS = 3  # starts per run; their median is the run's figure
IDLE = 2.0  # seconds after registration before the idle RSS is read
TARGETS = {"startup_s": 0.3, "rss_mb": 45.0, "unprepare_ms": 9.6}


def lightness(runs: int, pods: int) -> dict[str, Any]:
    """`runs` runs of the figures above, with a block of `pods` pods each."""
    compile_bytecode()
    binary = peer_binary()
    try:
        with running_node() as node:
            driver = start_driver(node, args=_args())
            cluster = NodeCluster(node)
            cluster.create_namespace("light")
            cluster.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), "light")
            _block(node, cluster, driver.log, 1, "warm")  # the image unpacked once
            peer = PeerDriver(node, binary, driver) if binary else None
            try:
                if peer is not None:
                    peer.prepare()
                out = [_run(node, cluster, driver, peer, pods, i) for i in range(runs)]
            finally:
                if peer is not None:
                    peer.cleanup()
    except NodeSkipped as e:
        return {"skipped": str(e)}
    return {"runs": out, "pods": pods, "targets": TARGETS, "peer": str(binary or "")}


def compile_bytecode() -> None:
    """Compile the driver's modules as the image does (`pip install --compile`): a
    checkout run with PYTHONDONTWRITEBYTECODE would compile them at every start."""
    for package in ("dradriver", "handlers"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def _args() -> tuple[str, ...]:
    return (*QUIET, "--metrics-addr", f"127.0.0.1:{DRIVER_METRICS_PORT}")


def _run(
    node: LocalNode,
    cluster: NodeCluster,
    driver: HostDriver,
    peer: PeerDriver | None,
    pods: int,
    i: int,
) -> dict[str, Any]:
    """Ours, then the peer (if any); in every other run the peer first."""
    if peer is None:
        return _ours(node, cluster, driver, pods, i)
    if i % 2:
        theirs = _peer(node, cluster, peer, pods, i)
        clear_slices(node)
        ours = _ours(node, cluster, driver, pods, i)
    else:
        ours = _ours(node, cluster, driver, pods, i)
        clear_slices(node)
        theirs = _peer(node, cluster, peer, pods, i)
    clear_slices(node)
    return {**ours, "peer": theirs}


def _ours(
    node: LocalNode, cluster: NodeCluster, driver: HostDriver, pods: int, i: int
) -> dict[str, Any]:
    starts = [_start(driver) for _ in range(STARTS)]
    proc = driver.process.proc
    assert proc is not None
    figures = _figures(node, cluster, starts, proc.pid, driver.log, pods, f"r{i}", phases=True)
    driver.stop()  # stopped between runs, as the next run starts it again
    return figures


def _peer(
    node: LocalNode, cluster: NodeCluster, peer: PeerDriver, pods: int, i: int
) -> dict[str, Any]:
    """The same figures of the peer: each start is a new process, so its RSS and its
    block come after its last start."""
    starts = []
    for _ in range(STARTS):
        peer.stop()
        starts.append(peer.start(POLL))
    figures = _figures(node, cluster, starts, peer.pid, peer.log, pods, f"p{i}")
    peer.stop()
    return figures


def _figures(
    node: LocalNode,
    cluster: NodeCluster,
    starts: list[float],
    pid: int,
    log: Callable[[], str],
    pods: int,
    tag: str,
    *,
    phases: bool = False,
) -> dict[str, Any]:
    """A started driver's figures: its starts' median, its RSS idle, a block's calls, its
    RSS after the block."""
    time.sleep(IDLE)
    idle = _rss_mb(pid)
    calls = _block(node, cluster, log, pods, tag, phases=phases)
    time.sleep(IDLE)
    return {
        "startup_s": statistics.median(starts),
        "starts_s": starts,
        "rss_idle_mb": idle,
        "rss_after_block_mb": _rss_mb(pid),
        **calls,
    }


def _start(driver: HostDriver) -> float:
    """Stop the driver, exec it again: seconds until GetInfo answers, polled every POLL;
    then until the kubelet has registered it."""
    driver.stop()
    seen = driver.registrations()
    start = time.perf_counter()
    driver.start(wait=False)
    proc = driver.process
    took = until_answering(proc.reg_socket, proc.proc, driver.log, POLL, since=start)
    driver.wait_registered(seen + 1)
    return took


def _rss_mb(pid: int) -> float:
    """A process's resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _block(
    node: LocalNode,
    cluster: NodeCluster,
    log: Callable[[], str],
    pods: int,
    tag: str,
    *,
    phases: bool = False,
) -> dict[str, Any]:
    """Start `pods` pods with a veth claim at once, then delete them at once; the
    kubelet's prepare and unprepare means over each half (with `phases`, our driver's
    own unprepare phases too)."""
    assert node.kubelet is not None
    names = [f"{tag}-{n}" for n in range(pods)]
    before = parse_histograms(node.kubelet.metrics())
    start_phases = driver_phases(node) if phases else {}
    cluster.apply([pod(n, ["veth"]) for n in names], "light")
    for name in names:
        cluster.wait_running("light", name)
    middle = parse_histograms(node.kubelet.metrics())
    phases_before = driver_phases(node) if phases else {}
    for name in names:
        cluster.delete_pod("light", name)
    for name in names:
        path = f"/api/v1/namespaces/light/pods/{name}"
        wait_for(f"pod {name} to go", partial(_gone, cluster, path), 120, log=log)
    time.sleep(1)  # the last unprepare lands in the histogram
    after = parse_histograms(node.kubelet.metrics())
    end_phases = driver_phases(node) if phases else {}
    inside = phases_delta(phases_before, end_phases).get("NodeUnprepareResources", {})
    inside_prepare = phases_delta(start_phases, phases_before).get("NodePrepareResources", {})
    ahead = {
        result: int(n - start_phases.get("ahead", {}).get(result, 0))
        for result, n in phases_before.get("ahead", {}).items()
    }
    prepare = histogram_delta(
        before.get("NodePrepareResources", {}), middle["NodePrepareResources"]
    )
    unprepare = histogram_delta(
        middle.get("NodeUnprepareResources", {}), after["NodeUnprepareResources"]
    )
    return {
        "prepare_mean_ms": prepare["mean_ms"],
        "unprepare_mean_ms": unprepare["mean_ms"],
        "unprepare_phases_ms": inside,
        "prepare_phases_ms": inside_prepare,
        "prepared_ahead": {k: v for k, v in sorted(ahead.items()) if v},
    }


def _gone(cluster: NodeCluster, path: str) -> bool:
    return cluster.get(path, missing_ok=True) is None


def _spread(values: list[float], unit: str, digits: int) -> str:
    return f"{' / '.join(f'{v:.{digits}f}' for v in values)} {unit}"


def rows(r: dict[str, Any] | None) -> list[str]:
    """The table's rows: each figure's runs against its target, the peer's beside them."""
    if r is None:
        return []
    if "skipped" in r:
        return [f"| real node, start-up and memory | skipped: {r['skipped']} | | | |"]
    runs, t, n = r["runs"], r["targets"], len(r["runs"])
    theirs = [run["peer"] for run in runs if "peer" in run]

    def row(what: str, key: str, unit: str, digits: int, limit: float) -> str:
        values = [run[key] for run in runs]
        worst = max(values)
        return (
            f"| real node: {what}, {n} runs | {_spread(values, unit, digits)} | | | "
            f"<= {limit:g}: {'met' if worst <= limit else 'MISSED'} (worst {worst:.{digits}f}) |"
        )

    def peer(what: str, key: str, unit: str, digits: int) -> list[str]:
        if not theirs:
            return []
        values = _spread([x[key] for x in theirs], unit, digits)
        return [f"| real node, the Go original: {what}, same {n} runs | {values} | | | |"]

    unprepare = f"NodeUnprepareResources mean, {r['pods']} pods deleted at once"
    startup = "exec to GetInfo from outside (0.1 s poll, median of 3)"
    block = f"RSS after a block of {r['pods']} pods"
    return [
        row(startup, "startup_s", "s", 2, t["startup_s"]),
        *peer(startup, "startup_s", "s", 2),
        row("RSS idle", "rss_idle_mb", "MB", 1, t["rss_mb"]),
        *peer("RSS idle", "rss_idle_mb", "MB", 1),
        row(block, "rss_after_block_mb", "MB", 1, t["rss_mb"]),
        *peer(block, "rss_after_block_mb", "MB", 1),
        _against_peer(unprepare, runs) if theirs
        else row(unprepare, "unprepare_mean_ms", "ms", 2, t["unprepare_ms"]),
        *peer(unprepare, "unprepare_mean_ms", "ms", 2),
        f"| real node: NodePrepareResources mean, {r['pods']} pods started at once, "
        f"{n} runs | {_spread([x['prepare_mean_ms'] for x in runs], 'ms', 2)} | | | |",
        *peer(f"NodePrepareResources mean, {r['pods']} pods started at once",
              "prepare_mean_ms", "ms", 2),
        *(
            f"| real node: NodeUnprepareResources inside the driver, run {i + 1}, mean (ms) "
            f"by phase | {_phases(run['unprepare_phases_ms'])} | | | |"
            for i, run in enumerate(runs)
            if run.get("unprepare_phases_ms")
        ),
        *(
            f"| real node: NodePrepareResources inside the driver, run {i + 1}, mean (ms) "
            f"by phase; claims prepared ahead while the pods started | "
            f"{_phases(run['prepare_phases_ms'])}; "
            f"{', '.join(f'{k} {v}' for k, v in run['prepared_ahead'].items()) or 'none'} | | | |"
            for i, run in enumerate(runs)
            if run.get("prepare_phases_ms")
        ),
    ]  # fmt: skip


def _against_peer(what: str, runs: list[dict[str, Any]]) -> str:
    """Ours against the Go original's of the same run: met when at most it in every run."""
    ours = [run["unprepare_mean_ms"] for run in runs]
    theirs = [run["peer"]["unprepare_mean_ms"] for run in runs]
    good = all(a <= b for a, b in zip(ours, theirs, strict=True))
    return (
        f"| real node: {what}, {len(runs)} runs | {_spread(ours, 'ms', 2)} | | | "
        f"<= the Go original's of the same run: {'met' if good else 'MISSED'} "
        f"(ours / its: {', '.join(f'{a / b:.2f}' for a, b in zip(ours, theirs, strict=True))}) |"
    )


def _phases(phases: dict[str, float]) -> str:
    parts = ", ".join(
        f"{name} {ms:.2f}"
        for name, ms in sorted(phases.items(), key=lambda item: -item[1])
        if name not in ("handler", "calls") and ms >= 0.05
    )
    return f"{phases.get('handler', 0.0):.2f} ({parts})"
