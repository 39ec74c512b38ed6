"""Host interfaces handed whole to a pod (host-device, SR-IOV VF, RoCE) and given back.

Which interfaces may be handed out is the operator's choice (`refusal`). In CDI mode the
runtime moves the interface into the pod and never moves it back; in NRI mode the
driver moves it in at sandbox creation and back when the sandbox stops. When the pod's
network namespace is destroyed the kernel returns a physical interface to the host
under its container name (or `dev<N>` on a clash); `release` finds it by MAC address,
renames it back and restores MTU, MAC, addresses and state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dradriver.base.errors import DeviceError
from dradriver.contract import naming
from dradriver.contract.hookspecs import DeviceRequest, HandlerContext, NetworkData
from dradriver.kernel import netlink
from dradriver.kit import netconfig, sysfs
from dradriver.kit.netconfig import NetConfig, configure

PROC = Path("/proc")
_KERNEL_FALLBACK_NAME = re.compile(r"dev[0-9]+")


def primary_interfaces() -> set[str]:
    """Interfaces holding the node's default route: never handed to a pod."""
    return sysfs.default_route_interfaces(PROC)


def refusal(context: HandlerContext, ifname: str, primary: set[str]) -> str | None:
    """Why `ifname` may not be handed to a pod (None if it may); `primary`: see above."""
    if ifname == "lo":
        return "loopback"
    if ifname in primary:
        return "it holds the node's default route"
    if naming.is_host_ifname(ifname):
        return "it was created by this driver"
    if not sysfs.matches(ifname, context.parent_interfaces):
        return "it is not on the operator's allow-list (--parent-interfaces)"
    return None


def checked(
    req: DeviceRequest,
    ifname: str,
    config: Mapping[str, Any] | None = None,
    path: str = netconfig.NETDEV_PATH,
    shares: bool = False,
) -> NetConfig:
    """The config for handing `ifname` to the pod, checked against the node and the
    interface: its MTU limits; its own addresses go with it, so they are not the node's
    (`shares`: the interface is on one of the node's links, as a VF is on its PF's)."""
    link = netlink.find(ifname)
    own = (link.index,) if link is not None else ()
    kept = [f"{a}/{p}" for a, p in netlink.addresses(link.index)] if link is not None else []
    cfg = netconfig.checked(req, config, path, own, kept, shares)
    if link is not None:
        netconfig.check_mtu(cfg, path, link)
        netconfig.check_ipv6_mtu(cfg, path, cfg.mtu or link.mtu)
    return cfg


