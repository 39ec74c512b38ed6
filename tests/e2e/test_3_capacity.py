"""Scenario 3: consumable capacity. Four pods share the node's one `netdev-virtual`
device (four `slots`), a fifth waits as unschedulable until one of them is gone."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.driverproc import DriverProcess
from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node
from .kubelet import check_answer, net_devices, results, spec_files

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]

SLOTS = 4


def veth_template(
    namespace: str,
    name: str = "one-veth",
    device_class: str = "virtual-network",
    driver: str = "dra.example.com",
) -> dict[str, Any]:
    """One virtual interface (one slot), the shape of the examples in deploy/."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "net",
                            "exactly": {
                                "deviceClassName": device_class,
                                "capacity": {"requests": {"slots": "1"}},
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["net"],
                            "opaque": {
                                "driver": driver,
                                "parameters": {
                                    "type": "netdev",
                                    "netdev": {"kind": "veth", "interfaceName": "net1"},
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def claim_pod(
    namespace: str, name: str, template: str = "one-veth", node: str | None = None
) -> dict[str, Any]:
    """A pod with one claim from `template`; only for `node` when given (a scheduler
    that has not yet seen an earlier test's node go could otherwise place it there)."""
    selector = {"kubernetes.io/hostname": node} if node else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 5,
            "resourceClaims": [{"name": "net", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "app",
                    "image": "stand-in.invalid/app:e2e",
                    "resources": {"claims": [{"name": "net"}]},
                }
            ],
        },
    }


def prepare_pod(
    cluster: Cluster, d: DriverProcess, pod: dict[str, Any]
) -> tuple[dict[str, Any], Any]:
    """The kubelet's prepare of one bound pod; returns (claim, answer entry)."""
    [claim] = cluster.kubelet_claims(pod)
    resp = d.prepare([claim])
    assert list(resp.claims) == [claim["metadata"]["uid"]]
    [entry] = check_answer(resp, [claim]).values()
    return claim, entry


def unschedulable(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    pod = cluster.pod(ns, name)
    cond = cluster.condition(pod, "PodScheduled")
    if cond and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
        return pod
    return None


def wait_no_fit(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    """Wait until the scheduler finds no node for pod `name` because of its claims, and
    return the pod (its PodScheduled message says so)."""
    pod = wait_for(
        f"{name} to be unschedulable",
        lambda: unschedulable(cluster, ns, name),
        log=lambda: cluster.scheduling_state(ns, name),
    )
    cond = cluster.condition(pod, "PodScheduled")
    assert cond is not None and "cannot allocate all claims" in cond.get("message", ""), cond
    return pod


def test_four_pods_share_the_virtual_device_and_a_fifth_waits(
    cluster: Cluster, node: Node, kns: str
) -> None:
    d = node.start_driver("--virtual-slots", str(SLOTS))
    wait_for(
        "netdev-virtual with 4 slots",
        lambda: (
            cluster.devices()
            .get("netdev-virtual", {})
            .get("capacity", {})
            .get("slots", {})
            .get("value")
            == str(SLOTS)
        ),
    )
    cluster.apply(veth_template(kns))
    # One pod after the other, each once the previous one is bound. Created together,
    # kube-scheduler v1.36.3 can count a claim whose allocation it is writing twice
    # against the device's capacity (in flight and already in its claim cache), reject
    # a pod that fits as "cannot allocate all claims", and then not retry it: no event
    # it waits for follows, so it waits for the 5-minute unschedulable-pod flush.
    pods = []
    for name in (f"app-{i}" for i in range(SLOTS)):
        cluster.apply(claim_pod(kns, name))
        pods.append(cluster.wait_bound(kns, name))

    claims, entries = [], []
    for pod in pods:
        claim, entry = prepare_pod(cluster, d, pod)
        claims.append(claim)
        entries.append(entry)
    allocated = [results(c)[0] for c in claims]
    assert {(r["pool"], r["device"]) for r in allocated} == {(cluster.node, "netdev-virtual")}
    assert len({r["shareID"] for r in allocated}) == SLOTS, "one share per allocation"
    assert all(r["consumedCapacity"] == {"slots": "1"} for r in allocated)
    assert len({e.devices[0].share_id for e in entries}) == SLOTS
    # Four distinct host interfaces (both ends of four veth pairs), one spec each.
    specs = spec_files(d)
    assert len(specs) == SLOTS
    hosts = {nd["hostInterfaceName"] for s in specs.values() for nd in net_devices(s).values()}
    assert len(hosts) == SLOTS
    tagged = node.tagged()
    assert hosts <= set(tagged)
    assert sorted(tagged.values()) == sorted(2 * [c["metadata"]["uid"] for c in claims])

    # The device is full: a fifth pod is not scheduled.
    cluster.apply(claim_pod(kns, "app-late"))
    pod = wait_no_fit(cluster, kns, "app-late")
    assert not pod["spec"].get("nodeName")
    [late_claim] = cluster.pod_claim_names(pod)
    assert not cluster.claim(kns, late_claim).get("status", {}).get("allocation")

    # One pod goes: deleted, its containers stopped (no runtime here: nothing moved),
    # unprepared by the kubelet, and finally removed by the kubelet (grace period 0).
    gone_pod, gone_claim = pods[0], claims[0]
    cluster.delete_pod(kns, gone_pod["metadata"]["name"])
    assert cluster.pod(kns, gone_pod["metadata"]["name"])["metadata"]["deletionTimestamp"]
    # Still allocated while the pod is terminating: the fifth must keep waiting.
    assert cluster.claim(kns, gone_claim["metadata"]["name"])["status"]["allocation"]
    gone = d.unprepare([gone_claim])
    assert gone.claims[gone_claim["metadata"]["uid"]].error == ""
    assert gone_claim["metadata"]["uid"] not in set(node.tagged().values())
    assert len(spec_files(d)) == SLOTS - 1
    cluster.finish_pod_deletion(kns, gone_pod["metadata"]["name"])
    cluster.wait_pod_gone(kns, gone_pod["metadata"]["name"])
    cluster.wait_claims_released(kns, [gone_claim["metadata"]["name"]])

    # The scheduler retries the fifth pod once the share is released.
    late = cluster.wait_bound(kns, "app-late")
    late_claim_obj, late_entry = prepare_pod(cluster, d, late)
    share = results(late_claim_obj)[0]["shareID"]
    assert share not in {r["shareID"] for r in allocated[1:]}
    assert late_entry.devices[0].share_id == share
    assert len(spec_files(d)) == SLOTS

    remaining = [*claims[1:], late_claim_obj]
    resp = d.unprepare(remaining)
    assert {e.error for e in resp.claims.values()} == {""}
    assert node.tagged() == {}
    assert spec_files(d) == {}
    assert list(d.state.iterdir()) == []
