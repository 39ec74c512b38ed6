"""A claim's bandwidth, enforced with real traffic: iperf3 between the node's namespace and
pods' namespaces over veth claims prepared by the handler and moved as runc moves them."""

from __future__ import annotations

import os

import pytest

from tests.support import iperf, netns
from tests.support.handlers import net_device, prepare
from tests.support.runtime import links_in, move_like_runc

pytestmark = [
    pytest.mark.root,
    pytest.mark.kind("veth"),
    pytest.mark.kernel("ifb"),
    pytest.mark.skipif(
        os.environ.get("DRA_KERNEL_VM") == "1",
        reason="the kernel-VM tier runs under software emulation, too slow to measure rates",
    ),
]

SECONDS = 10
TOLERANCE = 0.10  # TCP's goodput under a token bucket, against the bucket's rate


def _claim(host: str, pod: str, subnet: int, bandwidth: str | None):
    """A veth claim in `pod` at 10.40.<subnet>.2, its host end at .1; (handler, prepared)."""
    params = {
        "type": "netdev",
        "netdev": {
            "kind": "veth",
            "interfaceName": "net1",
            "ipAddresses": [f"10.40.{subnet}.2/24"],
        },
    }
    consumed = {"bandwidth": bandwidth} if bandwidth else {}
    handler, _, prepared = prepare(params, consumed=consumed)
    move_like_runc(*net_device(prepared), pod)
    outer = prepared.host_interfaces[0]
    netns.ip(host, "addr", "add", f"10.40.{subnet}.1/24", "dev", outer)
    netns.ip(host, "link", "set", outer, "up")
    return handler, prepared


def _within(measured: float, expected: float) -> bool:
    return abs(measured - expected) <= TOLERANCE * expected


def test_a_claim_of_100_mbits_gets_100_mbits_each_way_and_nothing_is_left(in_ns, pod):
    handler, prepared = _claim(in_ns, pod, 1, "100M")
    with iperf.server(in_ns, 5301):
        sent = iperf.rate(pod, "10.40.1.1", 5301, SECONDS)
        got = iperf.rate(pod, "10.40.1.1", 5301, SECONDS, reverse=True)
    print(f"100M claim: pod sent {sent / 1e6:.1f} Mbit/s, received {got / 1e6:.1f} Mbit/s")
    assert _within(sent, 100e6) and _within(got, 100e6), (sent, got)
    netns.delete(pod)  # the pod goes first, as it does on a node
    handler.unprepare(prepared.undo)
    assert links_in(in_ns) == []  # host end and ifb gone, qdiscs with them


def test_two_claims_share_as_allocated_and_an_unlimited_one_is_not_slowed(in_ns):
    pods = [netns.create("pod") for _ in range(3)]
    claims = []
    try:
        claims = [
            _claim(in_ns, pods[0], 2, "60M"),
            _claim(in_ns, pods[1], 3, "30M"),
            _claim(in_ns, pods[2], 4, None),
        ]
        with iperf.server(in_ns, 5302), iperf.server(in_ns, 5303):
            running = [
                iperf.client(pods[0], "10.40.2.1", 5302, SECONDS, reverse=False),
                iperf.client(pods[1], "10.40.3.1", 5303, SECONDS, reverse=False),
            ]
            sixty, thirty = (iperf.received(p) for p in running)
        with iperf.server(in_ns, 5304):
            free = iperf.rate(pods[2], "10.40.4.1", 5304, 3)
    finally:
        for pod in pods:
            netns.delete(pod)
        for handler, prepared in claims:
            handler.unprepare(prepared.undo)
    print(f"60M/30M claims at once: {sixty / 1e6:.1f}/{thirty / 1e6:.1f}; none: {free / 1e6:.0f}")
    assert _within(sixty, 60e6) and _within(thirty, 30e6), (sixty, thirty)
    assert free > 500e6, free  # a veth without a limit moves gigabits here
