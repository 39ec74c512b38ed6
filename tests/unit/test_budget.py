"""A call's budget, the lock taken within it, draining, and fetching claims side by side."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.errors import ClaimError
from dradriver.claims.budget import SHUTTING_DOWN, CallGate, Chosen, Deadline, call_budget
from dradriver.claims.fetch import ClaimFetcher
from dradriver.contract.hookspecs import ClaimRef
from dradriver.kubelet.sockets import SerializeLock
from tests.support.waiting import wait_for


def test_the_budget_is_two_thirds_of_the_deadline_at_most_the_cap():
    assert call_budget(45.0, 30.0) == pytest.approx(30.0)
    assert call_budget(45.0, 3.0) == 3.0
    assert call_budget(9.0, 30.0) == pytest.approx(6.0)
    assert call_budget(None, 12.0) == 12.0  # a caller without a deadline
    assert call_budget(-1.0, 30.0) == 0.0
    assert Deadline.after(29.99).describe() == "this call's budget of 30 s"


def test_the_lock_is_refused_when_it_is_not_free_within_the_budget():
    gate = CallGate()
    assert gate.acquire(Deadline.after(1)) is None
    start = time.monotonic()
    refusal = gate.acquire(Deadline.after(0.3))
    assert 0.25 < time.monotonic() - start < 10  # its budget, not a wait for the lock
    assert refusal is not None and "serialisation lock was not free within" in refusal
    assert "budget of 0.3 s" in refusal
    gate.release()


def test_draining_wakes_a_call_waiting_for_the_lock_and_waits_for_calls_in_flight():
    gate = CallGate()
    assert gate.acquire(Deadline.after(1)) is None  # a call at work
    got: list[str | None] = []

    def waiting_call() -> None:
        with gate.call():
            got.append(gate.acquire(Deadline.after(30)))

    waiter = threading.Thread(target=waiting_call)
    with gate.call():
        waiter.start()
        time.sleep(0.2)
        start = time.monotonic()
        assert not gate.drain(0.3)  # the call at work has not ended
        waiter.join(20)
        assert got == [SHUTTING_DOWN] and time.monotonic() - start < 20  # not its 30 s
        assert gate.stop_reason(Deadline.after(30)) == SHUTTING_DOWN
        gate.release()
    assert gate.drain(1)
    assert gate.acquire(Deadline.after(1)) == SHUTTING_DOWN  # nothing new begins


def test_the_file_lock_keeps_other_instances_out_and_is_closed_only_when_free(tmp_path):
    path = tmp_path / "serialize.lock"
    mine, other = SerializeLock(path), SerializeLock(path)  # two open files: two instances
    assert mine.acquire(timeout=1)
    start = time.monotonic()
    assert not other.acquire(timeout=0.3)
    assert time.monotonic() - start >= 0.29
    assert not mine.close(timeout=0.2)  # held: the file stays open, the flock stays
    assert not other.acquire(timeout=0.1)
    mine.release()
    assert mine.close(timeout=1)
    assert other.acquire(timeout=1)  # closed: the other instance gets it
    other.release()
    other.close()


def test_unprepares_share_the_lock_and_a_call_waiting_alone_stops_new_ones_joining(tmp_path):
    lock = SerializeLock(tmp_path / "serialize.lock")
    other = SerializeLock(tmp_path / "serialize.lock")  # another instance
    gate = CallGate(lock)
    assert gate.acquire_shared(Deadline.after(1)) is None
    assert gate.acquire_shared(Deadline.after(1)) is None  # joined: not waited for
    assert not other.acquire(timeout=0.1)  # the group holds the file lock too
    alone: Future[str | None] = Future()
    threading.Thread(target=lambda: alone.set_result(gate.acquire(Deadline.after(30)))).start()
    wait_for("the call waiting alone", lambda: gate._alone == 1, 10)
    late: Future[str | None] = Future()
    joining = threading.Thread(
        target=lambda: late.set_result(gate.acquire_shared(Deadline.after(30)))
    )
    joining.start()
    gate.release_shared()
    assert not alone.done()  # one call of the group still holds it
    gate.release_shared()  # the last one out: the call waiting alone gets it, not `late`
    assert alone.result(10) is None
    assert not late.done()
    gate.release()
    assert late.result(10) is None  # a group of its own
    assert not other.acquire(timeout=0.1)
    gate.release_shared()
    assert other.acquire(timeout=1)  # the group let go of the file lock as well
    other.release()


def test_a_shared_call_is_refused_within_its_budget_and_when_draining():
    gate = CallGate()
    assert gate.acquire(Deadline.after(1)) is None  # a prepare holds it
    start = time.monotonic()
    refusal = gate.acquire_shared(Deadline.after(0.3))
    assert refusal is not None and "budget of 0.3 s" in refusal
    assert time.monotonic() - start < 10
    gate.release()
    assert gate.acquire_shared(Deadline.after(1)) is None
    gate.drain(0)
    assert gate.acquire_shared(Deadline.after(1)) == SHUTTING_DOWN  # no one joins now
    gate.release_shared()
    assert gate.acquire(Deadline.after(1)) == SHUTTING_DOWN


class _Api:
    server = "https://api.example:6443"

    def __init__(self, delay: float = 0.0, error: ApiError | None = None) -> None:
        self.delay, self.error = delay, error
        self.active = self.most = 0
        self.lock = threading.Lock()
        self.held: set[str] = set()  # names whose GET waits until `go` is set
        self.go = threading.Event()

    def get_claim(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any]:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            time.sleep(min(self.delay, timeout or self.delay))
            if name in self.held:
                assert self.go.wait(30)
            if self.error:
                raise self.error
            return {"metadata": {"name": name}}
        finally:
            with self.lock:
                self.active -= 1


def _refs(n: int) -> list[ClaimRef]:
    return [ClaimRef("ns", f"c{i}", f"00000000-0000-0000-0000-{i:012d}") for i in range(n)]


def test_claims_are_fetched_side_by_side_with_bounded_parallelism():
    api = _Api(delay=0.2)
    got = ClaimFetcher(api, workers=4).fetch(_refs(8), Deadline.after(10), Future())
    assert api.most == 4  # side by side, never more than four
    assert [f.get()["metadata"]["name"] for f in got.values()] == [f"c{i}" for i in range(8)]


def _workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("claim-get-")}


def test_workers_start_as_calls_need_them_one_for_calls_of_one_claim():
    """A worker keeps its own connection to the API server: one-claim calls in a row
    keep one, a batch of three adds two, a call beside a busy worker gets its own."""
    before = _workers()
    fetcher = ClaimFetcher(_Api(), workers=4)
    for _ in range(5):
        [got] = fetcher.fetch(_refs(1), Deadline.after(5), Future()).values()
        assert got.get()["metadata"]["name"] == "c0"
    assert fetcher._started == 1
    fetcher.fetch(_refs(3), Deadline.after(5), Future())
    assert fetcher._started == 3
    api = fetcher.api = _Api()  # three busy workers, a call of one claim beside them
    api.held = {"c0", "c1", "c2"}
    beside = threading.Thread(target=fetcher.fetch, args=(_refs(3), Deadline.after(30), Future()))
    beside.start()
    try:
        wait_for("three busy workers", lambda: api.active == 3)
        solo = ClaimRef("ns", "solo", "00000000-0000-0000-0000-00000000aaaa")
        [got] = fetcher.fetch([solo], Deadline.after(30), Future()).values()
        assert got.get()["metadata"]["name"] == "solo"  # its own worker: not queued
        assert api.active == 3 and fetcher._started == 4
    finally:
        api.go.set()
        beside.join()
    assert len(_workers() - before) == 4


def test_a_claim_not_fetched_within_the_budget_names_the_server_and_the_budget():
    api = _Api(delay=30)
    start = time.monotonic()
    got = ClaimFetcher(api).fetch(_refs(3), Deadline.after(0.3), Future())
    assert time.monotonic() - start < 10  # the budget, not the server's 30 s
    for fetched in got.values():
        with pytest.raises(ClaimError, match=r"https://api\.example:6443 did not answer .*0\.3 s"):
            fetched.get()


def test_api_errors_become_the_claims_error_naming_the_server():
    for error, expected in [
        (ApiError(404, "NotFound", "x"), "not found in the API server https://api.example:6443"),
        (ApiError(500, "InternalError", "boom"), "from the API server https://api.example:6443"),
    ]:
        got = ClaimFetcher(_Api(error=error)).fetch(_refs(1), Deadline.after(5), Future())
        [fetched] = got.values()
        with pytest.raises(ClaimError, match=expected):
            fetched.get()


def test_shutdown_abandons_a_fetch_at_once():
    abandon: Future[None] = Future()
    threading.Timer(0.2, abandon.set_result, (None,)).start()
    start = time.monotonic()
    got = ClaimFetcher(_Api(delay=30)).fetch(_refs(2), Deadline.after(30), abandon)
    assert time.monotonic() - start < 10  # not the server's 30 s
    for fetched in got.values():
        with pytest.raises(ClaimError, match="shutting down"):
            fetched.get()


def test_the_budget_cap_is_a_flag_and_an_environment_variable(monkeypatch):
    import argparse

    from dradriver import settings

    def parse(argv):
        parser = argparse.ArgumentParser()
        settings.add_flags(parser, run=True)
        return settings.from_args(parser.parse_args(["--node-name", "n", *argv]))

    assert parse([]).call_budget == 30.0
    monkeypatch.setenv("DRA_CALL_BUDGET", "3")
    assert parse([]).call_budget == 3.0
    assert parse(["--call-budget", "12.5"]).call_budget == 12.5
    with pytest.raises(SystemExit, match=r"--call-budget must be 0\.1 to 300 seconds, got 0"):
        parse(["--call-budget", "0"])


def test_a_setting_chosen_after_start_is_waited_for_within_limits() -> None:

    chosen = Chosen("cdi")
    assert chosen.wait(Deadline.after(0), Future(), 0) and chosen.value == "cdi"
    chosen.pending()
    assert not chosen.wait(Deadline.after(10), Future(), 0.1)  # the limit
    assert not chosen.wait(Deadline.after(0.1), Future(), 10)  # the budget
    stopping: Future[None] = Future()
    stopping.set_result(None)
    started = time.monotonic()
    assert not chosen.wait(Deadline.after(30), stopping, 30)  # shutdown
    assert time.monotonic() - started < 10  # at once, not after 30 s
    threading.Timer(0.1, chosen.choose, ("nri",)).start()
    assert chosen.wait(Deadline.after(10), Future(), 10) and chosen.value == "nri"
