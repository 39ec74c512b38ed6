"""deploy/multi-nic-deployment.yaml on the real node: one pod, two claims, both
interfaces in the pod with the example's settings, each claim's status filled."""

from __future__ import annotations

from localcluster.driver import HostDriver
from localcluster.examples import adapt
from localcluster.manifests import DEPLOY
from localcluster.podnet import via_exec
from tests.e2e.cluster import example_objects, template_config
from tests.support import kernel
from tests.support.waiting import wait_for

from .cluster import NodeCluster


def test_multi_nic_example_gets_both_interfaces(cluster: NodeCluster, driver: HostDriver, kns):
    docs, _notes = adapt(example_objects(DEPLOY / "multi-nic-deployment.yaml", kns), kernel.missing)
    cluster.apply(docs, kns)
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    want = {name: template_config(t) for name, t in templates.items()}  # data-net, control-net

    pod = wait_for(
        "the multi-nic pod to run",
        lambda: next(
            (
                p
                for p in cluster.pods(kns, "app=multi-nic")
                if p["status"].get("phase") == "Running"
            ),
            None,
        ),
        90,
    )
    name = pod["metadata"]["name"]
    inside = via_exec(cluster.local.kubectl, kns, name, "app")
    for config in want.values():
        iface = inside[config["interfaceName"]]
        assert iface.mtu == config["mtu"], iface
        assert set(iface.addresses) == set(config["ipAddresses"]), iface

    claims = cluster.pod_claim_names(pod)
    assert len(claims) == 2
    seen = {}
    for claim_name in claims:
        [device] = cluster.claim(kns, claim_name)["status"]["devices"]
        nd = device["networkData"]
        seen[nd["interfaceName"]] = nd
        assert nd["hardwareAddress"] == inside[nd["interfaceName"]].mac
        assert nd["ips"] == want_ips(want, nd["interfaceName"])
    assert set(seen) == {c["interfaceName"] for c in want.values()}


def want_ips(want: dict, interface: str) -> list[str]:
    [config] = [c for c in want.values() if c["interfaceName"] == interface]
    return list(config["ipAddresses"])
