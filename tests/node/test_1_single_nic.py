"""One network claim, a real kubelet and runtime: what the pod gets, seen inside it,
and what the driver reported in the claim's status."""

from __future__ import annotations

from localcluster.driver import HostDriver
from localcluster.layout import PARENT
from localcluster.podnet import via_exec, via_sandbox
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .scenario import pod, template


def _claim(cluster: NodeCluster, kns: str, podobj: dict) -> dict:
    [name] = cluster.pod_claim_names(podobj)
    return dict(cluster.claim(kns, name))


def test_veth_reaches_the_pod_with_its_settings(cluster: NodeCluster, driver: HostDriver, kns):
    netdev = {
        "kind": "veth",
        "interfaceName": "net1",
        "mtu": 1400,
        "macAddress": "02:00:5e:10:00:01",
        "ipAddresses": ["198.51.100.10/24", "2001:db8:10::10/64"],
    }
    cluster.apply([template("veth", netdev), pod("p", ["veth"])], kns)
    p = cluster.wait_running(kns, "p")

    inside = via_exec(cluster.local.kubectl, kns, "p", "app")
    assert set(inside) == {"lo", "eth0", "net1"}, inside
    net1 = inside["net1"]
    assert (net1.mtu, net1.mac) == (1400, "02:00:5e:10:00:01")
    assert set(net1.addresses) == {"198.51.100.10/24", "2001:db8:10::10/64"}
    claim = _claim(cluster, kns, p)
    # The driver's tag travelled with the link: this interface is the claim's.
    assert f"claim={claim['metadata']['uid']}" in net1.alias
    # The sandbox's namespace holds the same link (every container shares it).
    sandbox = via_sandbox(cluster.local.lay, p["metadata"]["uid"])["net1"]
    assert (sandbox.mtu, sandbox.mac, set(sandbox.addresses)) == (
        1400,
        "02:00:5e:10:00:01",
        set(net1.addresses),
    )
    assert sandbox.kind == "veth"


def test_claim_status_reports_what_the_pod_has(cluster: NodeCluster, driver: HostDriver, kns):
    netdev = {"kind": "veth", "interfaceName": "net2", "ipAddresses": ["192.0.2.20/24"]}
    cluster.apply([template("veth", netdev), pod("p", ["veth"])], kns)
    p = cluster.wait_running(kns, "p")
    net2 = via_exec(cluster.local.kubectl, kns, "p", "app")["net2"]
    claim = _claim(cluster, kns, p)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    [device] = claim["status"]["devices"]
    assert (device["driver"], device["pool"], device["device"]) == (
        DRIVER,
        cluster.node,
        result["device"],
    )
    assert device.get("shareID") == result.get("shareID")
    assert device["networkData"] == {
        "interfaceName": "net2",
        "ips": ["192.0.2.20/24"],
        "hardwareAddress": net2.mac,
    }
    [ready] = [c for c in device["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True"


def test_macvlan_on_an_allowed_parent(cluster: NodeCluster, driver: HostDriver, kns):
    netdev = {
        "kind": "macvlan",
        "parent": PARENT,
        "mode": "bridge",
        "interfaceName": "data0",
        "mtu": 1400,
        "ipAddresses": ["198.51.100.30/24"],
    }
    cluster.apply([template("mv", netdev), pod("p", ["mv"])], kns)
    p = cluster.wait_running(kns, "p")
    data0 = via_exec(cluster.local.kubectl, kns, "p", "app")["data0"]
    assert (data0.mtu, data0.addresses, data0.state) == (1400, ("198.51.100.30/24",), "up")
    assert via_sandbox(cluster.local.lay, p["metadata"]["uid"])["data0"].kind == "macvlan bridge"


def test_macvlan_on_a_parent_not_allowed_never_starts(
    cluster: NodeCluster, driver: HostDriver, kns
):
    """gw0 exists on the node but is not on --virtual-parents: the kubelet's prepare
    fails with the driver's message, and the pod never runs."""
    netdev = {"kind": "macvlan", "parent": "gw0", "interfaceName": "data0"}
    cluster.apply([template("mv", netdev), pod("p", ["mv"])], kns)

    def refused() -> str | None:
        for ev in cluster.events(kns, "p"):
            if "not on the operator's list of parent interfaces" in ev.get("message", ""):
                return str(ev["message"])
        return None

    message = wait_for("the kubelet to report the refused parent", refused, 60)
    assert "gw0" in message and "config $.netdev.parent: " in message
    assert cluster.pod(kns, "p")["status"]["phase"] == "Pending"
