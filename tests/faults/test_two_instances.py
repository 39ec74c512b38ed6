"""Two instances with per-pod sockets serving the same claims under load (rolling update).

Several client threads call prepare and unprepare of overlapping claims, at random, on
both instances, for DRA_LOAD_SECONDS (60 in CI). Invariants: every call is answered
within its budget (no deadlock), no call fails, every prepare of a claim answers the
same whichever instance answers it, state on disk and in the kernel agree for every
claim afterwards (no double preparation, no lost record), and unpreparing everything
leaves nothing.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import defaultdict

import grpc
import pytest

from tests.integration.helpers import answer, nothing_left, veth_claim
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]

DURATION = float(os.environ.get("DRA_LOAD_SECONDS") or 60)
CLAIMS = 8
THREADS = 4
BUDGET = 10.0
MARGIN = 2.0


def test_two_instances_serving_overlapping_claims_under_load(api, start_proxied, ns):
    fake, _ = api
    claims = [veth_claim(f"c{i}", interface="net1") for i in range(CLAIMS)]  # a pod each
    for c in claims:
        fake.add_claim(c)
    instances = {
        name: start_proxied(pod_uid=str(uuid.uuid4()), budget=BUDGET) for name in ("a", "b")
    }
    answers: dict[str, set[bytes]] = defaultdict(set)
    failures: list[str] = []
    took: list[float] = []
    counts: dict[str, int] = defaultdict(int)
    end = time.monotonic() + DURATION

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < end:
            name = rng.choice("ab")
            op = rng.choice(("prepare", "unprepare"))
            batch = rng.sample(claims, rng.randint(1, 3))
            start = time.monotonic()
            try:
                resp = getattr(instances[name], op)(batch, timeout=45)
            except grpc.RpcError as exc:
                failures.append(f"{op} on {name}: {exc.code()} {exc.details()}")
                continue
            took.append(time.monotonic() - start)
            counts[f"{op}-{name}"] += 1
            for c in batch:
                got = answer(resp, c)
                if got.error:
                    failures.append(f"{op} of {c['metadata']['name']} on {name}: {got.error}")
                elif op == "prepare":
                    answers[c["metadata"]["uid"]].add(got.SerializeToString(deterministic=True))

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DURATION + 120)
    assert not any(t.is_alive() for t in threads), "a client thread never got its answer"
    took.sort()
    print(
        f"{len(took)} calls in {DURATION:g} s ({dict(counts)}); "
        f"median {took[len(took) // 2]:.3f} s, max {took[-1]:.3f} s"
    )
    assert failures == []
    assert took[-1] < BUDGET + MARGIN, f"a call took {took[-1]:.1f} s"
    for uid, seen in answers.items():
        assert len(seen) == 1, f"claim {uid} got {len(seen)} different answers"

    a, b = instances["a"], instances["b"]
    for c in claims:  # state on disk and in the kernel agree, claim by claim
        uid = c["metadata"]["uid"]
        record = (a.state / f"{uid}.alloc.json").exists()
        specs = list(a.cdi.glob(f"*{uid}*.json"))
        links = [ln for ln in links_in(ns) if uid in (ln["alias"] or "")]
        assert (len(specs), len(links)) == ((1, 2) if record else (0, 0)), (uid, specs, links)
    resp = a.prepare(claims)
    for c in claims:
        got = answer(resp, c)
        assert got.error == ""
        seen = answers[c["metadata"]["uid"]]
        assert seen in (set(), {got.SerializeToString(deterministic=True)})
    assert len(links_in(ns)) == 2 * CLAIMS  # each claim's interfaces exist once
    resp = b.unprepare(claims)
    assert all(answer(resp, c).error == "" for c in claims)
    nothing_left(ns, b)
