"""NodePrepareResources / NodeUnprepareResources over the real sockets, real kernel objects."""

import json
import uuid

import pytest

from dradriver.contract import naming
from tests.integration.helpers import DOC_RANGES, answer, nothing_left, specs, veth_claim
from tests.support import netns
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.runtime import links_in
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_then_unprepare_a_veth_claim(api, start_driver, ns, version):
    fake, _ = api
    claim = veth_claim(extra={"ipAddresses": ["198.51.100.2/24"], "mtu": 1400})
    fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    uid = claim["metadata"]["uid"]
    share = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]

    got = answer(d.prepare([claim], version), claim)
    assert got.error == ""
    [dev] = got.devices
    assert list(dev.request_names) == ["nic"]
    assert (dev.pool_name, dev.device_name) == ("node-a", "netdev-virtual")
    [cdi_id] = dev.cdi_device_ids
    assert cdi_id.startswith("dra.example.com/netdev=") and uid in cdi_id
    if version == "v1":
        assert dev.share_id == share
    [(fname, spec)] = specs(d.cdi).items()
    assert fname == f"dra.example.com-netdev_{uid}.json"
    [nd] = spec["devices"][0]["containerEdits"]["netDevices"]
    assert nd["name"] == "net1" and spec["devices"][0]["name"] == cdi_id.split("=")[1]
    record = json.loads((d.state / f"{uid}.alloc.json").read_text())
    assert record["claim"]["uid"] == uid and record["phase"] == "prepared"
    links = {ln["name"]: ln["alias"] for ln in links_in(ns)}
    assert nd["hostInterfaceName"] in links and len(links) == 2  # both ends of the pair
    tags = [naming.parse_ifalias(a) for a in links.values()]
    assert all(t is not None and (t.claim_uid, t.owner) == (uid, d.owner) for t in tags)

    gone = answer(d.unprepare([claim], version), claim)
    assert gone.error == ""
    nothing_left(ns, d)


def test_prepare_is_idempotent_without_touching_kernel_or_api(api, start_driver, ns):
    fake, _ = api
    claim = veth_claim()
    fake.add_claim(claim)
    d = start_driver()
    first = answer(d.prepare([claim]), claim)
    before = netns.ip(ns, "-o", "link")
    gets = len([r for r in fake.requests if "resourceclaims" in r[1] and r[0] == "GET"])
    second = answer(d.prepare([claim]), claim)
    assert second == first and second.error == ""
    assert netns.ip(ns, "-o", "link") == before
    assert len([r for r in fake.requests if "resourceclaims" in r[1] and r[0] == "GET"]) == gets
    d.unprepare([claim])
    nothing_left(ns, d)


def test_status_devices_carry_ready_and_network_data(api, start_driver):
    fake, _ = api
    claim = veth_claim(extra={"ipAddresses": ["198.51.100.2/24", "2001:db8::2/64"]})
    fake.add_claim(claim)
    d = start_driver("--claim-address-ranges", DOC_RANGES)
    assert answer(d.prepare([claim]), claim).error == ""
    wait_for(
        "status.devices",
        lambda: fake.claim("default", "c1")["status"].get("devices"),
        log=d.log,
    )
    [entry] = fake.claim("default", "c1")["status"]["devices"]
    result = claim["status"]["allocation"]["devices"]["results"][0]
    assert (entry["driver"], entry["pool"], entry["device"], entry["shareID"]) == (
        "dra.example.com",
        "node-a",
        "netdev-virtual",
        result["shareID"],
    )
    assert entry["conditions"][0]["type"] == "Ready" and entry["conditions"][0]["status"] == "True"
    nd = entry["networkData"]
    assert nd["interfaceName"] == "net1" and nd["ips"] == ["198.51.100.2/24", "2001:db8::2/64"]
    assert len(nd["hardwareAddress"]) == 17
    d.unprepare([claim])


def test_failed_status_write_is_logged_not_fatal(api, start_driver, ns):
    fake, _ = api
    fake.fail_status_writes = True
    claim = veth_claim()
    fake.add_claim(claim)
    d = start_driver()
    assert answer(d.prepare([claim]), claim).error == ""
    wait_for(
        "the failed status write in the log", lambda: "writing claim status failed" in d.log(), 10
    )
    d.unprepare([claim])
    nothing_left(ns, d)


def test_batch_with_one_bad_claim(api, start_driver, ns):
    fake, _ = api
    good1, good2 = veth_claim("a", interface="net1"), veth_claim("b", interface="net2")
    bad = veth_claim("bad", extra={"mtu": 10})
    for c in (good1, bad, good2):
        fake.add_claim(c)
    d = start_driver()
    resp = d.prepare([good1, bad, good2])
    assert len(resp.claims) == 3
    assert answer(resp, good1).error == "" and answer(resp, good2).error == ""
    err = answer(resp, bad).error
    assert err.startswith(f"claim default/bad ({bad['metadata']['uid']}): request nic: config ")
    assert "$.netdev.mtu" in err and "minimum of 68" in err
    assert not any(bad["metadata"]["uid"] in ln["alias"] for ln in links_in(ns))
    assert not any(bad["metadata"]["uid"] in p.name for p in d.cdi.glob("*.json"))
    d.unprepare([good1, bad, good2])
    nothing_left(ns, d)


