"""What a pod's network namespace holds, looked at from inside it: through
`kubectl exec` into one of its containers (what a user sees), or, for a pod without
a running container, from the host through its sandbox's network namespace."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .layout import NodeLayout
from .namespaces import cgroup_mounts

# Run by busybox sh in the container: one line per link from sysfs (the container's
# own sysfs shows its network namespace), then every address.
EXEC_SCRIPT = (
    'for d in /sys/class/net/*; do n="${d##*/}"; '
    'echo "link $n $(cat "$d/mtu") $(cat "$d/address") $(cat "$d/operstate") '
    '$(cat "$d/ifalias" 2>/dev/null)"; done; ip -o addr'
)
_ADDR = re.compile(r"^\d+:\s+(\S+)\s+inet6?\s+(\S+)(?:.*\bscope\s+(\S+))?")


@dataclass(frozen=True)
class Iface:
    """An interface as the pod sees it."""

    name: str
    mtu: int
    mac: str
    state: str
    addresses: tuple[str, ...]  # global scope, CIDR notation
    alias: str = ""
    kind: str = ""  # link kind and mode, e.g. "macvlan bridge" (from the sandbox view only)

    def line(self) -> str:
        """One line for a listing: name, MTU, MAC, state, addresses."""
        addrs = ", ".join(self.addresses) or "-"
        return f"{self.name:<8} mtu {self.mtu:<5} mac {self.mac}  {self.state:<7} {addrs}"


def parse_exec(text: str) -> dict[str, Iface]:
    """Interfaces from the output of EXEC_SCRIPT."""
    links: dict[str, list[str]] = {}
    addrs: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("link "):
            name, mtu, mac, state, *alias = [*line.split()[1:], ""]
            links[name] = [mtu, mac, state, " ".join(alias).strip()]
        elif (m := _ADDR.match(line)) and (m.group(3) or "global") == "global":
            addrs.setdefault(m.group(1), []).append(m.group(2))
    return {
        name: Iface(name, int(mtu), mac, state, tuple(addrs.get(name, ())), alias)
        for name, (mtu, mac, state, alias) in links.items()
    }


def via_exec(
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    namespace: str,
    pod: str,
    container: str,
) -> dict[str, Iface]:
    """The pod's interfaces, seen from `container` (`kubectl exec`)."""
    res = kubectl(
        "exec", "-n", namespace, pod, "-c", container, "--", "sh", "-c", EXEC_SCRIPT, check=False
    )
    if res.returncode != 0:
        raise RuntimeError(f"kubectl exec {namespace}/{pod} [{container}]: {res.stderr.strip()}")
    return parse_exec(res.stdout)


def sandbox_pid(lay: NodeLayout, pod_uid: str) -> int | None:
    """The pid of the pod's sandbox (pause) process, found in the node's cgroups."""
    for mountpoint, _ in cgroup_mounts():
        root = mountpoint / lay.cgroup_root.lstrip("/")
        for procs in root.glob(f"kubepods*/**/pod{pod_uid}/*/cgroup.procs"):
            for pid in procs.read_text().split():
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "pause":
                        return int(pid)
                except OSError:
                    continue
        if root.is_dir():
            return None  # one hierarchy holds every process
    return None


def via_sandbox(lay: NodeLayout, pod_uid: str) -> dict[str, Iface]:
    """The pod's interfaces, from its sandbox's network namespace (`ip -j` on the host)."""
    pid = sandbox_pid(lay, pod_uid)
    if pid is None:
        raise LookupError(f"pod {pod_uid} has no sandbox on node {lay.name}")
    res = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-d", "-j", "addr", "show"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = {}
    for link in json.loads(res.stdout):
        info = link.get("linkinfo") or {}
        kind = " ".join(
            str(x) for x in (info.get("info_kind"), (info.get("info_data") or {}).get("mode")) if x
        )
        addrs = tuple(
            f"{a['local']}/{a['prefixlen']}"
            for a in link.get("addr_info") or []
            if a.get("scope") == "global"
        )
        out[link["ifname"]] = Iface(
            link["ifname"],
            int(link["mtu"]),
            link.get("address", ""),
            link.get("operstate", "").lower(),
            addrs,
            link.get("ifalias", ""),
            kind,
        )
    return out
