"""What isolates a local node from the machine: its network namespace (with eth0 and
a default route), its mount namespace (its own /run, /var/log, /var/lib, and the
kernel settings the kubelet checks), and its cgroup root in every hierarchy."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

from .layout import GATEWAY_IP, NODE_PREFIX, PARENT, PRIVATE_DIRS, NodeLayout
from .network import CLUSTER_BRIDGE
from .nodeconfig import KUBELET_SYSCTLS


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip() or res.returncode}")


def create_netns(lay: NodeLayout, cluster_ns: str | None = None) -> None:
    """The node's network namespace: lo, and eth0 (a veth) holding the node's address
    and default route. A lone node keeps the peer, the "gateway", in its namespace; a
    cluster's node has it on the bridge of `cluster_ns` (network.py), its gateway."""
    ns = lay.netns
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        if cluster_ns is None:
            _run("ip", "-n", ns, "link", "add", PARENT, "type", "veth", "peer", "name", "gw0")
            _run("ip", "-n", ns, "addr", "add", f"{GATEWAY_IP}/{NODE_PREFIX}", "dev", "gw0")
            _run("ip", "-n", ns, "link", "set", "gw0", "up")
        else:
            peer = f"node{lay.index}"
            _run("ip", "-n", ns, "link", "add", PARENT, "type", "veth", "peer", "name", peer)
            _run("ip", "-n", ns, "link", "set", peer, "netns", cluster_ns)
            _run("ip", "-n", cluster_ns, "link", "set", peer, "master", CLUSTER_BRIDGE, "up")
            # Pods' traffic to other nodes' pods and to the API server leaves here.
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _run("ip", "-n", ns, "addr", "add", f"{lay.node_ip}/{NODE_PREFIX}", "dev", PARENT)
        _run("ip", "-n", ns, "link", "set", PARENT, "up")
        _run("ip", "-n", ns, "route", "add", "default", "via", GATEWAY_IP, "dev", PARENT)
    except BaseException:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        raise


def mount_script(lay: NodeLayout) -> str:
    """Shell commands run inside the new mount namespace: the node's own copies of
    PRIVATE_DIRS, and files holding the kernel settings the kubelet checks, mounted
    over theirs in /proc/sys (the kubelet would otherwise write the machine's)."""
    lines = []
    for host_dir in PRIVATE_DIRS:
        src = shlex.quote(str(lay.private_dir(host_dir)))
        lines.append(f"mount --bind {src} {host_dir}")
        if lay.standard_paths:
            # As on a real node, mounts made below (the pods' network namespaces in
            # /run/netns) reach containers that mount them HostToContainer.
            lines.append(f"mount --make-rshared {host_dir}")
    for key in KUBELET_SYSCTLS:
        src = shlex.quote(str(lay.sysctl_dir / key.replace("/", ".")))
        lines.append(f"mount --bind {src} /proc/sys/{key}")
    return "\n".join(lines)


def create_mntns(lay: NodeLayout) -> None:
    """A persistent mount namespace (a file bind-mounted like `ip netns` does), a slave
    of the host's: host mounts show up in it, the node's own mounts (the kubelet's
    volumes, containerd's root file systems) never show up on the host and vanish
    with it."""
    for host_dir in PRIVATE_DIRS:
        lay.private_dir(host_dir).mkdir(parents=True, exist_ok=True)
    lay.sysctl_dir.mkdir(parents=True, exist_ok=True)
    for key, value in KUBELET_SYSCTLS.items():
        (lay.sysctl_dir / key.replace("/", ".")).write_text(f"{value}\n")
    lay.mntns_dir.mkdir(parents=True, exist_ok=True)
    # The namespace file must sit on a private mount, or the new namespace would
    # hold a copy of its own reference.
    _run("mount", "--bind", str(lay.mntns_dir), str(lay.mntns_dir))
    _run("mount", "--make-private", str(lay.mntns_dir))
    lay.mntns.touch()
    _run(
        "unshare",
        f"--mount={lay.mntns}",
        "--propagation",
        "slave",
        "sh",
        "-ec",
        mount_script(lay),
    )


def cgroup_mounts() -> Iterator[tuple[Path, list[str]]]:
    """Every cgroup hierarchy (v1 and the unified one): mount point and options."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _dev, mountpoint, fstype, options, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            yield Path(mountpoint), options.split(",")


def create_cgroup_root(lay: NodeLayout) -> None:
    """The node's cgroup root in every hierarchy, before the kubelet starts (it expects
    it); cpuset needs its cpus and mems from the parent before anything joins."""
    for mountpoint, options in cgroup_mounts():
        path = mountpoint / lay.cgroup_root.lstrip("/")
        path.mkdir(exist_ok=True)
        if "cpuset" in options:
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((mountpoint / name).read_text())
