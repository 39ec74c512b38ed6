"""The NRI mode's pod sandbox events (dradriver/nrimode/sandboxes.py) in-process, without root:
the real handlers, records and CDI specs on disk, and the in-memory kernel, whose pod
network namespaces are separate tables (tests/support/fakekernel.py).

Every step of a RunPodSandbox and of a StopPodSandbox (each kernel request, each file
write) is made to fail, and separately to crash the process; what is left is checked
after the runtime does what it does next (a failed run: stop and remove; a crash: the
driver's restart and the runtime's Synchronize): the pod holds its interface as
configured, or the node is as it was once the claim is unprepared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from dradriver.base.errors import ClaimError, DriverError
from dradriver.claims.plan import MAX_POD_DEVICES, Plan, refuse_sharing
from dradriver.claims.prepare import Preparer
from dradriver.claims.resolution import ResolvedClaim
from dradriver.contract.hookspecs import CDI, NRI, ClaimRef, Validated
from dradriver.nri import NriPlugin, PodSandbox
from dradriver.nri.proto import api_pb2
from dradriver.nrimode.sandboxes import PodSandboxes
from dradriver.state.moves import IN, SPENT
from tests.support import nriruntime as stand_in
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.fakekernel import FakeLink
from tests.support.statenode import KINDS as PLAIN_KINDS
from tests.support.statenode import POD, UID, Node, claim_object, fsynced

NETNS = "/run/netns/cni-one"
NETNS2 = "/run/netns/cni-two"
ROUTE = {"destination": "203.0.113.0/24", "gateway": "198.51.100.1", "metric": 10}
KINDS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "veth": (
        "netdev-virtual",
        {"kind": "veth", "interfaceName": "net1", "mtu": 1400,
         "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"], "routes": [ROUTE],
         "sysctls": {"net.ipv4.conf.net1.rp_filter": 2, "net.ipv6.conf.net1.accept_ra": "0"}},
        True,
    ),
    "macvlan": (
        "netdev-virtual",
        {"kind": "macvlan", "parent": "ens2", "interfaceName": "data0",
         "macAddress": "02:00:00:00:20:01", "ipAddresses": ["198.51.100.8/24"],
         "routes": [{"destination": "0.0.0.0/0", "gateway": "198.51.100.1", "metric": 100}]},
        True,
    ),
    "host-device": (
        "nic-ens1",
        {"kind": "host-device", "interfaceName": "net2", "mtu": 9000,
         "macAddress": "02:00:00:00:30:01", "ipAddresses": ["198.51.100.9/24"],
         "sysctls": {"net.ipv4.conf.net2.forwarding": "1"}},
        False,
    ),
}  # fmt: skip
CONTAINER = {"veth": "net1", "macvlan": "data0", "host-device": "net2"}
REF = ClaimRef("default", "c", UID)
RUN, STOP, REMOVE = api_pb2.RUN_POD_SANDBOX, api_pb2.STOP_POD_SANDBOX, api_pb2.REMOVE_POD_SANDBOX


def _pod(sandbox: str = "s1", netns: str = NETNS) -> PodSandbox:
    return PodSandbox(sandbox, POD, "p", "default", netns)


def _add_claim(node: Node, kind: str) -> None:
    device, netdev, share = KINDS[kind]
    node.api.fake.add_claim(claim_object(UID, device, {"type": "netdev", "netdev": netdev}, share))


def _preparer(node: Node, injection: str = NRI) -> Preparer:
    preparer = node.preparer()
    preparer.injection = injection
    return preparer


def _sandboxes(preparer: Preparer) -> PodSandboxes:
    """The sandbox handler as `dra-driver run` wires it (a new one: a restarted driver)."""
    return PodSandboxes(preparer.lifecycle, preparer.gate)


def _prepare(preparer: Preparer) -> None:
    outcome = preparer.prepare([REF])[UID]
    assert outcome.error is None, outcome.error


def _pod_view(node: Node, netns: str) -> dict[str, Any]:
    """What a pod sees in its namespace: links (MTU, MAC, up, addresses), routes, sysctls."""
    ns = node.kernel.namespaces[netns]
    return {
        "links": {
            n: (ln.mtu, ln.address, ln.up, sorted(ln.addresses), ln.alias)
            for n, ln in ns.table.items()
        },
        "routes": sorted((d, g or "", m or 0) for d, g, m, _ in ns.added_routes),
        "sysctls": dict(ns.sysctls),
    }


def _record(node: Node) -> Any:
    record = _preparer(node).records.load(UID)
    assert record is not None
    return record


def _expected_inside(kind: str) -> tuple[str, set[str]]:
    """(interface name in the pod, the addresses it must hold)."""
    _, netdev, _ = KINDS[kind]
    addresses = set(netdev["ipAddresses"])
    if kind == "host-device":
        addresses.add("192.0.2.5/24")  # the NIC's own address goes with it, as in CDI mode
    return CONTAINER[kind], addresses


def _check_inside(node: Node, kind: str, netns: str = NETNS) -> None:
    name, addresses = _expected_inside(kind)
    view = _pod_view(node, netns)
    mtu, mac, up, held, _ = view["links"][name]
    _, netdev, _ = KINDS[kind]
    assert up and {f"{a}/{p}" for a, p in held} == addresses, view
    assert mtu == netdev.get("mtu", mtu) and mac == netdev.get("macAddress", mac)
    routes = {
        (r["destination"], r.get("gateway", ""), r.get("metric", 0))
        for r in netdev.get("routes", ())
    }
    assert set(view["routes"]) == routes
    for key, value in netdev.get("sysctls", {}).items():
        _, family, _, ifname, leaf = key.split(".")
        assert view["sysctls"][f"net/{family}/conf/{ifname}/{leaf}"] == str(value)


def _teardown(node: Node, sandboxes: PodSandboxes, pod: PodSandbox) -> None:
    """What the runtime does when the pod goes: stop, netns gone, remove."""
    sandboxes.stop_pod_sandbox(pod)
    if pod.netns in node.kernel.namespaces:
        node.kernel.remove_namespace(pod.netns)
    sandboxes.remove_pod_sandbox(PodSandbox(pod.id, pod.uid, pod.name, pod.namespace, ""))


# -- prepare in NRI mode ------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_nri_prepare_keeps_addresses_off_the_host_and_netdevices_out_of_the_spec(node, kind):
    before = node.links()
    _add_claim(node, kind)
    _prepare(_preparer(node))
    record = _record(node)
    assert record.injection == NRI and record.placement == {}
    [moves] = record.moves.values()
    [spec] = record.specs.values()
    [device] = spec["devices"]
    edits = device["containerEdits"]
    assert "netDevices" not in edits
    name = CONTAINER[kind]
    assert f"DRA_NETDEV={name}" in edits["env"] and f"DRA_NETDEV_NIC={name}" in edits["env"]
    assert [m.container for m in moves] == [name]
    # Not one of the claim's addresses is on the host: the host keeps what it had.
    held = {a for ln in node.kernel.table.values() for a in ln.addresses}
    assert held == {a for v in before.values() for a in v[4]}


def test_cdi_mode_refuses_routes_sysctls_and_says_why(node):
    _add_claim(node, "veth")
    outcome = _preparer(node, CDI).prepare([REF])[UID]
    assert outcome.error is not None
    for field in ("$.netdev.routes", "$.netdev.sysctls"):
        assert f"{field}: needs the NRI injection mode" in outcome.error
    assert node.files() == []


def test_sysctls_of_another_interface_or_unknown_keys_are_refused(node):
    """Another interface's setting is refused by the config's rules (as at admission);
    a setting this node lacks, or may not write, only on the node."""
    for sysctls, field, message in [
        ({"net.ipv4.conf.eth0.rp_filter": 1, "net.ipv4.conf.eth2.rp_filter": 1},
         "net.ipv4.conf.eth0.rp_filter", "names interface eth0, which is no claim's"),
        ({"net.ipv4.conf.eth2.rp_filter": 1}, "net.ipv4.conf.eth2.rp_filter",
         "names interface eth2, not this claim's net1"),
        ({"net.ipv4.conf.net1.no_such_key": 1}, "net.ipv4.conf.net1.no_such_key",
         "this node has no such setting"),
        ({"net.ipv4.conf.net1.mc_forwarding": 1}, "net.ipv4.conf.net1.mc_forwarding",
         "this node has no such setting, or it is read-only"),
    ]:  # fmt: skip
        netdev = {"kind": "veth", "interfaceName": "net1", "sysctls": sysctls}
        node.api.fake.add_claim(
            claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
        )
        outcome = _preparer(node).prepare([REF])[UID]
        assert outcome.error is not None
        assert f'$.netdev.sysctls["{field}"]: {message}' in outcome.error, outcome.error
        assert node.files() == []


def test_a_claim_with_more_devices_than_a_sandbox_event_can_move_is_refused(node):
    results, config = [], []
    for k in range(MAX_POD_DEVICES + 1):
        results.append({"request": f"nic{k}", "pool": "node-a", "device": "netdev-virtual",
                        "shareID": f"5a0c6f5e-0000-4000-8000-{k:012d}"})  # fmt: skip
        netdev = {"kind": "veth", "interfaceName": f"net{k}"}
        config.append(opaque({"type": "netdev", "netdev": netdev}, requests=[f"nic{k}"]))
    node.api.fake.add_claim(allocated_claim("c", results, uid=UID, config=config, pods=[POD]))
    outcome = _preparer(node).prepare([REF])[UID]
    assert outcome.error is not None
    assert f"request nic{MAX_POD_DEVICES}: {MAX_POD_DEVICES + 1} of the claim's devices" in (
        outcome.error
    )
    assert f"at most {MAX_POD_DEVICES} can be moved within the 1.5 s" in outcome.error
    assert node.files() == []
    assert _preparer(node, CDI).prepare([REF])[UID].error is None  # the runtime moves them


def test_a_gateway_off_the_interfaces_networks_is_refused(node):
    netdev = {"kind": "veth", "ipAddresses": ["198.51.100.7/24"], "routes": [
        {"destination": "0.0.0.0/0", "gateway": "203.0.113.1", "metric": 10},
        {"destination": "2001:db8:1::/48", "gateway": "198.51.100.1"}]}  # fmt: skip
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    outcome = _preparer(node).prepare([REF])[UID]
    assert outcome.error is not None
    assert "$.netdev.routes[0].gateway: 203.0.113.1 is not on a network" in outcome.error
    assert "$.netdev.routes[1].gateway: 198.51.100.1 is not of the family" in outcome.error


def test_configs_that_would_fail_only_inside_the_pod_are_refused_at_prepare(node):
    """Before, each passed prepare and failed every sandbox creation: the pod retried
    forever, and after a driver restart came up Running without its interface."""
    before = node.links()
    netdev = {
        "kind": "veth", "interfaceName": "net1",
        "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"],
        "routes": [
            {"destination": "203.0.113.0/24", "gateway": "198.51.100.255"},
            {"destination": "203.0.114.0/24", "gateway": "198.51.100.0"},
            {"destination": "203.0.115.0/24", "gateway": "198.51.100.7"},
            {"destination": "203.0.116.0/24", "gateway": "198.51.100.1"},
        ],
        "sysctls": {
            "net.ipv4.conf.net1.rp_filter": "abc",
            "net.ipv4.conf.net1.arp_ignore": 9223372036854775807,
            "net.ipv4.conf.net1.forwarding": "",
            "net.ipv6.conf.net1.disable_ipv6": "1",
            "net.ipv6.conf.net1.accept_ra": -1,
        },
    }  # fmt: skip
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    outcome = _preparer(node).prepare([REF])[UID]
    assert outcome.error is not None
    for field, message in [
        ("routes[0].gateway", "198.51.100.255 is the broadcast address of 198.51.100.0/24"),
        ("routes[1].gateway", "198.51.100.0 is the network address of 198.51.100.0/24"),
        ("routes[2].gateway", "198.51.100.7 is this interface's own address"),
        ('sysctls["net.ipv4.conf.net1.rp_filter"]', '"abc" is not a number the kernel takes'),
        ('sysctls["net.ipv4.conf.net1.arp_ignore"]', '"9223372036854775807" is not a number'),
        ('sysctls["net.ipv4.conf.net1.forwarding"]', '"" is not a number'),
        ('sysctls["net.ipv6.conf.net1.disable_ipv6"]',
         "turns IPv6 off, but ipAddresses[1] is an IPv6 address"),
    ]:  # fmt: skip
        assert f"$.netdev.{field}: {message}" in outcome.error
    assert "routes[3]" not in outcome.error and "accept_ra" not in outcome.error
    assert node.links() == before and node.files() == []


def test_routes_the_kernel_would_not_hold_beside_each_other_are_refused_at_prepare(node):
    """A default route without a metric collides with the pod's own default route; two
    routes to one destination at one metric collide with each other: the kernel keeps
    one, so the other was dropped without a word before."""
    before = node.links()
    netdev = {"kind": "veth", "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"], "routes": [
        {"destination": "0.0.0.0/0", "gateway": "198.51.100.1"},
        {"destination": "::/0", "gateway": "2001:db8::1", "metric": 0},
        {"destination": "203.0.113.0/24", "gateway": "198.51.100.1"},
        {"destination": "203.0.113.0/24", "gateway": "198.51.100.2", "metric": 0},
        {"destination": "2001:db8:5::/48", "gateway": "2001:db8::1"},
        {"destination": "2001:db8:5::/48", "gateway": "2001:db8::2", "metric": 1024},
        {"destination": "203.0.113.0/24", "gateway": "198.51.100.2", "metric": 5}]}  # fmt: skip
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    outcome = _preparer(node).prepare([REF])[UID]
    assert outcome.error is not None
    assert (
        "$.netdev.routes[0].metric: a default route needs a metric other than 0 and 1024"
        in outcome.error
    )
    assert (
        "$.netdev.routes[1].metric: a default route needs a metric other than 0 and 1024"
        in outcome.error
    )
    assert (
        "$.netdev.routes[3]: routes[2] already goes to 203.0.113.0/24 at metric 0" in outcome.error
    )
    assert "$.netdev.routes[5]: routes[4] already goes to 2001:db8:5::/48 at metric 1024" in (
        outcome.error
    )
    assert "routes[6]" not in outcome.error
    assert node.links() == before and node.files() == []


def test_a_claim_route_that_meets_another_in_the_pod_fails_the_sandbox_naming_both(node):
    """The pod's network already routes the destination at that metric (through eth0):
    the sandbox fails naming the claim's route and the route in its way; a move done
    again keeps the claim's own routes."""
    netdev = {**KINDS["veth"][1], "routes": [
        {"destination": "203.0.113.0/24", "gateway": "198.51.100.1", "metric": 10},
        {"destination": "10.96.0.0/12", "gateway": "198.51.100.1"}]}  # fmt: skip
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    preparer = _preparer(node)
    _prepare(preparer)
    ns = node.kernel.add_namespace(NETNS)
    eth0 = ns.table["eth0"] = FakeLink(900, "eth0", "veth", up=True, addresses={("10.244.0.5", 24)})
    ns.added_routes.append(("10.96.0.0/12", "10.244.0.1", None, eth0.index))  # the CNI's
    sandboxes = _sandboxes(preparer)
    with pytest.raises(DriverError) as refused:
        sandboxes.run_pod_sandbox(_pod())
    assert (
        f"claim default/c ({UID}): request nic: config routes[1] (10.96.0.0/12 via "
        "198.51.100.1, metric 0): the pod already has a route to 10.96.0.0/12 at metric 0 "
        "(10.96.0.0/12 via 10.244.0.1 dev eth0)"
    ) in str(refused.value)
    assert ("203.0.113.0/24", "198.51.100.1", 10) in _pod_view(node, NETNS)["routes"]
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