def test_failure_half_way_undoes_the_claims_earlier_devices(api, start_driver, ns):
    fake, _ = api
    uid = str(uuid.uuid4())
    claim = allocated_claim(
        "two",
        [
            {"request": "a", "pool": "node-a", "device": "netdev-virtual", "shareID": "s1"},
            {"request": "b", "pool": "node-a", "device": "netdev-virtual", "shareID": "s2"},
        ],
        uid=uid,
        config=[
            opaque(
                {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "net1"}},
                requests=["a"],
            ),
            opaque(
                {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "net2"}},
                requests=["b"],
            ),
        ],
    )
    fake.add_claim(claim)
    # Both devices validate; at prepare, b's host name is held by someone else's link,
    # which the driver must not touch: b fails after a was created.
    taken = naming.host_ifname(uid, naming.device_key("b", "netdev-virtual", "s2"))
    netns.ip(ns, "link", "add", taken, "type", "veth", "peer", "name", "other0")
    netns.ip(ns, "link", "set", taken, "alias", "someone else")
    d = start_driver()
    err = answer(d.prepare([claim]), claim).error
    assert "request b" in err and "belongs to someone else" in err, err
    assert sorted(ln["name"] for ln in links_in(ns)) == sorted([taken, "other0"])
    assert list(d.cdi.glob("*.json")) == [] and list(d.state.glob("*")) == []


def test_unprepare_of_unknown_claim_succeeds(start_driver):
    d = start_driver()
    claim = veth_claim()
    assert answer(d.unprepare([claim]), claim).error == ""


def test_claim_for_another_driver_only_prepares_nothing(api, start_driver, ns):
    fake, _ = api
    claim = allocated_claim(
        "gpu", [{"request": "g", "pool": "node-a", "device": "gpu0", "driver": "gpu.example.com"}]
    )
    fake.add_claim(claim)
    d = start_driver()
    got = answer(d.prepare([claim]), claim)
    assert got.error == "" and list(got.devices) == []
    nothing_left(ns, d)


def _bad(fake, claim, **changes):
    for key, value in changes.items():
        claim["metadata"][key] = value
    fake.add_claim(claim)
    return claim


@pytest.mark.parametrize(
    "case,expected",
    [
        ("replaced", "replaced: the API has UID"),
        ("unallocated", "not allocated"),
        ("missing", "not found in the API server"),
        ("bad-uid", "invalid claim UID"),
        ("other-pool", "is in pool node-b, but this node publishes pool node-a"),
        ("unknown-device", "device nic-eth9 is not published by this node"),
        ("unknown-kind", "$.netdev.kind: 'tap' is not one of"),
        ("no-parent", "'parent' is a required property"),
        ("parent-not-allowed", "eth0 is not on the operator's list of parent interfaces"),
        ("bad-cidr", "$.netdev.ipAddresses[0]"),
        ("long-name", "$.netdev.interfaceName"),
        ("bad-mode", "$.netdev.mode"),
    ],
)
def test_bad_input_gives_a_clear_error_and_leaves_nothing(api, start_driver, ns, case, expected):
    fake, _ = api
    netdev = {"kind": "veth", "interfaceName": "net1"}
    results = [{"request": "nic", "pool": "node-a", "device": "netdev-virtual", "shareID": "s"}]
    netdev_by_case = {
        "unknown-kind": {"kind": "tap"},
        "no-parent": {"kind": "macvlan"},
        "parent-not-allowed": {"kind": "macvlan", "parent": "eth0"},
        "bad-cidr": {"kind": "veth", "ipAddresses": ["10.0.0.300/24"]},
        "long-name": {"kind": "veth", "interfaceName": "a-very-long-name0"},
        "bad-mode": {"kind": "macvlan", "parent": "eth0", "mode": "shared"},
    }
    netdev = netdev_by_case.get(case, netdev)
    if case == "other-pool":
        results[0]["pool"] = "node-b"
    if case == "unknown-device":
        results[0]["device"] = "nic-eth9"
    claim = allocated_claim("c", results, config=[opaque({"type": "netdev", "netdev": netdev})])
    ref = claim
    if case == "replaced":
        ref = json.loads(json.dumps(claim))
        ref["metadata"]["uid"] = str(uuid.uuid4())
    if case == "unallocated":
        del claim["status"]["allocation"]
    if case == "bad-uid":
        ref = json.loads(json.dumps(claim))
        ref["metadata"]["uid"] = "../../../etc/x"
    if case != "missing":
        fake.add_claim(claim)
    d = start_driver()
    err = answer(d.prepare([ref]), ref).error
    assert err.startswith(f"claim default/c ({ref['metadata']['uid']}): ")
    assert expected in err, err
    nothing_left(ns, d)


def test_same_container_name_twice_in_one_pod_fails_on_the_second(api, start_driver, ns):
    fake, _ = api
    pod = str(uuid.uuid4())
    first, second = veth_claim("a", pods=[pod]), veth_claim("b", pods=[pod])
    other_pod = veth_claim("c", pods=[str(uuid.uuid4())])  # same name, other pod: fine
    for c in (first, second, other_pod):
        fake.add_claim(c)
    d = start_driver()
    resp = d.prepare([first, second, other_pod])
    assert answer(resp, first).error == "" and answer(resp, other_pod).error == ""
    err = answer(resp, second).error
    assert "container interface name net1 is already used by claim" in err
    assert first["metadata"]["uid"] in err
    d.unprepare([first, second, other_pod])
    nothing_left(ns, d)
