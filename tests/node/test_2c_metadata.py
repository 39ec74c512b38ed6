"""Device metadata (KEP-5304) on the real node: the container that references a claim
reads its file at the standard path, and finds the interface name, MAC and addresses it
has, in both injection modes; the file goes with the claim."""

from __future__ import annotations

import json

import pytest

from localcluster.podnet import via_exec

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import pod, template

PATH = (
    "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/meta/nic/"
    "dra.example.com-metadata.json"
)
VETH = {"kind": "veth", "interfaceName": "meta1", "ipAddresses": ["198.51.100.71/24"]}


@pytest.mark.parametrize("injection", ["nri", "cdi"])
def test_the_container_reads_its_interface_from_the_metadata_file(
    cluster: NodeCluster, drivers, kns: str, injection: str
):
    drivers.start("--injection", injection)
    cluster.apply([template("meta", VETH), pod("p", ["meta"], from_init=False)], kns)
    running = cluster.wait_running(kns, "p")
    text = cluster.local.kubectl("exec", "-n", kns, "p", "-c", "app", "--", "cat", PATH).stdout
    first, _ = json.JSONDecoder().raw_decode(text)  # the newest version comes first
    assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    [claim_name] = cluster.pod_claim_names(running)
    assert (first["metadata"]["name"], first["podClaimName"]) == (claim_name, "meta")
    [device] = first["requests"][0]["devices"]
    inside = via_exec(cluster.local.kubectl, kns, "p", "app")["meta1"]
    assert device["networkData"] == {
        "interfaceName": "meta1",
        "ips": ["198.51.100.71/24"],
        "hardwareAddress": inside.mac,
    }
    assert device["attributes"]["kind"] == {"string": "virtual"}
    cluster.delete_and_wait(kns, "p")
    host_dir = cluster.local.lay.on_host(cluster.local.lay.kubelet_plugins)
    assert not list(host_dir.glob(f"dra.example.com/dra-device-metadata/{kns}_*"))
    assert not driver_state(cluster.local.lay).records
