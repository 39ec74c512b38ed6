"""What the running kernel can do, probed once, for skip reasons that name the feature."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from localcluster.examples import link_kind_missing
from tests.support import hosttools, pcinics


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
    if feature in ("igb-sriov", "e1000e"):
        return _missing_nic(feature)
    if reason := hosttools.missing("ip"):
        return reason
    return link_kind_missing(feature)  # the probe the local cluster uses too


def _missing_nic(feature: str) -> str | None:
    """None when the emulated NIC the feature names is here, with its driver bound."""
    pcinics.load_drivers()
    ids = pcinics.IGB_PF if feature == "igb-sriov" else pcinics.E1000E
    if pcinics.netdevs(ids):
        return None
    model = "SR-IOV capable igb (82576)" if feature == "igb-sriov" else "e1000e"
    return f"no {model} PCI NIC here: the kernel-VM tier (make test-kernel) emulates one"


def _load_module(name: str) -> None:
    """Load a kernel module if modprobe exists; without it, the probe sees what is built in
    or already loaded (a fresh machine may lack kmod: that is not an error)."""
    if hosttools.missing("modprobe") is None:
        subprocess.run(["modprobe", "-q", name], capture_output=True, check=False)


def _missing_rdma() -> str | None:
    _load_module("rdma_rxe")
    if not Path("/sys/module/rdma_rxe").exists():
        no_kmod = hosttools.missing("modprobe")
        why = f"; {no_kmod}" if no_kmod else ""
        return f"the running kernel has no RDMA (module rdma_rxe for soft-RoCE is missing{why})"
    return hosttools.missing("rdma")


def infiniband_port() -> str | None:
    """A host interface with the InfiniBand link type (ARPHRD_INFINIBAND = 32), if any."""
    for iface in sorted(Path("/sys/class/net").iterdir()):
        if (iface / "type").read_text().strip() == "32":
            return iface.name
    return None
