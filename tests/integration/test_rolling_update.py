"""Two instances (seamless rolling update): unique sockets, shared state, serialised work."""

import fcntl
import os
import threading
import time
import uuid

import pytest

from tests.integration.helpers import answer, nothing_left, veth_claim
from tests.support.runtime import links_in
from tests.support.waiting import wait_for

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
    """Both instances fetch their claims at once, but touch the node only with the lock,
    here held by the test as a third instance would."""
    fake, _ = api
    a = start_driver(pod_uid=str(uuid.uuid4()))
    b = start_driver(pod_uid=str(uuid.uuid4()))
    claims = [veth_claim(f"c{i}", interface=f"net{i}") for i in range(4)]
    for c in claims:
        fake.add_claim(c)
    answers = {}

    def prepare(inst, claim):
        answers[claim["metadata"]["uid"]] = answer(inst.prepare([claim]), claim)

    threads = [
        threading.Thread(target=prepare, args=(inst, c))
        for inst, c in zip([a, b, a, b], claims, strict=True)
    ]
    lock = os.open(a.plugins / "dra.example.com" / "serialize.lock", os.O_RDWR)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for t in threads:
            t.start()
        wait_for("the four claim GETs", lambda: len(_claim_gets(fake)) == 4, log=a.log)
        time.sleep(0.5)
        assert links_in(ns) == [] and list(a.state.glob("*.alloc.json")) == []
        assert answers == {}
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    for t in threads:
        t.join(30)
    assert [answers[c["metadata"]["uid"]].error for c in claims] == [""] * 4
    assert len(links_in(ns)) == 8
    a.unprepare(claims)
    nothing_left(ns, a)


def _claim_gets(fake):
    return [r for r in list(fake.requests) if r[0] == "GET" and "/resourceclaims/" in r[1]]
