"""What runc (>= 1.4) does with a CDI netDevices entry, done the same way with netlink."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from tests.support import netns

IFA_F_PERMANENT = 0x80
RT_SCOPE_UNIVERSE = 0


@dataclass
class Seen:
    """An interface as the container sees it."""

    name: str
    mtu: int
    mac: str
    up: bool
    addresses: list[str]


def move_like_runc(host_name: str, container_name: str, pod_ns: str) -> None:
    """Down, remember permanent global addresses, move+rename in one request, re-add, up.

    Runs in the current (host) namespace, as runc does before it enters the container.
    """
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=host_name)
        if not index:
            raise LookupError(f"runc: link {host_name} not found")
        ipr.link("set", index=index[0], state="down")
        keep = [
            (a.get("address"), a["prefixlen"])
            for a in ipr.get_addr(index=index[0])
            if a["scope"] == RT_SCOPE_UNIVERSE
            and (a.get("IFA_FLAGS") or a["flags"]) & IFA_F_PERMANENT
        ]
        fd = netns.fd(pod_ns)
        try:
            ipr.link("set", index=index[0], net_ns_fd=fd, ifname=container_name)
        finally:
            os.close(fd)
    with netns.inside(pod_ns), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=container_name)[0]
        for address, prefixlen in keep:
            ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
        ipr.link("set", index=index, state="up")


def apply_cdi(spec_file: Path, pod_ns: str) -> list[str]:
    """Apply every netDevices edit of a CDI spec file into `pod_ns`; return container names."""
    spec = json.loads(spec_file.read_text())
    names = []
    for device in spec["devices"]:
        for nd in device["containerEdits"].get("netDevices") or []:
            move_like_runc(nd["hostInterfaceName"], nd["name"], pod_ns)
            names.append(nd["name"])
    return names


def seen_in(pod_ns: str, name: str) -> Seen:
    """How interface `name` looks inside `pod_ns`."""
    with netns.inside(pod_ns), IPRoute() as ipr:
        link = ipr.link("get", ifname=name)[0]
        addrs = [
            f"{a.get('address')}/{a['prefixlen']}"
            for a in ipr.get_addr(index=link["index"])
            if a["scope"] == RT_SCOPE_UNIVERSE
        ]
        return Seen(name, link.get("mtu"), link.get("address"), bool(link["flags"] & 1), addrs)


def links_in(ns: str) -> list[dict[str, Any]]:
    """Name and alias of every link in `ns` except lo."""
    with netns.inside(ns), IPRoute() as ipr:
        return [
            {"name": m.get("ifname"), "alias": m.get("IFLA_IFALIAS")}
            for m in ipr.get_links()
            if m.get("ifname") != "lo"
        ]


def return_to_host(pod_ns: str, host_ns: str, name: str) -> None:
    """What the kernel does with a physical NIC when the pod's namespace is destroyed:
    it goes back to the host namespace under its current (container) name. A veth
    standing in for a NIC would die instead, so tests move it back explicitly."""
    fd = netns.fd(host_ns)
    try:
        netns.ip(pod_ns, "link", "set", name, "netns", f"/proc/{os.getpid()}/fd/{fd}")
    finally:
        os.close(fd)
