"""The real kernel behind dradriver.netlink: rtnetlink through pyroute2.

Only this module imports pyroute2, and it is imported on the first netlink call.
Two pyroute2 0.9.7 workarounds live here (design.md, "Netlink through one module"):
GETs are sent without NLM_F_ACK (the ACK would stay queued on the socket forever), and
each thread's socket is reopened every RECYCLE_AFTER requests (it keeps a little state
per request).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError as Pyroute2Error
from pyroute2.netlink.rtnl import RTM_GETLINK

from dradriver import nsfs, rdmanl
from dradriver.log import event
from dradriver.netlink import Link, NetlinkError, Route, VfSettings

T = TypeVar("T")
log = logging.getLogger(__name__)
PROC_SYS = Path("/proc/sys")

# About 1.6 KB of resident memory per request stays on a socket (measured; none once
# the socket is reopened), so a thread's socket is replaced after this many requests
# (a reopen costs ~0.6 ms).
RECYCLE_AFTER = 200
_VF_UNSET = 2**32 - 1  # what a PF reports for a VF setting it does not support
# Our generic create() attribute names -> pyroute2's, per link kind.
# rtm_type values (linux/rtnetlink.h) -> names.
_ROUTE_TYPES = {
    1: "unicast",
    2: "local",
    3: "broadcast",
    4: "anycast",
    5: "multicast",
    6: "blackhole",
    7: "unreachable",
    8: "prohibit",
    9: "throw",
    10: "nat",
}
_CREATE_ATTRS = {
    "macvlan": {"mode": "macvlan_mode"},
    "ipvlan": {"mode": "ipvlan_mode"},
    "ipoib": {"pkey": "ipoib_pkey", "mode": "ipoib_mode"},
}


class Pyroute2Kernel:
    """rtnetlink through one pyroute2 IPRoute socket per thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _ipr(self) -> Any:
        local = self._local
        sock = getattr(local, "ipr", None)
        uses = getattr(local, "uses", 0) + 1
        if sock is not None and uses > RECYCLE_AFTER:
            sock.close()
            sock = None
        if sock is None or getattr(local, "pid", None) != os.getpid():
            sock, uses = IPRoute(), 1
            local.ipr, local.pid = sock, os.getpid()
        local.uses = uses
        return sock

    def close(self) -> None:
        """Close this thread's socket."""
        sock = getattr(self._local, "ipr", None)
        if sock is not None:
            sock.close()
            self._local.ipr = None

    # -- namespaces (a socket stays in the namespace it was opened in) ---------------

    def enter(self, netns: str) -> None:
        """Move this thread into the network namespace at `netns`."""
        if getattr(self._local, "home", None) is not None:
            raise RuntimeError("already inside a network namespace on this thread")
        target = nsfs.open_netns(netns)
        try:
            home = nsfs.current_netns()
        except BaseException:
            os.close(target)
            raise
        try:
            self.close()
            nsfs.setns(target)
        except BaseException:
            os.close(home)
            raise
        finally:
            os.close(target)
        self._local.home = home

    def leave(self) -> None:
        """Back to the namespace this thread left in `enter`."""
        home = getattr(self._local, "home", None)
        if home is None:
            return
        self.close()
        try:
            nsfs.setns(home)
        except OSError as exc:
            # A thread stuck in a pod's namespace would act on the wrong links from now
            # on. It cannot happen short of a kernel bug; the driver is crash-safe, so
            # it stops rather than go on there.
            event(log, logging.CRITICAL, "cannot return to the node's network namespace", error=exc)
            os._exit(70)
        os.close(home)
        self._local.home = None

    def has_netns(self, netns: str) -> bool:
        """Whether the path is a network namespace now."""
        try:
            os.close(nsfs.open_netns(netns))
        except OSError:
            return False
        return True

    def _target(self, netns: str | None) -> tuple[int, bool]:
        """A descriptor for `netns` (None: home) and whether the caller must close it."""
        if netns is None:
            home = getattr(self._local, "home", None)
            if home is None:
                raise NetlinkError("no namespace to return to", errno.EINVAL)
            return home, False
        return nsfs.open_netns(netns), True

    def move(self, index: int, netns: str | None, ifname: str) -> None:
        """Move and rename a link in one request (as runc does)."""
        fd, owned = self._target(netns)
        try:
            self._call(lambda ipr: ipr.link("set", index=index, net_ns_fd=fd, ifname=ifname))
        finally:
            if owned:
                os.close(fd)

    def add_route(
        self, index: int, destination: str, gateway: str | None, metric: int | None
    ) -> None:
        """Add a route (main table, protocol static)."""
        args: dict[str, Any] = {"dst": destination, "oif": index}
        if gateway:
            args["gateway"] = gateway
        if metric is not None:
            args["priority"] = metric
        self._call(lambda ipr: ipr.route("add", **args))

    def write_sysctl(self, path: str, value: str) -> None:
        """Write a sysctl file (this thread's namespace decides which one it is)."""
        with open(PROC_SYS / path, "w") as f:
            f.write(value)

    def has_sysctl(self, path: str) -> bool:
        """Whether the sysctl file exists."""
        return (PROC_SYS / path).is_file()

    def rdma_devices(self) -> list[str]:
        """RDMA devices of this thread's namespace."""
        return sorted(rdmanl.devices())

    def rdma_move(self, name: str, netns: str | None) -> None:
        """Move an RDMA device between namespaces (exclusive netns mode)."""
        fd, owned = self._target(netns)
        try:
            rdmanl.move(name, fd)
        finally:
            if owned:
                os.close(fd)

    def rdma_exclusive(self) -> bool:
        """Whether the RDMA subsystem is in exclusive netns mode."""
        return rdmanl.exclusive()

    def _call(self, fn: Callable[[Any], T]) -> T:
        try:
            return fn(self._ipr())
        except Pyroute2Error as exc:
            raise NetlinkError("netlink request", exc.code) from None

    def links(self) -> list[Link]:
        """Every interface in the current network namespace."""
        return [_to_link(m) for m in self._call(lambda ipr: ipr.get_links())]

    def find(self, name: str) -> Link | None:
        """The interface called `name`, or None."""
        try:
            msgs = self._call(lambda ipr: ipr.link((RTM_GETLINK, NLM_F_REQUEST), ifname=name))
        except NetlinkError as exc:
            if exc.errno in (errno.ENODEV, errno.ENOENT, errno.EINVAL):  # EINVAL: a bad name
                return None
            raise
        return _to_link(msgs[0])

    def create(self, name: str, kind: str, attrs: Mapping[str, Any]) -> None:
        """Create a down link."""
        names = _CREATE_ATTRS.get(kind, {})
        args: dict[str, Any] = {names.get(k, k): v for k, v in attrs.items()}
        if "peer" in args:
            args["peer"] = {"ifname": args["peer"]}
        self._call(lambda ipr: ipr.link("add", ifname=name, kind=kind, **args))

    def set(self, index: int, attrs: Mapping[str, Any]) -> None:
        """Change link attributes."""
        self._call(lambda ipr: ipr.link("set", index=index, **attrs))

    def delete(self, name: str) -> None:
        """Delete a link."""
        self._call(lambda ipr: ipr.link("del", ifname=name))

    def addresses(self, index: int) -> list[tuple[str, int]]:
        """Global-scope addresses of one link."""
        msgs = self._call(lambda ipr: ipr.get_addr(index=index))
        return [(m.get("address"), m["prefixlen"]) for m in msgs if m["scope"] == 0]

    def all_addresses(self) -> list[tuple[int, str, int]]:
        """Every address of every link, any scope (IFA_LOCAL: the local end of a
        point-to-point address)."""
        msgs = self._call(lambda ipr: ipr.get_addr())
        return [
            (m["index"], m.get("IFA_LOCAL") or m.get("IFA_ADDRESS"), m["prefixlen"]) for m in msgs
        ]

    def routes(self) -> list[Route]:
        """Every route of every table, both families."""
        msgs = self._call(lambda ipr: ipr.route("dump", family=socket.AF_UNSPEC))
        return [_to_route(m) for m in msgs if m["family"] in (socket.AF_INET, socket.AF_INET6)]

    def add_address(self, index: int, address: str, prefixlen: int) -> None:
        """Add an address."""
        self._call(lambda ipr: ipr.addr("add", index=index, address=address, prefixlen=prefixlen))

    def delete_address(self, index: int, address: str, prefixlen: int) -> None:
        """Remove an address."""
        self._call(lambda ipr: ipr.addr("del", index=index, address=address, prefixlen=prefixlen))

    def vf_settings(self, pf_index: int, vf: int) -> VfSettings | None:
        """One VF's settings from its PF's IFLA_VFINFO_LIST."""
        [msg] = self._call(lambda ipr: ipr.link("get", index=pf_index, ext_mask=1))
        for info in (msg.get("IFLA_VFINFO_LIST") or {}).get("attrs", []):
            if info[0] != "IFLA_VF_INFO":
                continue
            values = {n[len("IFLA_VF_") :].lower(): v for n, v in info[1].get("attrs", [])}
            if values.get("mac", {}).get("vf") != vf:
                continue
            return VfSettings(
                mac=values["mac"]["mac"],
                vlan=values.get("vlan", {}).get("vlan", 0),
                trust=_vf_bool(values.get("trust", {}).get("trust")),
                spoofchk=_vf_bool(values.get("spoofchk", {}).get("spoofchk")),
            )
        return None

    def set_vf(self, pf_index: int, vf: int, settings: VfSettings) -> None:
        """Set a VF's settings through its PF."""
        wanted: dict[str, Any] = {
            k: int(v) if isinstance(v, bool) else v
            for k, v in (
                ("mac", settings.mac),
                ("vlan", settings.vlan),
                ("trust", settings.trust),
                ("spoofchk", settings.spoofchk),
            )
            if v is not None
        }
        self._call(lambda ipr: ipr.link("set", index=pf_index, vf={"vf": vf, **wanted}))


