"""A node reboot: every kernel object the driver made is gone, its records and CDI specs
are not, and the kubelet will start the pods' containers again with the CDI IDs it was
given. Start-up recognises the reboot by the boot ID in the records and prepares those
claims again from the records alone, before it registers."""

from __future__ import annotations

import json

import pytest

from tests.faults.checks import answer_of, check_invariants, expected_answer
from tests.integration.helpers import DOC_RANGES, nothing_left, veth_claim
from tests.support import netns
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


def test_claims_are_prepared_again_after_a_reboot(api, start_driver, ns):
    fake, _ = api
    claims = [
        veth_claim(f"c{i}", interface="net1", extra={"mtu": 1400, "ipAddresses": [_address(i)]})
        for i in range(3)
    ]
    for claim in claims:
        fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    first = d.prepare(claims)
    assert all(answer_of(first, c) == ("", expected_answer(c)) for c in claims)
    before = {ln["name"]: ln["alias"] for ln in links_in(ns)}
    d.stop()
    # The reboot: the interfaces are gone, the records say they were made in another boot.
    for name in before:
        if name.startswith("drh"):
            netns.ip(ns, "link", "del", name)
    assert links_in(ns) == []  # (deleting a veth's host end deleted its pair)
    for path in d.state.glob("*.alloc.json"):
        doc = json.loads(path.read_text())
        doc["bootId"] = "00000000-0000-0000-0000-000000000000"
        path.write_text(json.dumps(doc))
    fake.claims.clear()  # the API server is not back yet: the records must be enough
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    assert "node rebooted: claim prepared again" in d.log()
    assert {ln["name"]: ln["alias"] for ln in links_in(ns)} == before
    for i, claim in enumerate(claims):
        uid = claim["metadata"]["uid"]
        [inner] = [n for n, alias in before.items() if n.startswith("drc") and uid in alias]
        assert _details(ns, inner) == (1400, [_address(i)])
    assert d.prepare(claims) == first
    check_invariants(ns, d)
    d.unprepare(claims)
    nothing_left(ns, d)


def _address(i: int) -> str:
    return f"198.51.100.{i + 1}/24"


def _details(ns: str, name: str) -> tuple[int, list[str]]:
    [link] = json.loads(netns.ip(ns, "-j", "addr", "show", "dev", name))
    addrs = [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]
    return link["mtu"], addrs
