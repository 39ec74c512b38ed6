"""Scenario 3d: a cluster-wide address pool on two nodes, against the real API server,
scheduler and garbage collector. Each node's driver takes blocks of the pool as Leases
owned by its Node; the claims placed on either node get addresses no other claim has;
when a Node is deleted, the garbage collector removes its Leases, and its blocks return
to the pool."""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import NODE, Node, forwarded, node_machine
from .kubelet import results
from .test_3_capacity import claim_pod, prepare_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]

POOLS = [{"name": "pods", "ranges": ["203.0.113.0/27"], "gateway": "203.0.113.1", "blockSize": 8}]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/dra-system/leases"
PER_NODE = 5


@pytest.fixture
def ipam_rbac(cluster: Cluster) -> Iterator[None]:
    """The chart's Role for the pools' Leases (rendered only when pools are set)."""
    pools = f"ipam.pools={json.dumps(POOLS)}"
    only = ("Role", "RoleBinding")
    with cluster.chart_objects("rbac.yaml", "--set-json", pools, kinds=only) as objects:
        assert sorted(o["kind"] for o in objects) == sorted(only)
        yield


@contextlib.contextmanager
def another_node(cluster: Cluster, name: str) -> Iterator[tuple[Node, str]]:
    """A second node beside the test's: its Node object, machine and kubeconfig."""
    with contextlib.ExitStack() as cleanup:
        uid, kubeconfig = cluster.add_node(name)
        cleanup.callback(cluster.remove_node, name)
        port = int(cluster.cp.server.rsplit(":", 1)[1])
        ns, root, fwd = cleanup.enter_context(node_machine(port))
        node = Node(cluster, ns, root, forwarded(kubeconfig, fwd, root / "kubeconfig"))
        node.name = name
        cleanup.callback(node.close)
        yield node, uid


def _start(node: Node) -> Any:
    args = ("--ipam-pools", json.dumps(POOLS), "--pod-namespace", "dra-system")
    d = node.start_driver(*args)
    wait_for(f"{node.name} to hold a block", lambda: _blocks(node.cluster).get(node.name), 30)
    return d


def _blocks(cluster: Cluster) -> dict[str, list[str]]:
    """The pool's Leases by the node holding them."""
    out: dict[str, list[str]] = {}
    for lease in cluster.get(LEASES)["items"]:
        out.setdefault(lease["spec"]["holderIdentity"], []).append(lease["metadata"]["name"])
    return out


def _ips(cluster: Cluster, namespace: str, claim: str) -> list[str]:
    """The addresses the claim's status reports (written just after the prepare)."""

    def reported() -> list[str] | None:
        devices = cluster.claim(namespace, claim).get("status", {}).get("devices") or []
        return [ip for d in devices for ip in (d.get("networkData") or {}).get("ips", [])]

    return wait_for(f"{claim}'s status", reported, 30)


def _pinned(pod: dict[str, Any], node: str) -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    return pod


def test_claims_on_two_nodes_get_distinct_addresses_from_one_pool(
    cluster: Cluster, node: Node, kns: str, ipam_rbac: None
) -> None:
    template = veth_template(kns, "pooled")
    config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["netdev"]
    config["ipam"] = {"pool": "pods"}
    cluster.apply(template)
    with another_node(cluster, f"{NODE}-ipam-b") as (other, other_uid):
        drivers = {node.name: _start(node), other.name: _start(other)}
        addresses: dict[str, str] = {}
        for name, d in drivers.items():
            for i in range(PER_NODE):
                pod_name = f"{name[-6:]}-{i}"
                cluster.apply(_pinned(claim_pod(kns, pod_name, "pooled"), name))
                claim, _ = prepare_pod(cluster, d, cluster.wait_bound(kns, pod_name))
                assert results(claim)[0]["pool"] == name
                [address] = _ips(cluster, kns, claim["metadata"]["name"])
                assert address not in addresses, (
                    f"{address} of {pod_name} is {addresses[address]}'s"
                )
                addresses[address] = pod_name
        assert len(addresses) == 2 * PER_NODE
        pool = ipaddress.ip_network(POOLS[0]["ranges"][0])
        assert all(ipaddress.ip_interface(a).ip in pool for a in addresses)
        assert "203.0.113.1/27" not in addresses  # the gateway
        blocks = _blocks(cluster)
        assert not set(blocks[node.name]) & set(blocks[other.name])
        [lease] = [
            x for x in cluster.get(LEASES)["items"] if x["spec"]["holderIdentity"] == other.name
        ][:1]
        assert lease["metadata"]["ownerReferences"][0]["uid"] == other_uid
        other.close()  # its driver stops; then the node leaves the cluster
    # The Node is gone: the garbage collector removes its Leases; the first node keeps its own.
    wait_for("the removed node's blocks to return", lambda: other.name not in _blocks(cluster), 60)
    assert _blocks(cluster).get(node.name)


