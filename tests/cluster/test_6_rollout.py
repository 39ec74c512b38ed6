"""A seamless rolling update through the DaemonSet, as an operator does it: `helm
upgrade` to a rebuilt image (a new tag), then `kubectl rollout restart`, while a loop
on each node keeps creating and deleting NIC pods. No prepare fails, no pod is stuck,
every node has a Ready (kubelet-registered) driver pod at every moment, claims
prepared before the update keep their NIC and unprepare cleanly afterwards (the new
pods carried the records over), and nothing is left."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from localcluster.driverimage import build_driver_image
from localcluster.helmrelease import NAMESPACE, operator_values
from localcluster.podnet import via_exec
from tests.node.scenario import pod, template

from .chart import ChartCluster, _ready, pinned

ROLLOUT_IMAGE = "dra-driver:rollout"
POD_TIMEOUT = 60.0
# Warnings the kubelet gives every pod here (no cluster DNS server): not the driver's.
IGNORED_WARNINGS = {"MissingClusterDNS"}


@dataclass
class Churn:
    """Pods created, run and deleted one after another on one node, until stopped."""

    chart: ChartCluster
    namespace: str
    node: str
    created: int = 0
    stuck: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        api, i = self.chart.api, 0
        while not self.stop.is_set():
            name = f"churn-{self.node.rsplit('-', 1)[1]}-{i}"
            i += 1
            try:
                api.apply(pinned(pod(name, ["veth"]), self.node), self.namespace)
                self.created += 1
                try:
                    api.wait_running(self.namespace, name, POD_TIMEOUT)
                except TimeoutError:
                    self.stuck.append(api.describe_pod(self.namespace, name))
                api.delete_and_wait(self.namespace, name, POD_TIMEOUT)
            except Exception as e:  # reported by the test, never lost in the thread
                self.errors.append(f"{name}: {e!r}")


@dataclass
class Watch:
    """Samples, until stopped, whether every node has a Ready driver pod."""

    chart: ChartCluster
    gaps: list[str] = field(default_factory=list)
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            pods = self.chart.driver_pods()
            for node in self.chart.node_names:
                mine = [p for p in pods if p["spec"].get("nodeName") == node]
                if not [
                    p for p in mine if _ready(p) and not p["metadata"].get("deletionTimestamp")
                ]:
                    self.gaps.append(
                        f"{time.strftime('%X')} {node}: {[p['metadata']['name'] for p in mine]}"
                    )
            self.samples += 1
            time.sleep(0.2)


def test_a_rolling_update_under_pod_churn_fails_no_prepare(chart: ChartCluster, kns: str, figures):
    image, seconds = build_driver_image(ROLLOUT_IMAGE)
    figures["rollout image build"] = f"{seconds:.1f} s"
    chart.local.import_image(image)
    chart.api.apply(template("veth", {"kind": "veth", "interfaceName": "net1", "mtu": 1280}), kns)
    for node in chart.node_names:
        chart.api.apply(pinned(pod(f"keeper-{node}", ["veth"]), node), kns)
    for node in chart.node_names:
        chart.api.wait_running(kns, f"keeper-{node}")
    old = {p["metadata"]["name"] for p in chart.driver_pods()}

    churns = [Churn(chart, kns, node) for node in chart.node_names]
    watch = Watch(chart)
    threads = [threading.Thread(target=w.run, daemon=True) for w in (*churns, watch)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        chart.release.install(operator_values(image), upgrade=True)
        chart.image = image
        chart.wait_rollout()
        upgraded = {p["metadata"]["name"] for p in chart.driver_pods()}
        assert not upgraded & old
        for p in chart.driver_pods():
            assert p["spec"]["containers"][0]["image"].endswith(ROLLOUT_IMAGE)
        chart.kubectl("-n", NAMESPACE, "rollout", "restart", "daemonset/dra-driver")
        time.sleep(1)
        chart.wait_rollout()
        assert not {p["metadata"]["name"] for p in chart.driver_pods()} & upgraded
        time.sleep(3)
    finally:
        for w in (*churns, watch):
            w.stop.set()
        for t in threads:
            t.join(timeout=2 * POD_TIMEOUT + 10)

    created = sum(c.created for c in churns)
    figures["rollout churn"] = f"{created} pods created, {watch.samples} samples"
    assert not [e for c in churns for e in c.errors], [e for c in churns for e in c.errors]
    assert not [s for c in churns for s in c.stuck], [s for c in churns for s in c.stuck]
    assert all(c.created >= 3 for c in churns), [(c.node, c.created) for c in churns]
    assert not watch.gaps, watch.gaps
    warnings = [
        f"{e['involvedObject']['name']}: {e.get('reason')}: {e.get('message')}"
        for e in chart.api.get(f"/api/v1/namespaces/{kns}/events")["items"]
        if e.get("type") == "Warning" and e.get("reason") not in IGNORED_WARNINGS
    ]
    figures["rollout failed prepares"] = str(len([w for w in warnings if "Prepare" in w]))
    assert not warnings, warnings
    for node in chart.node_names:
        assert via_exec(chart.kubectl, kns, f"keeper-{node}", "app")["net1"].mtu == 1280
        chart.api.delete_and_wait(kns, f"keeper-{node}")
