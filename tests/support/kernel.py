"""What the running kernel can do, probed once, for skip reasons that name the feature."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from tests.support import netns

_LINK_SETUP = {
    "veth": ["type", "veth", "peer", "name", "p1"],
    "macvlan": ["link", "p0", "type", "macvlan"],
    "ipvlan": ["link", "p0", "type", "ipvlan", "mode", "l2"],
    "dummy": ["type", "dummy"],
    "bridge": ["type", "bridge"],
}


@functools.cache
def missing(feature: str) -> str | None:
    """None if the kernel has `feature`, else the reason it is missing."""
    if feature == "rdma":
        return _missing_rdma()
    if feature == "infiniband":
        return (
            None
            if infiniband_port()
            else (
                "no InfiniBand port on this machine (IPoIB needs an InfiniBand link layer; "
                "soft-RoCE is Ethernet)"
            )
        )
    if feature not in _LINK_SETUP:
        return f"unknown kernel feature {feature}"
    _modprobe(feature)
    ns = netns.create("probe")
    try:
        netns.ip(ns, "link", "add", "p0", "type", "veth", "peer", "name", "q0")
        res = subprocess.run(
            ["ip", "-n", ns, "link", "add", "t0", *_LINK_SETUP[feature]],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            return (
                f"the running kernel lacks link kind {feature} "
                f"({res.stderr.strip() or 'ip link add failed'})"
            )
        return None
    finally:
        netns.delete(ns)


def _modprobe(module: str) -> None:
    """Load a module if modprobe (kmod) is there; the probe that follows decides."""
    if shutil.which("modprobe") is not None:
        subprocess.run(["modprobe", "-q", module], capture_output=True, check=False)


def _missing_rdma() -> str | None:
    _modprobe("rdma_rxe")
    if not Path("/sys/module/rdma_rxe").exists():
        return "the running kernel has no RDMA (module rdma_rxe for soft-RoCE is missing)"
    if shutil.which("rdma") is None:
        return "the rdma tool (iproute2) is missing"
    return None


def infiniband_port() -> str | None:
    """A host interface with the InfiniBand link type (ARPHRD_INFINIBAND = 32), if any."""
    for iface in sorted(Path("/sys/class/net").iterdir()):
        if (iface / "type").read_text().strip() == "32":
            return iface.name
    return None
