"""A real single-node Kubernetes cluster on this machine, without Docker.

The control plane (controlplane.py: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager) plus a real kubelet, containerd and runc, all inside the
node's own network namespace and mount namespace, with a cgroup root of its own and
every file under one work directory:

    with LocalNode("dra-demo", "/tmp/dra-demo") as node:
        node.kubectl("get", "nodes")

Users and tests on the host reach the API server through a forwarder on the host's
127.0.0.1 at the API server's own port (`node.lay.kubeconfig` works on both sides).
Everything started is stopped and removed on `stop()`, which also runs on an
exception in the `with` block, on Ctrl-C, on SIGTERM (turned into
KeyboardInterrupt) and at interpreter exit; kubelet, containerd and the control
plane die with Python (parent-death signal) if it is killed outright, and the next
start in the same work directory (or `sweep_abandoned`) removes what is left.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .binaries import Binaries, default_binaries, missing
from .containerd import Containerd
from .controlplane import DRA_FEATURE_GATES, ControlPlane
from .images import build_images
from .kubelet import Kubelet
from .layout import ClusterNodeLayout, NodeLayout, write_state
from .namespaces import create_cgroup_root, create_mntns, create_netns
from .procs import SigtermAsInterrupt
from .sweep import sweep, sweep_abandoned


class NodeUnavailable(RuntimeError):
    """The node cannot be started on this machine; the message says what is missing."""


class LocalNode:
    """One node: see the module docstring."""

    def __init__(
        self,
        name: str,
        workdir: Path | str,
        *,
        bins: Binaries | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        verbosity: int = 2,
        control_plane: ControlPlane | None = None,
        cluster_ns: str | None = None,
        index: int = 1,
    ) -> None:
        """With `control_plane` and `cluster_ns`: node number `index` of a cluster
        (cluster.py), joining its control plane over its network (both stay up when
        this node stops); otherwise a lone node with a control plane of its own."""
        if (control_plane is None) != (cluster_ns is None):
            raise ValueError("a cluster's node needs both its control plane and its network")
        self.lay: NodeLayout = (
            ClusterNodeLayout(name, Path(workdir), index)
            if cluster_ns is not None
            else NodeLayout(name, Path(workdir))
        )
        self.cluster_ns = cluster_ns
        self.own_cp = control_plane is None
        self.bins = bins or default_binaries()
        self.feature_gates = {**DRA_FEATURE_GATES, **(feature_gates or {})}
        self.verbosity = verbosity
        self.cp: ControlPlane | None = control_plane
        self.containerd = Containerd(self.lay, self.bins)
        self.kubelet: Kubelet | None = None
        self.timings: dict[str, float] = {}
        self.on_stop: list[Callable[[], None]] = []  # run first, newest first (drivers)
        self._started = False
        self._sigterm = SigtermAsInterrupt()

    def __enter__(self) -> LocalNode:
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

    @property
    def name(self) -> str:
        """The Node's name (also its namespace, cgroup root and CNI network)."""
        return self.lay.name

    @property
    def control_plane(self) -> ControlPlane:
        """The node's control plane (only while the node runs)."""
        if self.cp is None:
            raise RuntimeError("node not started")
        return self.cp

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Bring the node up until it is Ready; timings land in `self.timings`."""
        if problems := missing(self.bins):
            raise NodeUnavailable("; ".join(problems))
        lay = self.lay
        if sweep_abandoned(lay.workdir):
            print(f"node: removed what a killed run left in {lay.workdir}", file=sys.stderr)
        if lay.workdir.exists() and any(lay.workdir.iterdir()):
            raise FileExistsError(f"node work directory {lay.workdir} is in use")
        lay.workdir.mkdir(parents=True, exist_ok=True)
        write_state(lay)
        self._started = True
        atexit.register(self.stop)
        self._sigterm.install()
        t0 = time.monotonic()
        try:
            self._timed("namespaces", self._namespaces)
            self.containerd.start()  # starts while the control plane comes up
            if self.own_cp:
                self.cp = ControlPlane(
                    lay.controlplane,
                    node_netns=lay.netns,
                    feature_gates=self.feature_gates,
                    bin_dir=self.bins.k8s,
                    verbosity=self.verbosity,
                    keep_workdir=False,
                )
                self._timed("control_plane", self.cp.start)
            shutil.copyfile(self.control_plane.admin_kubeconfig, lay.kubeconfig)
            self._timed("containerd", self.containerd.wait_ready)
            images = build_images(lay.workdir / "images", self.bins["pause"])
            self._timed("images", lambda: self.containerd.import_images(images))
            self.kubelet = Kubelet(lay, self.bins, self.control_plane)
            self.kubelet.start(self.feature_gates)
            self._timed("node_ready", self.kubelet.wait_ready)
        except BaseException:
            self.print_logs()
            self.stop()
            raise
        self.timings["start_total"] = time.monotonic() - t0

    def _namespaces(self) -> None:
        create_netns(self.lay, self.cluster_ns)
        create_mntns(self.lay)
        create_cgroup_root(self.lay)

    def _timed(self, what: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        fn()
        self.timings[what] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop everything and remove every trace (see sweep.py). Idempotent."""
        if not self._started:
            return
        self._started = False
        t0 = time.monotonic()
        try:
            for fn in reversed(self.on_stop):
                fn()
            self.on_stop.clear()
            if self.kubelet is not None:
                self.kubelet.stop()
            self.containerd.stop()
            if self.cp is not None and self.own_cp:
                self.cp.stop()
        finally:
            sweep(self.lay, keep_workdir=os.environ.get("NODE_KEEP_WORKDIR") == "1")
            self._sigterm.restore()
            atexit.unregister(self.stop)
        self.timings["teardown"] = time.monotonic() - t0

    # ------------------------------------------------------------------ use
    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as admin, through the host-side forwarder."""
        return self.control_plane.kubectl(*args, check=check, input=input)

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A raw API call as admin; returns the decoded JSON answer."""
        return self.control_plane.request(method, path, body, **kw)

    def apply(self, source: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        """Server-side apply of objects (a path, YAML text, objects)."""
        return self.control_plane.apply(source, namespace)

    def logs(self, lines: int = 40) -> str:
        """The last `lines` lines of each component's log (control plane, containerd, kubelet)."""
        parts = [self.cp.logs(lines)] if self.cp is not None and self.own_cp else []
        comps = [self.containerd.component]
        if self.kubelet is not None:
            comps.append(self.kubelet.component)
        for comp in comps:
            parts.append(f"----- {comp.name} ({comp.log}) -----\n{comp.tail(lines)}")
        return "\n".join(parts)

    def print_logs(self, lines: int = 40) -> None:
        """Print the log tails to stderr."""
        print(f"\n===== node {self.name} logs =====\n{self.logs(lines)}", file=sys.stderr)
