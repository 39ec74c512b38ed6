"""Address messages (struct ifaddrmsg, linux/if_addr.h): requests and their parsing. Pure."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

from dradriver.kernel.rtnl import wire

RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
IFA_ADDRESS, IFA_LOCAL = 1, 2
RT_SCOPE_UNIVERSE = 0

IFADDR = struct.Struct("=BBBBI")  # struct ifaddrmsg: family, prefixlen, flags, scope, index


@dataclass(frozen=True)
class Address:
    """One address of one interface, as a RTM_NEWADDR reports it."""

    index: int
    address: str  # IFA_LOCAL if present (the local end of a point-to-point), else IFA_ADDRESS
    prefixlen: int
    scope: int


def _family_and_bytes(address: str) -> tuple[int, bytes]:
    ip = ipaddress.ip_address(address)
    return (socket.AF_INET if ip.version == 4 else socket.AF_INET6), ip.packed


def _change(kind: int, flags: int, index: int, address: str, prefixlen: int) -> wire.Request:
    family, raw = _family_and_bytes(address)
    body = IFADDR.pack(family, prefixlen, 0, RT_SCOPE_UNIVERSE, index)
    if family == socket.AF_INET:  # IFA_LOCAL is the address itself; IFA_ADDRESS its peer
        body += wire.attr(IFA_LOCAL, raw)
    return kind, flags, body + wire.attr(IFA_ADDRESS, raw)


def add(index: int, address: str, prefixlen: int) -> wire.Request:
    """RTM_NEWADDR of a permanent, global-scope address."""
    flags = wire.NLM_F_REQUEST | wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
    return _change(RTM_NEWADDR, flags, index, address, prefixlen)


def delete(index: int, address: str, prefixlen: int) -> wire.Request:
    """RTM_DELADDR of one address."""
    return _change(RTM_DELADDR, wire.NLM_F_REQUEST | wire.NLM_F_ACK, index, address, prefixlen)


def dump(index: int = 0) -> wire.Request:
    """RTM_GETADDR of every address (of one interface if `index`: the kernel filters with
    NETLINK_GET_STRICT_CHK, older kernels send all)."""
    body = IFADDR.pack(socket.AF_UNSPEC, 0, 0, 0, index)
    return RTM_GETADDR, wire.NLM_F_REQUEST | wire.NLM_F_DUMP, body


def parse(body: bytes) -> Address | None:
    """The address of one RTM_NEWADDR message body (None: not IPv4 or IPv6)."""
    family, prefixlen, _, scope, index = IFADDR.unpack_from(body)
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    a = wire.attrs(body, IFADDR.size)
    raw = a.get(IFA_LOCAL) or a.get(IFA_ADDRESS)
    if raw is None:
        return None
    return Address(index, socket.inet_ntop(family, raw), prefixlen, scope)
