"""sriov-vf: an SR-IOV virtual function's netdev, with VF settings applied through its PF.

VFs are published one device each, from the physical functions the operator lists
(--sriov-pfs). The VF is the allocated one: `parent` + `vfIndex` from the original
design are accepted but must name it (an absent vfIndex means the allocated VF, not 0).
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dradriver.base.errors import ConfigError, DeviceError
from dradriver.contract import naming
from dradriver.contract.hookspecs import Device, DeviceRequest, HandlerContext, Prepared, Validated
from dradriver.kernel import netlink
from dradriver.kit import hostif, links, netconfig, shaping, sysfs

KIND = "sriov-vf"
_UNSET = 2**32 - 1  # what a PF reports for a VF setting it does not support
_LINK_STATES = ("auto", "enable", "disable")
MAC_RETRY_SECONDS = 3.0
_RATES = ("minTxRate", "maxTxRate")  # Mb/s; maxTxRate also from a bandwidth request
# The VF settings a config sets through the PF, each applied (and refused) on its own, in
# this order: config keys -> the VfSettings fields one request carries.
_GROUPS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("macAddress",), ("mac",)),
    (("vlan", "vlanQoS"), ("vlan", "qos")),
    (("spoofchk",), ("spoofchk",)),
    (("trust",), ("trust",)),
    (("linkState",), ("link_state",)),
    (_RATES, ("min_tx_rate", "max_tx_rate")),
)
# The config key each VF setting comes from.
_KEY_OF = {f: k for keys, fields in _GROUPS for k, f in zip(keys, fields, strict=True)}


@dataclass(frozen=True)
class VfUndo:
    """A VF's settings on its PF before prepare changed them."""

    pf: str
    vf: int
    settings: netlink.VfSettings
    # The VF netdev's own MAC before a MAC set through the PF reached it (its driver
    # takes the PF's at a reset: restored when the PF's is cleared), and its name.
    netdev: str | None = None
    netdev_mac: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored in the allocation record (the settings prepare changes, as they were)."""
        kept = {k: v for k, v in vars(self.settings).items() if v is not None}
        out: dict[str, Any] = {"pf": self.pf, "vf": self.vf, "settings": kept}
        if self.netdev and self.netdev_mac:
            out |= {"netdev": self.netdev, "netdevMac": self.netdev_mac}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VfUndo:
        """Read a stored payload (unknown keys ignored; records before 0.3 hold mac, vlan,
        trust and spoofchk, whatever prepare changed)."""
        raw = data.get("settings") or {}

        def flag(key: str) -> bool | None:
            value = raw.get(key)
            return None if value is None or value == _UNSET else bool(value)

        def number(key: str) -> int | None:
            value = raw.get(key)
            return None if value is None else int(value)

        state = raw.get("link_state")
        settings = netlink.VfSettings(
            mac=raw.get("mac"),
            vlan=number("vlan"),
            trust=flag("trust"),
            spoofchk=flag("spoofchk"),
            qos=number("qos"),
            link_state=state if state in _LINK_STATES else None,
            min_tx_rate=number("min_tx_rate"),
            max_tx_rate=number("max_tx_rate"),
        )
        netdev, mac = data.get("netdev"), data.get("netdevMac")
        return cls(
            str(data["pf"]),
            int(data["vf"]),
            settings,
            str(netdev) if netdev else None,
            str(mac) if mac else None,
        )


@dataclass(frozen=True)
class SriovUndo:
    """Undo payload of a VF: its settings, and its netdev once claimed."""

    vf: VfUndo
    netdev: hostif.ClaimedInterface | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored in the allocation record."""
        out: dict[str, Any] = {"vf": self.vf.to_json()}
        if self.netdev is not None:
            out["netdev"] = self.netdev.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SriovUndo:
        """Read a stored payload (unknown keys ignored)."""
        netdev = data.get("netdev")
        return cls(
            VfUndo.from_json(data["vf"]),
            hostif.ClaimedInterface.from_json(netdev) if netdev else None,
        )


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
        pf_up = fs.read("class", "net", pf, "carrier") != "0"  # unknown counts as up
        speed = fs.link_speed(pf)  # the VFs share their PF's port
        capacity = shaping.link_capacity(context, pf, speed)
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
                "pfPciAddress": pf_pci,
            }
            for name, value in (
                ("macAddress", fs.read("class", "net", netdevs[0], "address")),
                ("numaNode", fs.pci_numa_node(vf_pci)),
                ("driver", fs.link_name("bus", "pci", "devices", vf_pci, "driver")),
                ("linkSpeedMbps", speed),
            ):
                if value is not None:
                    attrs[name] = value
            attrs.update(sysfs.pci_attributes(fs, vf_pci, context.multus_resource_name))
            devices.append(
                Device(
                    naming.published_device_name("vf", vf_pci),
                    attrs,
                    capacity=capacity,
                    healthy=pf_up,
                    health_message="" if pf_up else f"its PF {pf} has no carrier",
                )
            )
    return devices


