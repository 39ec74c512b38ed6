"""A real cluster of several nodes on this machine, without Docker: one control plane
and N nodes, each a kubelet and a containerd (NRI at its default socket) in network
and mount namespaces of its own, with its own pod range, all on one cluster network
(network.py).

    with LocalCluster("dra-mn", "/tmp/dra-mn", nodes=2) as cluster:
        cluster.kubectl("get", "nodes")

Node i is named `<name>-<i>` and keeps its files under `<workdir>/n<i>`; inside its
mount namespace the kubelet, CDI and NRI paths are a real node's defaults
(layout.ClusterNodeLayout), so one set of chart values serves every node. The control
plane runs in the cluster's own namespace; users on the host reach it through a
forwarder on the host's 127.0.0.1 (`cluster.kubeconfig`). Everything is removed on
`stop()`, which also runs on an exception in the `with` block, on Ctrl-C, on SIGTERM
and at interpreter exit; a later start in the same work directory removes what a
killed run left.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .binaries import Binaries, default_binaries, missing
from .controlplane import DRA_FEATURE_GATES, ControlPlane
from .images import Image
from .layout import GATEWAY_IP, MAX_NODES, owner_alive, read_owner_state, write_owner_state
from .network import create_cluster_netns, delete_netns
from .node import LocalNode, NodeUnavailable
from .procs import SigtermAsInterrupt
from .sweep import kill_netns_processes, sweep_abandoned

STATE = "cluster.json"


class LocalCluster:
    """One control plane and `nodes` nodes: see the module docstring. `nri_off`: the
    indexes (1-based) of nodes whose containerd has NRI disabled."""

    def __init__(
        self,
        name: str,
        workdir: Path | str,
        *,
        nodes: int = 2,
        nri_off: Sequence[int] = (),
        bins: Binaries | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        verbosity: int = 2,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"a local cluster has 1 to {MAX_NODES} nodes, not {nodes}")
        self.name = name
        self.workdir = Path(workdir)
        self.count = nodes
        self.nri_off = set(nri_off)
        self.bins = bins or default_binaries()
        self.feature_gates = {**DRA_FEATURE_GATES, **(feature_gates or {})}
        self.verbosity = verbosity
        self.cp: ControlPlane | None = None
        self.nodes: list[LocalNode] = []
        self.timings: dict[str, float] = {}
        self.on_stop: list[Callable[[], None]] = []  # run first, newest first
        self._started = False
        self._sigterm = SigtermAsInterrupt()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            self.print_logs()
        self.stop()

    # ------------------------------------------------------------------ names
    @property
    def netns(self) -> str:
        """The cluster network's namespace (where the control plane runs)."""
        return self.name

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig for the host (through the forwarder)."""
        return self.workdir / "kubeconfig"

    @property
    def control_plane(self) -> ControlPlane:
        """The control plane (only while the cluster runs)."""
        if self.cp is None:
            raise RuntimeError("cluster not started")
        return self.cp

    def node_name(self, index: int) -> str:
        """The Node name of node `index` (1-based)."""
        return f"{self.name}-{index}"

    def node(self, name: str) -> LocalNode:
        """The node called `name`."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name} in cluster {self.name}")

    # ------------------------------------------------------------------- life
    def start(self) -> None:
        """Bring up the network, the control plane and every node until Ready."""
        if problems := missing(self.bins):
            raise NodeUnavailable("; ".join(problems))
        if sweep_cluster(self.workdir):
            print(f"cluster: removed what a killed run left in {self.workdir}", file=sys.stderr)
        if self.workdir.exists() and any(self.workdir.iterdir()):
            raise FileExistsError(f"cluster work directory {self.workdir} is in use")
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_owner_state(self.workdir / STATE, self.name, self.workdir, nodes=self.count)
        self._started = True
        atexit.register(self.stop)
        self._sigterm.install()
        t0 = time.monotonic()
        try:
            create_cluster_netns(self.netns, self.count)
            self.cp = ControlPlane(
                self.workdir / "controlplane",
                node_netns=self.netns,
                advertise=GATEWAY_IP,
                feature_gates=self.feature_gates,
                bin_dir=self.bins.k8s,
                verbosity=self.verbosity,
                keep_workdir=False,
            )
            self._timed("control_plane", self.cp.start)
            shutil.copyfile(self.cp.admin_kubeconfig, self.kubeconfig)
            for index in range(1, self.count + 1):
                node = LocalNode(
                    self.node_name(index),
                    self.workdir / f"n{index}",
                    bins=self.bins,
                    feature_gates=self.feature_gates,
                    verbosity=self.verbosity,
                    control_plane=self.cp,
                    cluster_ns=self.netns,
                    index=index,
                )
                node.containerd.nri = index not in self.nri_off
                self.nodes.append(node)
                self._timed(f"node_{index}", node.start)
        except BaseException:
            self.print_logs()
            self.stop()
            raise
        self.timings["start_total"] = time.monotonic() - t0

    def _timed(self, what: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        fn()
        self.timings[what] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop every node, then the control plane; remove every trace. Idempotent."""
        if not self._started:
            return
        self._started = False
        t0 = time.monotonic()
        try:
            for fn in reversed(self.on_stop):
                fn()
            self.on_stop.clear()
            for node in reversed(self.nodes):
                node.stop()
            if self.cp is not None:
                self.cp.stop()
        finally:
            sweep_cluster(self.workdir, force=True)
            self._sigterm.restore()
            atexit.unregister(self.stop)
        self.timings["teardown"] = time.monotonic() - t0

    # -------------------------------------------------------------------- use
    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> Any:
        """kubectl as admin, through the host-side forwarder."""
        return self.control_plane.kubectl(*args, check=check, input=input)

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A raw API call as admin; returns the decoded JSON answer."""
        return self.control_plane.request(method, path, body, **kw)

    def apply(self, source: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        """Server-side apply of objects (a path, YAML text, objects)."""
        return self.control_plane.apply(source, namespace)

    def import_image(self, image: Image) -> None:
        """Import an image archive into every node's containerd."""
        for node in self.nodes:
            node.containerd.import_images([image])

    def logs(self, lines: int = 40) -> str:
        """The last lines of every component's log (control plane, then each node)."""
        parts = [self.cp.logs(lines)] if self.cp is not None else []
        parts += [f"===== node {n.name} =====\n{n.logs(lines)}" for n in self.nodes]
        return "\n".join(parts)

    def print_logs(self, lines: int = 40) -> None:
        """Print the log tails to stderr."""
        print(f"\n===== cluster {self.name} logs =====\n{self.logs(lines)}", file=sys.stderr)


def read_cluster_state(workdir: Path) -> dict[str, Any] | None:
    """What a cluster recorded in `workdir`, or None."""
    return read_owner_state(workdir / STATE)


def sweep_cluster(workdir: Path, *, force: bool = False) -> bool:
    """Remove what a cluster left in `workdir` (its nodes, its network namespace and
    every process in it, the directory) if its owner is gone, or with `force`;
    returns whether there was one."""
    state = read_cluster_state(workdir)
    if state is None or (not force and owner_alive(state)):
        return False
    keep = os.environ.get("NODE_KEEP_WORKDIR") == "1"
    for index in range(1, int(state.get("nodes", 0)) + 1):
        node_dir = workdir / f"n{index}"
        if node_dir.is_dir():
            sweep_abandoned(node_dir, force=True, keep_workdir=keep)
    kill_netns_processes(str(state["name"]))
    delete_netns(str(state["name"]))
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return True
