"""Unprepares share the serialisation lock (dradriver.claims.budget): in-process against
the in-memory kernel, one claim's unprepare held inside its release while other calls
come: another claim's goes through, the same claim's waits, a prepare waits."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from dradriver.claims.outcome import Outcome
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import ClaimRecord
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.statenode import UID, Node, add_claim, claim_ref, prepare_one

OTHER = ClaimRef("default", "d", "5a0c6f5e-0000-4000-8000-000000000002")
OTHER_POD = "5a0c6f5e-0000-4000-8000-0000000000bb"


def _add_other(node: Node) -> None:
    result = {"request": "nic", "pool": "node-a", "device": "netdev-virtual",
              "shareID": "5a0c6f5e-0000-4000-8000-0000000000cc"}  # fmt: skip
    params = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "net2"}}
    node.api.fake.add_claim(
        allocated_claim(
            OTHER.name, [result], uid=OTHER.uid, config=[opaque(params)], pods=[OTHER_POD]
        )
    )


def test_unprepares_of_other_claims_overlap_and_of_the_same_claim_wait(node, monkeypatch):
    add_claim(node, "veth")
    _add_other(node)
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    assert preparer.prepare([OTHER])[OTHER.uid].error is None

    inside, go = threading.Event(), threading.Event()
    release = preparer.lifecycle.release

    def held(record: ClaimRecord) -> Any:
        if record.claim.uid == UID:
            inside.set()
            assert go.wait(30)
        return release(record)

    monkeypatch.setattr(preparer.lifecycle, "release", held)
    first: Future[Outcome] = Future()
    thread = threading.Thread(
        target=lambda: first.set_result(preparer.unprepare([claim_ref()])[UID])
    )
    thread.start()
    try:
        assert inside.wait(10)
        # Another claim's unprepare does not wait for the one held (it did, for the lock).
        assert preparer.unprepare([OTHER], budget=5)[OTHER.uid].error is None
        # The same claim's waits for it, within its own budget.
        again = preparer.unprepare([claim_ref()], budget=0.3)[UID].error
        assert again is not None and "another call was still unpreparing the claim" in again
        # A prepare holds the lock alone: it waits for the unprepares.
        late = preparer.prepare([OTHER], budget=0.3)[OTHER.uid].error
        assert late is not None and "serialisation lock was not free" in late
    finally:
        go.set()
        thread.join(30)
    assert first.result(1).error is None
    assert preparer.reaper.drain(5) == 0
    assert node.files() == []  # both claims' records, specs and index entries gone
    assert set(node.kernel.table) == {"ens1", "ens2"}
