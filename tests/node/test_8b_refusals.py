"""A pod never loses its NIC silently, on the real node (NRI mode, the node's default,
and CDI mode where it matters):
a claim with a network interface serves one pod (the chart's admission policy keeps a
second pod Pending; without it, the driver refuses the claim at prepare), a route that
meets the pod network's own fails the sandbox naming both, and configs that once failed
only inside the pod are refused at prepare, naming the field. Every refused pod is told
why in its events; nothing of a refused claim is left on the node."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.driver import HostDriver
from localcluster.layout import NODE_IP, PARENT, POD_SUBNET
from localcluster.podnet import via_sandbox
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import SLEEPER, template

POLICY_BINDING = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
SHARING = "dra-driver-claim-sharing"
VETH = {"kind": "veth", "interfaceName": "shr2", "ipAddresses": ["198.51.100.60/24"]}


def _claim(name: str, netdev: dict[str, Any]) -> dict[str, Any]:
    """A ResourceClaim (not a template): pods that reference it share it."""
    spec = template(name, netdev)["spec"]["spec"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def _pod_of(name: str, claim: str) -> dict[str, Any]:
    """A pod whose app references the ResourceClaim `claim` (NRI mode: any container may)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "net", "resourceClaimName": claim}],
            "containers": [
                {
                    "name": "app",
                    "image": "busybox:1.37.0",
                    "imagePullPolicy": "Never",
                    "command": SLEEPER,
                    "resources": {"claims": [{"name": "net"}]},
                }
            ],
        },
    }


def _told(cluster: NodeCluster, kns: str, pod: str, *parts: str, timeout: float = 60) -> str:
    """The message of an event of `pod` that holds every one of `parts`."""

    def event() -> str | None:
        for ev in cluster.events(kns, pod):
            message = ev.get("message") or ""
            if all(p in message for p in parts):
                return message
        return None

    return wait_for(
        f"an event of pod {kns}/{pod} saying {parts}",
        event,
        timeout,
        log=lambda: cluster.describe_pod(kns, pod),
    )


def _not_running(cluster: NodeCluster, kns: str, pod: str) -> None:
    phase = (cluster.pod(kns, pod).get("status") or {}).get("phase")
    assert phase == "Pending", cluster.describe_pod(kns, pod)


INJECTION = pytest.mark.parametrize("injection", ["nri", "cdi"])


@INJECTION
def test_a_second_pod_of_a_network_claim_stays_pending_and_the_first_keeps_its_nic(
    cluster: NodeCluster, drivers, kns: str, injection: str
):
    drivers.start("--injection", injection)
    cluster.apply([_claim("shr", VETH), _pod_of("first", "shr")], kns)
    first = cluster.wait_running(kns, "first")
    cluster.apply([_pod_of("second", "shr")], kns)
    message = _told(cluster, kns, "second", "a network claim serves one pod")
    assert f"ResourceClaim {kns}/shr: request nic (device netdev-virtual)" in message
    assert "reserved for pod first" in message
    _not_running(cluster, kns, "second")
    claim = cluster.claim(kns, "shr")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["first"]
    inside = via_sandbox(cluster.local.lay, first["metadata"]["uid"])
    assert "198.51.100.60/24" in inside["shr2"].addresses


@pytest.fixture
def without_the_sharing_policy(cluster: NodeCluster):
    """The cluster as an operator who turned claimSharingPolicy off has it."""
    binding = cluster.get(f"{POLICY_BINDING}/{SHARING}")
    cluster.delete(f"{POLICY_BINDING}/{SHARING}")
    try:
        yield
    finally:
        keep = {"apiVersion", "kind", "spec"}
        restored = {k: v for k, v in binding.items() if k in keep}
        restored["metadata"] = {
            k: binding["metadata"][k] for k in ("name", "labels") if k in binding["metadata"]
        }
        cluster.apply([restored])


@INJECTION
def test_without_the_policy_two_pods_of_one_claim_are_refused_at_prepare(
    cluster: NodeCluster, drivers, kns: str, without_the_sharing_policy: None, injection: str
):
    """Both pods reserved before either is prepared (the driver is down meanwhile, its
    slices stay published): the driver refuses the claim for each, naming both pods, and
    creates nothing. Before, the second sandbox took the interface from the first,
    running pod, and the claim still said Ready."""
    drivers.start("--injection", injection).stop()
    cluster.apply([_claim("shr", VETH), _pod_of("a", "shr"), _pod_of("b", "shr")], kns)
    wait_for(
        "the claim to be reserved for both pods",
        lambda: len((cluster.claim(kns, "shr").get("status") or {}).get("reservedFor") or []) == 2,
        60,
        log=lambda: cluster.describe_pod(kns, "b"),
    )
    drivers.start("--injection", injection)
    for name in ("a", "b"):
        message = _told(cluster, kns, name, "2 pods hold the claim", timeout=90)
        assert "request nic: its device goes into one pod's network namespace" in message
        assert f"{kns}/a (" in message and f"{kns}/b (" in message
        _not_running(cluster, kns, name)
    assert not driver_state(cluster.local.lay).records


