"""Sysfs readers for discovery, rooted at --sysfs-root so tests can use fabricated trees.

Symlinks are read with readlink and never resolved against the real root, so a
fabricated tree with the same relative links as the kernel's behaves the same.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")  # fullmatch
_VIRTFN = re.compile(r"virtfn([0-9]+)")  # fullmatch
_PCI_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")  # fullmatch: a root complex in devices/
# The attribute names Kubernetes standardised (k8s.io/dynamic-resource-allocation's
# deviceattribute package), so one claim can align devices of several drivers.
STANDARD = "resource.kubernetes.io/"
MULTUS = "k8s.cni.cncf.io/"  # the attributes Multus reads from a DRA device


class Sysfs:
    """Read-only access to one sysfs tree."""

    def __init__(self, root: Path) -> None:
        """Use the tree at `root` (normally /sys)."""
        self.root = root

    def read(self, *parts: str) -> str | None:
        """A sysfs attribute as stripped text, or None when absent or unreadable."""
        try:
            return self.root.joinpath(*parts).read_text().strip()
        except OSError:  # absent, or EINVAL for e.g. carrier of a down link
            return None

    def read_int(self, *parts: str) -> int | None:
        """A sysfs attribute as an integer (decimal or 0x hex), or None."""
        text = self.read(*parts)
        try:
            return int(text, 0) if text is not None else None
        except ValueError:
            return None

    def link_name(self, *parts: str) -> str | None:
        """The last component of a symlink's target, or None if it is not a symlink."""
        try:
            return self.root.joinpath(*parts).readlink().name
        except OSError:
            return None

    def listdir(self, *parts: str) -> list[str]:
        """Sorted entries of a directory, empty if it does not exist."""
        with contextlib.suppress(OSError):
            return sorted(p.name for p in self.root.joinpath(*parts).iterdir())
        return []

    # -- network interfaces ------------------------------------------------------------

    def net_interfaces(self) -> list[str]:
        """Every interface in class/net."""
        return self.listdir("class", "net")

    def pci_address(self, ifname: str) -> str | None:
        """The PCI address behind an interface, None for virtual ones."""
        address = self.link_name("class", "net", ifname, "device")
        return address if address and _PCI_ADDRESS.fullmatch(address) else None

    def numa_node(self, ifname: str) -> int | None:
        """The NUMA node of an interface's device, None if unknown (-1 or absent)."""
        node = self.read_int("class", "net", ifname, "device", "numa_node")
        return node if node is not None and node >= 0 else None

    def kernel_driver(self, ifname: str) -> str | None:
        """The kernel driver bound to an interface's device."""
        return self.link_name("class", "net", ifname, "device", "driver")

    def physfn(self, ifname: str) -> str | None:
        """For an SR-IOV VF interface, the PCI address of its physical function."""
        return self.link_name("class", "net", ifname, "device", "physfn")

    def virtfns(self, pf_pci: str) -> dict[int, str]:
        """VF index -> VF PCI address of a physical function."""
        out = {}
        for entry in self.listdir("bus", "pci", "devices", pf_pci):
            match = _VIRTFN.fullmatch(entry)
            target = self.link_name("bus", "pci", "devices", pf_pci, entry) if match else None
            if match and target:
                out[int(match[1])] = target
        return out

    def active_vfs(self, ifname: str) -> int:
        """How many SR-IOV VFs an interface's PCI function has created (0: none, or no PF)."""
        return self.read_int("class", "net", ifname, "device", "sriov_numvfs") or 0

    def pci_netdevs(self, pci: str) -> list[str]:
        """Interfaces of a PCI function (bus/pci/devices/<pci>/net/*)."""
        return self.listdir("bus", "pci", "devices", pci, "net")

    def pci_numa_node(self, pci: str) -> int | None:
        """The NUMA node of a PCI function, None if unknown."""
        node = self.read_int("bus", "pci", "devices", pci, "numa_node")
        return node if node is not None and node >= 0 else None

    def pcie_root(self, pci: str) -> str | None:
        """The PCIe root complex (`pci<domain>:<bus>`) above a PCI function: the first
        directory under devices/ on the way to it."""
        try:
            target = self.root.joinpath("bus", "pci", "devices", pci).readlink()
        except OSError:
            return None
        parts = target.parts
        if "devices" not in parts or parts[-1] != pci:
            return None
        root = parts[parts.index("devices") + 1]
        return root if _PCI_ROOT.fullmatch(root) else None

    def pci_id(self, pci: str, which: str) -> str | None:
        """A PCI function's `vendor` or `device` ID as four hex digits, as lspci shows it."""
        value = self.read_int("bus", "pci", "devices", pci, which)
        return f"{value:04x}" if value is not None and 0 <= value <= 0xFFFF else None

    def link_speed(self, ifname: str) -> int | None:
        """An interface's link speed in Mb/s, None when it reports none (no link)."""
        speed = self.read_int("class", "net", ifname, "speed")
        return speed if speed is not None and 0 < speed < 2**31 - 1 else None

    # -- RDMA -----------------------------------------------------------------------------

    def rdma_devices(self) -> list[str]:
        """Every RDMA device in class/infiniband."""
        return self.listdir("class", "infiniband")

    def rdma_netdev(self, ibdev: str) -> str | None:
        """The Ethernet netdev behind an RDMA device: GID table, rxe's parent, or PCI function."""
        ndev = self.read("class", "infiniband", ibdev, "ports", "1", "gid_attrs", "ndevs", "0")
        if ndev:
            return ndev
        parent = self.read("class", "infiniband", ibdev, "parent")
        if parent:
            return parent
        netdevs = self.listdir("class", "infiniband", ibdev, "device", "net")
        return netdevs[0] if netdevs else None


def pci_attributes(fs: Sysfs, pci: str, multus_resource_name: str = "") -> dict[str, Any]:
    """What a PCI function is published with: the standard attributes (bus ID, PCIe
    root, NUMA node), its vendor and device IDs, and what Multus reads (its PCI address
    as deviceID; the operator's resource name, if set); what sysfs does not say is left
    out."""
    attrs: dict[str, Any] = {
        STANDARD + "pciBusID": pci,
        STANDARD + "pcieRoot": fs.pcie_root(pci),
        STANDARD + "numaNode": fs.pci_numa_node(pci),
        "pciVendorID": fs.pci_id(pci, "vendor"),
        "pciDeviceID": fs.pci_id(pci, "device"),
        MULTUS + "deviceID": pci,
        MULTUS + "resourceName": multus_resource_name or None,
    }
    return {k: v for k, v in attrs.items() if v is not None}


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether `name` matches one of the operator's glob patterns."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def unmatched(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The patterns no name matches (an allow-list entry naming nothing on this node)."""
    names = list(names)
    return [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]


def default_route_interfaces(proc: Path = Path("/proc")) -> set[str]:
    """Interfaces holding a default route (IPv4 or IPv6): the node's primary interfaces."""
    found = set()
    with contextlib.suppress(OSError):
        for line in (proc / "net" / "route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000" and fields[7] == "00000000":
                found.add(fields[0])
    with contextlib.suppress(OSError):
        for line in (proc / "net" / "ipv6_route").read_text().splitlines():
            fields = line.split()
            if len(fields) == 10 and fields[0] == "0" * 32 and fields[1] == "00":
                found.add(fields[9])
    found.discard("lo")
    return found
