"""Scenario 5: the driver's identity. deploy/namespace.yaml, the RBAC and admission
policy of deploy/driver.yaml and deploy/resourceclass.yaml are applied unchanged (the
session's `cluster` fixture; only the DaemonSet is left out, as no kubelet could run
it). The driver works with that and nothing more, and cannot touch another node."""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dradriver import selfcheck
from dradriver.apiserver.deviceclasses import classes_for
from dradriver.apiserver.events import EventRecorder, ObjectRef
from dradriver.apiserver.kubeapi import KubeApi
from dradriver.claims.failures import FailureEvents
from dradriver.contract.hookspecs import ClaimRef
from dradriver.settings import Settings
from localcluster.apiclient import ApiError
from tests.support.driverproc import DRIVER

from .cluster import (
    DRIVER_NAMESPACE,
    DRIVER_SA,
    RESOURCE,
    SLICES,
    Cluster,
    driver_manifests,
    wait_for,
)
from .conftest import Node
from .kubelet import check_answer, results
from .test_3_capacity import claim_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root]

OTHER = "e2e-other-node"
USER = f"system:serviceaccount:{DRIVER_NAMESPACE}:{DRIVER_SA}"


def slice_for(node: str, node_uid: str, name: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "netdev-virtual",
                    "attributes": {"type": {"string": "netdev"}, "kind": {"string": "virtual"}},
                    "allowMultipleAllocations": True,
                    "capacity": {"slots": {"value": "8", "requestPolicy": {"default": "1"}}},
                }
            ],
        },
    }


def forbidden(call: Any) -> str:
    """Run an API call that RBAC must refuse with 403; return the refusal's message."""
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.code == 403, err.value
    return str(err.value.status.get("message", ""))


POLICY = "ValidatingAdmissionPolicy 'dra-driver-resourceslices'"


def denied_by_policy(call: Any, codes: list[int]) -> str:
    """Run an API call the driver's admission policy must deny; return the message and
    append the HTTP code to `codes` (checked at the end of the test)."""
    with pytest.raises(ApiError) as err:
        call()
    message = str(err.value.status.get("message", ""))
    assert POLICY in message and "denied request" in message, err.value
    codes.append(err.value.code)
    return message


@pytest.fixture
def other_node(cluster: Cluster) -> Iterator[str]:
    """A second Node (another machine); its UID."""
    uid = cluster.cp.create_node(OTHER, labels={"dra-e2e/other": "true"})
    try:
        yield uid
    finally:
        cluster.delete_slices(OTHER)
        cluster.delete(f"/api/v1/nodes/{OTHER}")


def test_deployed_rbac_is_all_the_driver_has(cluster: Cluster) -> None:
    """The objects in the API are the files' (server-side apply kept every rule), and no
    other binding names the driver's ServiceAccount."""
    for obj in driver_manifests():
        if obj["kind"] == "ClusterRole":
            stored = cluster.get(
                f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{obj['metadata']['name']}"
            )
            assert stored["rules"] == obj["rules"]
        if obj["kind"] == "ValidatingAdmissionPolicy":
            stored = cluster.get(
                "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
                + obj["metadata"]["name"]
            )
            assert [v["expression"] for v in stored["spec"]["validations"]] == [
                v["expression"] for v in obj["spec"]["validations"]
            ]
    subjects = []
    for kind in ("clusterrolebindings", "rolebindings"):
        for b in cluster.get(f"/apis/rbac.authorization.k8s.io/v1/{kind}")["items"]:
            for s in b.get("subjects") or []:
                if s.get("kind") == "ServiceAccount" and s.get("name") == DRIVER_SA:
                    subjects.append((kind, b["metadata"]["name"], b["roleRef"]["name"]))
    assert sorted(subjects) == [("clusterrolebindings", "dra-driver", "dra-driver")]

    # Outside its role, the token gets nothing.
    token = cluster.kubeconfig_token(cluster.driver_kubeconfig)
    for method, path in [
        ("GET", "/api/v1/namespaces/default/pods/any"),  # pods: list and watch only
        ("DELETE", "/api/v1/namespaces/default/pods/any"),
        ("GET", f"/api/v1/namespaces/{DRIVER_NAMESPACE}/secrets"),
        ("GET", f"{RESOURCE}/resourceclaims"),
        ("GET", "/api/v1/nodes"),
        ("GET", f"/apis/events.k8s.io/v1/namespaces/{DRIVER_NAMESPACE}/events"),
        ("DELETE", f"/api/v1/nodes/{cluster.node}"),
    ]:
        forbidden(lambda m=method, p=path: cluster.cp.request(m, p, token=token))


