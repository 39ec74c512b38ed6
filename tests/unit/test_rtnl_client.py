"""How the client reads answers the real kernel cannot be made to give on demand: an
interrupted dump, a datagram larger than the buffer, an overrun. The kernel's side is one
end of a datagram socket pair, fed with messages laid out as the kernel lays them out.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Iterator

import pytest

from dradriver.kernel.netlink import NetlinkError
from dradriver.kernel.rtnl import client, wire
from dradriver.kernel.rtnl.client import Connection, Reply

DUMP = (18, wire.NLM_F_REQUEST | wire.NLM_F_DUMP, b"\0" * 16)


class Kernel:
    """The kernel's ends of the sockets the connection opens (one pair each)."""

    def __init__(self) -> None:
        self.ends: list[socket.socket] = []
        self.opened: list[socket.socket] = []
        self.later: dict[int, list[bytes]] = {}  # datagrams waiting on the n-th socket

    def open(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for data in self.later.pop(len(self.ends), []):
            theirs.send(data)
        self.ends.append(theirs)
        self.opened.append(ours)
        return ours

    def send(self, data: bytes) -> None:
        self.ends[0].send(data)


@pytest.fixture
def pair() -> Iterator[tuple[Connection, Kernel]]:
    kernel = Kernel()
    conn = Connection(timeout=0.3, opener=kernel.open)
    yield conn, kernel
    for sock in kernel.ends + kernel.opened:
        sock.close()


def _msg(kind: int, seq: int, body: bytes, flags: int = wire.NLM_F_MULTI) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body
    return raw + b"\0" * (wire.align(len(raw)) - len(raw))


def _done(seq: int, code: int = 0) -> bytes:
    return _msg(wire.NLMSG_DONE, seq, struct.pack("=i", -code))


def _seqs(kernels: Kernel) -> list[int]:
    """The sequence numbers of the requests the first socket sent."""
    out = []
    kernels.ends[0].setblocking(False)
    try:
        while True:
            out.append(struct.unpack_from("=IHHI", kernels.ends[0].recv(65536))[3])
    except BlockingIOError:
        return out


def test_a_dump_in_several_datagrams_ends_at_done(pair):
    conn, kernels = pair
    kernels.send(_msg(16, 1, b"one") + _msg(16, 1, b"two"))
    kernels.send(_msg(16, 1, b"three") + _done(1))
    assert conn.request(DUMP, Reply.DUMP, "dump") == [b"one", b"two", b"three"]


def test_an_interrupted_dump_is_asked_again(pair):
    conn, kernels = pair
    kernels.send(_msg(16, 1, b"old", wire.NLM_F_MULTI | wire.NLM_F_DUMP_INTR) + _done(1))
    kernels.send(_msg(16, 2, b"new") + _done(2))
    assert conn.request(DUMP, Reply.DUMP, "dump") == [b"new"]
    assert _seqs(kernels) == [1, 2]


def test_a_dump_interrupted_every_time_gives_up(pair):
    conn, kernels = pair
    for seq in range(1, client.DUMP_ATTEMPTS + 1):
        kernels.send(_msg(16, seq, b"x", wire.NLM_F_MULTI | wire.NLM_F_DUMP_INTR) + _done(seq))
    with pytest.raises(NetlinkError) as raised:
        conn.request(DUMP, Reply.DUMP, "list routes")
    assert raised.value.errno == errno.EINTR
    assert str(raised.value).startswith("list routes: Interrupted system call (errno 4)")


def test_replies_to_other_requests_are_skipped(pair):
    conn, kernels = pair
    kernels.send(_msg(16, 7, b"stale") + _done(7))
    kernels.send(_msg(16, 1, b"mine", 0))
    assert conn.request((18, wire.NLM_F_REQUEST, b""), Reply.ONE, "get") == [b"mine"]


def test_a_datagram_larger_than_the_buffer_grows_it_and_asks_again(pair):
    conn, kernels = pair
    big = b"x" * (client.BUFFER + 100)
    kernels.send(_msg(16, 1, big, 0))
    kernels.send(_msg(16, 2, big, 0))
    assert conn.request((18, wire.NLM_F_REQUEST, b""), Reply.ONE, "get") == [big]
    assert len(conn.buffer) > client.BUFFER


def test_a_dump_cut_short_is_asked_again_on_a_new_socket(pair):
    """The cut datagram may have held the dump's end; the kernel runs one dump per socket."""
    conn, kernels = pair
    big = b"x" * (client.BUFFER + 100)
    kernels.send(_msg(16, 1, big) + _done(1))
    kernels.later[1] = [_msg(16, 2, big) + _done(2)]  # what the second socket will get
    assert conn.request(DUMP, Reply.DUMP, "dump") == [big]
    assert len(kernels.opened) == 2 and kernels.opened[0].fileno() == -1  # the first closed


def test_errors_carry_the_kernels_message(pair):
    conn, kernels = pair
    tlv = struct.pack("=HH", 4 + 8, wire.NLMSGERR_ATTR_MSG) + b"no room\0"
    body = struct.pack("=i", -errno.ENOSPC) + struct.pack("=IHHII", 16, 16, 5, 1, 0) + tlv
    kernels.send(_msg(wire.NLMSG_ERROR, 1, body, wire.NLM_F_CAPPED | wire.NLM_F_ACK_TLVS))
    with pytest.raises(NetlinkError) as raised:
        conn.request((16, 5, b""), Reply.ACK, "create veth a0")
    assert str(raised.value) == "create veth a0: No space left on device (errno 28): no room"
    assert not conn.broken


def test_a_failed_dump_says_so_at_its_end(pair):
    conn, kernels = pair
    kernels.send(_msg(16, 1, b"partial") + _done(1, errno.EBUSY))
    with pytest.raises(NetlinkError) as raised:
        conn.request(DUMP, Reply.DUMP, "dump")
    assert raised.value.errno == errno.EBUSY


def test_an_overrun_or_silence_retires_the_socket(pair):
    conn, kernels = pair
    kernels.send(_msg(wire.NLMSG_OVERRUN, 1, b""))
    with pytest.raises(NetlinkError) as raised:
        conn.request(DUMP, Reply.DUMP, "dump")
    assert raised.value.errno == errno.ENOBUFS and conn.broken
    conn.broken = False
    with pytest.raises(NetlinkError) as raised:
        conn.request(DUMP, Reply.DUMP, "dump")
    assert raised.value.errno == errno.ETIMEDOUT and conn.broken