def test_a_block_lost_while_its_node_was_gone_is_handed_out_by_one_node_only(
    cluster: Cluster, kns: str, ipam_rbac: None
) -> None:
    """Node A's Node object is deleted (the garbage collector takes its Leases) and
    registered again; node B takes A's block meanwhile. A's driver, which still had room
    in that block, hears it from its watch of the Leases: it hands out nothing more from
    the block, names the claims still holding its addresses, and takes a block of its own
    for the next claim. A hands out no address of the lost block again."""
    template = veth_template(kns, "pooled-lost")
    config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["netdev"]
    config["ipam"] = {"pool": "pods"}
    cluster.apply(template)
    with (
        another_node(cluster, f"{NODE}-ipam-c") as (a, _),
        another_node(cluster, f"{NODE}-ipam-d") as (b, _),
    ):
        d_a = _start(a)
        [block] = _blocks(cluster)[a.name]
        index = block.rsplit("-", 1)[1]
        cluster.apply(_pinned(claim_pod(kns, "a-0", "pooled-lost"), a.name))
        claim, _ = prepare_pod(cluster, d_a, cluster.wait_bound(kns, "a-0"))
        [first] = _ips(cluster, kns, claim["metadata"]["name"])
        node = cluster.get(f"/api/v1/nodes/{a.name}")
        cluster.delete(f"/api/v1/nodes/{a.name}")
        wait_for("the deleted node's Lease to go", lambda: a.name not in _blocks(cluster), 60)
        d_b = _start(b)  # takes the first free block: A's
        assert _blocks(cluster)[b.name] == [block]
        cluster.cp.create_node(a.name)  # registered again (a new UID)
        assert cluster.get(f"/api/v1/nodes/{a.name}")["metadata"]["uid"] != node["metadata"]["uid"]
        wait_for(
            "A's driver to give up the block",
            lambda: f"ipam block {index} of pool pods lost its Lease" in d_a.log(),
            30,
            log=d_a.log,
        )
        assert f'claims="{kns}/{claim["metadata"]["name"]} ({first.split("/")[0]})"' in (
            d_a.log()
        ), d_a.log()
        got: dict[str, str] = {}
        for name, d, node_name in (("a-1", d_a, a.name), ("b-0", d_b, b.name)):
            cluster.apply(_pinned(claim_pod(kns, name, "pooled-lost"), node_name))
            [kclaim] = cluster.kubelet_claims(cluster.wait_bound(kns, name))
            # The kubelet retries while the node takes a block of its own.
            wait_for(
                f"{name} prepared",
                lambda d=d, c=kclaim: not d.prepare([c]).claims[c["metadata"]["uid"]].error,
                60,
            )
            [got[name]] = _ips(cluster, kns, kclaim["metadata"]["name"])
        lost = ipaddress.ip_network(f"{first.split('/')[0]}/29", strict=False)  # blockSize 8
        # A hands out nothing more from the block it lost; B, whose block it is now, may
        # hand out a-0's address again: that is what A's report names.
        assert ipaddress.ip_interface(got["a-1"]).ip not in lost, got
        assert ipaddress.ip_interface(got["b-0"]).ip in lost, got
        assert got["a-1"] != got["b-0"] and got["a-1"] != first
        blocks = _blocks(cluster)
        assert not set(blocks[a.name]) & set(blocks[b.name]), blocks


def _claim_with(netdev: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "probe"},
        "spec": {
            "devices": {
                "requests": [{"name": "net", "exactly": {"deviceClassName": "virtual-network"}}],
                "config": [
                    {
                        "opaque": {
                            "driver": "dra.example.com",
                            "parameters": {"type": "netdev", "netdev": {"kind": "veth", **netdev}},
                        }
                    }
                ],
            }
        },
    }


def test_an_unknown_pool_or_a_pool_beside_addresses_is_refused_at_creation(
    cluster: Cluster, kns: str
) -> None:
    with cluster.chart_policy(
        "ipam-policy.yaml", "--set-json", f"ipam.pools={json.dumps(POOLS)}"
    ) as policy:
        unknown = _claim_with({"ipam": {"pool": "nope"}})
        wait_for(f"{policy} enforced", lambda: cluster.refusal(kns, unknown) is not None, 30)
        message = cluster.refusal(kns, unknown) or ""
        assert f"ValidatingAdmissionPolicy '{policy}'" in message, message
        assert (
            "spec.devices.config[].opaque.parameters.netdev.ipam.pool: no pool nope (pools: pods)"
            in message
        )
        both = {"ipam": {"pool": "pods"}, "ipAddresses": ["203.0.113.9/27"]}
        assert "ipam and ipAddresses exclude each other" in (
            cluster.refusal(kns, _claim_with(both)) or ""
        )
        assert cluster.refusal(kns, _claim_with({"ipam": {"pool": "pods"}})) is None
        # A static address inside the pool: another claim would get it from the pool.
        inside = _claim_with({"ipAddresses": ["198.51.100.5/24", "203.0.113.9/27"]})
        assert (
            "spec.devices.config[].opaque.parameters.netdev.ipAddresses: 203.0.113.9/27 is "
            "inside an address pool (203.0.113.0/27)"
        ) in (cluster.refusal(kns, inside) or "")
        roce = copy.deepcopy(_claim_with({}))
        roce["spec"]["devices"]["config"][0]["opaque"]["parameters"] = {
            "type": "combo",
            "combo": {"netdev": {"ipAddresses": ["203.0.113.30/27"]}},
        }
        assert "203.0.113.30/27 is inside an address pool" in (cluster.refusal(kns, roce) or "")
        assert cluster.refusal(kns, _claim_with({"ipAddresses": ["198.51.100.5/24"]})) is None
        assert (
            cluster.refusal(kns, _claim_with({"ipam": {"pool": "pods"}, "ipAddresses": []})) is None
        )
