"""The prepare state machine in-process, without root: Preparer, Planner and start-up
reconciliation against an in-memory kernel, the API stand-in's objects and real files in
a temporary directory (kubernetes-sigs/dra-example-driver's state_test.go is the model).

Every step of a prepare (each kernel request, each file write) is made to fail, and
separately to crash the process, and what is left is checked: after a failure nothing,
after a crash nothing that start-up reconciliation does not repair, and a prepare after
either answers exactly what an undisturbed one answers.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import pytest

from dradriver.claims import reconcile
from dradriver.claims.outcome import Outcome
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import PREPARED
from tests.support.statenode import (
    DRIVER,
    KINDS,
    NIC_MAC,
    POD,
    UID,
    Node,
    add_claim,
    claim_object,
    prepare_one,
    unprepare_one,
)


@pytest.fixture
def reference(node: Node) -> Callable[[str], tuple[Outcome, int, dict[str, Any]]]:
    """Prepare `kind` once undisturbed on `node`, then undo it: (answer, steps, links)."""

    def run(kind: str) -> tuple[Outcome, int, dict[str, Any]]:
        before = node.links()
        add_claim(node, kind)
        preparer = node.preparer()
        start = node.steps.count
        outcome = prepare_one(preparer)
        assert outcome.error is None, outcome.error
        taken = node.steps.count - start
        prepared_links = node.links()
        assert unprepare_one(preparer).error is None
        assert node.links() == before and node.files() == []
        return outcome, taken, prepared_links

    return run


# -- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_prepare_is_idempotent_and_unprepare_leaves_nothing(node, kind):
    before = node.links()
    add_claim(node, kind)
    preparer = node.preparer()
    first = prepare_one(preparer)
    assert first.error is None and len(first.devices) == 1
    index = f"by-pod/{POD}/{UID}"
    metadata = f"dra-device-metadata/default_c_{UID}/nic/metadata.json"
    pool = ["ipam/pods.json"] if "ipam" in KINDS[kind][1] else []  # who has which address
    assert node.files() == sorted(
        [f"{DRIVER}-netdev_{UID}.json", f"{UID}.alloc.json", index, metadata, *pool]
    )
    steps = node.steps.count
    assert prepare_one(node.start()) == first  # after a restart too, from the record alone
    assert node.steps.count == steps, "an idempotent prepare touched the kernel or the disk"
    assert unprepare_one(node.preparer()).error is None
    assert node.links() == before and node.files() == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_failure_at_any_step_leaves_the_node_as_it_was(node, kind, reference):
    expected, steps, _ = reference(kind)
    before = node.links()
    for step in range(1, steps + 1):
        node.steps.fail_at = node.steps.count + step
        outcome = prepare_one(node.preparer())
        node.steps.fail_at = None
        assert outcome.error is not None and "Operation not permitted" in outcome.error, step
        assert node.links() == before, (step, node.steps.log[-steps:])
        assert node.files() == [], step
    assert prepare_one(node.preparer()) == expected


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crash_at_any_step_is_repaired_at_start(node, kind, reference):
    expected, steps, prepared_links = reference(kind)
    before = node.links()
    for step in range(1, steps + 1):
        node.crash_at(step, lambda: prepare_one(node.preparer()))
        preparer = node.start()
        committed = preparer.records.load(UID)
        if committed is None:
            assert node.links() == before, (step, node.steps.log[-steps:])
            assert node.files() == [], step
        else:  # the crash came after the commit point: the claim is prepared as it is
            assert committed.phase == PREPARED and node.links() == prepared_links, step
        assert prepare_one(preparer) == expected, step
        assert unprepare_one(preparer).error is None
        assert node.links() == before and node.files() == [], step


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_prepare_killed_at_any_step_is_undone_by_the_other_instances_unprepare(
    node, kind, reference
):
    """A rolling update: the old instance dies mid-prepare, and the new one, running all
    along (no start-up in between), is the one the kubelet asks to unprepare."""
    _, steps, _ = reference(kind)
    before = node.links()
    for step in range(1, steps + 1):
        node.crash_at(step, lambda: prepare_one(node.preparer()))
        assert unprepare_one(node.preparer()).error is None, step
        assert node.links() == before, (step, node.steps.log[-steps:])
        assert node.files() == [], (step, node.steps.log[-steps:])


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crash_at_any_step_of_unprepare_is_finished_by_the_next_one(node, kind, reference):
    expected, _, _ = reference(kind)
    before = node.links()
    # How many steps an unprepare takes.
    assert prepare_one(node.preparer()) == expected
    start = node.steps.count
    assert unprepare_one(node.preparer()).error is None
    steps = node.steps.count - start
    for step in range(1, steps + 1):
        assert prepare_one(node.preparer()) == expected
        node.crash_at(step, lambda: unprepare_one(node.preparer()))
        assert unprepare_one(node.start()).error is None, step
        assert node.links() == before and node.files() == [], step


def test_a_claim_the_api_no_longer_has_is_an_error_naming_it(node):
    outcome = prepare_one(node.preparer())
    assert outcome.error is not None
    assert f"claim default/c ({UID})" in outcome.error and "not found" in outcome.error
    assert node.files() == []


def test_a_claim_replaced_under_the_same_name_is_refused(node):
    add_claim(node, "veth")
    other = ClaimRef("default", "c", "5a0c6f5e-0000-4000-8000-0000000000ff")
    outcome = node.preparer().prepare([other])[other.uid]
    assert outcome.error is not None and "replaced" in outcome.error
    assert node.files() == []


# -- records that are no longer true ------------------------------------------------------


def _reboot(node: Node) -> None:
    """What a reboot does: every link the driver made is gone, host NICs are back as they
    were at boot, files stay; the kernel has a new boot ID."""
    node.kernel.table = {n: ln for n, ln in node.kernel.table.items() if n in ("ens1", "ens2")}
    nic = node.kernel.table["ens1"]
    nic.mtu, nic.address, nic.up, nic.alias = 1500, NIC_MAC, True, None
    nic.addresses = {("192.0.2.5", 24)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_reboot_is_repaired_at_start_from_the_record_alone(node, kind, reference):
    expected, _, prepared_links = reference(kind)
    preparer = node.preparer()
    preparer.lifecycle.boot_id = "boot-1"
    assert prepare_one(preparer) == expected
    _reboot(node)
    node.api.fake.claims.clear()  # the API server is not up yet: the record must do
    restarted = node.preparer()
    restarted.lifecycle.boot_id = "boot-2"
    loaded, _ = restarted.records.load_all()
    report = reconcile.reconcile(loaded, node.cdi_dir, DRIVER, restarted.lifecycle)
    assert report.reprepared_claims == [UID] and report.problems == []
    # The same names, configured the same way (a new veth or macvlan gets a new MAC from
    # the kernel unless the config sets one, as after any reboot).
    assert _without_macs(node.links()) == _without_macs(prepared_links)
    record = restarted.records.load(UID)
    assert record is not None and record.boot_id == "boot-2"
    assert prepare_one(restarted) == expected  # without the API: from the record
    assert unprepare_one(restarted).error is None
    assert node.files() == []


def test_a_prepared_claim_whose_interface_is_gone_is_prepared_again(node, reference):
    """SIGKILL in the middle of an unprepare can delete the interface and keep the
    record; a later prepare must not answer from that record as if all were well."""
    expected, _, prepared_links = reference("veth")
    preparer = node.preparer()
    assert prepare_one(preparer) == expected
    for name in list(node.kernel.table):
        if name not in ("ens1", "ens2") and name in node.kernel.table:
            node.kernel.delete(name)  # (a veth's peer goes with it)
    assert prepare_one(preparer) == expected
    assert _without_macs(node.links()) == _without_macs(prepared_links)
    assert unprepare_one(preparer).error is None


def _without_macs(links: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    return {n: (mtu, up, alias, *rest) for n, (mtu, _, up, alias, *rest) in links.items()}


def test_a_missing_spec_file_is_written_again_from_the_record(node):
    add_claim(node, "veth")
    preparer = node.preparer()
    first = prepare_one(preparer)
    [spec] = node.cdi_dir.glob("*.json")
    content = spec.read_bytes()
    shutil.rmtree(node.cdi_dir)  # the whole directory, while the driver runs
    assert prepare_one(preparer) == first
    assert spec.read_bytes() == content
    spec.unlink()
    node.start()  # and at start-up
    assert spec.read_bytes() == content


def test_one_pod_never_gets_one_interface_name_twice_across_calls(node):
    """A kubelet retry prepares a pod's claims in two calls: the check that two claims of
    a pod do not use one container name must see the claim prepared in the first."""
    netdev = {"kind": "veth", "interfaceName": "net1"}
    uids = ["5a0c6f5e-0000-4000-8000-00000000000a", "5a0c6f5e-0000-4000-8000-00000000000b"]
    for i, uid in enumerate(uids):
        claim = claim_object(uid, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
        claim["metadata"]["name"] = f"c{i}"
        node.api.fake.add_claim(claim)
    preparer = node.preparer()
    first, second = (ClaimRef("default", f"c{i}", uid) for i, uid in enumerate(uids))
    assert preparer.prepare([first])[first.uid].error is None
    refused = preparer.prepare([second])[second.uid].error
    assert refused is not None and "net1" in refused and uids[0] in refused
    assert "$.interfaceName" in refused
    # Idempotent again for the first; the second is free once the first is unprepared.
    assert preparer.prepare([first])[first.uid].error is None
    assert unprepare_one(preparer, first).error is None
    assert preparer.prepare([second])[second.uid].error is None


def test_a_repeated_prepare_after_the_runtime_moved_the_interface_touches_nothing(node, reference):
    """The container end is in the pod (the runtime moved it): that is how it should be,
    and the host end still witnesses the pair. The answer stands; nothing is recreated."""
    expected, _, _ = reference("veth")
    preparer = node.preparer()
    assert prepare_one(preparer) == expected
    [inner] = [n for n in node.kernel.table if n.startswith("drc")]
    moved = node.kernel.table.pop(inner)  # into the pod's namespace
    steps = node.steps.count
    assert prepare_one(preparer) == expected
    assert node.steps.count == steps and inner not in node.kernel.table
    node.kernel.table[inner] = moved
    assert unprepare_one(preparer).error is None


def test_a_claim_cannot_take_the_nodes_gateway(node):
    """Issue 13: a claim's addresses are added on the host before the move, and the
    kernel makes an IPv4 one local at once; the node's gateway must stay as it was,
    even when the operator's ranges include it."""
    before, route = node.links(), node.kernel.route_get("192.0.2.254")
    netdev = {"kind": "veth", "ipAddresses": ["198.51.100.7/24", "192.0.2.254/32"]}
    node.api.fake.add_claim(
        claim_object(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    ranges = ("192.0.2.0/24", "198.51.100.0/24")
    outcome = prepare_one(node.preparer(claim_address_ranges=ranges))
    assert outcome.error is not None
    assert outcome.error.startswith(f"claim default/c ({UID}): request nic: config ")
    assert (
        "$.netdev.ipAddresses[1]: 192.0.2.254 is the gateway of this node's route" in outcome.error
    )
    assert node.kernel.route_get("192.0.2.254") == route == "oif 2"
    assert node.links() == before and node.files() == []
