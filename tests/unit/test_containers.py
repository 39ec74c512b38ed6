"""The NRI mode's CreateContainer check (dradriver/nrimode/containers.py) in-process, without
root: the real handlers, records and CDI specs, and the in-memory kernel.

A pod added to a network claim after the kubelet prepared it is never prepared for: its
sandbox gets nothing. Its containers still get the claim's CDI devices, and with them
the claim's DRA_CLAIM_<uid> variable: that container is refused, naming the claim and
the pod holding it, and the holder keeps its interface.
"""

from __future__ import annotations

import pytest

from dradriver.base.errors import DriverError
from dradriver.contract.hookspecs import CDI, NRI
from dradriver.nri import Container, PodSandbox
from dradriver.state import injection
from dradriver.state.moves import IN, SPENT, holder, placement
from tests.support.statenode import KINDS as PLAIN_KINDS
from tests.support.statenode import POD, UID, claim_object
from tests.unit.test_sandboxes import (
    KINDS,
    NETNS,
    NETNS2,
    REF,
    _add_claim,
    _check_inside,
    _pod,
    _prepare,
    _preparer,
    _record,
    _sandboxes,
    _teardown,
)

POD2 = "5a0c6f5e-0000-4000-8000-0000000000bb"
OTHER_UID = "0d6f3a1e-1111-4111-8111-111111111111"


def _add_plain_claim(node, kind: str) -> None:
    """A claim without routes or sysctls, which CDI mode takes too."""
    device, netdev, share = PLAIN_KINDS[kind]
    node.api.fake.add_claim(claim_object(UID, device, {"type": "netdev", "netdev": netdev}, share))


def _env(node) -> list[str]:
    """What the runtime puts in a container's environment from the claim's CDI device."""
    [spec] = _record(node).specs.values()
    [device] = spec["devices"]
    return ["PATH=/bin", *device["containerEdits"]["env"]]


@pytest.mark.parametrize("injection_mode", [NRI, CDI])
def test_a_device_that_goes_into_the_pod_marks_its_containers_with_the_claim(node, injection_mode):
    _add_plain_claim(node, "veth")
    _prepare(_preparer(node, injection_mode))
    env = _env(node)
    assert f"DRA_CLAIM_{UID.upper().replace('-', '_')}=default/c" in env
    assert injection.claims_in_env(env) == [UID]
    assert _preparer(node).unprepare([REF])[UID].error is None


def test_the_claim_variable_reads_back_only_as_written():
    marker = injection.claim_env(UID, "default/c")
    assert injection.claims_in_env([marker, marker, injection.claim_env(OTHER_UID, "x/y")]) == [
        UID,
        OTHER_UID,
    ]
    # Not ours: another shape after the prefix, a value-less name, a lookalike prefix.
    assert injection.claims_in_env(["DRA_CLAIM_X=1", "DRA_CLAIM_", "XDRA_CLAIM_" + marker]) == []
    assert injection.claims_in_env([marker.replace("=", "_1=")]) == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_container_of_another_pod_is_refused_naming_the_claim_and_its_pod(node, kind):
    _add_claim(node, kind)
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    env = _env(node)
    sandboxes.create_container(_pod(), Container("c1", "app", tuple(env)))  # the holder's

    # A pod the scheduler added to the claim later: the kubelet did not prepare again.
    node.kernel.add_namespace(NETNS2)
    late = PodSandbox("s2", POD2, "web-2", "default", NETNS2)
    sandboxes.run_pod_sandbox(late)  # nothing: the pod index does not know it
    steps = node.steps.count
    with pytest.raises(DriverError) as refused:
        sandboxes.create_container(late, Container("c2", "side", tuple(env)))
    assert str(refused.value).startswith(
        f"claim default/c ({UID}) serves pod {POD}; container side of pod default/web-2 "
        f"({POD2}) may not use it: a claim with a network interface goes into one pod"
    )
    assert node.steps.count == steps
    _check_inside(node, kind)  # the first pod keeps its interface, configured
    assert set(node.kernel.namespaces[NETNS2].table) == {"lo"}
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None


