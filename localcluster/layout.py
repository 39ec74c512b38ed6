"""Every path and name of one local node, derived from its name and work directory,
and the state file that lets another process (or a later run) clean it up."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The node's own network: eth0 (a veth) with a default route, so the kubelet gets a
# non-loopback InternalIP and the macvlan examples find their parent; pods on a CNI
# bridge. A lone node (index 1) keeps the peer of eth0 in its own namespace; the nodes
# of a cluster (cluster.py) have theirs on the cluster's bridge, where the gateway is
# the control plane's address. Node i is 10.250.0.(i+1) with pods in 10.244.(i-1).0/24.
NODE_IP = "10.250.0.2"
GATEWAY_IP = "10.250.0.1"
NODE_PREFIX = 24
POD_SUBNET = "10.244.0.0/24"
PARENT = "eth0"
MAX_NODES = 50


def node_ip(index: int) -> str:
    """The InternalIP of node `index` (1-based)."""
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"node index {index} is not in 1..{MAX_NODES}")
    return f"10.250.0.{index + 1}"


def pod_subnet(index: int) -> str:
    """The pod range of node `index` (1-based)."""
    node_ip(index)
    return f"10.244.{index - 1}.0/24"


# Host directories the node gets its own copy of, inside its mount namespace (as a
# kind node container has its own): containerd puts shim sockets in /run/containerd/s,
# the kubelet links container logs into /var/log/containers, CNI caches results in
# /var/lib/cni; none of them can be configured elsewhere.
PRIVATE_DIRS = ("/run", "/var/log", "/var/lib")

# A unix socket path holds 107 bytes; the longest of the node's is the driver's
# registration socket, <kubelet root>/plugins_registry/<driver>-<pod uid>-reg.sock.
MAX_WORKDIR = 40


@dataclass(frozen=True)
class NodeLayout:
    """Where one node keeps everything. `name` is the Node's name, its network
    namespace, its cgroup root and its CNI network name."""

    name: str
    workdir: Path
    index: int = 1

    def __post_init__(self) -> None:
        if len(str(self.workdir)) > MAX_WORKDIR:
            raise ValueError(
                f"node work directory {self.workdir} is longer than {MAX_WORKDIR} bytes: "
                "the unix socket paths under it would not fit (use a short path under /tmp)"
            )

    @property
    def node_ip(self) -> str:
        """The node's InternalIP (on eth0)."""
        return node_ip(self.index)

    @property
    def pod_subnet(self) -> str:
        """The node's pod range (its CNI bridge's)."""
        return pod_subnet(self.index)

    @property
    def standard_paths(self) -> bool:
        """Whether the kubelet, CDI and NRI paths are a real node's defaults, seen
        inside the node's mount namespace (ClusterNodeLayout) rather than files under
        the work directory."""
        return False

    def on_host(self, path: Path) -> Path:
        """Where the host sees a path the node sees (the same path but inside
        PRIVATE_DIRS, whose node copies live under the work directory)."""
        if path == Path("/var/run") or Path("/var/run") in path.parents:
            path = Path("/run") / path.relative_to("/var/run")  # a symlink, as on Debian
        for host_dir in PRIVATE_DIRS:
            if path == Path(host_dir) or Path(host_dir) in path.parents:
                return self.private_dir(host_dir) / path.relative_to(host_dir)
        return path

    # -- namespaces and cgroups
    @property
    def netns(self) -> str:
        """The node's network namespace (`ip netns` name): the node's name."""
        return self.name

    @property
    def netns_path(self) -> Path:
        """The file of the node's network namespace."""
        return Path("/run/netns") / self.netns

    @property
    def mntns_dir(self) -> Path:
        """A private bind mount holding the mount namespace's file (as /run/netns does)."""
        return self.workdir / "ns"

    @property
    def mntns(self) -> Path:
        """The file of the node's mount namespace."""
        return self.mntns_dir / "mnt"

    @property
    def cgroup_root(self) -> str:
        """The node's cgroup root (the kubelet's cgroupRoot), the same in every hierarchy."""
        return f"/{self.name}"

    def enter(self) -> list[str]:
        """The command prefix that runs a process in the node (mount and network)."""
        return ["nsenter", f"--mount={self.mntns}", f"--net={self.netns_path}", "--"]

    def private_dir(self, host_dir: str) -> Path:
        """What the node sees at `host_dir` (one of PRIVATE_DIRS)."""
        return self.workdir / "private" / host_dir.strip("/").replace("/", "-")

    @property
    def sysctl_dir(self) -> Path:
        """Files holding the kernel settings the kubelet checks, as the node shows them."""
        return self.workdir / "private" / "sysctl"

    # -- containerd
    @property
    def containerd_dir(self) -> Path:
        """containerd's root, state, config and runc root."""
        return self.workdir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket (the CRI endpoint)."""
        return self.workdir / "containerd.sock"

    @property
    def nri_socket(self) -> Path:
        """containerd's NRI socket (the driver's --nri-socket)."""
        return self.workdir / "nri.sock"

    @property
    def cni_conf_dir(self) -> Path:
        """The node's CNI network configuration."""
        return self.workdir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        """host-local's address leases."""
        return self.workdir / "cni" / "ipam"

    @property
    def cdi_dir(self) -> Path:
        """containerd's CDI spec directory (the driver's --cdi-dir)."""
        return self.workdir / "cdi"

    # -- kubelet
    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir."""
        return self.workdir / "kubelet"

    @property
    def kubelet_registry(self) -> Path:
        """Where the kubelet's plugin watcher looks for registration sockets."""
        return self.kubelet_root / "plugins_registry"

    @property
    def kubelet_plugins(self) -> Path:
        """Where plugins put their service sockets."""
        return self.kubelet_root / "plugins"

    @property
    def kubelet_pki(self) -> Path:
        """The kubelet's --cert-dir."""
        return self.workdir / "kubelet-pki"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's podLogsDir."""
        return self.workdir / "pod-logs"

    # -- the rest
    @property
    def controlplane(self) -> Path:
        """The control plane's work directory."""
        return self.workdir / "controlplane"

    @property
    def driver_dir(self) -> Path:
        """The drivers' logs (and kubeconfigs)."""
        return self.workdir / "driver"

    @property
    def logs(self) -> Path:
        """containerd's and the kubelet's logs."""
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig, usable on the host (through the forwarder) and in the node."""
        return self.workdir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        """Who owns the node, for a later sweep (`write_state`)."""
        return self.workdir / "node.json"


@dataclass(frozen=True)
class ClusterNodeLayout(NodeLayout):
    """A node of a local cluster (cluster.py): the kubelet root, CDI directory and NRI
    socket where a real node has them (/var/lib/kubelet, /var/run/cdi, /var/run/nri), inside
    the node's own /var/lib and /run, so one set of chart values fits every node.
    The host reaches them through `on_host`."""

    @property
    def standard_paths(self) -> bool:
        """See NodeLayout.standard_paths."""
        return True

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir, as the node sees it."""
        return Path("/var/lib/kubelet")

    @property
    def cdi_dir(self) -> Path:
        """containerd's second default CDI directory, as the node sees it."""
        return Path("/var/run/cdi")

    @property
    def nri_socket(self) -> Path:
        """containerd's default NRI socket, as the node sees it."""
        return Path("/var/run/nri/nri.sock")


def write_owner_state(path: Path, name: str, workdir: Path, **extra: Any) -> None:
    """Record, atomically, who owns a node or cluster and what it is made of (read by
    `read_owner_state`; `owner_alive` tells whether the owner still runs)."""
    state = {
        "name": name,
        "workdir": str(workdir),
        "owner_pid": os.getpid(),
        "owner_start": process_start(os.getpid()),
        **extra,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(path)


def read_owner_state(path: Path) -> dict[str, Any] | None:
    """The state recorded at `path`, or None."""
    try:
        return dict(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return None


def write_state(lay: NodeLayout, **extra: Any) -> None:
    """Record who owns the node and what it is made of (read by `read_state`)."""
    write_owner_state(lay.state_file, lay.name, lay.workdir, **extra)


def read_state(workdir: Path) -> dict[str, Any] | None:
    """The state a node left in `workdir`, or None."""
    return read_owner_state(workdir / "node.json")


def process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a process, None if it is gone: with
    the pid, it tells whether the owner of a state file is still the same process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_alive(state: dict[str, Any]) -> bool:
    """Whether the process that wrote `state` still runs."""
    pid = int(state.get("owner_pid", 0))
    return pid > 0 and process_start(pid) == state.get("owner_start")