class SriovVfHandler:
    """Hands the allocated VF's netdev to the container."""

    type = "netdev"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """Common fields plus parent/vfIndex (must name the allocated VF) and VF settings."""
        return netconfig.schema(
            {
                "parent": dict(
                    netconfig.PARENT, description="PF of the VF (must be the allocated)"
                ),
                "vfIndex": {"type": "integer", "minimum": 0},
                "vlan": {"type": "integer", "minimum": 0, "maximum": 4094},
                "vlanQoS": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 7,
                    "description": "802.1p priority of the VLAN's frames (needs vlan)",
                },
                "trust": {"type": "boolean"},
                "spoofchk": {"type": "boolean"},
                "linkState": {
                    "enum": list(_LINK_STATES),
                    "description": "auto: follow the PF's link; enable/disable: force it",
                },
                "minTxRate": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "guaranteed transmit rate, Mb/s (0: none)",
                },
                "maxTxRate": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "transmit rate limit, Mb/s (0: none); a claim that "
                    "requests bandwidth gets it as its limit instead",
                },
            },
            keeps_addresses=True,
        )

    def _vf(self, req: DeviceRequest) -> tuple[str, int, str]:
        """(PF name, VF index, VF netdev) of the allocated VF, checked against the config."""
        device = req.published
        if device is None or device.kind != KIND:
            raise ConfigError(
                f"kind sriov-vf needs an SR-IOV VF device, but the allocated "
                f"device {req.device} is {device.kind if device else 'unknown'}",
                f"{netconfig.NETDEV_PATH}.kind",
            )
        pf, index = str(device.attributes["pfName"]), int(str(device.attributes["vfIndex"]))
        if req.config.get("parent", pf) != pf:
            raise ConfigError(
                f"parent {req.config['parent']} is not the PF {pf} of the "
                f"allocated VF {req.device}",
                f"{netconfig.NETDEV_PATH}.parent",
            )
        if req.config.get("vfIndex", index) != index:
            raise ConfigError(
                f"vfIndex {req.config['vfIndex']} is not the allocated VF {index} of {pf}",
                f"{netconfig.NETDEV_PATH}.vfIndex",
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
        """The allocated VF exists, the config names no other one, and its MTU and
        addresses fit the VF's netdev and the node."""
        _, _, ifname = self._vf(req)
        _settings(req)
        return hostif.checked(req, ifname, shares=True).validated()  # on its PF's port

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Journal VF and netdev state, apply VF settings through the PF, claim the netdev."""
        pf_name, index, ifname = self._vf(req)
        cfg = netconfig.NetConfig.parse(req.config)
        config, derived = _settings(req)
        pf = netlink.require(pf_name, "SR-IOV PF")
        current = netlink.vf_settings(pf, index) or netlink.VfSettings()
        wanted = _wanted(config)
        before = {f: getattr(current, f) for keys, fields in wanted for f in fields}
        vf_link = netlink.require(ifname, "VF netdev")
        own_mac = vf_link.address if cfg.mac and vf_link.address != cfg.mac else None
        vf_undo = VfUndo(pf_name, index, netlink.VfSettings(**before), ifname, own_mac)
        req.journal(SriovUndo(vf_undo).to_json())
        with netlink.rollback() as steps:
            if wanted:
                steps.append(lambda: _restore_vf(vf_undo))
            for keys, fields in wanted:
                group = {f: _value(config, f, current) for f in fields}
                given = [k for k in keys if k in config]
                told = ", ".join(
                    f"{k}={config[k]}" + (f" (from {shaping.FIELD})" if k in derived else "")
                    for k in given
                )
                own = [k for k in given if k not in derived]
                field = f"{netconfig.NETDEV_PATH}.{own[0]}" if own else shaping.FIELD
                what = f"{field}: PF {pf_name} refused {told} for VF {index}"
                netlink.set_vf(pf, index, what, netlink.VfSettings(**group))
            if own_mac and cfg.mac:  # cfg.mac for the type checker
                _take_pf_mac(vf_link, cfg.mac, f"VF {index} of {pf_name}")
            netdev_cfg = replace(cfg, mac=None)  # the PF sets the VF's MAC
            claimed, network_data = hostif.claim(
                req.journal,
                ifname,
                netdev_cfg,
                wrap=lambda c: SriovUndo(vf_undo, c).to_json(),
                on_host=links.on_host(req),
            )
        inside = netconfig.pod_interface(ifname, cfg, network_data.ips, returns=True)
        if cfg.mac:
            network_data = cfg.network_data(cfg.mac)
        return Prepared(
            edits=links.net_devices_edit(ifname, cfg.interface_name),
            undo=SriovUndo(vf_undo, claimed).to_json(),
            network_data=network_data,
            pod_interfaces=(inside,),
        )

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Give the netdev back, then restore the VF settings on the PF."""
        payload = SriovUndo.from_json(undo)
        if payload.netdev is not None:
            hostif.release(payload.netdev)
        _restore_vf(payload.vf)


def _settings(req: DeviceRequest) -> tuple[Mapping[str, Any], frozenset[str]]:
    """The VF settings the claim asks for, and which of them its request (not its
    config) sets: the config's, with the bandwidth it requested as maxTxRate (whole
    Mb/s, rounded up); a config that sets maxTxRate too is refused."""
    rate = shaping.megabits(req)
    if not rate:
        return req.config, frozenset()
    if "maxTxRate" in req.config:
        raise ConfigError(
            f"maxTxRate and the request's {shaping.FIELD} ({rate} Mb/s) both limit the "
            "VF: leave maxTxRate out of the claim's config and its DeviceClass's",
            f"{netconfig.NETDEV_PATH}.maxTxRate",
        )
    return {**req.config, "maxTxRate": rate}, frozenset({"maxTxRate"})


def _wanted(config: Mapping[str, Any]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The groups of VF settings the config sets, checked together (vlanQoS needs vlan)."""
    if "vlanQoS" in config and "vlan" not in config:
        raise ConfigError("vlanQoS needs vlan", f"{netconfig.NETDEV_PATH}.vlanQoS")
    return [(keys, fields) for keys, fields in _GROUPS if any(k in config for k in keys)]


def _value(config: Mapping[str, Any], field: str, current: netlink.VfSettings) -> Any:
    """What VF setting `field` becomes: the config's value, or the one it has now for
    the other half of a pair the config sets one half of (a rate), or 0 (qos)."""
    key = _KEY_OF[field]
    if key in config:
        return config[key]
    return getattr(current, field) if field in ("min_tx_rate", "max_tx_rate") else 0


def _take_pf_mac(link: netlink.Link, mac: str, vf: str) -> None:
    """Make the VF netdev carry the MAC its PF now assigns it. Some VF drivers take it
    when asked (mlx5); igbvf takes it only at a reset, which bringing the down link up
    and down again is."""
    what = f"{netconfig.NETDEV_PATH}.macAddress: {vf} ({link.name})"
    with contextlib.suppress(netlink.NetlinkError):  # refused: the PF's MAC is binding
        netlink.set_link(link, f"{what}: set its MAC", address=mac)
    now = netlink.require(link.name, "VF netdev")
    if now.address != mac and not now.up:
        netlink.set_link(now, f"{what}: reset it (up)", state="up")
        netlink.set_link(now, f"{what}: reset it (down)", state="down")
        now = netlink.require(link.name, "VF netdev")
    if now.address != mac:
        raise DeviceError(
            f"{what}: its PF assigns it {mac}, but its driver kept {now.address}: "
            "reload the VF's driver, or leave macAddress out"
        )


def _restore_vf(vf_undo: VfUndo) -> None:
    """Put back the VF settings saved before prepare, each one that differs now (a
    setting the PF refused was never changed, and is not asked for again), then the VF
    netdev's own MAC."""
    saved = {k: v for k, v in vars(vf_undo.settings).items() if v is not None}
    if not saved:
        return
    pf = netlink.find(vf_undo.pf)
    if pf is None:
        raise DeviceError(f"SR-IOV PF {vf_undo.pf} is gone; cannot restore VF settings")
    now = netlink.vf_settings(pf, vf_undo.vf) or netlink.VfSettings()
    for _, fields in _GROUPS:
        group = {f: saved[f] for f in fields if f in saved}
        if group and any(getattr(now, f) != v for f, v in group.items()):
            what = f"restore VF {vf_undo.vf} of {vf_undo.pf} ({', '.join(group)})"
            netlink.set_vf(pf, vf_undo.vf, what, netlink.VfSettings(**group))
    if vf_undo.netdev and vf_undo.netdev_mac:
        _restore_own_mac(vf_undo.netdev, vf_undo.netdev_mac, f"VF {vf_undo.vf} of {vf_undo.pf}")


def _restore_own_mac(name: str, mac: str, vf: str) -> None:
    """Give the VF netdev its own MAC back once its PF assigns none. The VF asks the PF
    through their mailbox, which igbvf only sets up when the link is opened: a link that
    is down is brought up for the request and down again; asked again for up to
    MAC_RETRY_SECONDS while the PF refuses (the VF still resetting)."""
    deadline = time.monotonic() + MAC_RETRY_SECONDS
    what = f"restore the MAC of {name} ({vf})"
    while (link := netlink.find(name)) is not None and link.address != mac:
        try:
            netlink.set_link(link, what, address=mac)
        except netlink.NetlinkError as exc:
            if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
            if not link.up:
                netlink.set_link(link, f"{what}: open it", state="up")
                try:
                    netlink.set_link(link, what, address=mac)
                except netlink.NetlinkError:
                    time.sleep(0.1)
                finally:
                    netlink.set_link(link, f"{what}: close it again", state="down")
            else:
                time.sleep(0.1)