def test_in_cdi_mode_the_pod_the_claim_was_prepared_for_decides(node):
    _add_plain_claim(node, "veth")
    preparer = _preparer(node, CDI)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    env = tuple(_env(node))
    sandboxes.create_container(_pod(), Container("c1", "app", env))
    late = PodSandbox("s2", POD2, "web-2", "default", NETNS2)
    with pytest.raises(DriverError, match=rf"serves pod {POD}; container app of pod"):
        sandboxes.create_container(late, Container("c2", "app", env))
    assert preparer.unprepare([REF])[UID].error is None


def test_containers_without_a_claim_of_ours_read_nothing(node, monkeypatch):
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)

    def no_reads(uid: str) -> None:
        raise AssertionError(f"record {uid} read")

    late = PodSandbox("s2", POD2, "web-2", "default", NETNS2)
    monkeypatch.setattr(sandboxes.records, "load", no_reads)
    sandboxes.create_container(late, Container("c", "app", ("PATH=/bin", "DRA_NETDEV=net1")))
    monkeypatch.undo()
    # Another driver's claim (no record here) is that driver's business.
    other = (injection.claim_env(OTHER_UID, "default/theirs"),)
    sandboxes.create_container(late, Container("c", "app", other))
    assert preparer.unprepare([REF])[UID].error is None


def test_the_holder_is_the_pod_whose_sandbox_has_the_devices():
    live = {"r/0": placement(IN, "s1", NETNS, POD)}
    assert holder(live, [POD], POD) is None
    assert holder(live, [POD], POD2) == POD
    # The pod's devices were used up by a sandbox that went: still that pod's claim.
    spent = {"r/0": placement(SPENT, "s1", NETNS, POD)}
    assert holder(spent, [POD], POD) is None
    assert holder(spent, [POD], POD2) == POD
    # Records before 0.2 do not name the pod in a placement: the pod list decides.
    unnamed = {"r/0": {"state": IN, "sandbox": "s1", "netns": NETNS}}
    assert holder(unnamed, [POD, POD2], POD2) is None
    assert holder(unnamed, [POD], POD2) == POD
    assert holder({}, [], POD2) is None  # nothing known: nothing refused


def _pod_object(uid: str, claims: list[str], generated: list[str] | None = None) -> dict:
    """A pod as the pod watch has it: the claims its spec names, and those made for it."""
    return {
        "metadata": {"uid": uid, "namespace": "default"},
        "spec": {"resourceClaims": [{"name": n, "resourceClaimName": n} for n in claims]},
        "status": {
            "resourceClaimStatuses": [{"name": n, "resourceClaimName": n} for n in generated or []]
        },
    }


def test_a_forged_claim_variable_reads_nothing_of_another_namespace_nor_of_an_unused_claim(node):
    """A container's own environment can name any claim UID: the check looks only at
    claims of the pod's namespace that its spec uses, and its refusal never names a
    claim the pod does not use."""
    _add_claim(node, "veth")
    preparer = _preparer(node)
    _prepare(preparer)
    sandboxes = _sandboxes(preparer)
    node.kernel.add_namespace(NETNS)
    sandboxes.run_pod_sandbox(_pod())
    forged = (injection.claim_env(UID, "default/c"),)
    # A pod of another namespace: nothing read, nothing said.
    elsewhere = PodSandbox("s3", POD2, "spy", "tenant-b", NETNS2)
    sandboxes.create_container(elsewhere, Container("c3", "app", forged))
    # A pod of the same namespace whose spec does not use the claim (the pod watch says).
    sandboxes.containers.pods = lambda: {POD2: _pod_object(POD2, ["mine"])}
    late = PodSandbox("s2", POD2, "web-2", "default", NETNS2)
    sandboxes.create_container(late, Container("c2", "side", forged))
    # One that does use it, by name or from a template: refused, as before.
    for spec, generated in ((["c"], []), ([], ["c"])):
        sandboxes.containers.pods = lambda s=spec, g=generated: {POD2: _pod_object(POD2, s, g)}
        with pytest.raises(DriverError, match=rf"claim default/c \({UID}\) serves pod {POD}"):
            sandboxes.create_container(late, Container("c2", "side", forged))
    _teardown(node, sandboxes, _pod())
    assert preparer.unprepare([REF])[UID].error is None