@dataclass(frozen=True)
class ClaimedInterface:
    """Undo payload of a host interface handed to a pod: how to give it back."""

    host_name: str
    container_name: str
    mtu: int | None
    mac: str | None
    up: bool
    addresses: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    expected_mac: str | None = None
    # What identifies the NIC and no claim can set (records before 0.2 have neither):
    index: int | None = None  # its ifindex on the host when it was claimed
    permanent_mac: str | None = None  # its hardware's own address, where it has one

    def to_json(self) -> dict[str, Any]:
        """The payload as stored in the allocation record (keys as version 1 wrote them)."""
        return {
            "hostName": self.host_name,
            "containerName": self.container_name,
            "mtu": self.mtu,
            "mac": self.mac,
            "up": self.up,
            "addresses": list(self.addresses),
            "added": list(self.added),
            "expectedMac": self.expected_mac,
            "index": self.index,
            "permanentMac": self.permanent_mac,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClaimedInterface:
        """Read a stored payload (unknown keys ignored)."""
        return cls(
            host_name=str(data["hostName"]),
            container_name=str(data["containerName"]),
            mtu=data.get("mtu"),
            mac=data.get("mac"),
            up=bool(data.get("up")),
            addresses=tuple(data.get("addresses") or ()),
            added=tuple(data.get("added") or ()),
            expected_mac=data.get("expectedMac"),
            index=data.get("index"),
            permanent_mac=data.get("permanentMac"),
        )


def claim(
    journal: Callable[[Mapping[str, Any]], None],
    ifname: str,
    cfg: NetConfig,
    wrap: Callable[[ClaimedInterface], Mapping[str, Any]] | None = None,
    on_host: bool = True,
) -> tuple[ClaimedInterface, NetworkData]:
    """Take `ifname` for the pod: journal its state, set it down, apply the config.

    `wrap` turns the payload into what the handler journals (e.g. inside its own undo).
    Without `on_host` (NRI mode) the claim's addresses are not added on the host: they
    are added in the pod after the move, with the ones the interface had.
    """
    link = netlink.require(ifname, "host")
    original = tuple(f"{a}/{p}" for a, p in netlink.addresses(link.index))
    undo = ClaimedInterface(
        host_name=ifname,
        container_name=cfg.interface_name,
        mtu=link.mtu,
        mac=link.address,
        up=link.up,
        addresses=original,
        added=tuple(str(ip) for ip in cfg.ips if str(ip) not in original),
        expected_mac=cfg.mac or link.address,
        index=link.index,
        permanent_mac=link.permanent_address,
    )
    journal(wrap(undo) if wrap else undo.to_json())  # persisted before the host changes
    with netlink.rollback() as steps:
        steps.append(lambda: release(undo))
        netlink.set_link(link, f"set {ifname} down", state="down")
        mac = configure(link, NetConfig(cfg.interface_name, cfg.mtu, cfg.mac, ()), alias=None)
        for cidr in undo.added if on_host else ():
            address, _, prefix = cidr.partition("/")
            netlink.add_address(link.index, address, int(prefix), ifname)
    return undo, NetworkData(cfg.interface_name, original + undo.added, mac)


def locate(undo: ClaimedInterface) -> netlink.Link | None:
    """Find the claimed interface on the host: original name, container name, or devN.

    A candidate must be the NIC that was claimed, by what no claim can set: its
    permanent hardware address, its ifindex or its original MAC (a VF driver may give a
    VF another permanent address when its PF sets its MAC).
    A name and a MAC alone are not enough: a claim chooses its interface name and MAC,
    and a host interface that happens to match them is not ours to touch.
    """
    for name in (undo.host_name, undo.container_name):
        link = netlink.find(name)
        if link is not None and _is_the_claimed_nic(link, undo):
            return link
    for link in netlink.links():
        if _KERNEL_FALLBACK_NAME.fullmatch(link.name) and _is_the_claimed_nic(link, undo):
            return link
    return None


def _is_the_claimed_nic(link: netlink.Link, undo: ClaimedInterface) -> bool:
    """Whether `link` is the NIC `claim` took (see `locate`)."""
    if link.address not in {undo.expected_mac, undo.mac} - {None}:
        return False
    if undo.permanent_mac is not None and link.permanent_address == undo.permanent_mac:
        return True
    if undo.index is not None:
        return link.index == undo.index or (undo.mac is not None and link.address == undo.mac)
    return True  # a record of a driver before 0.2: name and MAC are all it kept


def release(undo: ClaimedInterface) -> None:
    """Give the interface back to the host as it was before `claim`."""
    link = locate(undo)
    host = undo.host_name
    if link is None:
        raise DeviceError(
            f"interface {host} (MAC {undo.expected_mac}) is not back on the "
            "host yet (is the pod's network namespace still alive?)"
        )
    netlink.set_link(link, f"set {link.name} down", state="down")
    if link.name != host:
        if netlink.find(host) is not None:
            raise DeviceError(f"cannot rename {link.name} back to {host}: the name is taken")
        netlink.set_link(link, f"rename {link.name} back to {host}", ifname=host)
    restore: dict[str, Any] = {}
    if undo.mtu and link.mtu != undo.mtu:
        restore["mtu"] = undo.mtu
    if undo.mac and link.address != undo.mac:
        restore["address"] = undo.mac
    if restore:
        netlink.set_link(link, f"restore {host} ({', '.join(sorted(restore))})", **restore)
    for cidr in undo.added:
        address, _, prefix = cidr.partition("/")
        netlink.delete_address(link.index, address, int(prefix))
    for cidr in undo.addresses:
        address, _, prefix = cidr.partition("/")
        netlink.add_address(link.index, address, int(prefix), host, exist_ok=True)
    if undo.up:
        netlink.set_link(link, f"set {host} up", state="up")
