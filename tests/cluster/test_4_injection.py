"""Both injection modes, from inside the pods: node 1's containerd runs NRI (the
driver picks it: auto), and a container that restarts keeps its NIC; node 2's has NRI
off, and the driver there hands interfaces over in CDI netDevices."""

from __future__ import annotations

from localcluster.podnet import via_exec
from tests.node.scenario import pod, template
from tests.support.waiting import wait_for

from .chart import ChartCluster, pinned

NETDEV = {"kind": "veth", "interfaceName": "net1", "mtu": 1400, "ipAddresses": ["198.51.100.7/24"]}


def _mode(chart: ChartCluster, node: str) -> str:
    log = chart.driver_log(chart.driver_pod(node))
    [line] = [line for line in log.splitlines() if 'msg="injection mode"' in line]
    return line.split(" mode=")[1].split()[0]


def test_nri_node_keeps_the_nic_of_a_restarting_container(chart: ChartCluster, kns: str):
    node = chart.node_names[0]
    assert _mode(chart, node) == "nri"
    chart.api.apply(template("veth", NETDEV), kns)
    # The app itself references the claim and exits after a while: it restarts.
    restarting = pod("p", ["veth"], from_init=False, app_command=["sh", "-c", "sleep 2; exit 1"])
    chart.api.apply(pinned(restarting, node), kns)

    def restarted() -> bool:
        statuses = (chart.api.pod(kns, "p").get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0].get("restartCount", 0) >= 2

    wait_for(
        "the app to restart twice", restarted, 90, log=lambda: chart.api.describe_pod(kns, "p")
    )
    chart.api.wait_running(kns, "p")
    seen = via_exec(chart.kubectl, kns, "p", "app")
    assert seen["net1"].mtu == 1400 and seen["net1"].addresses == ("198.51.100.7/24",), seen


def test_cdi_node_hands_the_nic_over_in_netdevices(chart: ChartCluster, kns: str):
    node = chart.node_names[1]
    assert _mode(chart, node) == "cdi"
    chart.api.apply(template("veth", NETDEV), kns)
    chart.api.apply(pinned(pod("p", ["veth"]), node), kns)
    chart.api.wait_running(kns, "p")
    seen = via_exec(chart.kubectl, kns, "p", "app")
    assert seen["net1"].mtu == 1400 and seen["net1"].addresses == ("198.51.100.7/24",), seen
    specs = chart.held(node).specs
    [claim] = chart.api.claims(kns)
    assert claim["metadata"]["uid"] in specs
