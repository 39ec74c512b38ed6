"""SIGKILL at random moments of a batch prepare and of a batch unprepare, many rounds.

Each round kills the daemon somewhere inside one kubelet call (the moment drawn from the
duration of an undisturbed call), restarts it, and checks the invariants of checks.py:
start-up reconciliation must leave either nothing of a claim or all of it, and the next
prepare must answer exactly what an undisturbed prepare answers. Seeded; the number of
rounds comes from DRA_FAULT_ROUNDS (default 30).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time

import pytest

from tests.faults.checks import answer_of, check_invariants, expected_answer, prepared_records
from tests.integration.helpers import nothing_left, veth_claim

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]

ROUNDS = int(os.environ.get("DRA_FAULT_ROUNDS") or 30)
BATCH = 16
SEED = 20261125


def _claims(fake, tag: str) -> list[dict]:
    # Every other claim is given bandwidth: its ifb and limits are made and undone too.
    claims = [
        veth_claim(f"{tag}-{i}", interface="net1", bandwidth="100M" if i % 2 else None)
        for i in range(BATCH)
    ]
    for claim in claims:
        fake.add_claim(claim)
    return claims


def _in_background(call, claims) -> threading.Thread:
    def run():
        with contextlib.suppress(Exception):  # the daemon dies under it: an error
            call(claims)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _duration(call, claims) -> float:
    start = time.monotonic()
    call(claims)
    return time.monotonic() - start


def _prepare_all(d, claims) -> None:
    """Every claim prepares, and answers exactly what an undisturbed prepare answers."""
    first = d.prepare(claims)
    for claim in claims:
        assert answer_of(first, claim) == ("", expected_answer(claim)), claim["metadata"]
    again = d.prepare(claims)
    assert again == first


def test_sigkill_at_random_moments_of_a_batch_prepare(api, start_driver, ns):
    fake, _ = api
    rng = random.Random(SEED)
    d = start_driver()
    probe = _claims(fake, "probe")
    took = _duration(d.prepare, probe)
    d.unprepare(probe)
    for round_ in range(ROUNDS):
        claims = _claims(fake, f"p{round_}")
        worker = _in_background(d.prepare, claims)
        time.sleep(rng.uniform(0, took))
        d.kill()
        worker.join(10)
        d = start_driver()
        check_invariants(ns, d)
        _prepare_all(d, claims)
        check_invariants(ns, d)
        assert all(not r.error for r in d.unprepare(claims).claims.values())
        nothing_left(ns, d)


def test_sigkill_at_random_moments_of_a_batch_unprepare(api, start_driver, ns):
    fake, _ = api
    rng = random.Random(SEED + 1)
    d = start_driver()
    probe = _claims(fake, "probe")
    d.prepare(probe)
    took = _duration(d.unprepare, probe)
    for round_ in range(ROUNDS):
        claims = _claims(fake, f"u{round_}")
        _prepare_all(d, claims)
        worker = _in_background(d.unprepare, claims)
        time.sleep(rng.uniform(0, took))
        d.kill()
        worker.join(10)
        d = start_driver()
        check_invariants(ns, d)
        # Whatever the kill left prepared is still true: prepare answers as before, and
        # what it had already unprepared is prepared again from the API.
        _prepare_all(d, claims)
        check_invariants(ns, d)
        assert all(not r.error for r in d.unprepare(claims).claims.values())
        nothing_left(ns, d)


POOL = '[{"name": "pods", "scope": "node", "ranges": ["198.51.100.0/25"]}]'


def _pool_addresses(d) -> dict[str, str]:
    """address -> claim UID, as the prepared records hold them; none twice."""
    out: dict[str, str] = {}
    for uid, doc in prepared_records(d).items():
        for config in doc["configs"].values():
            for cidr in config.get("ipAddresses", []):
                assert cidr not in out, f"{cidr} is held by {out[cidr]} and {uid}"
                out[cidr] = uid
    return out


def test_sigkill_while_a_batch_takes_pool_addresses(api, start_driver, ns):
    """Each round kills the driver while 16 claims take addresses from one pool: after
    the restart no address is held twice, the pool's file says what the records say, and
    the next prepare gives every claim its own."""
    fake, _ = api
    rng = random.Random(SEED + 2)
    flags = ("--claim-address-ranges", "198.51.100.0/24", "--ipam-pools", POOL)
    d = start_driver(*flags)
    probe = [veth_claim(f"probe-{i}", extra={"ipam": {"pool": "pods"}}) for i in range(BATCH)]
    for claim in probe:
        fake.add_claim(claim)
    took = _duration(d.prepare, probe)
    d.unprepare(probe)
    for round_ in range(ROUNDS // 2):
        claims = [
            veth_claim(f"i{round_}-{i}", extra={"ipam": {"pool": "pods"}}) for i in range(BATCH)
        ]
        for claim in claims:
            fake.add_claim(claim)
        worker = _in_background(d.prepare, claims)
        time.sleep(rng.uniform(0, took))
        d.kill()
        worker.join(10)
        d = start_driver(*flags)
        check_invariants(ns, d)
        held = _pool_addresses(d)
        listed = (
            json.loads((d.state / "ipam" / "pods.json").read_text())["addresses"] if held else {}
        )
        assert {f"{a}/25": h["claim"] for a, h in listed.items()} == held
        _prepare_all(d, claims)
        assert len(_pool_addresses(d)) == BATCH
        assert all(not r.error for r in d.unprepare(claims).claims.values())
        nothing_left(ns, d)
        assert not (d.state / "ipam" / "pods.json").exists()
