"""Route messages (struct rtmsg, linux/rtnetlink.h): the dump request and its parsing. Pure."""

from __future__ import annotations

import socket
import struct

from dradriver.netlink import Route
from dradriver.rtnl import wire

RTM_GETROUTE = 26
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH, RTA_TABLE, RTA_VIA = 1, 4, 5, 9, 15, 18

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