def test_without_the_policy_a_pod_added_to_a_prepared_claim_is_refused_at_its_container(
    cluster: NodeCluster, drivers, kns: str, without_the_sharing_policy: None
):
    """The kubelet prepares a claim once: a pod reserved after that gets no prepare, so
    its sandbox got nothing and it ran without the interface, silently. Its container
    carries the claim's variable from the CDI spec; the driver refuses it at
    CreateContainer, naming the claim and the holder, which keeps its interface."""
    drivers.start("--injection", "nri")
    cluster.apply([_claim("shr", VETH), _pod_of("first", "shr")], kns)
    first = cluster.wait_running(kns, "first")
    uid = first["metadata"]["uid"]
    cluster.apply([_pod_of("late", "shr")], kns)
    message = _told(cluster, kns, "late", f"serves pod {uid}", timeout=90)
    assert f"claim {kns}/shr (" in message
    assert f"container app of pod {kns}/late (" in message
    _not_running(cluster, kns, "late")
    reserved = cluster.claim(kns, "shr")["status"]["reservedFor"]
    assert sorted(r["name"] for r in reserved) == ["first", "late"]
    inside = via_sandbox(cluster.local.lay, uid)
    assert "198.51.100.60/24" in inside["shr2"].addresses


@pytest.mark.parametrize(
    "netdev,where,why",
    [
        pytest.param(
            {**VETH, "routes": [{"destination": "0.0.0.0/0", "gateway": "198.51.100.1"}]},
            "$.netdev.routes[0].metric",
            "a default route needs a metric other than 0 and 1024",
            id="default-route-without-metric",
        ),
        pytest.param(
            {**VETH, "sysctls": {"net.ipv4.conf.shr2.rp_filter": "abc"}},
            '$.netdev.sysctls["net.ipv4.conf.shr2.rp_filter"]',
            '"abc" is not a number the kernel takes',
            id="sysctl-not-a-number",
        ),
        pytest.param(
            {**VETH, "sysctls": {"net.ipv4.conf.shr2.mc_forwarding": 1}},
            '$.netdev.sysctls["net.ipv4.conf.shr2.mc_forwarding"]',
            "this node has no such setting, or it is read-only",
            id="read-only-sysctl",
        ),
        pytest.param(
            {**VETH, "routes": [{"destination": "203.0.113.0/24", "gateway": "198.51.100.255"}]},
            "$.netdev.routes[0].gateway",
            "198.51.100.255 is the broadcast address of 198.51.100.0/24",
            id="gateway-is-broadcast",
        ),
    ],
)
def test_configs_that_failed_inside_the_pod_are_refused_at_prepare(
    cluster: NodeCluster, driver: HostDriver, kns: str, netdev, where, why
):
    """Each passed prepare before and then failed every sandbox creation, forever."""
    cluster.apply([template("bad", netdev), _pod_of_template("p", "bad")], kns)
    message = _told(cluster, kns, "p", f"config {where}: {why}")
    assert "request nic" in message
    _not_running(cluster, kns, "p")
    assert not driver_state(cluster.local.lay).records
    # The driver's own Event on the pod, beside the kubelet's: what `kubectl describe`
    # lists with its reason, the driver as its source, and the claim and field it names.
    [ours] = wait_for(
        "the driver's PrepareFailed event",
        lambda: [e for e in cluster.events(kns, "p") if e.get("reason") == "PrepareFailed"],
        30,
        log=lambda: cluster.describe_pod(kns, "p"),
    )
    assert (ours["type"], ours["reportingComponent"]) == ("Warning", "dra.example.com/driver")
    assert f"config {where}: {why}" in ours["message"] and f"claim {kns}/p-net-" in ours["message"]


def _pod_of_template(name: str, template_name: str) -> dict[str, Any]:
    obj = _pod_of(name, template_name)
    obj["spec"]["resourceClaims"] = [{"name": "net", "resourceClaimTemplateName": template_name}]
    return obj


def test_a_route_that_meets_the_pod_networks_own_fails_the_sandbox_naming_both(
    cluster: NodeCluster, driver: HostDriver, kns: str
):
    """The pod's eth0 already routes its own subnet (metric 0): a claim route to it at
    that metric was dropped without a word before; now the sandbox fails, naming the
    claim's route and the route in its way, and nothing of the claim is left in it."""
    netdev = {**VETH, "routes": [{"destination": POD_SUBNET, "gateway": "198.51.100.1"}]}
    cluster.apply([template("clash", netdev), _pod_of_template("p", "clash")], kns)
    message = _told(cluster, kns, "p", "config routes[0]", "dev eth0")
    assert f"the pod already has a route to {POD_SUBNET} at metric 0" in message
    _not_running(cluster, kns, "p")


def test_nri_mode_refuses_the_nodes_own_address_for_a_macvlan_on_its_uplink(
    cluster: NodeCluster, drivers, kns: str
):
    """Claim ranges that cover the node's LAN (the usual choice for macvlan pods on it):
    in NRI mode a macvlan on the uplink once got the node's own address."""
    drivers.start("--claim-address-ranges", "10.250.0.0/24,198.51.100.0/24")
    netdev = {
        "kind": "macvlan", "parent": PARENT, "interfaceName": "lan0",
        "ipAddresses": [f"{NODE_IP}/24"],
    }  # fmt: skip
    cluster.apply([template("lan", netdev), _pod_of_template("p", "lan")], kns)
    message = _told(cluster, kns, "p", f"config $.netdev.ipAddresses[0]: {NODE_IP} is an address")
    assert f"of this node (on {PARENT})" in message
    _not_running(cluster, kns, "p")
