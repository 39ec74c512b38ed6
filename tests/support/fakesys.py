"""Fabricated sysfs trees shaped like the kernel's: same directories, same relative symlinks.

Only what the driver reads is filled in. Layout followed (Linux 6.x):
  devices/pci0000:00/<pci>/{numa_node, driver -> ../../../bus/pci/drivers/<drv>}
  devices/pci0000:00/<pci>/net/<ifname>/{address, mtu, type, carrier, operstate}
  devices/pci0000:00/<pci>/net/<ifname>/device -> ../../../<pci>
  devices/virtual/net/<ifname>/...                       (no device link)
  class/net/<ifname> -> ../../devices/.../net/<ifname>
  bus/pci/devices/<pci> -> ../../../devices/pci0000:00/<pci>
  PF: <pf pci>/virtfn<N> -> ../<vf pci>; VF: <vf pci>/physfn -> ../<pf pci>
  RDMA: devices/.../infiniband/<ibdev>/{node_guid, ports/<n>/{state, link_layer,
        gid_attrs/ndevs/0}}, class/infiniband/<ibdev> -> ../../devices/.../infiniband/<ibdev>
  uverbs: devices/.../infiniband_verbs/uverbs<N>/{ibdev, dev},
        class/infiniband_verbs/uverbs<N> -> ../../devices/.../infiniband_verbs/uverbs<N>
"""

from __future__ import annotations

import os
from pathlib import Path

PCI_BUS = "devices/pci0000:00"


class FakeSys:
    """Builds a sysfs tree under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for d in (
            "class/net",
            "class/infiniband",
            "class/infiniband_verbs",
            "bus/pci/devices",
            "bus/pci/drivers",
            PCI_BUS,
            "devices/virtual/net",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)

    def _write(self, rel: str, files: dict[str, object]) -> Path:
        path = self.root / rel
        path.mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"{value}\n")
        return path

    def _link(self, rel_link: str, target: str) -> None:
        link = self.root / rel_link
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        os.symlink(target, link)

    def pci(self, address: str, *, driver: str = "mlx5_core", numa: int = 0) -> str:
        """A PCI function with a bound driver."""
        rel = f"{PCI_BUS}/{address}"
        self._write(rel, {"numa_node": numa, "vendor": "0x15b3", "device": "0x101d"})
        self._write(f"bus/pci/drivers/{driver}", {})
        self._link(f"{rel}/driver", f"../../../bus/pci/drivers/{driver}")
        self._link(f"bus/pci/devices/{address}", f"../../../{PCI_BUS}/{address}")
        return rel

    def nic(
        self,
        ifname: str,
        pci: str | None = None,
        *,
        mac: str = "02:00:00:00:00:01",
        mtu: int = 1500,
        carrier: int | None = 1,
        link_type: int = 1,
        driver: str = "mlx5_core",
        numa: int = 0,
    ) -> None:
        """A network interface, on a PCI function if `pci` is given, else virtual."""
        files: dict[str, object] = {
            "address": mac,
            "mtu": mtu,
            "type": link_type,
            "operstate": "up" if carrier else "down",
            "speed": 25000 if carrier else -1,  # Mb/s; -1: no link
        }
        if carrier is not None:
            files["carrier"] = carrier
        if pci:
            base = self.pci(pci, driver=driver, numa=numa)
            rel = f"{base}/net/{ifname}"
            self._write(rel, files)
            self._link(f"{rel}/device", f"../../../{pci}")
        else:
            rel = f"devices/virtual/net/{ifname}"
            self._write(rel, files)
        self._link(f"class/net/{ifname}", f"../../{rel}")

    def sriov(
        self, pf: str, pf_pci: str, vfs: dict[int, tuple[str, str | None]], numa: int = 0
    ) -> None:
        """A PF with VFs: index -> (VF PCI address, VF netdev name or None if unbound)."""
        self.nic(pf, pf_pci, numa=numa)
        for index, (vf_pci, vf_netdev) in vfs.items():
            if vf_netdev:
                self.nic(
                    vf_netdev,
                    vf_pci,
                    driver="mlx5_core",
                    numa=numa,
                    mac=f"02:00:00:00:01:{index:02x}",
                )
            else:
                self.pci(vf_pci, driver="vfio-pci", numa=numa)
            self._link(f"{PCI_BUS}/{pf_pci}/virtfn{index}", f"../{vf_pci}")
            self._link(f"{PCI_BUS}/{vf_pci}/physfn", f"../{pf_pci}")

    def rdma(
        self,
        ibdev: str,
        *,
        pci: str | None,
        uverbs: int,
        netdev: str | None,
        link_layer: str = "Ethernet",
        state: str = "4: ACTIVE",
        node_guid: str = "0c42:a103:0065:3e2a",
        umad: int | None = None,
    ) -> None:
        """An RDMA device (mlx5-like on PCI, or rxe-like virtual) with its uverbs device."""
        base = f"{PCI_BUS}/{pci}" if pci else "devices/virtual"
        if pci and not (self.root / base).exists():
            self.pci(pci)
        rel = f"{base}/infiniband/{ibdev}"
        port = {
            "ports/1/state": state,
            "ports/1/link_layer": link_layer,
            "ports/1/phys_state": "5: LinkUp",
        }
        if netdev:
            port["ports/1/gid_attrs/ndevs/0"] = netdev
        self._write(rel, {"node_guid": node_guid, "node_type": "1: CA", **port})
        if pci:
            self._link(f"{rel}/device", f"../../../{pci}")
        self._link(f"class/infiniband/{ibdev}", f"../../{rel}")
        vrel = f"{base}/infiniband_verbs/uverbs{uverbs}"
        self._write(vrel, {"ibdev": ibdev, "dev": f"231:{192 + uverbs}"})
        self._link(f"class/infiniband_verbs/uverbs{uverbs}", f"../../{vrel}")
        if umad is not None:
            mrel = f"{base}/infiniband_mad/umad{umad}"
            self._write(mrel, {"ibdev": ibdev, "port": 1, "dev": f"231:{umad}"})
            self._link(f"class/infiniband_mad/umad{umad}", f"../../{mrel}")