# -- sandbox events ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_run_moves_configures_and_a_repeat_or_another_instance_changes_nothing(node, kind):
    before = node.links()
    _add_claim(node, kind)
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes = _sandboxes(preparer)
    sandboxes.run_pod_sandbox(_pod())
    _check_inside(node, kind)
    assert _record(node).placement[next(iter(_record(node).moves))]["state"] == IN
    steps = node.steps.count
    sandboxes.run_pod_sandbox(_pod())  # a repeated event
    _sandboxes(_preparer(node)).run_pod_sandbox(_pod())  # the other instance's turn
    assert node.steps.count == steps
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_where_a_device_is_is_never_fsynced_its_release_at_unprepare_is(node, kind, monkeypatch):
    # After a reboot every claim is prepared again and no device is in a sandbox.
    _add_claim(node, kind)
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    flushed = fsynced(monkeypatch)
    sandboxes = _sandboxes(preparer)
    sandboxes.run_pod_sandbox(_pod())
    _teardown(node, sandboxes, _pod())
    assert _record(node).placement[next(iter(_record(node).moves))]["state"] == SPENT
    assert flushed == []
    assert preparer.unprepare([REF])[UID].error is None
    assert flushed == [str(node.state_dir)]  # the record's removal, and only that


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_pods_next_sandbox_gets_the_claim_again(node, kind):
    """The pause container died: the runtime stops and removes the sandbox (a virtual
    link dies with its namespace, a physical one is given back and restored) and the
    kubelet creates a new one for the same pod, without preparing the claim again."""
    before = node.links()
    _add_claim(node, kind)
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    sandboxes.stop_pod_sandbox(_pod())
    if kind == "host-device":  # back on the host, as unprepare gives it back
        assert node.links()["ens1"] == before["ens1"]
    node.kernel.remove_namespace(NETNS)
    assert {w["state"] for w in _record(node).placement.values()} == {SPENT}
    node.kernel.add_namespace(NETNS2)
    written: list[Any] = []
    sandboxes.status = type("Sink", (), {"submit": lambda _, r: written.append(r)})()
    sandboxes.run_pod_sandbox(_pod("s2", NETNS2))
    _check_inside(node, kind, NETNS2)
    # Prepared again: its status (a new veth's MAC) is written again.
    assert [r.claim.uid for r in written] == [UID]
    _teardown(node, sandboxes, _pod("s2", NETNS2))
    sandboxes.remove_pod_sandbox(_pod("s1", ""))
    assert preparer.unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == []


