"""ResourceSlice publishing by the real daemon against the API stand-in."""

import copy
import time

import pytest

from tests.integration.helpers import answer, nothing_left
from tests.support import netns
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.waiting import wait_for

pytestmark = pytest.mark.root


def _devices(fake):
    with fake.lock:
        return {d["name"]: d for s in fake.slices.values() for d in s["spec"]["devices"]}


def test_slice_is_owned_by_the_node_in_a_pool_named_after_it(api, start_driver):
    fake, _ = api
    d = start_driver()
    [s] = wait_for("a slice", lambda: list(fake.slices.values()), log=d.log)
    assert s["spec"]["driver"] == "dra.example.com" and s["spec"]["nodeName"] == "node-a"
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    [owner] = s["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Node",
        "node-a",
        fake.nodes["node-a"]["metadata"]["uid"],
    )
    dev = s["spec"]["devices"][0]
    assert dev["allowMultipleAllocations"] is True
    assert dev["capacity"]["slots"]["value"] == "128"


def test_unchanged_pool_is_not_rewritten_and_a_deleted_one_is_healed(api, start_driver):
    fake, _ = api
    d = start_driver()  # --publish-interval 2 in tests
    [s] = wait_for("a slice", lambda: list(fake.slices.values()), log=d.log)
    version = s["metadata"]["resourceVersion"]
    time.sleep(4.5)  # two periodic checks
    assert [x["metadata"]["resourceVersion"] for x in fake.slices.values()] == [version]
    with fake.lock:  # the kubelet deletes a driver's slices when it re-registers
        fake.slices.clear()
    d.notify(True)
    [healed] = wait_for("the slice again", lambda: list(fake.slices.values()), log=d.log)
    assert healed["spec"]["pool"]["generation"] == 1


def test_dropped_consumable_capacity_falls_back_to_single_devices(api, start_driver, ns):
    fake, _ = api
    fake.drop_consumable_capacity = True
    d = start_driver("--virtual-slots", "4")
    wait_for("fallback devices", lambda: "netdev-virtual-3" in _devices(fake), log=d.log)
    assert sorted(_devices(fake)) == [f"netdev-virtual-{i}" for i in range(4)]
    lines = [ln for ln in d.log().splitlines() if "dropped consumable-capacity" in ln]
    assert len(lines) == 1 and "DRAConsumableCapacity" in lines[0]
    claim = allocated_claim(
        "c",
        [{"request": "nic", "pool": "node-a", "device": "netdev-virtual-2"}],
        config=[opaque({"type": "netdev", "netdev": {"kind": "veth"}})],
    )
    fake.add_claim(claim)
    assert answer(d.prepare([claim]), claim).error == ""
    d.unprepare([claim])
    nothing_left(ns, d)


def test_more_than_128_devices_split_into_slices_of_one_pool(api, start_driver):
    fake, _ = api
    fake.drop_consumable_capacity = True
    d = start_driver("--virtual-slots", "200")
    wait_for("two slices", lambda: len(_devices(fake)) == 200, log=d.log)
    counts = sorted(len(s["spec"]["devices"]) for s in fake.slices.values())
    assert counts == [72, 128]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in fake.slices.values()} == {2}
    assert len({s["spec"]["pool"]["generation"] for s in fake.slices.values()}) == 1


def test_link_events_republish_without_waiting_for_the_timer(api, start_driver, ns):
    fake, _ = api
    d = start_driver("--publish-interval", "600", "--parent-interfaces", "eth*")
    wait_for("a slice", lambda: fake.slices, log=d.log)
    assert "nic-eth5" not in _devices(fake)
    netns.ip(ns, "link", "add", "eth5", "type", "veth", "peer", "name", "x5")
    dev = wait_for("nic-eth5", lambda: _devices(fake).get("nic-eth5"), log=d.log)
    assert dev["attributes"]["kind"] == {"string": "host-device"}
    assert {s["spec"]["pool"]["generation"] for s in fake.slices.values()} == {2}
    netns.ip(ns, "link", "del", "eth5")
    wait_for("nic-eth5 gone", lambda: "nic-eth5" not in _devices(fake), log=d.log)


def _api_calls(fake, since):
    """The requests after the first `since`, watches and the one DeviceClass check of the
    start-up (10 s after it) left out."""
    return [
        r for r in list(fake.requests)[since:] if r[0] != "WATCH" and "deviceclasses" not in r[1]
    ]


def test_a_node_at_rest_costs_one_watch_and_heals_from_its_events(api, start_driver):
    """Rediscovery every second costs the API nothing; a slice deleted or changed behind
    the driver's back is put right from the watch's event, not a timer (600 s)."""
    fake, _ = api
    d = start_driver("--publish-interval", "1", "--virtual-slots", "1000")  # stored as 1k
    wait_for("a slice", lambda: list(fake.slices.values()), log=d.log)
    wait_for(
        "the watch",
        lambda: ("WATCH", "/apis/resource.k8s.io/v1/resourceslices") in fake.requests,
        log=d.log,
    )
    time.sleep(1.0)  # the publisher's answer to the events of its own writes
    seen = len(fake.requests)
    time.sleep(3.5)  # three rediscoveries
    assert _api_calls(fake, seen) == []
    with fake.lock:
        fake.slices.clear()
    [healed] = wait_for("the slice again", lambda: list(fake.slices.values()), log=d.log)
    assert (
        healed["metadata"]["ownerReferences"][0]["uid"] == fake.nodes["node-a"]["metadata"]["uid"]
    )
    # A creation reads the Node again (a re-created Node's collector deleted the slice).
    assert ("GET", "/api/v1/nodes/node-a") in _api_calls(fake, seen)
    with fake.lock:
        changed = copy.deepcopy(healed)
        changed["spec"]["devices"] = []
        fake.slices[changed["metadata"]["name"]] = fake._store(changed, healed["metadata"]["uid"])
    wait_for(
        "the slice's devices back",
        lambda: [x["spec"]["devices"] for x in fake.slices.values()] == [healed["spec"]["devices"]],
        log=d.log,
    )


def test_an_expired_watch_lists_again_and_keeps_healing(api, start_driver):
    fake, _ = api
    d = start_driver("--publish-interval", "600")
    wait_for("a slice", lambda: list(fake.slices.values()), log=d.log)
    watches = lambda: len(  # noqa: E731
        [r for r in fake.requests if r[0] == "WATCH" and r[1].endswith("/resourceslices")]
    )
    wait_for("the watch", watches, log=d.log)
    time.sleep(1.5)  # a watch ended sooner without an event counts as a failure instead
    with fake.lock:
        # The server forgets the version the driver's watch goes on from, and ends the
        # watch: the next one is refused (410), the driver lists again and watches on.
        fake.next_rv()
        fake.oldest_watchable = fake._rv
        fake.end_watches()
    wait_for("the relist", lambda: "ResourceSlices watch expired" in d.log(), log=d.log)
    wait_for("a watch from the new list", lambda: watches() >= 3, log=d.log)
    with fake.lock:
        fake.slices.clear()
    wait_for("the slice again", lambda: list(fake.slices.values()), log=d.log)


def test_without_watches_the_timer_lists_and_heals(api, start_driver):
    fake, _ = api
    fake.refuse_watches = True
    d = start_driver()  # --publish-interval 2
    wait_for("a slice", lambda: list(fake.slices.values()), log=d.log)
    with fake.lock:
        fake.slices.clear()
    wait_for("the slice again", lambda: list(fake.slices.values()), log=d.log)
    assert "watching ResourceSlices failed" in d.log()
