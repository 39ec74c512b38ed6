"""The example workloads: claims wired to containers the way the runtime can serve."""

from __future__ import annotations

import pytest

from tests.deploy.support import (
    CLASS_FILE,
    EXAMPLE_FILES,
    device_classes,
    docs,
    network_check,
    objects,
)

DEPLOYMENTS = objects("Deployment", EXAMPLE_FILES)
TEMPLATES = {
    (t["metadata"]["namespace"], t["metadata"]["name"]): t
    for t in objects("ResourceClaimTemplate", EXAMPLE_FILES)
}
# Classes whose devices put a network interface in the container (moved by runc,
# which can do it for exactly one container, once).
NETDEV_CLASSES = {"virtual-network", "network-devices", "roce-devices"}


def _pod(dep):
    return dep["spec"]["template"]["spec"]


def _template(dep, claim_name):
    (claim,) = [c for c in _pod(dep)["resourceClaims"] if c["name"] == claim_name]
    return TEMPLATES[(dep["metadata"]["namespace"], claim["resourceClaimTemplateName"])]


def test_the_examples_are_there():
    names = {d["metadata"]["name"] for d in DEPLOYMENTS}
    assert names == {"dummy-net1", "macvlan-data0", "rdma-uverbs", "roce", "multi-nic"}
    assert {d["metadata"]["name"] for d in docs(EXAMPLE_FILES[1]) if d["kind"] == "Deployment"} == {
        "multi-nic"
    }


@pytest.mark.parametrize("dep", DEPLOYMENTS, ids=lambda d: d["metadata"]["name"])
def test_every_claim_is_used_and_exists(dep):
    pod = _pod(dep)
    assert pod["resourceClaims"], "each example claims devices"
    referenced = [
        ref["name"]
        for c in pod.get("containers", []) + pod.get("initContainers", [])
        for ref in (c.get("resources") or {}).get("claims") or []
    ]
    for claim in pod["resourceClaims"]:
        assert claim["name"] in referenced, f"claim {claim['name']} reaches no container"
        template = _template(dep, claim["name"])
        for req in template["spec"]["spec"]["devices"]["requests"]:
            assert req["exactly"]["deviceClassName"] in device_classes()
    assert set(referenced) <= {c["name"] for c in pod["resourceClaims"]}
    assert dep["spec"]["selector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("dep", DEPLOYMENTS, ids=lambda d: d["metadata"]["name"])
def test_a_netdev_claim_reaches_exactly_one_container(dep):
    pod = _pod(dep)
    users: dict[str, list[str]] = {}
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        for ref in (container.get("resources") or {}).get("claims") or []:
            users.setdefault(ref["name"], []).append(container["name"])
    for claim, containers in users.items():
        classes = {
            r["exactly"]["deviceClassName"]
            for r in _template(dep, claim)["spec"]["spec"]["devices"]["requests"]
        }
        if classes & NETDEV_CLASSES:
            assert len(containers) == 1, f"{claim} is in {containers}: runc moves it once"


@pytest.mark.parametrize("dep", DEPLOYMENTS, ids=lambda d: d["metadata"]["name"])
def test_containers_keep_running(dep):
    for container in _pod(dep)["containers"]:
        assert container["image"].split(":")[-1] not in ("", "latest"), "pin the image"
        command = " ".join(container.get("command", []) + container.get("args", []))
        assert "sleep" in command, "a long-running command keeps the pod up for checks"
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate", "static addresses: no overlap"


def test_multi_nic_pod_has_a_macvlan_data_and_a_dummy_control_interface():
    (dep,) = [d for d in DEPLOYMENTS if d["metadata"]["name"] == "multi-nic"]
    claims = {c["name"]: c["resourceClaimTemplateName"] for c in _pod(dep)["resourceClaims"]}
    assert claims == {"data-net": "data-net", "control-net": "control-net"}

    def netdev(claim):
        (config,) = _template(dep, claim)["spec"]["spec"]["devices"]["config"]
        return config["opaque"]["parameters"]["netdev"]

    assert (netdev("data-net")["kind"], netdev("data-net")["interfaceName"]) == ("macvlan", "data0")
    assert (netdev("control-net")["kind"], netdev("control-net")["interfaceName"]) == (
        "dummy",
        "ctrl0",
    )


def test_interface_names_and_addresses_do_not_clash():
    """Within a pod names must differ; across examples addresses differ (they may share a
    node and, for macvlan, an L2 segment)."""
    nc = network_check()
    exps = nc.expectations(
        nc.load_docs(EXAMPLE_FILES), nc.class_configs(nc.load_docs([CLASS_FILE]))
    )
    by_pod: dict[str, list[str]] = {}
    addresses: list[str] = []
    for exp in exps:
        if exp.interface:
            by_pod.setdefault(exp.deployment, []).append(exp.interface)
        addresses.extend(exp.addresses)
    for dep, names in by_pod.items():
        assert len(names) == len(set(names)), dep
    assert len(addresses) == len(set(addresses)), addresses
    wanted = {(e.deployment, e.interface) for e in exps if e.interface}
    assert wanted == {
        ("dummy-net1", "net1"),
        ("macvlan-data0", "data0"),
        ("roce", "roce0"),
        ("multi-nic", "data0"),
        ("multi-nic", "ctrl0"),
    }


@pytest.mark.parametrize("dep", DEPLOYMENTS, ids=lambda d: d["metadata"]["name"])
def test_netdev_only_claims_are_attached_by_an_init_container(dep):
    """An app container that references a netdev claim cannot restart (runc would look
    for the host interface again), so plain network claims go to an init container."""
    pod = _pod(dep)
    app_claims = {
        ref["name"]
        for c in pod.get("containers", [])
        for ref in (c.get("resources") or {}).get("claims") or []
    }
    for claim in pod["resourceClaims"]:
        classes = {
            r["exactly"]["deviceClassName"]
            for r in _template(dep, claim["name"])["spec"]["spec"]["devices"]["requests"]
        }
        if classes <= {"virtual-network", "network-devices"}:
            assert claim["name"] not in app_claims, f"{claim['name']} is on the app container"