def test_a_claim_prepared_in_cdi_mode_is_left_to_the_runtime(node):
    netdev = {"kind": "veth", "interfaceName": "net1"}
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    preparer = _preparer(node, CDI)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    steps = node.steps.count
    _sandboxes(preparer).run_pod_sandbox(_pod())
    assert node.steps.count == steps and set(node.kernel.namespaces[NETNS].table) == {"lo"}
    assert preparer.unprepare([REF])[UID].error is None


def test_a_host_network_pod_cannot_get_the_interface(node):
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    with pytest.raises(Exception, match=r"claim default/c .*hostNetwork"):
        _sandboxes(preparer).run_pod_sandbox(_pod(netns=""))
    assert preparer.unprepare([REF])[UID].error is None


def test_a_busy_lock_is_an_error_within_the_events_budget(node):
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes = PodSandboxes(preparer.lifecycle, preparer.gate, lock_wait=0.2)
    preparer.gate.lock.acquire()  # a long prepare (or the other instance) holds it
    try:
        with pytest.raises(Exception, match="serialisation lock was not free"):
            sandboxes.run_pod_sandbox(_pod())
    finally:
        preparer.gate.lock.release()
    sandboxes.run_pod_sandbox(_pod())  # the kubelet's retry
    _check_inside(node, "veth")
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_synchronize_spends_gone_sandboxes_and_fills_running_ones(node):
    """The driver was down while a sandbox was created (the runtime does not wait for a
    plugin that is not connected) and while another one went."""
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes = _sandboxes(preparer)
    sandboxes.synchronize([_pod()])
    assert sandboxes.synced.wait(5)
    _check_inside(node, "veth")
    # The sandbox goes while the driver is down; the next Synchronize lists none.
    node.kernel.remove_namespace(NETNS)
    restarted = _sandboxes(_preparer(node))
    restarted.synchronize([])
    assert restarted.synced.wait(5)
    assert {w["state"] for w in _record(node).placement.values()} == {SPENT}
    assert preparer.unprepare([REF])[UID].error is None
    assert node.files() == []


