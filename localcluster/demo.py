"""`make demo`: the driver on a real cluster on this machine, no Docker.

    python -m localcluster demo up   [--workdir /tmp/dra-demo] [--nodes 2]   (make demo)
    python -m localcluster demo down [--workdir /tmp/dra-demo]               (make demo-down)

`up` builds the driver image (`make image`, cached), starts a local cluster of
`--nodes` nodes (cluster.py) and installs the Helm chart, whose DaemonSet runs the
driver on every node (chartdemo.py). Where the image cannot be built, it says why and
falls back to one node with the driver as a host process, as its DaemonSet would run
it (node.py, driver.py). Either way it applies the example workloads of deploy/
(adapted where the kernel lacks a kind, see examples.py), waits for them with
deploy/network-check.py, prints per pod the interfaces it got and its claims' status
(report.py), and keeps everything up until Ctrl-C, SIGTERM or `down`. `down` stops a
running demo from another terminal, or removes what a killed one left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import chartdemo
from .chartdemo import say
from .cluster import read_cluster_state, sweep_cluster
from .driver import install_driver_objects, start_driver
from .driverimage import ImageUnavailable
from .layout import NodeLayout, owner_alive, read_state
from .manifests import DEPLOY
from .node import LocalNode, NodeUnavailable
from .sweep import sweep

NODE_NAME = "dra-demo"
DEFAULT_WORKDIR = Path("/tmp/dra-demo")
NETWORK_CHECK = DEPLOY / "network-check.py"


def kubectl_command(node: LocalNode) -> str:
    """kubectl for the host, against the node (through the forwarder)."""
    return (
        f"{node.bins.kubectl()} --kubeconfig {node.lay.kubeconfig} "
        f"--cache-dir {node.lay.workdir / 'kubectl-cache'}"
    )


def network_check(node: LocalNode, mode: str, files: list[Path], timeout: int = 180) -> bool:
    """deploy/network-check.py against the lone node."""
    return network_check_with(kubectl_command(node), mode, files, timeout)


def injection_mode(log: str) -> str:
    """The driver's injection mode and why, from its start-up log line."""
    for line in log.splitlines():
        if 'msg="injection mode"' in line:
            mode = re.search(r" mode=(\S+)", line)
            reason = re.search(r' reason="([^"]*)"', line)
            return (
                f"driver injection mode {mode[1] if mode else '?'} "
                f"({reason[1] if reason else 'no reason logged'})"
            )
    return "driver injection mode not logged"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _running(workdir: Path) -> dict[str, object] | None:
    """The state of a demo whose owner still runs in `workdir`, or None."""
    for state in (read_cluster_state(workdir), read_state(workdir)):
        if state is not None and owner_alive(state):
            return state
    return None


def up(workdir: Path, nodes: int = 2) -> int:
    """Start the demo in `workdir` and keep it up until interrupted; the exit status."""
    # Ctrl-C and a closed terminal stop the demo, even where SIGINT was ignored when it
    # started (a shell's background job); SIGTERM (make demo-down) is the cluster's own.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    if (state := _running(workdir)) is not None:
        say(f"demo: a demo is running already (pid {state['owner_pid']}): make demo-down")
        return 1
    try:
        return chartdemo.up(workdir, nodes, network_check_with)
    except ImageUnavailable as e:
        say(f"demo: the driver image cannot be built here, so no DaemonSet: {e}")
        say("demo: falling back to one node with the driver as a host process")
        why = str(e).strip().splitlines()[-1] if str(e).strip() else "make image failed"
    except NodeUnavailable as e:
        say(f"demo: cannot start a cluster here: {e}")
        return 2
    return host_process_up(workdir, fallback=why)


def network_check_with(kubectl: str, mode: str, files: list[Path], timeout: int = 180) -> bool:
    """deploy/network-check.py, the checker `make network-check` runs, with `kubectl`."""
    argv = [sys.executable, str(NETWORK_CHECK), "--kubectl", kubectl]
    argv += ["--timeout", str(timeout), mode, *map(str, files)]
    return subprocess.run(argv, check=False).returncode == 0


