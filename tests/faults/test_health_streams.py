"""Device-health streams (NodeWatchResources) never starve prepare and unprepare.

Invariant: the number of open health streams is bounded below the DRA server's worker
count; a stream beyond the bound is answered RESOURCE_EXHAUSTED (the kubelet retries a
failed stream every 5 s); a stream whose client went away frees its worker at once.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from dradriver.kubelet.proto import health_v1alpha1_pb2, health_v1alpha1_pb2_grpc
from tests.integration.helpers import answer, nothing_left, veth_claim

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]

STREAMS = 12  # more than the DRA server has worker threads (8)


def _open(channel, count):
    """Open `count` streams; (calls, first message or error per stream) after 3 s."""
    stub = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel)
    calls = [
        stub.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=120)
        for _ in range(count)
    ]
    firsts: list[object] = [None] * count

    def first(i):
        try:
            firsts[i] = next(calls[i])
        except grpc.RpcError as exc:
            firsts[i] = exc

    threads = [threading.Thread(target=first, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3)
    return calls, firsts


def test_more_health_streams_than_workers_never_starve_prepare(api, start_driver, ns):
    fake, _ = api
    claim = veth_claim()
    fake.add_claim(claim)
    d = start_driver()
    channel = grpc.insecure_channel(f"unix://{d.service_socket}")
    calls: list = []
    try:
        calls, firsts = _open(channel, STREAMS)
        open_ = [f for f in firsts if isinstance(f, health_v1alpha1_pb2.NodeWatchResourcesResponse)]
        refused = [f for f in firsts if isinstance(f, grpc.RpcError)]
        assert open_ and len(open_) < 8, f"{len(open_)} streams open"
        assert len(open_) + len(refused) == STREAMS, "a stream got no answer at all"
        assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "health streams" in refused[0].details()
        start = time.monotonic()
        assert answer(d.prepare([claim], timeout=15), claim).error == ""
        assert answer(d.unprepare([claim], timeout=15), claim).error == ""
        took = time.monotonic() - start
        print(f"{len(open_)} streams open, {len(refused)} refused; prepare+unprepare {took:.3f} s")
        assert took < 5, f"prepare and unprepare took {took:.1f} s beside the streams"
        for call in calls:
            call.cancel()  # the kubelet went away
        time.sleep(1.0)
        calls, again = _open(channel, len(open_))
        refused = [f for f in again if isinstance(f, grpc.RpcError)]
        assert refused == [], "the workers of cancelled streams were not freed within 1 s"
        start = time.monotonic()
        assert d.stop() == 0  # SIGTERM with streams open: they end, nothing waits for them
        took = time.monotonic() - start
        print(f"SIGTERM with {len(open_)} health streams open: exited in {took:.2f} s")
        assert took < 4, "open health streams held up the shutdown"
    finally:
        for call in calls:
            call.cancel()
        channel.close()
    nothing_left(ns, d)
