"""Scenario 1: the driver's ResourceSlice as the real API server stores it."""

from __future__ import annotations

import time

import pytest

from dradriver.apiserver.kubeapi import KubeApi
from dradriver.apiserver.publisher import Publisher
from dradriver.contract.hookspecs import Device
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node

pytestmark = [pytest.mark.e2e, pytest.mark.root]


def test_slice_is_accepted_with_shared_device_owned_by_the_node(
    cluster: Cluster, node: Node
) -> None:
    assert cluster.slices() == []
    d = node.start_driver("--virtual-slots", "16")
    info = d.get_info()
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert info.endpoint == str(d.service_socket)
    assert list(info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    d.notify(True)

    [stored] = wait_for("the driver's slice", cluster.slices)
    spec = stored["spec"]
    assert spec["driver"] == DRIVER
    assert spec["nodeName"] == cluster.node
    assert spec["pool"]["name"] == cluster.node
    assert spec["pool"]["resourceSliceCount"] == 1
    assert spec["pool"]["generation"] >= 1
    [owner] = stored["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": cluster.node,
        "uid": cluster.node_uid,
        "controller": True,
    }
    devices = {dev["name"]: dev for dev in spec["devices"]}
    shared = devices["netdev-virtual"]
    # What DRAConsumableCapacity adds survived the API server's strategy.
    assert shared["allowMultipleAllocations"] is True
    slots = shared["capacity"]["slots"]
    assert slots["value"] == "16"
    assert slots["requestPolicy"]["default"] == "1"
    assert shared["attributes"] == {"type": {"string": "netdev"}, "kind": {"string": "virtual"}}
    # No single-allocation fallback devices while the fields are kept.
    assert not [n for n in devices if n.startswith("netdev-virtual-")]
    # The eth0 on the virtual-parents allow-list is not offered whole (host-device needs
    # --parent-interfaces, empty by default).
    assert not [n for n in devices if "eth0" in n]
    # Every slice of this driver on this node is in the one pool named after the node.
    everything = cluster.get("/apis/resource.k8s.io/v1/resourceslices")["items"]
    ours = [s for s in everything if s["spec"]["driver"] == DRIVER]
    assert {(s["spec"]["nodeName"], s["spec"]["pool"]["name"]) for s in ours} == {
        (cluster.node, cluster.node)
    }
    assert "dropped consumable-capacity fields" not in d.log()

    # The kubelet deletes a driver's slices when it lost the driver for 30 s (and all
    # slices of its node when it starts): the driver publishes them again.
    cluster.delete_slices()
    [again] = wait_for("the slice to be published again", cluster.slices, 10)
    assert again["metadata"]["uid"] != stored["metadata"]["uid"]
    assert again["spec"]["devices"] == stored["spec"]["devices"]
    assert again["spec"]["pool"]["generation"] >= 1


def test_slice_follows_the_node_when_it_is_registered_again(cluster: Cluster, node: Node) -> None:
    """The Node object is deleted and registered again (new UID), as when a node is
    removed from the cluster and its kubelet re-registers it: the garbage collector
    deletes the slices owned by the old Node, and the driver must publish new ones
    owned by the new Node, which then stay."""
    d = node.start_driver()
    [first] = wait_for("the driver's slice", cluster.slices)
    assert first["metadata"]["ownerReferences"][0]["uid"] == cluster.node_uid
    cluster.delete(f"/api/v1/nodes/{cluster.node}")
    wait_for("the garbage collector to delete the slice", lambda: not cluster.slices())
    new_uid = cluster.cp.create_node(cluster.node)
    assert new_uid != cluster.node_uid
    cluster.node_uid = new_uid

    def owned_by_new_node() -> bool:
        got = cluster.slices()
        return bool(got) and got[0]["metadata"]["ownerReferences"][0]["uid"] == new_uid

    wait_for("a slice owned by the new Node", owned_by_new_node, 15)
    # It stays, as it is: nothing deletes it as an orphan, and the driver does not
    # rewrite it, over several publishing periods (--publish-interval 2).
    [settled] = cluster.slices()
    published = d.log().count("published ResourceSlices")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert owned_by_new_node()
        time.sleep(0.5)
    [later] = cluster.slices()
    assert later["metadata"]["uid"] == settled["metadata"]["uid"]
    assert later["metadata"]["resourceVersion"] == settled["metadata"]["resourceVersion"]
    assert d.log().count("published ResourceSlices") == published


class _Synthetic:
    """An inventory of `count` host-device-like devices, as Publisher reads one."""

    fallback = False

    def __init__(self, count: int) -> None:
        self.count = count

    def refresh(self) -> list[Device]:
        return [
            Device(
                f"nic-syn{i:03d}",
                {"type": "netdev", "kind": "host-device", "interfaceName": f"syn{i}"},
            )
            for i in range(self.count)
        ]

    def devices(self) -> list[Device]:
        return self.refresh()

    def set_fallback(self, fallback: bool) -> None:
        raise AssertionError("the e2e API server keeps consumable capacity")


def test_a_pool_larger_than_one_slice_is_split_and_shrinks_back(cluster: Cluster) -> None:
    """More devices than one ResourceSlice holds (128): the publisher, with the driver's
    own credentials, writes one pool of several slices that the API server accepts, each
    saying how many slices the pool has, all of one generation; fewer devices later, and
    the slices it no longer needs are deleted."""
    inventory = _Synthetic(300)
    api = KubeApi(str(cluster.driver_kubeconfig))
    publisher = Publisher(api, inventory, DRIVER, cluster.node, 60.0)  # type: ignore[arg-type]
    try:
        assert publisher.publish()
        stored = cluster.slices()
        pools = {
            (
                s["spec"]["pool"]["name"],
                s["spec"]["pool"]["generation"],
                s["spec"]["pool"]["resourceSliceCount"],
            )
            for s in stored
        }
        [(pool, generation, count)] = pools
        assert (pool, count, len(stored)) == (cluster.node, 3, 3)
        sizes = sorted(len(s["spec"]["devices"]) for s in stored)
        assert sizes == [44, 128, 128]
        names = sorted(d["name"] for s in stored for d in s["spec"]["devices"])
        assert names == sorted(d.name for d in inventory.refresh())

        inventory.count = 100
        assert publisher.publish(force=False)
        [left] = cluster.slices()
        assert left["spec"]["pool"]["resourceSliceCount"] == 1
        assert left["spec"]["pool"]["generation"] == generation + 1
        assert len(left["spec"]["devices"]) == 100
    finally:
        cluster.delete_slices()