# -- failures and crashes at every step ------------------------------------------------------


def _count(node: Node, fn: Callable[[], None]) -> int:
    start = node.steps.count
    fn()
    return node.steps.count - start


def _claim_ready(node: Node, renew: bool) -> Preparer:
    """The claim prepared in NRI mode; with `renew`, used up by a first sandbox of the pod
    (so that the next one prepares it again first)."""
    preparer = _preparer(node)
    _prepare(preparer)
    if renew:
        node.kernel.add_namespace(NETNS)
        _sandboxes(preparer).run_pod_sandbox(_pod("first"))
        _teardown(node, _sandboxes(preparer), _pod("first"))
    return preparer


def _finish(node: Node, preparer: Preparer, before: dict[str, Any]) -> None:
    """The pod goes: the claim is unprepared, and the node holds what it held before."""
    assert preparer.unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == [], node.steps.log[-20:]


@pytest.mark.parametrize("renew", [False, True], ids=["first-sandbox", "next-sandbox"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_failure_at_any_step_of_run_fails_the_sandbox_and_the_next_one_works(node, kind, renew):
    before = node.links()
    _add_claim(node, kind)
    preparer = _claim_ready(node, renew)
    node.kernel.add_namespace(NETNS)
    steps = _count(node, lambda: _sandboxes(preparer).run_pod_sandbox(_pod()))
    _teardown(node, _sandboxes(preparer), _pod())
    _finish(node, preparer, before)
    for step in range(1, steps + 1):
        preparer = _claim_ready(node, renew)
        node.kernel.add_namespace(NETNS)
        node.steps.fail_at = node.steps.count + step
        with pytest.raises(Exception) as failed:
            _sandboxes(preparer).run_pod_sandbox(_pod("failing"))
        node.steps.fail_at = None
        assert "Operation not permitted" in str(failed.value), step
        assert f"claim default/c ({UID})" in str(failed.value) or "write" in str(failed.value)
        # The runtime fails the sandbox: it sends Stop and Remove, the namespace goes.
        _teardown(node, _sandboxes(preparer), _pod("failing"))
        node.kernel.add_namespace(NETNS)
        sandboxes = _sandboxes(preparer)
        sandboxes.run_pod_sandbox(_pod("retry"))  # the kubelet's next sandbox gets it all
        _check_inside(node, kind)
        _teardown(node, sandboxes, _pod("retry"))
        _finish(node, preparer, before)


@pytest.mark.parametrize("renew", [False, True], ids=["first-sandbox", "next-sandbox"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crash_at_any_step_of_run_is_finished_at_the_next_synchronize(node, kind, renew):
    before = node.links()
    _add_claim(node, kind)
    preparer = _claim_ready(node, renew)
    node.kernel.add_namespace(NETNS)
    steps = _count(node, lambda: _sandboxes(preparer).run_pod_sandbox(_pod()))
    _teardown(node, _sandboxes(preparer), _pod())
    _finish(node, preparer, before)
    for step in range(1, steps + 1):
        preparer = _claim_ready(node, renew)
        node.kernel.add_namespace(NETNS)
        node.crash_at(step, partial(_sandboxes(preparer).run_pod_sandbox, _pod("crashing")))
        # The driver restarts: start-up reconciliation, then the runtime's Synchronize
        # lists the running sandbox (its containers started meanwhile, without it).
        restarted = node.start()
        sandboxes = _sandboxes(restarted)
        sandboxes.synchronize([_pod("crashing")])
        assert sandboxes.synced.wait(5), step
        _check_inside(node, kind)
        _teardown(node, sandboxes, _pod("crashing"))
        _finish(node, restarted, before)


@pytest.mark.parametrize("gone", [False, True], ids=["sandbox-alive", "sandbox-gone"])
@pytest.mark.parametrize("kind", ["host-device", "veth"])
def test_a_crash_at_any_step_of_stop_is_finished_or_spent_at_synchronize(node, kind, gone):
    before = node.links()
    _add_claim(node, kind)
    _prepare(_preparer(node))

    def run_and_stop() -> None:
        node.kernel.add_namespace(NETNS)
        _sandboxes(_preparer(node)).run_pod_sandbox(_pod())
        _sandboxes(_preparer(node)).stop_pod_sandbox(_pod())

    run_and_stop()
    node.kernel.remove_namespace(NETNS)
    _sandboxes(_preparer(node)).remove_pod_sandbox(_pod(netns=""))
    node.kernel.add_namespace(NETNS)
    _sandboxes(_preparer(node)).run_pod_sandbox(_pod())
    steps = _count(node, lambda: _sandboxes(_preparer(node)).stop_pod_sandbox(_pod()))
    node.kernel.remove_namespace(NETNS)
    _sandboxes(_preparer(node)).remove_pod_sandbox(_pod(netns=""))
    for step in range(1, steps + 1):
        node.kernel.add_namespace(NETNS)
        _sandboxes(_preparer(node)).run_pod_sandbox(_pod())
        node.crash_at(step, lambda: _sandboxes(_preparer(node)).stop_pod_sandbox(_pod()))
        restarted = node.start()
        sandboxes = _sandboxes(restarted)
        if gone:  # the runtime finished the stop without the driver: the namespace went
            node.kernel.remove_namespace(NETNS)
            sandboxes.synchronize([])
        else:
            sandboxes.synchronize([_pod()])
        assert sandboxes.synced.wait(5), step
        if not gone:
            node.kernel.remove_namespace(NETNS)
        sandboxes.remove_pod_sandbox(_pod(netns=""))
        assert {w["state"] for w in _record(node).placement.values()} == {SPENT}, step
    assert _preparer(node).unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == [], node.steps.log[-20:]


def test_events_of_many_pods_from_two_threads_never_interleave_badly(node):
    """The runtime calls one event at a time, but the background synchronize runs beside
    the events: both take the lock, and the records stay true."""
    uids = [f"5a0c6f5e-0000-4000-8000-0000000001{i:02d}" for i in range(6)]
    pods = [f"5a0c6f5e-0000-4000-8000-0000000002{i:02d}" for i in range(6)]
    for i, (uid, pod) in enumerate(zip(uids, pods, strict=True)):
        claim = claim_object(
            uid, "netdev-virtual", {"type": "netdev", "netdev": {"kind": "veth"}}, True
        )
        claim["metadata"]["name"] = f"c{i}"
        claim["status"]["reservedFor"][0]["uid"] = pod
        node.api.fake.add_claim(claim)
    preparer = _preparer(node)
    refs = [ClaimRef("default", f"c{i}", uid) for i, uid in enumerate(uids)]
    assert all(o.error is None for o in preparer.prepare(refs).values())
    sandboxes = [
        PodSandbox(f"s{i}", pod, f"p{i}", "default", f"/run/netns/{i}")
        for i, pod in enumerate(pods)
    ]
    for sb in sandboxes:
        node.kernel.add_namespace(sb.netns)
    events = _sandboxes(preparer)
    events.synchronize(sandboxes[:3])
    threads = [threading.Thread(target=events.run_pod_sandbox, args=(sb,)) for sb in sandboxes[3:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert events.synced.wait(5)
    for sb in sandboxes:
        assert "eth1" in node.kernel.namespaces[sb.netns].table, sb
    for sb in sandboxes:
        _teardown(node, events, sb)
    assert all(o.error is None for o in preparer.unprepare(refs).values())
    assert node.files() == []


# -- through the plugin runtime and the NRI stand-in -----------------------------------------


def _nri_pod(sandbox: str, netns: str) -> Any:
    msg = stand_in.pod(POD, netns)
    msg.id = sandbox
    return msg


def test_two_instances_behind_the_nri_stand_in_move_once_and_give_back_once(node):
    """A rolling update: the runtime calls both plugins (same name and index) for every
    event, one after the other. Only the first does the work; the second finds it done."""
    before = node.links()
    _add_claim(node, "host-device")
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    with stand_in.fake_runtime() as runtime:
        plugins, conns = [], []
        for _ in range(2):
            plugin = NriPlugin(
                runtime.path, _sandboxes(_preparer(node)), backoff_first=0.05, backoff_max=0.2
            )
            plugin.start()
            plugins.append(plugin)
            conn = runtime.accept()
            conn.configure()
            conn.synchronize([])
            conns.append(conn)
        try:
            assert all(p.wait_registered(5) for p in plugins)
            for conn in conns:  # RunPodSandbox, to each plugin in turn
                assert conn.state_change(RUN, _nri_pod("s1", NETNS))
            _check_inside(node, "host-device")
            moves = [line for line in node.steps.log if line.startswith("move ")]
            assert len(moves) == 1, moves
            for conn in conns:
                assert conn.state_change(STOP, _nri_pod("s1", NETNS))
            assert node.links()["ens1"] == before["ens1"]  # given back and restored, once
            node.kernel.remove_namespace(NETNS)
            for conn in conns:
                assert conn.state_change(REMOVE, _nri_pod("s1", ""))
            assert [c.violations for c in conns] == [[], []]
        finally:
            for plugin in plugins:
                plugin.stop()
    assert preparer.unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == []


def test_a_synchronize_snapshot_older_than_a_sandbox_does_not_spend_its_placement(node):
    """A rolling update: instance B's Synchronize lists the runtime's sandboxes; before its
    pass reaches the records, instance A handles a new sandbox's RunPodSandbox. B's pass
    must not take that sandbox for gone (its snapshot could not know it): B's own
    RunPodSandbox of it, which the runtime sends next, then finds the work done."""
    before = node.links()
    _add_claim(node, "host-device")
    _prepare(_preparer(node))
    node.kernel.add_namespace(NETNS)
    a, b = _sandboxes(_preparer(node)), _sandboxes(_preparer(node))
    snapshot = time.time()  # B's Synchronize: no sandbox yet
    a.run_pod_sandbox(_pod())
    b.reconcile([], taken_at=snapshot)  # B's pass, late
    assert _record(node).placement[next(iter(_record(node).placement))]["state"] == "in"
    b.run_pod_sandbox(_pod())  # no error: the interface is where the record says
    _check_inside(node, "host-device")
    assert len([line for line in node.steps.log if line.startswith("move ")]) == 1
    # A snapshot taken after the sandbox was placed, without it: that sandbox is gone.
    b.reconcile([], taken_at=time.time())
    assert _record(node).placement[next(iter(_record(node).placement))]["state"] == "spent"
    _teardown(node, a, _pod())
    assert _preparer(node).unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == []


def test_a_failed_run_behind_the_nri_stand_in_names_the_pod_claim_and_interface(node):
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    node.kernel.namespaces[NETNS].table["net1"] = FakeLink(999, "net1", "dummy")  # taken
    with stand_in.fake_runtime() as runtime:
        plugin = NriPlugin(runtime.path, _sandboxes(preparer), backoff_first=0.05, backoff_max=0.2)
        plugin.start()
        try:
            conn = runtime.accept()
            conn.configure()
            conn.synchronize([])
            with pytest.raises(stand_in.CallFailed) as failed:
                conn.state_change(RUN, _nri_pod("s1", NETNS))
        finally:
            plugin.stop()
    message = failed.value.message
    assert message.startswith(f"dra-driver: RunPodSandbox of pod default/app (uid {POD}): ")
    assert f"claim default/c ({UID}): request nic: move drc" in message
    assert "into the pod as net1: File exists" in message
    del node.kernel.namespaces[NETNS].table["net1"]
    _teardown(node, _sandboxes(preparer), _pod("s1"))
    assert preparer.unprepare([REF])[UID].error is None


def test_a_sandbox_run_after_the_synchronize_snapshot_is_not_taken_for_gone(node):
    """Synchronize lists the sandboxes of its moment; one created right after it is
    placed by its RunPodSandbox before the background pass looks at the records."""
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes = _sandboxes(preparer)
    release = threading.Event()
    forget = sandboxes._forget_gone

    def held(live: Any) -> None:  # the pass, held until the sandbox was run
        assert release.wait(5)
        forget(live)

    sandboxes._forget_gone = held  # type: ignore[method-assign]
    sandboxes.synchronize([])  # an empty node, a moment ago ...
    sandboxes.run_pod_sandbox(_pod())  # ... then a pod's sandbox, while the pass runs
    release.set()
    assert sandboxes.synced.wait(5)
    assert {w["state"] for w in _record(node).placement.values()} == {IN}
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_nothing_per_sandbox_is_kept_once_no_pass_needs_it(node):
    """A node's pods come and go for months between two Synchronizes: the sandboxes
    seen during a background pass are forgotten when it ends, and none is kept
    without one."""
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    sandboxes.synchronize([])
    assert sandboxes.synced.wait(5)
    for n, netns in enumerate((NETNS, NETNS2)):
        node.kernel.add_namespace(netns)
        sandboxes.run_pod_sandbox(_pod(f"s{n}", netns))
        _teardown(node, sandboxes, _pod(f"s{n}", netns))
        assert (sandboxes._started, sandboxes._ended, sandboxes._pending) == (set(), set(), None)
    assert preparer.unprepare([REF])[UID].error is None


@pytest.mark.parametrize("pod_name_taken", [False, True])
def test_a_nic_whose_host_name_was_taken_meanwhile_comes_back_and_is_restored(node, pod_name_taken):
    """The host took `ens1` while the NIC was in the pod. Linux moves a link whose pod
    name is free on the host first and then refuses the rename, so the NIC arrives as
    `net2`; if `net2` is taken too, it stays in the pod until the kernel names it. Either
    way it comes back under a name of the kernel's choosing, and unprepare, which finds
    it by MAC, restores its name and settings once `ens1` is free again (the stop event
    says why it could not)."""
    before = node.links()
    _add_claim(node, "host-device")
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    squatters = ["ens1", "net2"] if pod_name_taken else ["ens1"]
    for i, name in enumerate(squatters):
        node.kernel.table[name] = FakeLink(900 + i, name, "veth")
    with pytest.raises(DriverError, match=r"request nic: cannot rename dev0 back to ens1: "):
        sandboxes.stop_pod_sandbox(_pod())
    back = {n: v for n, v in node.links().items() if n not in squatters}
    mac = KINDS["host-device"][1]["macAddress"]  # the claim's, set before the move
    [name] = [n for n, v in back.items() if v[1] == mac]
    assert name.startswith("dev"), node.links()
    assert "net2" not in node.kernel.namespaces[NETNS].table
    for name in squatters:
        del node.kernel.table[name]
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert node.links() == before and node.files() == []


# -- a claim with a network interface serves one pod ----------------------------------------

POD2 = "5a0c6f5e-0000-4000-8000-0000000000bb"


@pytest.mark.parametrize("injection", [NRI, CDI])
@pytest.mark.parametrize("kind", ["veth", "host-device"])
def test_a_claim_two_pods_hold_is_refused_at_prepare_naming_both(node, kind, injection):
    """Both pods in reservedFor at prepare: refused before any kernel work, in both modes."""
    before = node.links()
    device, netdev, share = PLAIN_KINDS[kind]  # no routes or sysctls: CDI mode takes them
    claim = claim_object(UID, device, {"type": "netdev", "netdev": netdev}, share)
    claim["status"]["reservedFor"].append({"resource": "pods", "name": "web-2", "uid": POD2})
    node.api.fake.add_claim(claim)
    outcome = _preparer(node, injection).prepare([REF])[UID]
    assert outcome.error is not None
    assert "request nic: its device goes into one pod's network namespace" in outcome.error
    assert f"2 pods hold the claim (default/pod-5a0c6f5e ({POD}), default/web-2 ({POD2}))" in (
        outcome.error
    )
    assert node.links() == before and node.files() == []


def _shared_record(node: Node, name_the_pod: bool = True) -> None:
    """A record that lists two pods, as a driver before 0.2 prepared a shared claim."""
    records = _preparer(node).records
    record = _record(node)
    record.pod_uids = [POD, POD2]
    if not name_the_pod:
        record.placement = {k: {x: v for x, v in w.items() if x != "pod"} for k, w in
                            record.placement.items()}  # fmt: skip
    records.save(record)
    records.index(record)


@pytest.mark.parametrize("name_the_pod", [True, False])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_second_pods_sandbox_never_takes_the_interface_from_the_first(node, kind, name_the_pod):
    """The high-severity defect: the second pod's sandbox found the device placed in
    another sandbox, prepared the claim again and deleted the first pod's interface."""
    _add_claim(node, kind)
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    _shared_record(node, name_the_pod)
    node.kernel.add_namespace(NETNS2)
    steps = node.steps.count
    other = PodSandbox("s2", POD2, "web-2", "default", NETNS2)
    holder = POD if name_the_pod else "unknown (sandbox s1)"
    with pytest.raises(DriverError) as refused:
        sandboxes.run_pod_sandbox(other)
    assert f"claim default/c ({UID}): its interfaces are in the sandbox of pod {holder}" in str(
        refused.value
    )
    assert f"pod default/web-2 ({POD2}) asks for them too" in str(refused.value)
    assert node.steps.count == steps  # nothing changed: the first pod keeps its interface
    _check_inside(node, kind)
    assert set(node.kernel.namespaces[NETNS2].table) == {"lo"}
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_a_pods_new_sandbox_after_one_that_died_unseen_gets_the_claim(node):
    """The same pod's earlier sandbox went without a stop event (its placement still
    says IN): the pod's new sandbox gets the claim prepared again, as before."""
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    node.kernel.remove_namespace(NETNS)  # the veth died with it; no event came
    node.kernel.add_namespace(NETNS2)
    sandboxes.run_pod_sandbox(_pod("s2", NETNS2))
    _check_inside(node, "veth", NETNS2)
    assert _record(node).placement[next(iter(_record(node).moves))]["pod"] == POD
    _teardown(node, sandboxes, _pod("s2", NETNS2))
    assert preparer.unprepare([REF])[UID].error is None


def test_devices_that_stay_out_of_the_pods_namespace_may_be_shared():
    """An RDMA device in shared netns mode is device nodes only: pods may share it; in
    exclusive mode it follows one pod's namespace, as an interface does."""
    resolved = ResolvedClaim(REF, (), (POD, POD2), ("a", "b"))

    def plan(validated: Validated) -> Plan:
        return Plan(None, SimpleNamespace(request="rdma"), "rdma", validated, "id")  # type: ignore[arg-type]

    refuse_sharing(resolved, [plan(Validated())])  # shared: no refusal
    with pytest.raises(ClaimError, match=r"request rdma: .* 2 pods hold the claim"):
        refuse_sharing(resolved, [plan(Validated(pod_rdma=True))])
    refuse_sharing(ResolvedClaim(REF, (), (POD,), ("a",)), [plan(Validated(pod_rdma=True))])


@pytest.mark.parametrize("kind", ["macvlan", "veth"])
def test_nri_mode_keeps_the_node_address_rule_for_links_on_a_node_link(node, kind):
    """A macvlan on the uplink shares the node's network in either mode: the node's own
    address is refused for it in NRI mode as in CDI mode; a veth's pod end is the pod's."""
    before = node.links()
    node.kernel.table["ens2"].addresses.add(("198.51.100.2", 24))  # the node, on the LAN
    device, netdev, share = PLAIN_KINDS[kind]
    netdev = {**netdev, "ipAddresses": ["198.51.100.2/24"]}
    node.api.fake.add_claim(claim_object(UID, device, {"type": "netdev", "netdev": netdev}, share))
    outcome = _preparer(node).prepare([REF])[UID]
    if kind == "veth":
        assert outcome.error is None, outcome.error
        assert _preparer(node).unprepare([REF])[UID].error is None
        return
    assert outcome.error is not None
    assert "config $.netdev.ipAddresses[0]: 198.51.100.2 is an address of this node (on ens2)" in (
        outcome.error
    )
    assert node.links() == {**before, "ens2": node.links()["ens2"]} and node.files() == []


def test_giving_a_nic_back_never_touches_a_host_interface_named_and_addressed_like_it(node):
    """The NIC is inside the pod under the name `ens2` with ens2's MAC (both the claim's
    choice) while the host's own ens2 is up: unprepare must not take the host's ens2 for
    the claimed NIC (set it down, rename it); it waits for the NIC to come back."""
    ens2 = node.kernel.table["ens2"]
    netdev = {"kind": "host-device", "interfaceName": "ens2", "macAddress": ens2.address}
    node.api.fake.add_claim(
        claim_object(UID, "nic-ens1", {"type": "netdev", "netdev": netdev}, False)
    )
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    assert "ens2" in node.kernel.namespaces[NETNS].table  # the claimed ens1, in the pod
    host_ens2 = node.links()["ens2"]
    outcome = preparer.unprepare([REF])[UID]
    assert outcome.error is not None and "interface ens1" in outcome.error
    assert "is not back on the host yet" in outcome.error
    assert node.links()["ens2"] == host_ens2 and node.kernel.table["ens2"] is ens2
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None
    assert node.kernel.table["ens2"] is ens2 and node.links()["ens2"] == host_ens2


@pytest.mark.parametrize("holder", ["ens2", "ens1"])
def test_a_macvlan_may_not_take_the_mac_of_its_parent_or_a_node_interface(node, holder):
    """The kernel refuses the parent's MAC only when the link comes up in the pod, with
    no field named; a node interface's MAC would move its traffic on the LAN."""
    mac = "0a:00:00:00:00:01"
    node.kernel.table[holder].address = mac
    before = node.links()
    netdev = {**PLAIN_KINDS["macvlan"][1], "macAddress": mac}
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    outcome = _preparer(node).prepare([REF])[UID]
    assert outcome.error is not None
    what = "the parent" if holder == "ens2" else "the node's interface"
    assert f"config $.netdev.macAddress: {mac} is the MAC address of {what} {holder}" in (
        outcome.error
    )
    assert node.links() == before and node.files() == []
