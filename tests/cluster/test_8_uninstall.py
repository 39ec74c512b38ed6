"""`helm uninstall` removes everything the chart made; once the claims are gone no
node holds an interface, CDI spec or record of the driver. Installed again after, as
an operator would, for the tests that follow."""

from __future__ import annotations

from localcluster.helmrelease import NAMESPACE, operator_values
from tests.e2e.cluster import SLICES
from tests.node.scenario import pod, template
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .chart import ChartCluster, pinned


def test_uninstall_removes_the_release_and_leaves_no_trace(chart: ChartCluster, kns: str):
    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1"}), kns)
    for node in chart.node_names:
        chart.api.apply(pinned(pod(f"p-{node}", ["veth"]), node), kns)
    for node in chart.node_names:
        chart.api.wait_running(kns, f"p-{node}")
    made = [
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        for o in chart.release.manifest()
    ]
    # Claims first (the driver unprepares them), then the release.
    for node in chart.node_names:
        chart.api.delete_and_wait(kns, f"p-{node}")
    chart.wait_nothing_held()
    chart.release.uninstall()
    wait_for("the driver pods to go", lambda: not chart.driver_pods(), 90)
    left = []
    for kind, name, namespace in made:
        res = chart.kubectl(
            "get", kind, name, *(["-n", namespace] if namespace else []), check=False
        )
        if res.returncode == 0:
            left.append((kind, name))
    assert not left, left
    wait_for(
        "the driver's slices to go",
        lambda: not [s for s in chart.api.get(SLICES)["items"] if s["spec"]["driver"] == DRIVER],
        60,
    )
    for node in chart.node_names:
        held = chart.held(node)
        assert not (held.links or held.specs or held.records or held.untagged), (node, held)
    # Back, for the tests that follow.
    chart.release.install(operator_values(chart.image))
    chart.wait_rollout()
    assert chart.api.get(f"/api/v1/namespaces/{NAMESPACE}")
