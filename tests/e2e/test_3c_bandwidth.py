"""Scenario 3c: bandwidth as consumable capacity. The node offers 200 Mbit/s on its
virtual device; the real scheduler gives one pod 150M, keeps a 100M pod Pending with its
reason, still places a pod that asks for no bandwidth, and places the 100M pod once the
first is gone. The driver limits each claim's links to what the scheduler gave it.
A host NIC offers its link's speed: the scheduler places a request for less on it and
keeps one for more Pending."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dradriver.state.recordstore import RecordStore
from tests.support import hosttools, netns
from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node
from .kubelet import results
from .test_3_capacity import claim_pod, prepare_pod, veth_template, wait_no_fit
from .test_3b_first_available import SPARE

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]


def bandwidth_template(namespace: str, name: str, bandwidth: str | None) -> dict[str, Any]:
    """One veth claim asking for `bandwidth` (None: for none, so not limited)."""
    template = veth_template(namespace, name)
    if bandwidth is not None:
        [request] = template["spec"]["spec"]["devices"]["requests"]
        request["exactly"]["capacity"]["requests"]["bandwidth"] = bandwidth
    return template


def rates(node: Node, claim_uid: str) -> dict[str, int]:
    """The rate of the root qdisc of each link tagged for the claim, in bits per second
    (as `tc` reads it: bytes per second in its JSON)."""
    out = {}
    for name, uid in node.tagged().items():
        if uid != claim_uid:
            continue
        shown = hosttools.run(
            ["ip", "netns", "exec", node.ns, "tc", "-j", "qdisc", "show", "dev", name],
            capture_output=True,
            text=True,
            check=True,
        )
        qdiscs = json.loads(shown.stdout)
        for q in qdiscs:
            if q.get("root") and q["kind"] == "tbf":
                out[name] = int(q["options"]["rate"]) * 8
    return out


def test_the_scheduler_keeps_the_sum_of_bandwidth_within_the_node_and_it_is_enforced(
    cluster: Cluster, node: Node, kns: str
) -> None:
    d = node.start_driver("--virtual-bandwidth", "200M", "--bandwidth-step", "10M")
    wait_for(
        "netdev-virtual with 200M of bandwidth",
        lambda: cluster.devices().get("netdev-virtual", {}).get("capacity", {}).get("bandwidth"),
    )
    offered = cluster.devices()["netdev-virtual"]["capacity"]["bandwidth"]
    assert offered == {
        "value": "200M",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "10M"}},
    }
    cluster.apply(bandwidth_template(kns, "fast", "150M"))
    cluster.apply(bandwidth_template(kns, "slow", "100M"))
    cluster.apply(bandwidth_template(kns, "free", None))

    cluster.apply(claim_pod(kns, "fast-app", "fast"))
    fast = cluster.wait_bound(kns, "fast-app")
    fast_claim, _ = prepare_pod(cluster, d, fast)
    [given] = results(fast_claim)
    assert given["consumedCapacity"] == {"slots": "1", "bandwidth": "150M"}
    uid = fast_claim["metadata"]["uid"]
    limited = rates(node, uid)
    assert sorted(limited.values()) == [150_000_000, 150_000_000], limited  # host end, ifb

    # 150M + 100M > 200M: the scheduler says so, and the pod waits.
    cluster.apply(claim_pod(kns, "slow-app", "slow"))
    wait_no_fit(cluster, kns, "slow-app")

    # A claim that asks for no bandwidth takes none, and is not limited.
    cluster.apply(claim_pod(kns, "free-app", "free"))
    free = cluster.wait_bound(kns, "free-app")
    free_claim, _ = prepare_pod(cluster, d, free)
    assert results(free_claim)[0]["consumedCapacity"] == {"slots": "1", "bandwidth": "0"}
    assert rates(node, free_claim["metadata"]["uid"]) == {}

    # The first pod goes: its bandwidth is released, and the waiting pod is placed.
    cluster.delete_pod(kns, "fast-app")
    assert d.unprepare([fast_claim]).claims[uid].error == ""
    assert uid not in node.tagged().values()
    cluster.finish_pod_deletion(kns, "fast-app")
    cluster.wait_pod_gone(kns, "fast-app")
    cluster.wait_claims_released(kns, [fast_claim["metadata"]["name"]])
    slow = cluster.wait_bound(kns, "slow-app")
    slow_claim, _ = prepare_pod(cluster, d, slow)
    slow_rates = rates(node, slow_claim["metadata"]["uid"])
    assert sorted(slow_rates.values()) == [100_000_000, 100_000_000], slow_rates

    resp = d.unprepare([slow_claim, free_claim])
    assert {e.error for e in resp.claims.values()} == {""}
    assert node.tagged() == {}


def nic_template(namespace: str, name: str, bandwidth: str) -> dict[str, Any]:
    """One whole host NIC at least `bandwidth` fast."""
    template = veth_template(namespace, name, device_class="network-devices")
    [request] = template["spec"]["spec"]["devices"]["requests"]
    request["exactly"]["capacity"] = {"requests": {"bandwidth": bandwidth}}
    [config] = template["spec"]["spec"]["devices"]["config"]
    config["opaque"]["parameters"]["netdev"]["kind"] = "host-device"
    return template


def test_a_host_nic_is_placed_only_for_a_request_its_link_can_carry(
    cluster: Cluster, node: Node, kns: str
) -> None:
    netns.ip(node.ns, "link", "add", SPARE, "type", "veth", "peer", "name", "spare0p")
    for name in (SPARE, "spare0p"):  # with carrier: a NIC without is tainted unhealthy
        netns.ip(node.ns, "link", "set", name, "up")
    d = node.start_driver("--parent-interfaces", SPARE)
    published = wait_for(
        "the host NIC with its bandwidth",
        lambda: cluster.devices().get(f"nic-{SPARE}", {}).get("capacity"),
    )
    assert published == {"bandwidth": {"value": "10G"}}  # what the kernel says of a veth
    cluster.apply(nic_template(kns, "too-fast", "20G"))
    cluster.apply(nic_template(kns, "fits", "5G"))

    cluster.apply(claim_pod(kns, "too-fast-app", "too-fast"))
    wait_no_fit(cluster, kns, "too-fast-app")

    cluster.apply(claim_pod(kns, "fits-app", "fits"))
    claim, _ = prepare_pod(cluster, d, cluster.wait_bound(kns, "fits-app"))
    [given] = results(claim)
    assert given["device"] == f"nic-{SPARE}" and "consumedCapacity" not in given
    uid = claim["metadata"]["uid"]
    record = RecordStore(d.state).load(uid)
    assert record is not None and list(record.consumed.values()) == [{"bandwidth": "5G"}]
    assert d.unprepare([claim]).claims[uid].error == ""


def _claim(name: str, bandwidth: str, sub: bool = False, fallback: str = "") -> dict[str, Any]:
    """A claim asking the virtual class for `bandwidth` (in a firstAvailable subrequest
    `fast`, followed by a subrequest `slow` for `fallback` when given)."""

    def asking(amount: str) -> dict[str, Any]:
        return {
            "deviceClassName": "virtual-network",
            "capacity": {"requests": {"bandwidth": amount}},
        }

    request: dict[str, Any] = {"name": "net"}
    if sub:
        request["firstAvailable"] = [{"name": "fast", **asking(bandwidth)}]
        if fallback:
            request["firstAvailable"].append({"name": "slow", **asking(fallback)})
    else:
        request["exactly"] = asking(bandwidth)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def test_a_bandwidth_request_no_node_offers_or_off_the_step_is_refused_at_creation(
    cluster: Cluster, kns: str
) -> None:
    with cluster.chart_policy(
        "bandwidth-policy.yaml",
        "--set", "settings.virtualBandwidth=200M",
        "--set", "settings.bandwidthStep=10M",
    ) as policy:  # fmt: skip
        wait_for(
            f"{policy} to be enforced",
            lambda: cluster.refusal(kns, _claim("probe", "1G")) is not None,
            30,
        )
        too_much = cluster.refusal(kns, _claim("big", "300M")) or ""
        assert f"ValidatingAdmissionPolicy '{policy}'" in too_much, too_much
        assert (
            "spec.devices.requests[net].exactly.capacity.requests.bandwidth: 300M is more "
            "than the 200M a node's virtual device offers"
        ) in too_much, too_much
        only_too_much = cluster.refusal(kns, _claim("big-sub", "300M", sub=True)) or ""
        assert (
            "spec.devices.requests[net].firstAvailable[fast].capacity.requests.bandwidth: "
            "300M is more than the 200M"
        ) in only_too_much, only_too_much
        off_step = cluster.refusal(kns, _claim("odd", "15M", sub=True)) or ""
        assert (
            "spec.devices.requests[net].firstAvailable[fast].capacity.requests.bandwidth: "
            "15M is not a multiple of 10M"
        ) in off_step, off_step
        refused = cluster.refusal(kns, bandwidth_template(kns, "tmpl", "250M")) or ""
        assert "spec.spec.devices.requests[net].exactly.capacity.requests.bandwidth: 250M" in (
            refused
        ), refused
        fine = [
            _claim("ok", "200M"),
            _claim("ok-sub", "10M", sub=True),
            _claim("none", "0"),
            _claim("fallback", "300M", sub=True, fallback="100M"),  # the scheduler falls back
        ]
        for claim in fine:
            assert cluster.refusal(kns, claim) is None, claim["metadata"]["name"]


def test_with_auto_bandwidth_the_policy_checks_only_the_step(cluster: Cluster, kns: str) -> None:
    """Each node offers its uplink's speed, which the chart cannot know: a request is
    refused for being off the step, or beyond what any node could have (10T)."""
    with cluster.chart_policy(
        "bandwidth-policy.yaml",
        "--set", "settings.virtualBandwidth=auto",
        "--set", "settings.bandwidthStep=10M",
    ) as policy:  # fmt: skip
        wait_for(  # and not an earlier version of it (with a figure) any more
            f"{policy} to be enforced",
            lambda: (
                cluster.refusal(kns, _claim("probe", "15M")) is not None
                and cluster.refusal(kns, _claim("fast", "40G")) is None
            ),
            30,
        )
        assert "5M is not a multiple of 10M" in (cluster.refusal(kns, _claim("odd", "5M")) or "")
        assert "is more than the driver's limit (10T)" in (
            cluster.refusal(kns, _claim("huge", "20T")) or ""
        )
