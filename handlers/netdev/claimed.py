"""Handing an existing host interface to a pod and getting it back (host-device, VF, RoCE).

The runtime moves the interface into the pod and never moves it back. When the pod's
network namespace is destroyed the kernel returns a physical interface to the host
under its container name (or `dev<N>` on a clash); unprepare finds it by MAC address,
renames it back and restores MTU, MAC, addresses and state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from dradriver import netlink
from dradriver.errors import DeviceError
from dradriver.hookspecs import NetworkData
from handlers.netdev import common

_KERNEL_FALLBACK_NAME = re.compile(r"^dev\d+$")


def claim(
    journal: Callable[[Mapping[str, Any]], None], ifname: str, cfg: common.NetConfig
) -> tuple[dict[str, Any], NetworkData]:
    """Take `ifname` for the pod: journal its state, set it down, apply the config."""
    link = netlink.require(ifname, "host")
    original = [f"{a}/{p}" for a, p in netlink.addresses(link.index)]
    undo: dict[str, Any] = {
        "hostName": ifname,
        "containerName": cfg.interface_name,
        "mtu": link.mtu,
        "mac": link.address,
        "up": link.up,
        "addresses": original,
        "added": [str(ip) for ip in cfg.ips if str(ip) not in original],
        "expectedMac": cfg.mac or link.address,
    }
    journal(undo)  # persisted before anything on the host changes
    with netlink.rollback() as steps:
        steps.append(lambda: release(undo))
        netlink.set_link(link, f"set {ifname} down", state="down")
        mac = common.configure(
            link, common.NetConfig(cfg.interface_name, cfg.mtu, cfg.mac, ()), alias=None
        )
        for cidr in undo["added"]:
            address, _, prefix = cidr.partition("/")
            netlink.add_address(link.index, address, int(prefix), ifname)
    ips = tuple(original + undo["added"])
    return undo, NetworkData(cfg.interface_name, ips, mac)


def locate(undo: Mapping[str, Any]) -> netlink.Link | None:
    """Find the claimed interface on the host: original name, container name, or devN."""
    macs = {undo.get("expectedMac"), undo.get("mac")} - {None}
    for name in (undo["hostName"], undo["containerName"]):
        link = netlink.find(name)
        if link is not None and link.address in macs:
            return link
    for link in netlink.links():
        if _KERNEL_FALLBACK_NAME.match(link.name) and link.address in macs:
            return link
    return None


def release(undo: Mapping[str, Any]) -> None:
    """Give the interface back to the host as it was before `claim`."""
    link = locate(undo)
    if link is None:
        raise DeviceError(
            f"interface {undo['hostName']} (MAC {undo.get('expectedMac')}) is not back on the "
            "host yet (is the pod's network namespace still alive?)"
        )
    host = undo["hostName"]
    netlink.set_link(link, f"set {link.name} down", state="down")
    if link.name != host:
        if netlink.find(host) is not None:
            raise DeviceError(f"cannot rename {link.name} back to {host}: the name is taken")
        netlink.set_link(link, f"rename {link.name} back to {host}", ifname=host)
    restore: dict[str, Any] = {}
    if undo.get("mtu") and link.mtu != undo["mtu"]:
        restore["mtu"] = undo["mtu"]
    if undo.get("mac") and link.address != undo["mac"]:
        restore["address"] = undo["mac"]
    if restore:
        netlink.set_link(link, f"restore {host} ({', '.join(sorted(restore))})", **restore)
    for cidr in undo.get("added", []):
        address, _, prefix = cidr.partition("/")
        netlink.delete_address(link.index, address, int(prefix))
    for cidr in undo.get("addresses", []):
        address, _, prefix = cidr.partition("/")
        netlink.add_address(link.index, address, int(prefix), host, exist_ok=True)
    if undo.get("up"):
        netlink.set_link(link, f"set {host} up", state="up")
