"""Claims of type cni with the chart and the image: the release asked to install the
NetworkAttachmentDefinition CRD, the NADs of deploy/cni-examples.yaml applied unchanged,
their pods on the NRI node get their networks from the plugins the image ships; on the
node where containerd's NRI is off (CDI mode) such a claim is refused, saying why."""

from __future__ import annotations

from typing import Any

from localcluster.helmrelease import operator_values
from localcluster.podnet import via_exec
from tests.e2e.cluster import example_objects
from tests.support import kernel
from tests.support.cniexamples import EXAMPLES, EXPECTED
from tests.support.waiting import wait_for

from .chart import ChartCluster, host_path, pinned


def _objects(kns: str, names: set[str], node: str) -> list[dict[str, Any]]:
    out = []
    for obj in example_objects(EXAMPLES, kns):
        if obj["metadata"]["name"].removeprefix("cni-") not in names:
            continue
        out.append(pinned(obj, node) if obj["kind"] == "Pod" else obj)
    return out


def test_example_networks_from_the_chart_and_image(chart: ChartCluster, kns):
    nri_node, cdi_node = chart.node_names[0], chart.node_names[-1]
    with chart.installed({**operator_values(chart.image), "cni": {"installCRD": True}}):
        wait_for(
            "the NetworkAttachmentDefinition API",
            lambda: chart.api.get("/apis/k8s.cni.cncf.io/v1", missing_ok=True),
            60,
        )
        runnable = {n for n, (_, feature) in EXPECTED.items() if not kernel.missing(feature)}
        chart.api.apply(_objects(kns, runnable, nri_node), kns)
        node = chart.node(nri_node)
        for name in sorted(runnable):
            chart.api.wait_running(kns, f"cni-{name}")
            net1 = via_exec(chart.kubectl, kns, f"cni-{name}", "app")["net1"]
            [address] = net1.addresses
            assert address.startswith(EXPECTED[name][0]), (name, address)
        leases = host_path(node, "/var/lib/cni/networks/macvlan-conf")
        assert sorted(p.name for p in leases.iterdir() if p.name[0].isdigit())

        # The node whose runtime has NRI off prepares claims in CDI mode: refused.
        [refused] = [o for o in _objects(kns, {"macvlan-conf"}, cdi_node) if o["kind"] == "Pod"]
        refused["metadata"]["name"] = "on-cdi-node"
        chart.api.apply(refused, kns)

        def said() -> str | None:
            for ev in chart.api.events(kns, "on-cdi-node"):
                if "needs the NRI injection mode" in ev.get("message", ""):
                    return str(ev["message"])
            return None

        message = wait_for("the CDI node to refuse the cni claim", said, 90)
        assert "config $.cni.kind" in message, message
        for name in sorted(runnable):
            chart.api.delete_and_wait(kns, f"cni-{name}")
        assert not [p.name for p in leases.iterdir() if p.name[0].isdigit()]
