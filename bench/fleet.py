"""A simulated fleet: N driver instances, each for a Node of its own, against one real
control plane (the e2e tier's: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, all on loopback).

Each instance runs as a host process in a network namespace of its own (as the e2e
tier's node), with the driver's service-account token bound to a stand-in pod on its
Node; there is no kubelet: registration and prepares go over the instances' sockets.
What is measured: the drivers' requests (kube-apiserver's audit log) and
kube-apiserver's CPU, at rest and while every instance prepares and unprepares a claim
over and over; the time until all N pools are published at start; and the time until
all N are back after every slice of the driver is deleted at once. Bounded in time,
everything stopped and removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.env import rss_kb
from localcluster.audit import DRIVER_USER as USER
from localcluster.binaries import default_bin_dir, missing_binaries
from localcluster.controlplane import ControlPlane
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import forwarded, node_machine
from tests.e2e.test_3_capacity import claim_pod, veth_template
from tests.support.driverproc import DriverProcess
from tests.support.waiting import wait_for

NAMESPACE = "fleet"
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _rates(counts: dict[str, int], seconds: float, nodes: int) -> dict[str, Any]:
    total = sum(counts.values())
    return {
        "requests": dict(sorted(counts.items())),
        "total": total,
        "per_second": round(total / seconds, 3),
        "per_node_hour": round(total / seconds / nodes * 3600, 2),
    }


def fleet(nodes: int, idle_seconds: float, churn_seconds: float) -> dict[str, Any]:
    """Start `nodes` instances, then measure at rest, under churn and a mass heal."""
    if missing := missing_binaries(default_bin_dir()):
        return {"skipped": f"{', '.join(missing)} not built: run hack/build-k8s.sh"}
    workdir = tempfile.mkdtemp(prefix="dra-fleet-")
    with ControlPlane(workdir) as cp, contextlib.ExitStack() as stack:
        cluster = Cluster(cp, "fleet-0")
        cluster.setup()
        cluster.create_namespace(NAMESPACE)
        apiserver = cp.components["kube-apiserver"].proc
        assert apiserver is not None
        port = int(cp.server.rsplit(":", 1)[1])
        drivers: list[DriverProcess] = []
        names = [f"fleet-{i}" for i in range(nodes)]
        started = time.monotonic()
        for i, name in enumerate(names):
            kubeconfig = cluster.driver_kubeconfig if i == 0 else cluster.add_node(name)[1]
            ns, root, fwd = stack.enter_context(node_machine(port))
            d = DriverProcess(
                root,
                ns,
                forwarded(kubeconfig, fwd, root / "kubeconfig"),
                node=name,
                args=("--publish-interval", "60", "--log-level", "warning"),
            )
            stack.callback(d.stop)
            drivers.append(d.start(wait=False))

        def published() -> bool:
            got = cp.request("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
            return len({s["spec"]["nodeName"] for s in got}) >= nodes

        wait_for("every instance's slice", published, 60 + nodes)
        to_published = time.monotonic() - started
        time.sleep(12)  # past the one DeviceClass check of each (10 s after its start)

        out: dict[str, Any] = {"nodes": nodes, "all_published_s": round(to_published, 1)}
        out["idle"] = _window(cp, apiserver.pid, idle_seconds, nodes, lambda: None)
        out["churn"] = _churn(cluster, drivers, names, cp, apiserver.pid, churn_seconds)
        out["heal"] = _heal(cp, published)
        out["driver_rss_mb"] = round(
            statistics.median(rss_kb(d.proc.pid) for d in drivers if d.proc is not None) / 1024, 1
        )
    return out


def _window(cp: ControlPlane, pid: int, seconds: float, nodes: int, during: Any) -> dict[str, Any]:
    """The drivers' requests and kube-apiserver's CPU over `seconds` while `during` runs."""
    cp.audit.mark()
    cpu = _cpu_seconds(pid)
    start = time.monotonic()
    finish = during()
    while time.monotonic() - start < seconds:
        time.sleep(0.2)
    extra = finish() if finish is not None else {}  # stopped before anything is read
    elapsed = time.monotonic() - start
    out = _rates(cp.audit.counts(USER), elapsed, nodes)
    out["apiserver_cpu_percent"] = round(100 * (_cpu_seconds(pid) - cpu) / elapsed, 1)
    out["seconds"] = round(elapsed, 1)
    return out | extra


def _churn(
    cluster: Cluster,
    drivers: list[DriverProcess],
    names: list[str],
    cp: ControlPlane,
    pid: int,
    seconds: float,
) -> dict[str, Any]:
    """Every instance prepares and unprepares one claim (a pod bound to its Node by the
    real scheduler) in a loop for `seconds`."""
    cluster.apply(veth_template(NAMESPACE))
    for name in names:
        pod = claim_pod(NAMESPACE, name)
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": name}
        cluster.apply(pod)
    claims = []
    for name in names:
        [claim] = cluster.kubelet_claims(cluster.wait_bound(NAMESPACE, name, 120))
        claims.append(claim)
    time.sleep(1)
    stop = threading.Event()
    cycles = [0] * len(drivers)
    errors: list[str] = []

    def loop(i: int) -> None:
        d, claim = drivers[i], claims[i]
        uid = claim["metadata"]["uid"]
        try:
            while not stop.is_set():
                for call in (d.prepare, d.unprepare):
                    entry = call([claim]).claims[uid]
                    if entry.error:
                        errors.append(entry.error)
                        return
                cycles[i] += 1
        except Exception as exc:  # counted and shown, never a silently shorter run
            errors.append(f"{d.node}: {exc}")

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(drivers))]

    def during() -> Any:
        for t in threads:
            t.start()

        def finish() -> dict[str, Any]:
            stop.set()
            for t in threads:
                t.join(30)
            return {"cycles": sum(cycles), "errors": errors[:3]}

        return finish

    out = _window(cp, pid, seconds, len(drivers), during)
    out["cycles_per_second"] = round(out["cycles"] / out["seconds"], 1)
    out["requests_per_cycle"] = round(out["total"] / max(1, out["cycles"]), 2)
    for name in names:
        cluster.finish_pod_deletion(NAMESPACE, name)
    return out


def _heal(cp: ControlPlane, published: Any) -> dict[str, Any]:
    """Delete every slice of the driver at once (what the kubelets do when they lose
    it); the time until every Node has its slice again, and what it cost."""
    cp.audit.mark()
    start = time.monotonic()
    cp.request(
        "DELETE",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Ddra.example.com",
    )
    wait_for("every slice back", published, 60)
    seconds = time.monotonic() - start
    return {
        "all_back_s": round(seconds, 2),
        "requests": dict(sorted(cp.audit.counts(USER).items())),
    }


def rows(r: dict[str, Any] | None) -> list[str]:
    """The fleet's rows of the bench table."""
    if not r:
        return []
    if "skipped" in r:
        return [f"| simulated fleet | skipped: {r['skipped']} | | | |"]
    n, idle, churn = r["nodes"], r["idle"], r["churn"]
    return [
        f"| fleet of {n}: all pools published from the first start (s) | "
        f"{r['all_published_s']} | | | |",
        f"| fleet of {n} at rest: driver requests per node-hour / kube-apiserver CPU | "
        f"{idle['per_node_hour']} / {idle['apiserver_cpu_percent']}% | | | "
        f"no periodic requests: {'met' if idle['total'] == 0 else 'MISSED'} |",
        f"| fleet of {n} churning: cycles/s, requests per claim lifecycle, kube-apiserver "
        f"CPU | {churn['cycles_per_second']}, {churn['requests_per_cycle']}, "
        f"{churn['apiserver_cpu_percent']}%"
        + (f", ERRORS: {'; '.join(churn['errors'])}" if churn["errors"] else "")
        + f" | | | <= 2: {'met' if churn['requests_per_cycle'] <= 2 else 'MISSED'} |",
        f"| fleet of {n}: every slice deleted at once, all back (s) | "
        f"{r['heal']['all_back_s']} | | | |",
    ]
