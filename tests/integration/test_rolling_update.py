"""Two instances (seamless rolling update): unique sockets, shared state, serialised calls."""

import itertools
import threading
import time
import uuid

import pytest

from tests.integration.helpers import answer, nothing_left, veth_claim

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


def test_each_instance_has_its_own_sockets_and_either_answers_any_call(api, start_driver, ns):
    fake, _ = api
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    a = start_driver(pod_uid=old)
    b = start_driver(pod_uid=new)
    assert a.reg_socket != b.reg_socket and a.service_socket != b.service_socket
    assert a.reg_socket.exists() and b.service_socket.exists()
    assert a.get_info().endpoint == str(a.service_socket)
    assert b.get_info().endpoint == str(b.service_socket)
    claim = veth_claim()
    fake.add_claim(claim)
    first = answer(a.prepare([claim]), claim)
    assert answer(b.prepare([claim]), claim) == first  # state is on disk, not in memory
    assert answer(b.unprepare([claim]), claim).error == ""
    a.stop()
    assert not a.reg_socket.exists() and b.reg_socket.exists()
    nothing_left(ns, b)


def test_calls_are_serialised_across_instances(api, start_driver, ns):
    fake, _ = api
    a = start_driver(pod_uid=str(uuid.uuid4()))
    b = start_driver(pod_uid=str(uuid.uuid4()))
    claims = [veth_claim(f"c{i}", interface=f"net{i}") for i in range(4)]
    for c in claims:
        fake.add_claim(c)
    spans = []
    orig = fake.handle

    def timed(method, path, query, body):
        start = time.monotonic()
        result = orig(method, path, query, body)
        if method == "GET" and "/resourceclaims/" in path:
            time.sleep(0.3)  # a slow API server widens any overlap
            spans.append((start, time.monotonic()))
        return result

    fake.handle = timed
    threads = [
        threading.Thread(target=inst.prepare, args=([c],))
        for inst, c in zip([a, b, a, b], claims, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    spans.sort()
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, "two prepares ran at the same time"
    fake.handle = orig
    a.unprepare(claims)
    nothing_left(ns, a)
