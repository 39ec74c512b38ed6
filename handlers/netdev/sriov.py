"""sriov-vf: an SR-IOV virtual function's netdev, with VF settings applied through its PF.

VFs are published one device each, from the physical functions the operator lists
(--sriov-pfs). The VF is the allocated one: `parent` + `vfIndex` from the original
design are accepted but must name it (an absent vfIndex means the allocated VF, not 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dradriver import naming, netlink
from dradriver.errors import ConfigError, DeviceError
from dradriver.hookspecs import Device, DeviceRequest, HandlerContext, Prepared, Validated
from handlers import sysfs
from handlers.netdev import claimed, common

KIND = "sriov-vf"
_VF_SETTINGS = ("mac", "vlan", "trust", "spoofchk")


def discover(context: HandlerContext) -> list[Device]:
    """Every VF with a kernel netdev whose PF is on the operator's list."""
    if not context.sriov_pfs:
        return []  # nothing is offered unless the operator lists PFs
    fs = sysfs.Sysfs(context.sysfs_root)
    devices = []
    for pf in fs.net_interfaces():
        if not sysfs.matches(pf, context.sriov_pfs):
            continue
        pf_pci = fs.pci_address(pf)
        if not pf_pci or fs.physfn(pf):
            continue
        for index, vf_pci in sorted(fs.virtfns(pf_pci).items()):
            netdevs = fs.pci_netdevs(vf_pci)
            if not netdevs:
                continue  # bound to vfio-pci or no driver: not a netdev VF
            attrs: dict[str, Any] = {
                "type": "netdev",
                "kind": KIND,
                "pfName": pf,
                "vfIndex": index,
                "pciAddress": vf_pci,
                "interfaceName": netdevs[0],
            }
            numa = fs.pci_numa_node(vf_pci)
            if numa is not None:
                attrs["numaNode"] = numa
            driver = fs.link_name("bus", "pci", "devices", vf_pci, "driver")
            if driver:
                attrs["driver"] = driver
            devices.append(Device(naming.published_device_name("vf", vf_pci), attrs))
    return devices


class SriovVfHandler:
    """Hands the allocated VF's netdev to the container."""

    type = "netdev"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields plus parent/vfIndex (must name the allocated VF) and VF settings."""
        return common.schema(
            {
                "parent": dict(common.PARENT, description="PF of the VF (must be the allocated)"),
                "vfIndex": {"type": "integer", "minimum": 0},
                "vlan": {"type": "integer", "minimum": 0, "maximum": 4094},
                "trust": {"type": "boolean"},
                "spoofchk": {"type": "boolean"},
            }
        )

    def _vf(self, req: DeviceRequest) -> tuple[str, int, str]:
        """(PF name, VF index, VF netdev) of the allocated VF, checked against the config."""
        device = req.published
        if device is None or device.kind != KIND:
            raise ConfigError(
                f"kind sriov-vf needs an SR-IOV VF device, but the allocated "
                f"device {req.device} is {device.kind if device else 'unknown'}",
                "$.kind",
            )
        pf, index = str(device.attributes["pfName"]), int(str(device.attributes["vfIndex"]))
        if req.config.get("parent", pf) != pf:
            raise ConfigError(
                f"parent {req.config['parent']} is not the PF {pf} of the "
                f"allocated VF {req.device}",
                "$.parent",
            )
        if req.config.get("vfIndex", index) != index:
            raise ConfigError(
                f"vfIndex {req.config['vfIndex']} is not the allocated VF {index} of {pf}",
                "$.vfIndex",
            )
        if not sysfs.matches(pf, req.context.sriov_pfs):
            raise DeviceError(f"PF {pf} is not on the operator's list (--sriov-pfs)")
        netdevs = sysfs.Sysfs(req.context.sysfs_root).pci_netdevs(
            str(device.attributes["pciAddress"])
        )
        if not netdevs:
            raise DeviceError(f"VF {index} of {pf} has no netdev (driver unbound?)")
        return pf, index, netdevs[0]

    def validate(self, req: DeviceRequest) -> Validated:
        """The allocated VF exists and the config does not name another one."""
        self._vf(req)
        return common.NetConfig.parse(req.config).validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Journal VF and netdev state, apply VF settings through the PF, claim the netdev."""
        pf_name, index, ifname = self._vf(req)
        cfg = common.NetConfig.parse(req.config)
        pf = netlink.require(pf_name, "SR-IOV PF")
        wanted = {
            "mac": cfg.mac,
            "vlan": req.config.get("vlan"),
            "trust": req.config.get("trust"),
            "spoofchk": req.config.get("spoofchk"),
        }
        wanted = {
            k: int(v) if isinstance(v, bool) else v for k, v in wanted.items() if v is not None
        }
        vf_undo = {"pf": pf_name, "vf": index, "settings": _vf_settings(pf.index, index)}
        req.journal({"vf": vf_undo})
        with netlink.rollback() as steps:
            if wanted:
                steps.append(lambda: _restore_vf(vf_undo))
                netlink.set_link(
                    pf,
                    f"set VF {index} of {pf_name} ({', '.join(sorted(wanted))})",
                    vf={"vf": index, **wanted},
                )
            netdev_cfg = common.NetConfig(cfg.interface_name, cfg.mtu, None, cfg.ips)
            undo, network_data = claimed.claim(
                lambda u: req.journal({"vf": vf_undo, "netdev": u}), ifname, netdev_cfg
            )
        if cfg.mac:
            network_data = common.NetConfig.network_data(cfg, cfg.mac)
        return Prepared(
            edits=common.net_devices_edit(ifname, cfg.interface_name),
            undo={"vf": vf_undo, "netdev": undo},
            network_data=network_data,
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Give the netdev back, then restore the VF settings on the PF."""
        if "netdev" in undo:
            claimed.release(undo["netdev"])
        if "vf" in undo:
            _restore_vf(undo["vf"])


def _vf_settings(pf_index: int, vf: int) -> dict[str, Any]:
    """Current mac/vlan/trust/spoofchk of one VF, read from its PF (empty if unsupported)."""
    msg = netlink.call(
        "read VF settings", lambda: netlink.ipr().link("get", index=pf_index, ext_mask=1)
    )[0]
    for info in (msg.get("IFLA_VFINFO_LIST") or {}).get("attrs", []):
        if info[0] != "IFLA_VF_INFO":
            continue
        values = {n[len("IFLA_VF_") :].lower(): v for n, v in info[1].get("attrs", [])}
        if values.get("mac", {}).get("vf") != vf:
            continue
        return {
            "mac": values["mac"]["mac"],
            "vlan": values.get("vlan", {}).get("vlan", 0),
            "trust": values.get("trust", {}).get("trust"),
            "spoofchk": values.get("spoofchk", {}).get("spoofchk"),
        }
    return {}


def _restore_vf(vf_undo: Mapping[str, Any]) -> None:
    """Put back the VF settings saved before prepare."""
    settings = {
        k: v
        for k, v in (vf_undo.get("settings") or {}).items()
        if k in _VF_SETTINGS and v is not None and v != 2**32 - 1
    }
    if not settings:
        return
    pf = netlink.find(vf_undo["pf"])
    if pf is None:
        raise DeviceError(f"SR-IOV PF {vf_undo['pf']} is gone; cannot restore VF settings")
    netlink.set_link(
        pf, f"restore VF {vf_undo['vf']} of {vf_undo['pf']}", vf={"vf": vf_undo["vf"], **settings}
    )
