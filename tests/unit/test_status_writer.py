"""The claim status writer: retries until written, gone or unprepared; one per claim; bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dradriver.apiserver.kubeapi import ApiError
from dradriver.apiserver.status import StatusWriter
from dradriver.base.metrics import Metrics
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import PREPARED, ClaimRecord, DeviceRecord
from tests.support.waiting import wait_for

FAST = (0.01, 0.05)  # back-off: first and longest pause


class _Api:
    """Answers status writes with the queued errors, then success; records every try."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.tries: list[tuple[str, float]] = []
        self.written: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.fail_always: Exception | None = None

    def apply_claim_status(self, namespace: str, name: str, body: Any, manager: str) -> None:
        with self.lock:
            self.tries.append((name, time.monotonic()))
            if self.fail_always is not None:
                raise self.fail_always
            if self.errors:
                raise self.errors.pop(0)
            self.written[name] = body

    def count(self, name: str) -> int:
        with self.lock:
            return sum(1 for n, _ in self.tries if n == name)


def _record(name: str = "c1", uid: str | None = None) -> ClaimRecord:
    device = DeviceRecord(
        key="k",
        request="nic",
        pool="node-a",
        device="netdev-virtual",
        share_id=None,
        type="netdev",
        kind="veth",
        undo={},
    )
    return ClaimRecord(ClaimRef("ns", name, uid or f"uid-{name}"), PREPARED, devices=[device])


@pytest.fixture
def writer_of() -> Iterator[Any]:
    made: list[StatusWriter] = []

    def make(api: _Api, **kwargs: Any) -> StatusWriter:
        writer = StatusWriter(api, "dra.example.com", "node-a", backoff=FAST, **kwargs)
        writer.start()
        made.append(writer)
        return writer

    yield make
    for writer in made:
        writer.stop()


def test_a_failed_write_is_retried_until_it_is_written(writer_of):
    boom = ApiError(500, "InternalError", "boom")
    api = _Api(boom, ApiError(409, "Conflict", "c"), ApiError(0, "unreachable", "down"), boom)
    metrics = Metrics()
    writer_of(api, metrics=metrics).submit(_record())
    wait_for("the status", lambda: "c1" in api.written)
    assert api.count("c1") == 5 and metrics.status_failures._value.get() == 4
    pauses = [b[1] - a[1] for a, b in zip(api.tries, api.tries[1:], strict=False)]
    # Jittered exponential back-off, capped: 0.01, 0.02, 0.04, 0.05 at most, half at least.
    for pause, longest in zip(pauses, (0.01, 0.02, 0.04, 0.05), strict=True):
        assert longest * 0.5 <= pause + 0.002, pauses


def test_a_write_stops_when_the_claim_is_gone_or_unprepared(writer_of):
    api = _Api(ApiError(404, "NotFound", "gone"))
    writer = writer_of(api)
    writer.submit(_record("gone"))
    wait_for("the 404", lambda: api.count("gone"))
    prepared = {"uid-kept"}
    api.fail_always = ApiError(500, "InternalError", "boom")
    writer = writer_of(api, still_prepared=lambda uid: uid in prepared)
    writer.submit(_record("kept"))
    wait_for("two tries", lambda: api.count("kept") >= 2)
    prepared.clear()  # unprepared: its record is gone
    time.sleep(0.3)
    tries = api.count("kept")
    time.sleep(0.3)
    assert api.count("kept") == tries and api.count("gone") == 1
    assert writer.pending() == 0


def test_one_pending_write_per_claim_and_the_queue_is_bounded():
    metrics = Metrics()
    writer = StatusWriter(_Api(), "dra.example.com", "node-a", metrics, max_pending=3)
    for _ in range(50):
        writer.submit(_record("c1"))  # re-prepares of one claim: one pending write
    for name in ("c2", "c3", "c4", "c5"):
        writer.submit(_record(name))
    assert writer.pending() == 3
    assert metrics.status_failures._value.get() == 2  # c4 and c5 did not fit, counted


def test_submitting_again_does_not_hurry_the_back_off(writer_of):
    api = _Api()
    api.fail_always = ApiError(500, "InternalError", "boom")
    writer = writer_of(api)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        writer.submit(_record("c1"))
        time.sleep(0.001)
    # Back-off 0.01 s doubling to 0.05 s, times 0.5-1.0: at most about 20 tries in 0.5 s,
    # not one per submit (~400).
    assert api.count("c1") < 30


def test_a_re_prepare_submits_again_unless_this_process_wrote_it(writer_of):
    api = _Api()
    writer = writer_of(api)
    writer.resubmit(_record("c1"))  # a re-prepare after a restart: not written here yet
    wait_for("the status", lambda: "c1" in api.written)
    writer.resubmit(_record("c1"))
    time.sleep(0.2)
    assert api.count("c1") == 1
    writer.submit(_record("c1"))  # a new prepare always writes
    wait_for("the second write", lambda: api.count("c1") == 2)
