"""routes.add (dradriver/kernel/rtnl/routes.py), the NRI mode's route request, without root:
compared byte for byte with what pyroute2's encoder (a test dependency, written apart
from ours) makes of the same rtmsg. tests/kernel/test_rtnl_netns.py adds them for real.
"""

from __future__ import annotations

import re
import socket

import pytest

from dradriver.kernel.rtnl import routes, wire


def _pyroute2_route(header, attrs) -> bytes:
    """The rtmsg body pyroute2 encodes (header: family, dst_len, scope)."""
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    msg = rtmsg()
    msg["family"], msg["dst_len"], msg["scope"] = header
    msg["table"], msg["proto"], msg["type"] = 254, 4, 1  # main, static, unicast
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data[16 : msg["header"]["length"]])


@pytest.mark.parametrize(
    "args,header,attrs",
    [
        (
            (3, "10.1.0.0/24", None, None),
            (socket.AF_INET, 24, 253),  # on the link: link scope, as `ip route add` sets
            [("RTA_DST", "10.1.0.0"), ("RTA_OIF", 3)],
        ),
        (
            (3, "10.2.0.0/16", "10.1.0.1", 100),
            (socket.AF_INET, 16, 0),
            [("RTA_DST", "10.2.0.0"), ("RTA_OIF", 3), ("RTA_GATEWAY", "10.1.0.1"),
             ("RTA_PRIORITY", 100)],
        ),
        (
            (7, "0.0.0.0/0", "10.1.0.1", 0),
            (socket.AF_INET, 0, 0),  # the default route names no destination
            [("RTA_OIF", 7), ("RTA_GATEWAY", "10.1.0.1"), ("RTA_PRIORITY", 0)],
        ),
        (
            (3, "2001:db8:1::/64", None, 1024),
            (socket.AF_INET6, 64, 0),  # IPv6 routes are universe-scope, as iproute2 sends
            [("RTA_DST", "2001:db8:1::"), ("RTA_OIF", 3), ("RTA_PRIORITY", 1024)],
        ),
        (
            (4, "::/0", "fe80::1", None),
            (socket.AF_INET6, 0, 0),
            [("RTA_OIF", 4), ("RTA_GATEWAY", "fe80::1")],
        ),
        (
            (4, "192.0.2.7/32", None, None),
            (socket.AF_INET, 32, 253),
            [("RTA_DST", "192.0.2.7"), ("RTA_OIF", 4)],
        ),
    ],
    ids=["v4-link", "v4-gateway-metric", "v4-default", "v6-link-metric", "v6-default", "v4-host"],
)  # fmt: skip
def test_route_requests_encode_byte_for_byte_as_pyroute2_does(args, header, attrs):
    kind, flags, body = routes.add(*args)
    assert kind == 24  # RTM_NEWROUTE
    want = wire.NLM_F_REQUEST | wire.NLM_F_ACK | wire.NLM_F_CREATE | wire.NLM_F_EXCL
    assert flags == want
    assert body == _pyroute2_route(header, attrs)


@pytest.mark.parametrize(
    "args,message",
    [
        ((3, "10.1.0.0/x", None, None), "route destination '10.1.0.0/x' is not an address/prefix"),
        ((3, "nowhere", None, None), "route destination 'nowhere' is not an address/prefix"),
        ((3, "10.1.0.0/24", "fe80::1", None), "route gateway fe80::1 is not of the family of"),
        ((3, "10.1.0.0/24", "10.1.0.300", None), "route gateway '10.1.0.300' is not an address"),
        ((3, "10.1.0.0/24", None, -1), "route metric -1 is not between 0 and 4294967295"),
        ((3, "10.1.0.0/24", None, 2**32), "route metric 4294967296 is not between"),
    ],
)
def test_a_route_the_code_cannot_mean_is_refused(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        routes.add(*args)