def test_the_driver_reports_what_cannot_work_with_its_own_credentials(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The start-up checks with the deployed role: the DeviceClasses of
    deploy/resourceclass.yaml are read and select the driver's name and not another; an
    Event on a driver pod is stored where `kubectl describe pod` finds it."""
    api = KubeApi(str(cluster.driver_kubeconfig))
    classes = api.list_device_classes()
    assert len(classes_for(DRIVER, classes)) == 4
    assert classes_for("dra.example.org", classes) == []
    pod = ObjectRef("Pod", DRIVER_NAMESPACE, "dra-driver-e2e", str(uuid.uuid4()))
    reporter = selfcheck.Reporter(EventRecorder(api, DRIVER, cluster.node), pod)
    renamed = Settings(node_name=cluster.node, driver_name="dra.example.org")
    with caplog.at_level(logging.WARNING, logger="dradriver"):
        selfcheck.check_device_classes(renamed, api, reporter)
        reporter.stop()
    refused = [r.error for r in caplog.records if r.getMessage() == "cannot record an event"]
    assert not refused, refused
    [stored] = wait_for(
        "the Event",
        lambda: cluster.get(
            f"/api/v1/namespaces/{DRIVER_NAMESPACE}/events"
            f"?fieldSelector=involvedObject.uid={pod.uid}"
        )["items"],
    )
    assert stored["involvedObject"]["name"] == "dra-driver-e2e"
    assert (stored["type"], stored["reason"]) == ("Warning", "NoDeviceClass")
    assert stored["message"].startswith("no DeviceClass selects driver dra.example.org")
    assert f"classes: {DRIVER} (network-devices" in stored["message"]
    assert stored["reportingComponent"] == f"{DRIVER}/driver"


def test_a_failed_prepare_is_an_event_on_the_claims_pod_in_its_namespace(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """With the driver's own credentials, the Event lands on a pod of a workload
    namespace (not the driver's), where `kubectl describe pod` finds it."""
    api = KubeApi(str(cluster.driver_kubeconfig))
    pod_uid, claim_uid = str(uuid.uuid4()), str(uuid.uuid4())
    claim = {
        "metadata": {"name": "c1", "namespace": "default", "uid": claim_uid},
        "status": {"reservedFor": [{"resource": "pods", "name": "web-0", "uid": pod_uid}]},
    }
    failures = FailureEvents(EventRecorder(api, DRIVER, cluster.node))
    error = f"claim default/c1 ({claim_uid}): config $.netdev.mtu: 70000 is above 65535"
    with caplog.at_level(logging.WARNING, logger="dradriver"):
        failures(ClaimRef("default", "c1", claim_uid), error, claim)
        failures.stop()
    refused = [r.error for r in caplog.records if r.getMessage() == "cannot record an event"]
    assert not refused, refused
    [stored] = wait_for(
        "the Event",
        lambda: cluster.get(
            f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid={pod_uid}"
        )["items"],
    )
    assert (stored["involvedObject"]["kind"], stored["involvedObject"]["name"]) == ("Pod", "web-0")
    assert (stored["type"], stored["reason"], stored["message"]) == (
        "Warning", "PrepareFailed", error,
    )  # fmt: skip


def test_driver_cannot_write_another_nodes_slice(cluster: Cluster, other_node: str) -> None:
    token = cluster.kubeconfig_token(cluster.driver_kubeconfig)
    suffix = uuid.uuid4().hex[:6]
    codes: list[int] = []

    def as_driver(method: str, path: str, body: Any = None) -> Any:
        return cluster.cp.request(method, path, body, token=token)

    # Its own node: allowed (so what follows is refused for the node, not for the verb).
    mine = slice_for(cluster.node, cluster.node_uid, f"{cluster.node}-probe-{suffix}")
    try:
        as_driver("POST", SLICES, mine)
        as_driver("DELETE", f"{SLICES}/{mine['metadata']['name']}")
    finally:
        cluster.delete(f"{SLICES}/{mine['metadata']['name']}")

    # Another node: the ValidatingAdmissionPolicy answers 403.
    theirs = slice_for(OTHER, other_node, f"{OTHER}-{suffix}")
    msg = denied_by_policy(lambda: as_driver("POST", SLICES, theirs), codes)
    assert (
        f"dra-driver on node {cluster.node} may not write a ResourceSlice for node {OTHER}" in msg
    )
    assert cluster.slices(OTHER) == []

    # A slice of the other node that exists (written by its own driver; admin here)
    # can be neither changed nor deleted.
    stored = cluster.cp.request("POST", SLICES, theirs)
    changed = copy.deepcopy(stored)
    changed["spec"]["pool"]["generation"] = 2
    msg = denied_by_policy(
        lambda: as_driver("PUT", f"{SLICES}/{theirs['metadata']['name']}", changed), codes
    )
    assert f"may not write a ResourceSlice for node {OTHER}" in msg
    msg = denied_by_policy(
        lambda: as_driver("DELETE", f"{SLICES}/{theirs['metadata']['name']}"), codes
    )
    assert f"may not change or delete a ResourceSlice of node {OTHER}" in msg
    assert cluster.slices(OTHER)[0]["spec"]["pool"]["generation"] == 1
    # A token of the same ServiceAccount that is not bound to a pod names no node.
    unbound = cluster.cp.request(
        "POST",
        f"/api/v1/namespaces/{DRIVER_NAMESPACE}/serviceaccounts/{DRIVER_SA}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 600},
        },
    )["status"]["token"]
    assert cluster.cp.whoami(unbound)["username"] == USER
    msg = denied_by_policy(lambda: cluster.cp.request("POST", SLICES, mine, token=unbound), codes)
    assert "only with a token bound to a pod on a node" in msg
    assert cluster.slices() == []

    # An authorization refusal is 403 Forbidden. A policy validation without a `reason`
    # answers 422 Invalid, which clients take for a malformed object.
    assert codes == [403] * len(codes), (
        f"the policy denied with HTTP {codes}, not 403: each validation of the "
        "ValidatingAdmissionPolicy in deploy/driver.yaml needs `reason: Forbidden`"
    )


def test_driver_works_with_the_deployed_role_only(
    cluster: Cluster, node: Node, kns: str, other_node: str
) -> None:
    """Publishing, reading claims and writing their status with the deployed role; the
    status of a claim allocated on another node is refused (granular authorization)."""
    d = node.start_driver()
    wait_for("the driver's slice", cluster.slices)
    cluster.apply(veth_template(kns))
    pod = claim_pod(kns, "app")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": cluster.node}
    cluster.apply(pod)
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    resp = d.prepare([claim])
    check_answer(resp, [claim])
    [result] = results(claim)
    wait_for(
        "status.devices written by the driver",
        lambda: cluster.claim(kns, claim["metadata"]["name"]).get("status", {}).get("devices"),
    )
    assert "writing claim status failed" not in d.log()
    assert "publishing ResourceSlices failed" not in d.log()

    # A claim allocated on the other node (its slice written by admin for the test).
    cluster.cp.request("POST", SLICES, slice_for(OTHER, other_node, f"{OTHER}-{kns}"))
    far = claim_pod(kns, "far")
    far["spec"]["nodeSelector"] = {"kubernetes.io/hostname": OTHER}
    cluster.apply(far)
    far = cluster.wait_bound(kns, "far")
    assert far["spec"]["nodeName"] == OTHER
    [far_claim] = cluster.kubelet_claims(far)
    [far_result] = results(far_claim)
    assert far_result["pool"] == OTHER
    token = cluster.kubeconfig_token(cluster.driver_kubeconfig)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": far_claim["metadata"]["name"], "namespace": kns},
        "status": {
            "devices": [
                {
                    "driver": DRIVER,
                    "pool": far_result["pool"],
                    "device": far_result["device"],
                    "shareID": far_result["shareID"],
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Prepared",
                            "message": "not mine",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                }
            ]
        },
    }
    path = f"{RESOURCE}/namespaces/{kns}/resourceclaims/{far_claim['metadata']['name']}/status"
    with pytest.raises(ApiError) as err:
        cluster.cp.request(
            "PATCH",
            f"{path}?fieldManager={DRIVER}&force=true",
            body,
            token=token,
            content_type="application/apply-patch+yaml",
        )
    # Field-level authorization of status.devices: the API server refuses it during
    # validation (422 Invalid, cause FieldValueForbidden): for a claim on another node
    # the driver would need arbitrary-node:patch, which the role does not grant.
    assert err.value.code == 422, err.value
    [cause] = err.value.status["details"]["causes"]
    assert (cause["reason"], cause["field"]) == ("FieldValueForbidden", "status.devices")
    assert "arbitrary-node:patch" in cause["message"] and USER in cause["message"]
    assert not cluster.claim(kns, far_claim["metadata"]["name"]).get("status", {}).get("devices")
    # The same write for the claim on its own node is allowed (the driver did it).
    assert result["pool"] == cluster.node
    d.unprepare([claim])