def host_process_up(workdir: Path, fallback: str = "") -> int:
    """The fallback: one node, the driver as a host process; until interrupted.
    `fallback`: why the two-node chart demo could not run, repeated at the end."""
    t_start = time.monotonic()
    node = LocalNode(NODE_NAME, workdir)
    try:
        say(f"demo: starting a node in {workdir} (control plane, containerd, kubelet) ...")
        try:
            node.start()
        except NodeUnavailable as e:
            say(f"demo: cannot start a node here: {e}")
            return 2
        t = dict(node.timings)
        say(
            f"demo: node {node.name} Ready after {t['start_total']:.1f} s (control plane "
            f"{t['control_plane']:.1f} s, images {t['images']:.1f} s, "
            f"kubelet to Ready {t['node_ready']:.1f} s)"
        )
        install_driver_objects(node)
        t0 = time.monotonic()
        driver = start_driver(node)
        t_driver = time.monotonic() - t0
        say(
            f"demo: driver registered with the kubelet after {t_driver:.1f} s "
            f"(host process, pod dra-system/{driver.pod_name}, log {driver.log_path})"
        )
        say(f"demo: {injection_mode(driver.log())}")
        say("demo: the cni examples need the chart's image (its CNI plugins): left out")
        ok, t_examples = chartdemo.run_examples(
            node, workdir, 1, lambda files: network_check(node, "wait", files), with_cni=False
        )
        total = time.monotonic() - t_start
        say(
            f"demo: bring-up {total:.1f} s: node {t['start_total']:.1f} s, driver "
            f"{t_driver:.1f} s, example pods {t_examples:.1f} s"
            + ("" if ok else " (NOT every example came up: see above)")
        )
        kubectl = kubectl_command(node)
        say(f"""
The cluster stays up until Ctrl-C here, or `make demo-down` in another terminal.
  kubectl:        {kubectl} get pods -A -o wide
  or:             export KUBECONFIG={node.lay.kubeconfig}
  checker:        make network-check CLUSTER=local
  driver log:     {driver.log_path}
  node logs:      {node.lay.logs}/  and {node.lay.controlplane}/*.log""")
        if fallback:
            say(
                "demo: NOTE: this is the fallback, one node with the driver as a host "
                f"process, not the two-node demo of the image and the chart: {fallback}"
            )
        while True:
            signal.pause()
    except KeyboardInterrupt:
        say("\ndemo: stopping ...")
        return 0
    finally:
        node.stop()
        if "teardown" in node.timings:
            say(f"demo: node stopped and removed in {node.timings['teardown']:.1f} s")


def down(workdir: Path, timeout: float = 120) -> int:
    """Stop the demo of `workdir` (or remove what a killed one left); the exit status."""
    cluster = read_cluster_state(workdir)
    state = cluster or read_state(workdir)
    if state is None:
        say(f"demo: no demo in {workdir}")
        return 0
    if owner_alive(state):
        pid = int(state["owner_pid"])
        say(f"demo: stopping the demo (pid {pid}) ...")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while owner_alive(state) and time.monotonic() < deadline:
            time.sleep(0.2)
        if owner_alive(state):
            say(f"demo: pid {pid} still runs after {timeout:.0f} s")
            return 1
    if cluster is not None:
        if sweep_cluster(workdir):  # the demo was killed, or did not finish its cleanup
            say(f"demo: removed what was left in {workdir}")
    elif workdir.exists():  # the demo was killed, or did not finish its cleanup
        sweep(NodeLayout(str(state["name"]), workdir))
        say(f"demo: removed what was left in {workdir}")
    say("demo: stopped")
    return 0


def main(command: str, workdir: Path = DEFAULT_WORKDIR, nodes: int = 2) -> int:
    """`up` or `down` the demo in `workdir` (as root); the exit status."""
    if os.geteuid() != 0:
        say("demo: needs root (namespaces, cgroups, mounts): run it as root")
        return 2
    if command == "up":
        return up(workdir, nodes)
    if command == "down":
        return down(workdir)
    raise ValueError(f"unknown demo command {command!r} (up, down)")
