"""Capture real rtnetlink replies of this machine's kernel as test fixtures (make rtnl-fixtures).

In a throw-away namespace it builds a veth pair (alias, MTU, MAC), a macvlan, a bridge
with a port, point-to-point, IPv4 and IPv6 addresses, and routes of every shape the
driver reads (multipath IPv4 and IPv6, an IPv4 route via an IPv6 gateway, a blackhole
in table 100, a route in table 1000, a default route); then it dumps links, addresses
and routes over a raw NETLINK_ROUTE socket and keeps the kernel's bytes of the
interesting messages, each with what `ip -j` reports for the same object (the expected
parse), plus a real acknowledgement and a real error with an extended ack. Written to
tests/data/rtnl/replies.json; tests/unit/test_rtnl_codec.py parses them without root.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import socket
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dradriver.kernel.rtnl import addresses, links, routes, wire  # noqa: E402
from tests.support import ipjson, netns  # noqa: E402

OUT = ROOT / "tests" / "data" / "rtnl" / "replies.json"
SETUP = [
    "link add a0 type veth peer name b0",
    "link set a0 mtu 1400 address 02:00:5e:10:00:01 alias dra:fixture",
    "link add a1 type veth peer name b1",
    "link add mv0 link a1 type macvlan mode bridge",
    "link add br0 type bridge",
    "link set b1 master br0",
    "link set a0 up",
    "link set a1 up",
    "link set b0 up",
    "addr add 10.9.0.1/24 dev a0",
    "addr add fd00:9::1/64 dev a0 nodad",
    "addr add 10.9.1.1/24 dev a1",
    "addr add 10.7.0.1 peer 10.7.0.2/32 dev a1",
    "route add 198.51.100.0/24 nexthop via 10.9.0.2 dev a0 nexthop via 10.9.1.2 dev a1",
    "-6 route add 2001:db8:5::/64 nexthop via fd00:9::2 dev a0 nexthop via fd00:9::3 dev a0",
    "route add 203.0.113.0/24 via inet6 fe80::1 dev a0",
    "route add blackhole 192.0.2.0/24 table 100",
    "route add 192.0.2.128/25 via 10.9.0.2 table 1000",
    "route add default via 10.9.0.254",
]
LINKS = {"lo", "a0", "mv0", "br0"}
ADDRESSES = {"10.9.0.1", "fd00:9::1", "10.7.0.1"}
ROUTES = {"198.51.100.0/24", "2001:db8:5::/64", "203.0.113.0/24", "192.0.2.0/24",
          "192.0.2.128/25", "0.0.0.0/0", "10.9.0.1/32"}  # fmt: skip


def exchange(sock: socket.socket, request: tuple[int, int, bytes], seq: int) -> list[bytes]:
    """Every message (header included) the kernel answers to one request."""
    kind, flags, body = request
    sock.send(wire.message(kind, flags, seq, body))
    out = []
    while True:
        data = sock.recv(1 << 20)
        offset = 0
        while offset + wire.HEADER.size <= len(data):
            length, msg_type = struct.unpack_from("=IH", data, offset)
            out.append(data[offset : offset + length])
            offset += wire.align(length)
            if msg_type in (wire.NLMSG_DONE, wire.NLMSG_ERROR) or not flags & wire.NLM_F_DUMP:
                return out


def body(raw: bytes) -> bytes:
    return raw[wire.HEADER.size :]


def capture(ns: str) -> dict[str, object]:
    with netns.inside(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        for option in (wire.NETLINK_EXT_ACK, wire.NETLINK_CAP_ACK, wire.NETLINK_GET_STRICT_CHK):
            sock.setsockopt(wire.SOL_NETLINK, option, 1)
        sock.connect((0, 0))
        link_msgs = exchange(sock, links.dump(), 1)
        addr_msgs = exchange(sock, addresses.dump(), 2)
        route_msgs = exchange(sock, routes.dump(), 3)
        index = {ln.name: ln.index for ln in ipjson.links(ns)}
        error = exchange(sock, links.change(index["a0"], {"mtu": 99999}), 4)
        ack = exchange(sock, links.change(index["a0"], {"mtu": 1400}), 5)
        sock.close()
    want_links = {ln.name: ln for ln in ipjson.links(ns)}
    want_addrs = {(a[1], a[2]): a for a in ipjson.addresses(ns)}
    want_routes = {(r.dst, r.table): r for r in ipjson.routes(ns)}
    out: dict[str, object] = {
        "kernel": platform.release(),
        "links": [],
        "addresses": [],
        "routes": [],
        "done": link_msgs[-1].hex(),
        "error": error[0].hex(),
        "ack": ack[0].hex(),
    }
    for raw in link_msgs[:-1]:
        link = links.parse(body(raw))
        if link.name in LINKS:
            expect = dataclasses.asdict(want_links[link.name])
            out["links"].append({"hex": raw.hex(), "expect": expect})  # type: ignore[attr-defined]
    for raw in addr_msgs[:-1]:
        addr = addresses.parse(body(raw))
        if addr is not None and addr.address in ADDRESSES:
            index_, local, prefixlen, scope = want_addrs[(addr.address, addr.prefixlen)]
            expect = {"index": index_, "address": local, "prefixlen": prefixlen, "scope": scope}
            out["addresses"].append({"hex": raw.hex(), "expect": expect})  # type: ignore[attr-defined]
    for raw in route_msgs[:-1]:
        route = routes.parse(body(raw))
        if route is not None and route.dst in ROUTES:
            expect = dataclasses.asdict(want_routes[(route.dst, route.table)])
            out["routes"].append({"hex": raw.hex(), "expect": expect})  # type: ignore[attr-defined]
    return out


def main() -> int:
    ns = netns.create("fixtures")
    try:
        for line in SETUP:
            netns.ip(ns, *line.split())
        data = capture(ns)
    finally:
        netns.delete(ns)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    counts = {k: len(v) for k, v in data.items() if isinstance(v, list)}
    print(f"wrote {OUT.relative_to(ROOT)}: {counts} from kernel {data['kernel']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
