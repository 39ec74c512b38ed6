"""The emulated PCI NICs of the kernel-VM tier (qemu's igb, an SR-IOV capable Intel
82576, and e1000e, an 82574L): finding them, making VFs, reading a PF's VF table as `ip`
shows it. On a machine without them every finder returns nothing."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

PCI = Path("/sys/bus/pci/devices")
IGB_PF = ("0x8086", "0x10c9")  # vendor, device: 82576
IGB_VF = ("0x8086", "0x10ca")
E1000E = ("0x8086", "0x10d3")  # 82574L
DRIVERS = ("igb", "igbvf", "e1000e")


def load_drivers() -> None:
    """Load the NICs' drivers: the VM's udev does not load drivers for its hardware."""
    for module in DRIVERS:
        subprocess.run(["modprobe", "-q", module], capture_output=True, check=False)


def _ids(pci: Path) -> tuple[str, str]:
    try:
        return ((pci / "vendor").read_text().strip(), (pci / "device").read_text().strip())
    except OSError:
        return ("", "")


def netdevs(ids: tuple[str, str]) -> list[str]:
    """The netdevs of the PCI functions with these vendor and device IDs, by PCI address."""
    if not PCI.is_dir():
        return []
    out = []
    for pci in sorted(PCI.iterdir()):
        if _ids(pci) == ids and (pci / "net").is_dir():
            out += sorted(p.name for p in (pci / "net").iterdir())
    return out


def pci_of(ifname: str) -> str:
    """The PCI address of an interface."""
    return Path(f"/sys/class/net/{ifname}/device").resolve().name


def total_vfs(pf: str) -> int:
    """How many VFs the PF can have (sriov_totalvfs)."""
    return int(Path(f"/sys/class/net/{pf}/device/sriov_totalvfs").read_text())


def vf_netdev(pf: str, index: int) -> str | None:
    """The netdev of VF `index` of `pf`, None while it has none."""
    net = Path(f"/sys/class/net/{pf}/device/virtfn{index}/net")
    names = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    return names[0] if names else None


def set_numvfs(pf: str, count: int, timeout: float = 30.0) -> list[str]:
    """Give `pf` exactly `count` VFs (0 first: the kernel refuses to change a nonzero
    count directly); return their netdevs by VF index once igbvf has made them all."""
    path = Path(f"/sys/class/net/{pf}/device/sriov_numvfs")
    if int(path.read_text()) != count:
        path.write_text("0")
        if count:
            path.write_text(str(count))
    deadline = time.monotonic() + timeout
    while True:
        names = [vf_netdev(pf, i) for i in range(count)]
        if all(names):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"VF netdevs of {pf} after {timeout:g} s: {names}")
        time.sleep(0.1)
    wait_link(pf, timeout)  # the PF resets when its VFs change
    return [n for n in names if n]


def wait_link(ifname: str, timeout: float = 30.0) -> None:
    """Until an interface that is up has its link (igb takes about 2 s after up or a
    reset; a VF's rate limit needs it)."""
    flags = int(Path(f"/sys/class/net/{ifname}/flags").read_text(), 16)
    if not flags & 1:  # IFF_UP
        return
    deadline = time.monotonic() + timeout
    while Path(f"/sys/class/net/{ifname}/carrier").read_text().strip() != "1":
        if time.monotonic() > deadline:
            raise TimeoutError(f"no link on {ifname} after {timeout:g} s")
        time.sleep(0.1)


def vf_table(pf: str) -> list[dict[str, Any]]:
    """The PF's VF table as `ip -j link show` gives it (vfinfo_list)."""
    out = subprocess.run(
        ["ip", "-j", "link", "show", "dev", pf], capture_output=True, text=True, check=True
    )
    return list(json.loads(out.stdout)[0].get("vfinfo_list") or [])


def vf_entry(pf: str, index: int) -> dict[str, Any]:
    """One VF's entry in its PF's table."""
    [entry] = [e for e in vf_table(pf) if e.get("vf") == index]
    return entry


def vlan_of(entry: dict[str, Any]) -> tuple[int, int]:
    """(VLAN, QoS) of a VF table entry (`ip` prints vlan_list where the kernel sends one)."""
    first = (entry.get("vlan_list") or [entry])[0]
    return int(first.get("vlan", 0)), int(first.get("qos", 0))


def max_rate_of(entry: dict[str, Any]) -> int:
    """The transmit rate limit of a VF table entry, Mb/s (0: none)."""
    return int((entry.get("rate") or {}).get("max_tx", entry.get("max_tx_rate", 0)))
