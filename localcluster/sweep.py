"""Removing everything a local node is made of, from its layout alone: the processes
in its namespaces and cgroups (containerd shims and pod processes included), its
mount namespace (and with it every mount the kubelet and containerd made), its
cgroups, its network namespace (with eth0, the CNI bridge and the pods' veths) and
its work directory. Idempotent, and usable from another process after a crash."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .layout import NodeLayout, owner_alive, read_state
from .namespaces import cgroup_mounts


def _ns_id(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _mounted(path: Path) -> bool:
    target = str(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if line.split()[4] == target:
            return True
    return False


def cgroup_dirs(lay: NodeLayout) -> list[Path]:
    """The node's cgroup root in every hierarchy where it exists."""
    out = []
    for mountpoint, _ in cgroup_mounts():
        path = mountpoint / lay.cgroup_root.lstrip("/")
        if path.is_dir():
            out.append(path)
    return out


def _pids_in(namespace_files: list[Path]) -> set[int]:
    """Processes in any of the namespaces these files stand for."""
    # (An unmounted namespace file is a plain file: no process has its identity.)
    namespaces = {i for i in map(_ns_id, namespace_files) if i is not None}
    pids: set[int] = set()
    if namespaces:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            for kind in ("net", "mnt"):
                if _ns_id(entry / "ns" / kind) in namespaces:
                    pids.add(int(entry.name))
    pids.discard(os.getpid())
    return pids


def _kill_all(what: str, find: Callable[[], set[int]], timeout: float) -> set[int]:
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while pids := find():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: processes survive SIGKILL: {sorted(pids)}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.05)
    return killed


def kill_netns_processes(netns: str, timeout: float = 30) -> set[int]:
    """SIGKILL every process in the network namespace `ip netns` calls `netns`."""
    path = Path("/run/netns") / netns
    return _kill_all(f"namespace {netns}", lambda: _pids_in([path]), timeout)


def node_pids(lay: NodeLayout) -> set[int]:
    """Processes of the node: in its network or mount namespace (control plane,
    containerd, shims, kubelet, driver) or in its cgroups (pod processes)."""
    pids = _pids_in([lay.netns_path, lay.mntns])
    for root in cgroup_dirs(lay):
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    pids.discard(os.getpid())
    return pids


def kill_node_processes(lay: NodeLayout, timeout: float = 30) -> set[int]:
    """SIGKILL every process of the node until none is left; returns those killed."""
    return _kill_all(f"node {lay.name}", lambda: node_pids(lay), timeout)


def remove_cgroups(lay: NodeLayout, timeout: float = 15) -> None:
    """rmdir the node's cgroup trees, leaves first (a cgroup empties just after its
    last process is reaped, so busy ones are retried)."""
    deadline = time.monotonic() + timeout
    for root in cgroup_dirs(lay):
        for dirpath, _dirs, _files in os.walk(root, topdown=False):
            while True:
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"cannot remove cgroup {dirpath}: {e}") from None
                    time.sleep(0.05)


def release_mntns(lay: NodeLayout) -> None:
    """Unmount the mount namespace's file (the namespace goes with its last process)
    and the private mount that held it."""
    for path in (lay.mntns, lay.mntns_dir):
        if _mounted(path):
            subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)


def mounts_under(path: Path) -> list[str]:
    """Mount points on the host at or under `path` (none once a node is swept)."""
    prefix = str(path)
    return [
        mp
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if (mp := line.split()[4]) == prefix or mp.startswith(prefix + "/")
    ]


def sweep(lay: NodeLayout, *, keep_workdir: bool = False) -> None:
    """Remove everything of the node (see the module docstring)."""
    kill_node_processes(lay)
    release_mntns(lay)
    for mp in sorted(mounts_under(lay.workdir), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mp], capture_output=True, check=False)
    remove_cgroups(lay)
    subprocess.run(["ip", "netns", "del", lay.netns], capture_output=True, check=False)
    if not keep_workdir:
        shutil.rmtree(lay.workdir, ignore_errors=True)


def sweep_abandoned(
    workdir: Path, *, force: bool = False, keep_workdir: bool = False
) -> NodeLayout | None:
    """Sweep the node in `workdir` if the process that started it is gone (killed
    before it could clean up), or with `force`; returns its layout if it did."""
    state = read_state(workdir)
    if state is None or (not force and owner_alive(state)):
        return None
    lay = NodeLayout(str(state["name"]), Path(state["workdir"]))
    sweep(lay, keep_workdir=keep_workdir)
    return lay
