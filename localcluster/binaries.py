"""Where a local cluster's programs are (built by hack/build-k8s.sh and
hack/build-node.sh), and what is missing, with the fix named."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .images import BUSYBOX
from .nodeconfig import CNI_BIN_DIR

REPO_ROOT = Path(__file__).resolve().parents[1]


def k8s_version() -> str:
    """The Kubernetes release the local cluster runs: K8S_VERSION if set (an earlier
    release with its hack/k8s/<version>.mod), else the one hack/k8s/go.mod pins; the
    one hack/build-k8s.sh builds for the same environment."""
    chosen = os.environ.get("K8S_VERSION", "")
    if chosen:
        return chosen
    for line in (REPO_ROOT / "hack" / "k8s" / "go.mod").read_text().splitlines():
        fields = line.split()
        if fields[:1] == ["k8s.io/kubernetes"]:
            return fields[1]
    raise RuntimeError("hack/k8s/go.mod pins no k8s.io/kubernetes")


K8S_VERSION = k8s_version()
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
NODE_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "pause")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
# Host tools the node runs, and the Debian package of each.
HOST_TOOLS = {"ip": "iproute2", "nsenter": "util-linux", "unshare": "util-linux", "mount": "mount"}


def default_bin_dir() -> Path:
    """Where ``hack/build-k8s.sh`` puts the binaries (``E2E_K8S_BIN_DIR`` overrides)."""
    env = os.environ.get("E2E_K8S_BIN_DIR")
    return Path(env) if env else REPO_ROOT / ".cache" / "k8s" / K8S_VERSION / "bin"


def missing_binaries(bin_dir: Path) -> list[str]:
    """The control-plane components not built in `bin_dir`."""
    return [c for c in COMPONENTS if not os.access(bin_dir / c, os.X_OK)]


def node_bin_dir() -> Path:
    """Where hack/build-node.sh puts containerd, runc and pause (NODE_BIN_DIR overrides)."""
    env = os.environ.get("NODE_BIN_DIR")
    if env:
        return Path(env)
    out = subprocess.run(
        [str(REPO_ROOT / "hack" / "build-node.sh"), "--bin-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


@dataclass(frozen=True)
class Binaries:
    """The programs of one node."""

    k8s: Path  # etcd, kube-apiserver, ..., kubelet, kubectl
    node: Path  # containerd, containerd-shim-runc-v2, ctr, runc, pause
    cni: Path = Path(CNI_BIN_DIR)

    def kubelet(self) -> Path:
        """The kubelet."""
        return self.k8s / "kubelet"

    def kubectl(self) -> Path:
        """kubectl (of K8S_VERSION, built with the control plane)."""
        return self.k8s / "kubectl"

    def __getitem__(self, name: str) -> Path:
        return self.node / name


def default_binaries() -> Binaries:
    """The programs where the hack/ scripts build them."""
    return Binaries(default_bin_dir(), node_bin_dir())


def missing(bins: Binaries) -> list[str]:
    """What keeps a node from starting here, each with how to fix it; empty if none."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root (namespaces, cgroups, mounts)")
    absent = missing_binaries(bins.k8s) + [
        b for b in ("kubelet", "kubectl") if not os.access(bins.k8s / b, os.X_OK)
    ]
    if absent:
        problems.append(f"{', '.join(absent)} not built in {bins.k8s}: run hack/build-k8s.sh")
    absent = [b for b in NODE_BINARIES if not os.access(bins.node / b, os.X_OK)]
    if absent:
        problems.append(f"{', '.join(absent)} not built in {bins.node}: run hack/build-node.sh")
    absent = [p for p in CNI_PLUGINS if not os.access(bins.cni / p, os.X_OK)]
    if absent:
        problems.append(
            f"CNI plugins {', '.join(absent)} missing in {bins.cni}: "
            "apt-get install containernetworking-plugins (or run hack/build-node.sh)"
        )
    if not os.access(BUSYBOX, os.X_OK):
        problems.append(
            f"{BUSYBOX} missing (the busybox image is built from it): "
            "apt-get install busybox-static (or run hack/build-node.sh)"
        )
    for tool, package in HOST_TOOLS.items():
        if shutil.which(tool) is None:
            problems.append(f"{tool} missing: apt-get install {package}")
    if not Path("/sys/fs/cgroup").is_dir():
        problems.append("no cgroup file system at /sys/fs/cgroup")
    return problems
