"""Scenario 2: the example workloads of deploy/ through the real controllers and scheduler,
then the kubelet's part played over the driver's sockets, the runtime's part with
`move_like_runc`, and the claim status read back from the API server."""

from __future__ import annotations

from typing import Any

import pytest

from dradriver.contract import naming
from tests.support import kernel, netns
from tests.support.driverproc import DRIVER, DriverProcess
from tests.support.runtime import move_like_runc, seen_in

from .cluster import (
    DEPLOY,
    Cluster,
    example_objects,
    netdev_kind_of_template,
    template_config,
    wait_for,
)
from .conftest import PARENT, Node
from .kubelet import check_answer, net_devices, record, record_uids, results, spec_files

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("macvlan")]


def workload(
    path: str, namespace: str, kinds: set[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The Deployment of an example manifest whose claim templates ask for `kinds`,
    with those templates (moved into `namespace`, otherwise as written)."""
    docs = example_objects(DEPLOY / path, namespace)
    templates = {t["metadata"]["name"]: t for t in docs if t["kind"] == "ResourceClaimTemplate"}
    for dep in (d for d in docs if d["kind"] == "Deployment"):
        refs = [
            r["resourceClaimTemplateName"]
            for r in dep["spec"]["template"]["spec"].get("resourceClaims") or []
        ]
        if refs and {netdev_kind_of_template(templates[r]) for r in refs} == kinds:
            return dep, [templates[r] for r in refs]
    raise LookupError(f"{path}: no Deployment whose claims are all of kinds {kinds}")


def run_example(
    cluster: Cluster, ns: str, dep: dict[str, Any], templates: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Apply the example; the Deployment and ReplicaSet controllers make the pod, the
    resourceclaim controller its claims, the scheduler allocates and binds."""
    cluster.apply([*templates, dep])
    selector = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
    [pod] = wait_for("the example's pod", lambda: cluster.pods(ns, selector))
    pod = cluster.wait_bound(ns, pod["metadata"]["name"])
    assert pod["spec"]["nodeName"] == cluster.node
    # Claims generated from the templates, owned by the pod, allocated on our node.
    claims = cluster.kubelet_claims(pod)
    assert len(claims) == len(templates), "all claims of the pod go to our driver in one call"
    for claim in claims:
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
        [result] = results(claim)
        assert (result["pool"], result["device"]) == (cluster.node, "netdev-virtual")
        assert result["shareID"] and result["consumedCapacity"] == {"slots": "1"}
    return pod, claims


def wait_status(cluster: Cluster, claim: dict[str, Any]) -> dict[str, Any]:
    """The driver's status.devices entry of a claim, once the API server has it."""
    ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    [result] = results(claim)

    def entry() -> dict[str, Any] | None:
        for dev in cluster.claim(ns, name).get("status", {}).get("devices") or []:
            if (dev["driver"], dev["pool"], dev["device"], dev.get("shareID")) == (
                DRIVER,
                result["pool"],
                result["device"],
                result.get("shareID"),
            ):
                return dict(dev)
        return None

    return wait_for(f"status.devices of claim {ns}/{name}", entry, 15)


def check_host_link(node: Node, name: str, uid: str, cfg: dict[str, Any]) -> str:
    """The prepared host-side macvlan: ours by tag and name shape, down, configured as
    the claim asks, on the node's eth0. Returns its MAC address."""
    link = node.link(name)
    assert naming.is_host_ifname(name)
    tag = naming.parse_ifalias(link["ifalias"])
    assert tag is not None and tag[0] == uid
    assert link["linkinfo"]["info_kind"] == "macvlan"
    assert link["linkinfo"]["info_data"]["mode"] == cfg.get("mode", "bridge")
    assert link["link"] == PARENT
    assert link["mtu"] == cfg["mtu"]
    assert "UP" not in link["flags"], "the runtime sets it up inside the pod"
    addrs = [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["scope"] == "global"]
    assert addrs == cfg["ipAddresses"]
    return str(link["address"])


def start(node: Node) -> DriverProcess:
    d = node.start_driver("--virtual-parents", PARENT)
    # The kubelet's registration: GetInfo on the registration socket, then the verdict.
    info = d.get_info()
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(d.service_socket))
    assert "v1.DRAPlugin" in info.supported_versions
    d.notify(True)
    wait_for("the shared virtual device", lambda: "netdev-virtual" in node.cluster.devices())
    return d


def test_macvlan_example_from_deploy(cluster: Cluster, node: Node, kns: str) -> None:
    d = start(node)
    dep, [template] = workload("deployment.yaml", kns, {"macvlan"})
    cfg = template_config(template)
    pod, [claim] = run_example(cluster, kns, dep, [template])
    uid = claim["metadata"]["uid"]

    # NodePrepareResources with the pod's claims, as the kubelet sends them.
    resp = d.prepare([claim])
    assert list(resp.claims) == [uid]
    [entry] = check_answer(resp, [claim]).values()
    [dev] = entry.devices
    assert list(dev.request_names) == [results(claim)[0]["request"]]

    # The CDI spec the runtime will read, and the host interface it names.
    [(fname, spec)] = spec_files(d).items()
    assert fname == naming.cdi_spec_filename(DRIVER, "netdev", uid)
    [(cdi_name, nd)] = net_devices(spec).items()
    assert dev.cdi_device_ids[0] == f"{DRIVER}/netdev={cdi_name}"
    assert nd["name"] == cfg["interfaceName"]
    host = nd["hostInterfaceName"]
    mac = check_host_link(node, host, uid, cfg)
    assert node.tagged() == {host: uid}
    assert record(d, uid)["phase"] == "prepared"

    # The claim status in the API server: Ready, with what the pod will see.
    status = wait_status(cluster, claim)
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "True"
    assert status["networkData"] == {
        "interfaceName": cfg["interfaceName"],
        "ips": cfg["ipAddresses"],
        "hardwareAddress": mac,
    }

    # The runtime creates the pod's container: the interface moves into the pod.
    pod_ns = node.pod_netns()
    with netns.inside(node.ns):
        move_like_runc(host, nd["name"], pod_ns)
    seen = seen_in(pod_ns, cfg["interfaceName"])
    assert seen.mtu == cfg["mtu"] and seen.up and seen.mac == mac
    assert seen.addresses == cfg["ipAddresses"]
    assert host not in node.links()

    # A repeated prepare (kubelet retry) answers the same without touching anything.
    assert d.prepare([claim]) == resp

    # The user deletes the Deployment; the garbage collector deletes its pod gracefully.
    cluster.delete(f"/apis/apps/v1/namespaces/{kns}/deployments/{dep['metadata']['name']}")
    wait_for(
        "the pod to be terminating",
        lambda: cluster.pod(kns, pod["metadata"]["name"])["metadata"].get("deletionTimestamp"),
    )
    # The kubelet stops the pod (its sandbox, so the namespace, goes), then unprepares.
    node.drop_pod_netns(pod_ns)
    gone = d.unprepare([claim])
    assert list(gone.claims) == [uid] and gone.claims[uid].error == ""
    assert set(node.links()) == {PARENT, f"{PARENT}-peer"}
    assert spec_files(d) == {}
    assert record_uids(d) == set() and list(d.state.iterdir()) == []
    # ... and removes the pod; the controller then deletes the generated claim.
    cluster.finish_pod_deletion(kns, pod["metadata"]["name"])
    wait_for(
        "the generated claim to be deleted",
        lambda: cluster.claim(kns, claim["metadata"]["name"], missing_ok=True) is None,
    )
    # Unprepare is idempotent: the kubelet may call again after a restart.
    assert d.unprepare([claim]).claims[uid].error == ""


def test_multi_nic_example_from_deploy(cluster: Cluster, node: Node, kns: str) -> None:
    """One pod, two claims (macvlan data0 and dummy ctrl0) in one kubelet call. Where the
    kernel has no dummy links (this machine), the dummy claim fails alone, naming itself,
    and leaves nothing behind; the macvlan claim of the same call is prepared, and is
    unprepared from the host when the pod, which never started, is deleted."""
    no_dummy = kernel.missing("dummy")
    d = start(node)
    dep, templates = workload("multi-nic-deployment.yaml", kns, {"macvlan", "dummy"})
    cfgs = {t["metadata"]["name"]: template_config(t) for t in templates}
    pod, claims = run_example(cluster, kns, dep, templates)
    kinds = {}
    for claim in claims:
        pod_claim = claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"]
        [ref] = [r for r in pod["spec"]["resourceClaims"] if r["name"] == pod_claim]
        kinds[claim["metadata"]["uid"]] = cfgs[ref["resourceClaimTemplateName"]]
    [data] = [c for c in claims if kinds[c["metadata"]["uid"]]["kind"] == "macvlan"]
    [ctrl] = [c for c in claims if kinds[c["metadata"]["uid"]]["kind"] == "dummy"]

    resp = d.prepare(claims)
    assert sorted(resp.claims) == sorted(c["metadata"]["uid"] for c in claims)
    check_answer(resp, [data])
    ctrl_uid = ctrl["metadata"]["uid"]
    if no_dummy:
        err = resp.claims[ctrl_uid].error
        request = results(ctrl)[0]["request"]
        assert err.startswith(
            f"claim {kns}/{ctrl['metadata']['name']} ({ctrl_uid}): request {request}: "
        ), err
        assert "dummy" in err, err
        assert not resp.claims[ctrl_uid].devices
        assert ctrl_uid not in record_uids(d)
        assert ctrl_uid not in set(node.tagged().values())
        assert not [f for f in spec_files(d) if ctrl_uid in f]
    else:
        check_answer(resp, claims)

    for claim in [data] if no_dummy else claims:
        status = wait_status(cluster, claim)
        cfg = kinds[claim["metadata"]["uid"]]
        assert status["networkData"]["interfaceName"] == cfg["interfaceName"]
        assert status["networkData"]["ips"] == cfg["ipAddresses"]
    pod_ns = node.pod_netns()
    if no_dummy:
        # The pod's sync failed, so no container is created; the kubelet retries: the
        # failed claim fails the same way, the prepared one answers from its record.
        again = d.prepare(claims)
        assert again.claims[data["metadata"]["uid"]] == resp.claims[data["metadata"]["uid"]]
        assert again.claims[ctrl_uid].error == resp.claims[ctrl_uid].error
    else:
        # The runtime creates the container: both interfaces move into the pod.
        for claim in claims:
            cfg = kinds[claim["metadata"]["uid"]]
            [spec] = [s for f, s in spec_files(d).items() if claim["metadata"]["uid"] in f]
            [nd] = net_devices(spec).values()
            with netns.inside(node.ns):
                move_like_runc(nd["hostInterfaceName"], nd["name"], pod_ns)
            seen = seen_in(pod_ns, cfg["interfaceName"])
            assert (seen.mtu, seen.addresses, seen.up) == (cfg["mtu"], cfg["ipAddresses"], True)

    # Deleting the Deployment: pod terminating, sandbox gone, unprepare of every claim
    # (without a container, data0 is still on the host: unprepare deletes it there).
    cluster.delete(f"/apis/apps/v1/namespaces/{kns}/deployments/{dep['metadata']['name']}")
    wait_for(
        "the pod to be terminating",
        lambda: cluster.pod(kns, pod["metadata"]["name"])["metadata"].get("deletionTimestamp"),
    )
    node.drop_pod_netns(pod_ns)
    gone = d.unprepare(claims)
    assert {uid: e.error for uid, e in gone.claims.items()} == {
        c["metadata"]["uid"]: "" for c in claims
    }
    assert set(node.links()) == {PARENT, f"{PARENT}-peer"}
    assert spec_files(d) == {} and list(d.state.iterdir()) == []
    cluster.finish_pod_deletion(kns, pod["metadata"]["name"])
    cluster.wait_claims_released(kns, [c["metadata"]["name"] for c in claims])
