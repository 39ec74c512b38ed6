"""Scenario 7: claims the driver must refuse or ignore, as the real API server and
scheduler produce them: invalid opaque config (which the API itself does not validate;
deploy/config-policy.yaml refuses it at creation, so it is lifted here, as in a cluster
without it), a claim of another driver, a claim replaced under the same name, a claim
not allocated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.driverproc import DRIVER, DriverProcess
from tests.support.waiting import wait_for

from .cluster import RESOURCE, SLICES, Cluster
from .conftest import Node
from .kubelet import check_answer, record_uids, results, spec_files
from .test_3_capacity import claim_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]

OTHER_DRIVER = "other.example.com"
OTHER_CLASS = "e2e-other-devices"


def veth_claim(namespace: str, name: str, **netdev: Any) -> dict[str, Any]:
    spec = veth_template(namespace, name)["spec"]["spec"]
    spec["devices"]["config"][0]["opaque"]["parameters"]["netdev"].update(netdev)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pod_with(namespace: str, name: str, claims: list[str]) -> dict[str, Any]:
    pod = claim_pod(namespace, name)
    pod["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": c} for c in claims]
    return pod


def nothing_of(node: Node, d: DriverProcess, uid: str) -> None:
    """No interface, spec or record of claim `uid`."""
    assert uid not in set(node.tagged().values())
    assert not [f for f in spec_files(d) if uid in f]
    assert uid not in record_uids(d)


def started(node: Node) -> DriverProcess:
    d = node.start_driver()
    wait_for("the driver's slice", node.cluster.slices)
    return d


@pytest.fixture
def other_driver(cluster: Cluster) -> Iterator[None]:
    """Another DRA driver on the node: its slice and its DeviceClass."""
    cluster.apply(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": OTHER_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER_DRIVER}"'}}]},
        }
    )
    cluster.cp.request(
        "POST",
        SLICES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{cluster.node}-{OTHER_DRIVER}"},
            "spec": {
                "driver": OTHER_DRIVER,
                "nodeName": cluster.node,
                "pool": {"name": cluster.node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": f"gpu-{i}", "attributes": {"model": {"string": "x"}}} for i in range(2)
                ],
            },
        },
    )
    try:
        yield
    finally:
        cluster.delete_slices(driver=OTHER_DRIVER)
        cluster.delete(f"{RESOURCE}/deviceclasses/{OTHER_CLASS}")


def test_invalid_config_is_a_per_claim_error(cluster: Cluster, node: Node, kns: str) -> None:
    d = started(node)
    with cluster.config_policy_lifted():
        cluster.apply(
            [
                veth_claim(kns, "good", interfaceName="net1"),
                veth_claim(kns, "bad", interfaceName="net2", mtu=10),
            ]
        )
    cluster.apply(pod_with(kns, "app", ["good", "bad"]))
    pod = cluster.wait_bound(kns, "app")
    claims = cluster.kubelet_claims(pod)
    [good] = [c for c in claims if c["metadata"]["name"] == "good"]
    [bad] = [c for c in claims if c["metadata"]["name"] == "bad"]
    # The API server stored the config as written: opaque parameters are the driver's.
    assert (
        bad["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["netdev"]["mtu"]
        == 10
    )

    resp = d.prepare(claims)
    assert sorted(resp.claims) == sorted(c["metadata"]["uid"] for c in claims)
    check_answer(resp, [good])
    uid = bad["metadata"]["uid"]
    err = resp.claims[uid].error
    assert err.startswith(f"claim {kns}/bad ({uid}): request net: config "), err
    assert "$.netdev.mtu" in err and "minimum of 68" in err, err
    assert not resp.claims[uid].devices
    nothing_of(node, d, uid)
    assert d.unprepare(claims).claims[uid].error == ""
    assert node.tagged() == {} and spec_files(d) == {}


def test_claim_of_another_driver_is_ignored(
    cluster: Cluster, node: Node, kns: str, other_driver: None
) -> None:
    d = started(node)
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "foreign", "namespace": kns},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": OTHER_CLASS}}],
                "config": [
                    {
                        "requests": ["gpu"],
                        "opaque": {"driver": OTHER_DRIVER, "parameters": {"anything": True}},
                    }
                ],
            }
        },
    }
    # A claim with a device of each driver: only ours is prepared.
    mixed = veth_claim(kns, "mixed", interfaceName="net1")
    mixed["spec"]["devices"]["requests"].append(
        {"name": "gpu", "exactly": {"deviceClassName": OTHER_CLASS}}
    )
    cluster.apply([foreign, mixed])
    cluster.apply(pod_with(kns, "app", ["foreign", "mixed"]))
    pod = cluster.wait_bound(kns, "app")
    foreign = cluster.claim(kns, "foreign")
    mixed = cluster.claim(kns, "mixed")
    assert [r["driver"] for r in foreign["status"]["allocation"]["devices"]["results"]] == [
        OTHER_DRIVER
    ]
    assert sorted(r["driver"] for r in mixed["status"]["allocation"]["devices"]["results"]) == [
        DRIVER,
        OTHER_DRIVER,
    ]
    # The kubelet would not even send the foreign claim to us.
    assert [c["metadata"]["name"] for c in cluster.kubelet_claims(pod)] == ["mixed"]

    resp = d.prepare([foreign, mixed])
    uid = foreign["metadata"]["uid"]
    assert (resp.claims[uid].error, list(resp.claims[uid].devices)) == ("", [])
    [entry] = check_answer(resp, [mixed]).values()
    assert [d.device_name for d in entry.devices] == ["netdev-virtual"]
    assert len(results(mixed)) == 1
    nothing_of(node, d, uid)
    assert len(spec_files(d)) == 1
    gone = d.unprepare([foreign, mixed])
    assert {e.error for e in gone.claims.values()} == {""}
    assert node.tagged() == {} and spec_files(d) == {}


def test_replaced_missing_and_unallocated_claims_are_refused(
    cluster: Cluster, node: Node, kns: str
) -> None:
    d = started(node)
    cluster.apply(veth_claim(kns, "net", interfaceName="net1"))
    cluster.apply(pod_with(kns, "first", ["net"]))
    first = cluster.wait_bound(kns, "first")
    [old] = cluster.kubelet_claims(first)
    old_uid = old["metadata"]["uid"]
    # The pod goes before the kubelet prepared anything; the claim is deleted and made
    # again under the same name for another pod: a new UID.
    cluster.finish_pod_deletion(kns, "first")
    cluster.wait_claims_released(kns, ["net"])
    cluster.delete(f"{RESOURCE}/namespaces/{kns}/resourceclaims/net")
    wait_for("the old claim to go", lambda: cluster.claim(kns, "net", missing_ok=True) is None)
    cluster.apply(veth_claim(kns, "net", interfaceName="net1"))
    cluster.apply(pod_with(kns, "second", ["net"]))
    second = cluster.wait_bound(kns, "second")
    [new] = cluster.kubelet_claims(second)
    new_uid = new["metadata"]["uid"]
    assert new_uid != old_uid

    # A kubelet still working on the first pod asks with the old UID.
    resp = d.prepare([old])
    err = resp.claims[old_uid].error
    assert err.startswith(f"claim {kns}/net ({old_uid}): replaced"), err
    assert new_uid in err
    nothing_of(node, d, old_uid)
    nothing_of(node, d, new_uid)
    # Unpreparing the old one is a no-op that succeeds; the new one is served normally.
    assert d.unprepare([old]).claims[old_uid].error == ""
    check_answer(d.prepare([new]), [new])

    # A claim that exists but is not allocated, and one that does not exist.
    cluster.apply(veth_claim(kns, "idle", interfaceName="net2"))
    idle = cluster.claim(kns, "idle")
    missing = {"metadata": {"namespace": kns, "name": "nosuch", "uid": old_uid}}
    resp = d.prepare([idle, missing])
    idle_uid = idle["metadata"]["uid"]
    assert "not allocated" in resp.claims[idle_uid].error
    assert "not found in the API server" in resp.claims[old_uid].error
    nothing_of(node, d, idle_uid)

    assert d.unprepare([new]).claims[new_uid].error == ""
    assert node.tagged() == {} and spec_files(d) == {} and record_uids(d) == set()
