"""RDMA netlink (NETLINK_RDMA, the nldev client): device list, netns mode, netns moves.

What `rdma dev`, `rdma system show netns` and `rdma dev set <dev> netns <ns>` send,
built and parsed here (pure) and sent over a socket of the calling thread's network
namespace (in exclusive netns mode each namespace sees only its own RDMA devices).
Values from the kernel's include/uapi/rdma/rdma_netlink.h; the byte layout is checked by
tests/unit/test_rdmanl.py against vectors derived by hand.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_SET = 2
RDMA_NLDEV_CMD_SYS_GET = 6
RDMA_NLDEV_ATTR_DEV_INDEX = 1  # u32
RDMA_NLDEV_ATTR_DEV_NAME = 2  # string
RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66  # u8: 1 shared, 0 exclusive
RDMA_NLDEV_NET_NS_FD = 68  # u32

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_ATTR = struct.Struct("=HH")  # nlattr: len, type
_TIMEOUT = 5.0


def msg_type(op: int) -> int:
    """RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)."""
    return (RDMA_NL_NLDEV << 10) + op


class RdmaNetlinkError(OSError):
    """The kernel refused an RDMA netlink request."""


def _align(n: int) -> int:
    return (n + 3) & ~3


def attr_u32(kind: int, value: int) -> bytes:
    """One nlattr holding a native-endian u32."""
    return _ATTR.pack(8, kind) + struct.pack("=I", value)


def encode(op: int, flags: int, seq: int, attrs: bytes = b"") -> bytes:
    """One nldev request: the header and its attributes."""
    return _HEADER.pack(_HEADER.size + len(attrs), msg_type(op), flags, seq, 0) + attrs


def attributes(data: bytes) -> dict[int, bytes]:
    """The attributes of one message body, by type (nested flag bits cleared)."""
    out: dict[int, bytes] = {}
    offset = 0
    while offset + _ATTR.size <= len(data):
        length, kind = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size or offset + length > len(data):
            break
        out[kind & 0x3FFF] = data[offset + _ATTR.size : offset + length]
        offset += _align(length)
    return out


@dataclass(frozen=True)
class Message:
    """One netlink message of an answer."""

    type: int
    flags: int
    seq: int
    attrs: Mapping[int, bytes]
    error: int = 0  # for NLMSG_ERROR: the errno (0: an ACK)


def messages(data: bytes) -> Iterator[Message]:
    """The messages in one datagram of an answer."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, flags, seq, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            return
        body = data[offset + _HEADER.size : offset + length]
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", body)
            yield Message(kind, flags, seq, {}, -code)
        else:
            yield Message(kind, flags, seq, attributes(body))
        offset += _align(length)


def _string(value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode(errors="replace")


def _u32(value: bytes) -> int:
    return int(struct.unpack_from("=I", value)[0])


def _request(payload: bytes, seq: int) -> list[Message]:
    """Send one request on a fresh socket of this thread's namespace; its answer."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA) as sock:
        sock.settimeout(_TIMEOUT)
        sock.bind((0, 0))
        sock.send(payload)
        answer: list[Message] = []
        while True:
            data = sock.recv(65536)
            for msg in messages(data):
                if msg.seq != seq:
                    continue
                if msg.type == NLMSG_ERROR:
                    if msg.error:
                        raise RdmaNetlinkError(msg.error, os.strerror(msg.error))
                    return answer  # the ACK
                if msg.type == NLMSG_DONE:
                    return answer
                answer.append(msg)
                if not msg.flags & NLM_F_MULTI:
                    return answer


def devices() -> dict[str, int]:
    """RDMA devices this namespace sees: name -> index."""
    out = {}
    for msg in _request(encode(RDMA_NLDEV_CMD_GET, NLM_F_REQUEST | NLM_F_DUMP, 1), 1):
        if RDMA_NLDEV_ATTR_DEV_NAME in msg.attrs and RDMA_NLDEV_ATTR_DEV_INDEX in msg.attrs:
            out[_string(msg.attrs[RDMA_NLDEV_ATTR_DEV_NAME])] = _u32(
                msg.attrs[RDMA_NLDEV_ATTR_DEV_INDEX]
            )
    return out


def exclusive() -> bool:
    """Whether RDMA devices are in exclusive netns mode (`rdma system show netns`)."""
    answer = _request(encode(RDMA_NLDEV_CMD_SYS_GET, NLM_F_REQUEST, 2), 2)
    for msg in answer:
        mode = msg.attrs.get(RDMA_NLDEV_SYS_ATTR_NETNS_MODE)
        if mode:
            return mode[0] == 0
    return False


def set_netns_request(index: int, netns_fd: int, seq: int = 3) -> bytes:
    """RDMA_NLDEV_CMD_SET moving device `index` into the namespace of `netns_fd`."""
    attrs = attr_u32(RDMA_NLDEV_ATTR_DEV_INDEX, index) + attr_u32(RDMA_NLDEV_NET_NS_FD, netns_fd)
    return encode(RDMA_NLDEV_CMD_SET, NLM_F_REQUEST | NLM_F_ACK, seq, attrs)


def move(name: str, netns_fd: int) -> None:
    """Move RDMA device `name` (seen from this namespace) into the namespace `netns_fd`."""
    index = devices().get(name)
    if index is None:
        raise RdmaNetlinkError(errno.ENODEV, f"no RDMA device {name} in this namespace")
    _request(set_netns_request(index, netns_fd), 3)
