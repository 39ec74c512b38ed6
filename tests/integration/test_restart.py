"""State on disk across restarts: corrupt records, leaked interfaces, crashes, journals."""

import contextlib
import json
import signal
import threading
import uuid

import pytest

from dradriver.contract import naming
from tests.integration.helpers import DOC_RANGES, answer, nothing_left, veth_claim
from tests.support import netns
from tests.support.runtime import links_in
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


def test_corrupt_record_is_quarantined_and_the_rest_served(api, start_driver, ns):
    fake, _ = api
    good, broken = veth_claim("good", interface="net1"), veth_claim("broken", interface="net2")
    fake.add_claim(good)
    fake.add_claim(broken)
    d = start_driver()
    first = answer(d.prepare([good, broken]), good)
    d.stop()
    broken_uid = broken["metadata"]["uid"]
    record = d.state / f"{broken_uid}.alloc.json"
    record.write_text('{"version": 1, "claim": ')  # torn by hand
    d = start_driver()
    log = d.log()
    assert "corrupt allocation record quarantined" in log and str(record) in log
    assert (d.state / f"{broken_uid}.alloc.json.corrupt").exists()
    assert answer(d.prepare([good]), good) == first
    # Unprepare of the claim whose record was lost still removes its tagged interfaces.
    assert answer(d.unprepare([broken]), broken).error == ""
    assert not any(broken_uid in (ln["alias"] or "") for ln in links_in(ns))
    d.unprepare([good])
    (d.state / f"{broken_uid}.alloc.json.corrupt").unlink()
    nothing_left(ns, d)


def test_leaked_interfaces_and_specs_are_collected_at_start(api, start_driver, ns, droot):
    """What this instance tagged and no record lists goes; what it cannot prove is its own
    (another instance's tag, an untagged link of the driver's name shape) stays."""
    leaked_uid = str(uuid.uuid4())
    key = "nic/netdev-virtual"
    d = start_driver(wait=False)
    d.stop()
    tagged = naming.host_ifname(leaked_uid, key)
    others = naming.host_ifname(leaked_uid, key, "o")
    untagged = naming.host_ifname(leaked_uid, key, "h")
    netns.ip(ns, "link", "add", tagged, "type", "veth", "peer", "name", "keepme0")
    netns.ip(ns, "link", "set", tagged, "alias", naming.ifalias(d.owner, leaked_uid, key))
    netns.ip(ns, "link", "add", others, "type", "veth", "peer", "name", "keepme1")
    other_owner = naming.owner_id("dra.example.com", "/var/lib/another-instance")
    netns.ip(ns, "link", "set", others, "alias", naming.ifalias(other_owner, leaked_uid, key))
    netns.ip(ns, "link", "add", untagged, "type", "veth", "peer", "name", "keepme2")
    spec_dir = droot / "cdi"
    spec_dir.mkdir(exist_ok=True)
    (spec_dir / f"dra.example.com-netdev_{leaked_uid}.json").write_text("{}")
    (spec_dir / "other-vendor_x.json").write_text("{}")
    d = start_driver()
    left = {ln["name"] for ln in links_in(ns)}
    # Deleting a veth end deletes its peer too: keepme0 went with our tagged leak.
    assert left == {others, "keepme1", untagged, "keepme2"}
    assert sorted(p.name for p in spec_dir.glob("*.json")) == ["other-vendor_x.json"]
    assert "deleted leaked interface" in d.log()


def test_foreign_interfaces_survive_start(api, start_driver, ns):
    netns.ip(ns, "link", "add", "keepme0", "type", "veth", "peer", "name", "keepme1")
    netns.ip(ns, "link", "set", "keepme0", "alias", "dra-driver is not my owner")
    start_driver()
    assert {ln["name"] for ln in links_in(ns)} == {"keepme0", "keepme1"}


def test_sigkill_between_prepare_and_unprepare(api, start_driver, ns):
    fake, _ = api
    claim = veth_claim(extra={"ipAddresses": ["198.51.100.2/24"]})
    fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    first = answer(d.prepare([claim]), claim)
    links = netns.ip(ns, "-o", "link")
    d.kill()
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    assert answer(d.prepare([claim]), claim) == first
    assert netns.ip(ns, "-o", "link") == links  # nothing recreated, nothing collected
    assert answer(d.unprepare([claim]), claim).error == ""
    nothing_left(ns, d)


def test_interrupted_prepare_journal_is_rolled_back_at_start(api, start_driver, ns, droot):
    uid = str(uuid.uuid4())
    key = "nic/nic-x"
    name = naming.host_ifname(uid, key)
    netns.ip(ns, "link", "add", name, "type", "veth", "peer", "name", "peer0")
    legacy = f"dra-driver claim={uid} {key}"  # as a driver before owner tags wrote it
    netns.ip(ns, "link", "set", name, "alias", legacy)
    state = droot / "cdi" / "dra.example.com-state"
    state.mkdir(parents=True)
    (state / f"{uid}.alloc.json").write_text(
        json.dumps(
            {
                "version": 1,
                "claim": {"namespace": "default", "name": "c", "uid": uid},
                "phase": "preparing",
                "podUIDs": [],
                "cdiSpecs": [],
                "answer": [],
                "devices": [
                    {
                        "key": key,
                        "request": "nic",
                        "pool": "node-a",
                        "device": "nic-x",
                        "share_id": None,
                        "type": "netdev",
                        "kind": "veth",
                        "undo": {"interfaces": [name], "alias": legacy},
                    }
                ],
            }
        )
    )
    d = start_driver()
    assert "rolling back interrupted prepare" in d.log()
    nothing_left(ns, d)


def test_kill_during_prepare_leaks_nothing_after_restart(api, start_driver, ns):
    fake, _ = api
    claims = [veth_claim(f"c{i}", interface="net1") for i in range(40)]
    for c in claims:
        fake.add_claim(c)
    d = start_driver()
    t = threading.Thread(target=lambda: _ignore(d.prepare, claims), daemon=True)
    t.start()
    # Kill once the batch is under way.
    wait_for("a record", lambda: list(d.state.glob("*.alloc.json")), interval=0.001, log=d.log)
    d.stop(signal.SIGKILL)
    t.join(10)
    d = start_driver()
    prepared = {p.name.split(".")[0] for p in d.state.glob("*.alloc.json")}
    tags = [naming.parse_ifalias(ln["alias"]) for ln in links_in(ns)]
    assert None not in tags, "an untagged interface survived the restart"
    owners = {t.claim_uid for t in tags if t is not None}
    assert owners <= prepared, "interfaces without a record survived the restart"
    assert {p.name.split("_")[1][:-5] for p in d.cdi.glob("*.json")} <= prepared
    d.unprepare(claims)
    nothing_left(ns, d)


def _ignore(fn, *args):
    with contextlib.suppress(Exception):  # the driver is killed under this call
        fn(*args)
