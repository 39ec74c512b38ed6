"""SIGTERM during a slow prepare, with a second instance waiting (a rolling update).

Invariant: an instance lets go of the cross-instance lock only after its in-flight work
has finished or been refused, so the new instance never hands out a link that the old
one then replaces; calls reaching an instance that is shutting down get a per-claim
error the kubelet retries, never a half-done preparation.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import grpc
import pytest

from tests.integration.helpers import answer, nothing_left, veth_claim
from tests.support.linkwatch import watching
from tests.support.runtime import links_in
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]

GET_DELAY = 2.0  # every claim GET takes this long: a slow API server (through the proxy)


def _host_links(ns, claim):
    uid = claim["metadata"]["uid"]
    return sorted(ln["name"] for ln in links_in(ns) if uid in (ln["alias"] or ""))


@pytest.mark.parametrize(
    "case",
    [
        # The old instance waits on a slow API server when SIGTERM comes (what the
        # review reproduced: it used to go on fetching and preparing under a lock it
        # had already dropped).
        "slow-api",
        # The old instance holds the lock, half-way through the kernel work of a long
        # batch, when SIGTERM comes.
        "long-batch",
    ],
)
def test_sigterm_during_a_slow_prepare_keeps_the_lock_until_the_work_is_done(
    api, proxy, start_proxied, ns, case
):
    fake, _ = api
    count = 6 if case == "slow-api" else 40
    claims = [veth_claim(f"c{i}", interface="net1") for i in range(count)]  # a pod each
    for c in claims:
        fake.add_claim(c)
    old = start_proxied(pod_uid=str(uuid.uuid4()), budget=20)
    new = start_proxied(pod_uid=str(uuid.uuid4()), budget=20)
    if case == "slow-api":
        proxy.slow("claim-get", GET_DELAY)
    calls: dict[str, object] = {}

    def call(name, driver):
        start = time.monotonic()
        try:
            calls[name] = driver.prepare(claims)
        except grpc.RpcError as exc:
            calls[name] = exc
        calls[name + "-took"] = time.monotonic() - start

    with watching(ns) as links:
        first = threading.Thread(target=call, args=("old", old))
        first.start()
        if case == "slow-api":
            wait_for("the old instance's first GET", lambda: proxy.count("claim-get"), 10)
            time.sleep(0.5)
        else:  # four claims (two links each) done, the fifth under way
            wait_for("links of four claims", lambda: len(links.created_names()) >= 8, 20)
        sigterm = time.monotonic()
        old.proc.send_signal(signal.SIGTERM)
        # The kubelet sees the old instance go and calls the new one.
        second = threading.Thread(target=call, args=("new", new))
        second.start()
        old.proc.wait(60)
        exited = time.monotonic() - sigterm
        second.join(60)
        first.join(60)
        assert not links.overflowed
    print(
        f"old instance exited {exited:.2f} s after SIGTERM; old call {calls['old-took']:.2f} s, "
        f"new call {calls['new-took']:.2f} s; the old one prepared {_done(calls['old'], claims)}"
    )
    assert old.proc.returncode == 0, old.log()
    proxy.heal()
    resp = calls["new"]
    assert not isinstance(resp, grpc.RpcError), resp
    for c in claims:
        assert answer(resp, c).error == "", answer(resp, c).error
    before = calls["old"]
    if not isinstance(before, grpc.RpcError):  # what the old one answered, it finished
        for c in claims:
            got = answer(before, c)
            assert got.error == "" or "shutting down" in got.error, got.error
            if got.error == "":
                assert got == answer(resp, c)
    for c in claims:
        names = _host_links(ns, c)
        assert len(names) == 2, (c["metadata"]["name"], names)  # both veth ends, once
        for name in names:
            assert len(links.created(name)) == 1, f"{name} was made more than once"
            assert links.deleted_after(name, sigterm) == [], f"{name} was deleted"
    new.unprepare(claims)
    nothing_left(ns, new)


def _done(resp, claims):
    if isinstance(resp, grpc.RpcError):
        return f"nothing it answered ({resp.code()})"
    return f"{sum(1 for c in claims if answer(resp, c).error == '')} of {len(claims)} claims"


def test_sigterm_refuses_a_prepare_waiting_on_a_hanging_api_and_does_not_wait_for_it(
    api, proxy, start_proxied, ns
):
    fake, _ = api
    slow = veth_claim("slow", interface="net1")
    fake.add_claim(slow)
    d = start_proxied(budget=20)
    proxy.fail("claim-get", "hang")
    result = {}
    t = threading.Thread(target=lambda: result.update(resp=d.prepare([slow])))
    t.start()
    wait_for("the hanging GET", lambda: proxy.count("claim-get", "hang"), 10, log=d.log)
    start = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    t.join(30)
    d.proc.wait(30)
    took = time.monotonic() - start
    print(f"SIGTERM with a prepare waiting on a hanging API: exited after {took:.2f} s")
    err = answer(result["resp"], slow).error
    assert "default/slow" in err and "shutting down" in err, err
    assert took < 10, "shutdown waited for the hanging API call"
    nothing_left(ns, d)
