"""Route messages (struct rtmsg, linux/rtnetlink.h): requests and their parsing. Pure."""

from __future__ import annotations

import ipaddress
import socket
import struct

from dradriver.kernel.objects import Route
from dradriver.kernel.rtnl import wire

RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY = 1, 4, 5, 6
RTA_MULTIPATH, RTA_TABLE, RTA_VIA = 9, 15, 18
RT_TABLE_MAIN = 254
RTPROT_STATIC = 4  # a route an administrator (here: the pod's configuration) added
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK = 0, 253
RTN_UNICAST = 1

RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope,
# type, flags
RTNEXTHOP = struct.Struct("=HBBi")  # struct rtnexthop: len, flags, hops, ifindex
_FAMILY = struct.Struct("=H")  # struct rtvia: family, then the address

# rtm_type values (RTN_* in linux/rtnetlink.h) -> names.
TYPES = {
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
    11: "xresolve",
}
_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def dump() -> wire.Request:
    """RTM_GETROUTE of every route of every table, every family."""
    body = RTMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)
    return RTM_GETROUTE, wire.NLM_F_REQUEST | wire.NLM_F_DUMP, body


def add(index: int, destination: str, gateway: str | None, metric: int | None) -> wire.Request:
    """RTM_NEWROUTE of a unicast route to `destination` (CIDR) via interface `index` (and
    `gateway`), main table, protocol static, as `ip route add` sends it: link scope for
    an IPv4 route without a gateway (the network is on the link), universe otherwise."""
    try:
        dst = ipaddress.ip_interface(destination)
    except ValueError:
        raise ValueError(f"route destination {destination!r} is not an address/prefix") from None
    family = socket.AF_INET if dst.version == 4 else socket.AF_INET6
    scope = RT_SCOPE_LINK if family == socket.AF_INET and not gateway else RT_SCOPE_UNIVERSE
    flags = wire.NLM_F_REQUEST | wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
    dst_len = dst.network.prefixlen
    body = RTMSG.pack(family, dst_len, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, scope, RTN_UNICAST, 0)
    if dst_len:  # a default route names no destination
        body += wire.attr(RTA_DST, dst.ip.packed)
    body += wire.attr_u32(RTA_OIF, index)
    if gateway:
        try:
            via = ipaddress.ip_address(gateway)
        except ValueError:
            raise ValueError(f"route gateway {gateway!r} is not an address") from None
        if via.version != dst.version:
            raise ValueError(f"route gateway {gateway} is not of the family of {destination}")
        body += wire.attr(RTA_GATEWAY, via.packed)
    if metric is not None:
        if not 0 <= metric <= 0xFFFFFFFF:
            raise ValueError(f"route metric {metric} is not between 0 and 4294967295")
        body += wire.attr_u32(RTA_PRIORITY, metric)
    return RTM_NEWROUTE, flags, body


def parse(body: bytes) -> Route | None:
    """The Route of one RTM_NEWROUTE message body (None: not IPv4 or IPv6)."""
    family, dst_len, _, _, table, _, _, kind, _ = RTMSG.unpack_from(body)
    if family not in _FAMILIES:
        return None
    a = wire.attrs(body, RTMSG.size)
    gateways = _gateways(family, a)
    for hop in _hops(a.get(RTA_MULTIPATH, b"")):
        gateways += _gateways(family, hop)
    dst = socket.inet_ntop(family, a[RTA_DST]) if RTA_DST in a else _ANY[family]
    return Route(
        dst=f"{dst}/{dst_len}",
        type=TYPES.get(kind, str(kind)),
        table=wire.u32(a[RTA_TABLE]) if RTA_TABLE in a else table,
        gateways=tuple(gateways),
        oif=wire.u32(a[RTA_OIF]) if RTA_OIF in a else None,
        metric=wire.u32(a[RTA_PRIORITY]) if RTA_PRIORITY in a else None,
    )


_ANY = {socket.AF_INET: "0.0.0.0", socket.AF_INET6: "::"}


def _gateways(family: int, a: dict[int, bytes]) -> list[str]:
    """RTA_GATEWAY (in the route's family) and RTA_VIA (in its own, e.g. IPv6 for IPv4)."""
    out = []
    if RTA_GATEWAY in a:
        out.append(socket.inet_ntop(family, a[RTA_GATEWAY]))
    via = a.get(RTA_VIA)
    if via is not None and len(via) > _FAMILY.size:
        via_family = _FAMILY.unpack_from(via)[0]
        if via_family in _FAMILIES:
            out.append(socket.inet_ntop(via_family, via[_FAMILY.size :]))
    return out


def _hops(data: bytes) -> list[dict[int, bytes]]:
    """The attributes of each next hop of RTA_MULTIPATH (an array of struct rtnexthop,
    each followed by its own attributes)."""
    out = []
    offset = 0
    while offset + RTNEXTHOP.size <= len(data):
        length = RTNEXTHOP.unpack_from(data, offset)[0]
        if length < RTNEXTHOP.size or offset + length > len(data):
            break
        out.append(wire.attrs(data[offset : offset + length], RTNEXTHOP.size))
        offset += wire.align(length)
    return out
