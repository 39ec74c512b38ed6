"""A NIC asked for as an extended resource (KEP-5004) on the real node: the chart's
deviceClasses.extendedResource class, and deploy/selection-examples.yaml's pod that sets
`resources.limits` instead of a claim; the scheduler makes the claim, the container gets
the class config's interface."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from localcluster.driver import HostDriver
from localcluster.manifests import DEPLOY
from localcluster.podnet import via_exec
from tests.e2e.cluster import example_objects
from tests.support.helm import helm_binary
from tests.support.waiting import wait_for

from .cluster import NodeCluster

CHART = DEPLOY / "helm" / "dra-driver"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def _extended_class() -> dict[str, Any]:
    """The chart's extended-resource DeviceClass, rendered with it enabled."""
    out = subprocess.run(
        [
            str(helm_binary()), "template", "dra-driver", str(CHART), "--namespace", "dra-system",
            "--set", "deviceClasses.extendedResource.enabled=true",
            "--show-only", "templates/resourceclass/deviceclasses.yaml",
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    [found] = [d for d in yaml.safe_load_all(out) if d and d["spec"].get("extendedResourceName")]
    return dict(found)


@pytest.fixture
def extended_class(cluster: NodeCluster) -> Iterator[dict[str, Any]]:
    obj = _extended_class()
    cluster.apply([obj])
    try:
        yield obj
    finally:
        cluster.delete(f"{CLASSES}/{obj['metadata']['name']}")


def test_a_container_gets_a_nic_by_resources_limits(
    cluster: NodeCluster, driver: HostDriver, kns: str, extended_class: dict[str, Any]
):
    [pod] = [
        d
        for d in example_objects(DEPLOY / "selection-examples.yaml", kns)
        if d["kind"] == "Pod" and d["metadata"]["name"] == "nic-by-limits"
    ]
    resource = extended_class["spec"]["extendedResourceName"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {resource: 1}
    pod["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    cluster.apply([pod], kns)
    running = cluster.wait_running(kns, "nic-by-limits")
    # The claim the scheduler made for the pod, named in its status.
    claim_name = running["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = cluster.claim(kns, claim_name)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"].startswith("netdev-virtual")
    inside = via_exec(cluster.local.kubectl, kns, "nic-by-limits", "app")
    assert "net1" in inside  # the class config's veth
    [status] = wait_for(
        "the claim's status.devices",
        lambda: (cluster.claim(kns, claim_name).get("status") or {}).get("devices"),
        30,
    )
    assert status["networkData"]["interfaceName"] == "net1"
    assert status["networkData"]["hardwareAddress"] == inside["net1"].mac
