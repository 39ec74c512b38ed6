"""Netlink framing (linux/netlink.h): message headers, attributes, errors. Pure, no I/O.

A message is a `struct nlmsghdr` (length, type, flags, sequence number, port id) and a
body; bodies carry attributes (`struct nlattr`: length, type, payload), each padded to
4 bytes. Errors and acknowledgements are NLMSG_ERROR messages (`struct nlmsgerr`),
followed, with NETLINK_EXT_ACK, by attributes such as the kernel's own message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

# Socket options (SOL_NETLINK from bits/socket.h; the rest from linux/netlink.h).
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # errors do not echo the whole request back
NETLINK_EXT_ACK = 11  # errors carry the kernel's message (NLMSGERR_ATTR_MSG)
NETLINK_GET_STRICT_CHK = 12  # dump requests are checked, and their filters honoured

# Message types below NLMSG_MIN_TYPE (0x10).
NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4

# nlmsg_flags
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_CAPPED = 0x100  # in an NLMSG_ERROR: the request was not echoed
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR or NLMSG_DONE: extended-ack attributes follow

NLA_F_NESTED = 1 << 15
NLA_TYPE_MASK = ~(NLA_F_NESTED | 1 << 14) & 0xFFFF  # without NLA_F_NET_BYTEORDER too
NLMSGERR_ATTR_MSG = 1

Request = tuple[int, int, bytes]  # what a request is made of: message type, flags, body

HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
_NLA = struct.Struct("=HH")  # struct nlattr
_I32 = struct.Struct("=i")
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")


def align(length: int) -> int:
    """`length` rounded up to the 4-byte netlink alignment (NLMSG_ALIGN, NLA_ALIGN)."""
    return (length + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded."""
    size = _NLA.size + len(payload)
    return _NLA.pack(size, kind) + payload + b"\0" * (align(size) - size)


def attr_u16(kind: int, value: int) -> bytes:
    """An attribute holding a native-endian u16."""
    return attr(kind, _U16.pack(value))


def attr_u32(kind: int, value: int) -> bytes:
    """An attribute holding a native-endian u32."""
    return attr(kind, _U32.pack(value))


def attr_str(kind: int, value: str) -> bytes:
    """An attribute holding a NUL-terminated string."""
    return attr(kind, value.encode() + b"\0")


def nest(kind: int, *children: bytes) -> bytes:
    """An attribute holding other attributes (sent without NLA_F_NESTED, as iproute2 does)."""
    return attr(kind, b"".join(children))


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """One request: header and body."""
    return HEADER.pack(HEADER.size + len(body), kind, flags, seq, 0) + body


@dataclass(frozen=True)
class Message:
    """One message of a datagram from the kernel."""

    type: int
    flags: int
    seq: int
    body: bytes


def split(data: bytes) -> Iterator[Message]:
    """The messages of one datagram; a malformed length ends it."""
    offset, end = 0, len(data)
    while offset + HEADER.size <= end:
        length, kind, flags, seq, _ = HEADER.unpack_from(data, offset)
        if length < HEADER.size or offset + length > end:
            return
        yield Message(kind, flags, seq, data[offset + HEADER.size : offset + length])
        offset += align(length)


def attrs(data: bytes, offset: int = 0) -> dict[int, bytes]:
    """The attributes from `offset` on, by type (nested flag cleared; the last one wins)."""
    return dict(attr_list(data, offset))


def attr_list(data: bytes, offset: int = 0) -> list[tuple[int, bytes]]:
    """The attributes from `offset` on, in order (for lists of repeated types)."""
    out = []
    end = len(data)
    while offset + _NLA.size <= end:
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size or offset + length > end:
            break
        out.append((kind & NLA_TYPE_MASK, data[offset + _NLA.size : offset + length]))
        offset += align(length)
    return out


def u16(payload: bytes) -> int:
    """A native-endian u16 payload."""
    return int(_U16.unpack_from(payload)[0])


def u32(payload: bytes) -> int:
    """A native-endian u32 payload."""
    return int(_U32.unpack_from(payload)[0])


def string(payload: bytes) -> str:
    """A string payload, up to its NUL (if any)."""
    return payload.split(b"\0", 1)[0].decode(errors="replace")


def error(msg: Message) -> tuple[int, str | None]:
    """(errno, the kernel's extended-ack message) of an NLMSG_ERROR or NLMSG_DONE; errno 0
    is an acknowledgement (or a dump's normal end)."""
    if len(msg.body) < _I32.size:
        return 0, None
    code = -_I32.unpack_from(msg.body)[0]
    offset = _I32.size
    if msg.type == NLMSG_ERROR and len(msg.body) >= offset + HEADER.size:
        echoed = HEADER.unpack_from(msg.body, offset)[0]
        offset += HEADER.size if msg.flags & NLM_F_CAPPED else align(echoed)
    text = attrs(msg.body, offset).get(NLMSGERR_ATTR_MSG) if msg.flags & NLM_F_ACK_TLVS else None
    return code, (string(text).strip() or None) if text is not None else None
