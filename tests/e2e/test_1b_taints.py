"""Device health as taints on the real control plane: the publisher, with the driver's
own credentials, marks an unhealthy device with the driver's taint; the scheduler
leaves a claim unallocated while its only device is tainted NoSchedule and allocates it
once the taint is gone; with NoExecute, kube-controller-manager evicts the pod using a
device that turns unhealthy."""

from __future__ import annotations

from typing import Any

from dradriver.apiserver.kubeapi import KubeApi
from dradriver.apiserver.publisher import Publisher
from dradriver.contract.hookspecs import Device
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

from .cluster import CONTROLLERS, Cluster
from .conftest import Node
from .test_3_capacity import claim_pod, unschedulable

KEY = f"{DRIVER}/unhealthy"


class _Nic:
    """An inventory of one host NIC whose health the test sets, as Publisher reads one."""

    fallback = False

    def __init__(self) -> None:
        self.healthy = True

    def refresh(self) -> list[Device]:
        attrs = {"type": "netdev", "kind": "host-device", "interfaceName": "eth9"}
        why = "" if self.healthy else "no carrier"
        return [Device("nic-eth9", attrs, healthy=self.healthy, health_message=why)]

    def devices(self) -> list[Device]:
        return self.refresh()

    def set_fallback(self, fallback: bool) -> None:
        raise AssertionError("not expected")


def _nic_template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-nic", "namespace": namespace},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {
                "deviceClassName": "network-devices"}}]}}
        },
    }  # fmt: skip


def _taints(cluster: Cluster) -> list[dict[str, Any]]:
    return list(cluster.devices().get("nic-eth9", {}).get("taints") or [])


def test_no_new_claim_on_a_tainted_device_and_an_evicted_pod_with_no_execute(
    cluster: Cluster, node: Node, kns: str
) -> None:
    nic = _Nic()
    api = KubeApi(str(cluster.driver_kubeconfig))
    publisher = Publisher(api, nic, DRIVER, cluster.node, 60.0, taint_effect="NoSchedule")  # type: ignore[arg-type]
    try:
        nic.healthy = False
        assert publisher.publish()
        [taint] = _taints(cluster)
        assert (taint["key"], taint["effect"]) == (KEY, "NoSchedule")
        assert taint.get("timeAdded")  # stamped by the API server
        assert not publisher.publish(force=True)  # the stamp is no change to write again

        cluster.apply([_nic_template(kns), claim_pod(kns, "p", "one-nic")])
        wait_for("the pod unschedulable", lambda: unschedulable(cluster, kns, "p"), CONTROLLERS)

        nic.healthy = True
        assert publisher.publish(force=False)
        assert _taints(cluster) == []
        bound = cluster.wait_bound(kns, "p")
        assert bound["spec"]["nodeName"] == cluster.node

        # Unhealthy again, now with NoExecute: the pod using the device is evicted.
        evicting = Publisher(api, nic, DRIVER, cluster.node, 60.0, taint_effect="NoExecute")  # type: ignore[arg-type]
        nic.healthy = False
        assert evicting.publish()
        assert [t["effect"] for t in _taints(cluster)] == ["NoExecute"]

        def evicted() -> dict[str, Any] | None:
            pod = cluster.get(f"/api/v1/namespaces/{kns}/pods/p", missing_ok=True)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return pod or {"gone": True}
            return None

        wait_for("the pod evicted", evicted, CONTROLLERS)
    finally:
        cluster.delete_slices()