def _vf_bool(value: int | None) -> bool | None:
    return None if value is None or value == _VF_UNSET else bool(value)


def _to_link(msg: Any) -> Link:
    return Link(
        index=msg["index"],
        name=msg.get("ifname"),
        kind=msg.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) if msg.get("IFLA_LINKINFO") else None,
        alias=msg.get("IFLA_IFALIAS"),
        mtu=msg.get("mtu"),
        address=msg.get("address"),
        up=bool(msg["flags"] & 1),
        link_type=msg["ifi_type"],
        min_mtu=msg.get("IFLA_MIN_MTU") or 0,
        max_mtu=msg.get("IFLA_MAX_MTU") or 0,
    )


def _to_route(msg: Any) -> Route:
    family = msg["family"]
    default = "0.0.0.0" if family == socket.AF_INET else "::"
    gateways = [msg.get("RTA_GATEWAY"), (msg.get("RTA_VIA") or {}).get("addr")]
    for hop in msg.get("RTA_MULTIPATH") or []:
        gateways += [hop.get("RTA_GATEWAY"), (hop.get("RTA_VIA") or {}).get("addr")]
    return Route(
        dst=f"{msg.get('RTA_DST') or default}/{msg['dst_len']}",
        type=_ROUTE_TYPES.get(msg["type"], str(msg["type"])),
        table=msg.get("RTA_TABLE") or msg["table"],
        gateways=tuple(g for g in gateways if g),
        oif=msg.get("RTA_OIF"),
    )
