"""A claim whose prepare fails is told as a Warning Event on its pod (or on the claim when
no pod is known), with the error the kubelet gets; a prepare that works tells nothing."""

from __future__ import annotations

import time
from typing import Any

from dradriver.apiserver.events import EventRecorder
from dradriver.claims.failures import FailureEvents, regarding
from dradriver.contract.hookspecs import ClaimRef
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.statenode import POD, UID, Node, add_claim, claim_ref, prepare_one


class Api:
    """Records the Events a recorder posts."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None):
        assert method == "POST" and path.endswith(
            f"/namespaces/{body['regarding']['namespace']}/events"
        )
        self.posted.append(body)


def prepare_with_events(node: Node, ref: ClaimRef | None = None) -> tuple[str | None, list[dict]]:
    """Prepare `ref` (the claim of add_claim) with Events recorded; the error and the Events."""
    api = Api()
    sink = FailureEvents(EventRecorder(api, "dra.example.com", "node-a"))
    preparer = node.preparer()
    preparer.failures = sink
    ref = ref or claim_ref()
    outcome = preparer.prepare([ref])[ref.uid]
    sink.stop()
    return outcome.error, api.posted


def test_a_config_error_is_a_warning_event_on_the_pod_with_the_claim_and_the_field(node):
    bad = {"type": "netdev", "netdev": {"kind": "veth", "interfaceName": "eth0", "mtu": 70000}}
    claim = allocated_claim(
        "c", [{"request": "nic", "pool": "node-a", "device": "netdev-virtual"}],
        uid=UID, config=[opaque(bad)], pods=[POD],
    )  # fmt: skip
    node.api.fake.add_claim(claim)
    error, [posted] = prepare_with_events(node)
    assert error is not None and "$.netdev.mtu" in error
    assert posted["type"] == "Warning" and posted["reason"] == "PrepareFailed"
    assert posted["note"] == error  # names the claim, its UID and the field
    assert posted["regarding"] == {
        "apiVersion": "v1", "kind": "Pod", "namespace": "default",
        "name": f"pod-{POD[:8]}", "uid": POD,
    }  # fmt: skip
    assert posted["reportingController"] == "dra.example.com/driver"
    assert node.files() == []


def test_a_claim_the_api_does_not_have_is_an_event_on_the_claim(node):
    error, [posted] = prepare_with_events(node)
    assert error is not None and "not found" in error
    assert posted["regarding"]["kind"] == "ResourceClaim"
    assert posted["regarding"]["apiVersion"] == "resource.k8s.io/v1"
    assert (posted["regarding"]["name"], posted["regarding"]["uid"]) == ("c", UID)


def test_a_replaced_claim_never_puts_an_event_on_the_new_claims_pods(node):
    add_claim(node, "veth")  # reserved for POD, under another UID than the kubelet's
    other = ClaimRef("default", "c", "5a0c6f5e-0000-4000-8000-0000000000ff")
    error, [posted] = prepare_with_events(node, other)
    assert error is not None and "replaced" in error
    assert posted["regarding"]["kind"] == "ResourceClaim"
    assert posted["regarding"]["uid"] == other.uid


def test_a_prepare_that_works_records_nothing(node):
    add_claim(node, "veth")
    error, posted = prepare_with_events(node)
    assert error is None and posted == []


def test_the_kubelets_retries_of_one_failure_are_one_event(node):
    api = Api()
    sink = FailureEvents(EventRecorder(api, "dra.example.com", "node-a"))
    for _ in range(5):
        preparer = node.preparer()
        preparer.failures = sink
        assert prepare_one(preparer).error is not None  # not in the API
        time.sleep(0.01)
    sink.stop()
    assert len(api.posted) == 1


def test_the_objects_of_an_event_come_from_the_claim_the_kubelet_named():
    ref = ClaimRef("ns1", "c1", UID)
    claim = allocated_claim("c1", [], namespace="ns1", uid=UID, pods=[POD, POD[:-2] + "bb"])
    assert [(o.kind, o.namespace, o.uid) for o in regarding(ref, claim)] == [
        ("Pod", "ns1", POD), ("Pod", "ns1", POD[:-2] + "bb"),
    ]  # fmt: skip
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "../x", "uid": POD}]
    # A name no pod has never reaches a URL: the Event is about the claim.
    assert [o.kind for o in regarding(ref, claim)] == ["ResourceClaim"]
    assert regarding(ClaimRef("../x", "c1", UID), None) == []
