"""Resident memory over pod churn in NRI mode: the real daemon, its real sockets.

The bench plays the kubelet (prepare, unprepare over the DRA socket) and containerd (the
NRI stand-in of tests/support/nriruntime.py: RunPodSandbox, StopPodSandbox,
RemovePodSandbox), with a throw-away network namespace per pod sandbox, and reads the
daemon's RSS every `every` pods. Memory is measured, never asserted.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from bench.client import Kubelet
from bench.env import environment, rss_kb
from dradriver.nri.proto import api_pb2
from tests.support import netns, nriruntime
from tests.support.fakeapi import allocated_claim, opaque

RUN, STOP, REMOVE = api_pb2.RUN_POD_SANDBOX, api_pb2.STOP_POD_SANDBOX, api_pb2.REMOVE_POD_SANDBOX
NETDEV = {"kind": "veth", "interfaceName": "net1", "ipAddresses": ["10.77.0.2/24"]}


def _claim(pod_uid: str) -> dict[str, Any]:
    result = {
        "request": "nic",
        "pool": "node-a",
        "device": "netdev-virtual",
        "shareID": str(uuid.uuid4()),
    }
    config = [opaque({"type": "netdev", "netdev": NETDEV})]
    return allocated_claim(f"c-{uuid.uuid4().hex[:10]}", [result], config=config, pods=[pod_uid])


def churn(pods: int, every: int) -> dict[str, Any]:
    """`pods` pod lifecycles one after another; RSS (kB) at 0 and every `every` pods."""
    samples: list[tuple[int, int]] = []
    started = time.monotonic()
    with environment("churn") as env, nriruntime.fake_runtime() as runtime:
        d = env.driver(
            "--injection", "nri", "--nri-socket", str(runtime.path), "--claim-address-ranges",
            "10.77.0.0/16", wait=False,
        )  # fmt: skip
        conn = runtime.accept()  # (the daemon waits for its registration's answer)
        d.wait_ready()
        conn.configure()
        conn.synchronize([])
        kubelet = Kubelet(d.service_socket)
        assert d.proc is not None
        samples.append((0, rss_kb(d.proc.pid)))
        for i in range(1, pods + 1):
            pod_uid = str(uuid.uuid4())
            claim = _claim(pod_uid)
            env.fake.add_claim(claim)
            kubelet.prepare([claim])
            ns = netns.create("churn")
            try:
                pod = nriruntime.pod(pod_uid, f"/run/netns/{ns}")
                conn.state_change(RUN, pod)
                conn.state_change(STOP, pod)
            finally:
                netns.delete(ns)
            conn.state_change(REMOVE, nriruntime.pod(pod_uid, ""))
            kubelet.unprepare([claim])
            with env.fake.lock:  # the stand-in's memory is not the driver's
                del env.fake.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])]
            if i % every == 0:
                samples.append((i, rss_kb(d.proc.pid)))
        kubelet.close()
    first = samples[0][1]
    return {
        "pods": pods,
        "rss_kb": samples,
        "growth_kb": samples[-1][1] - first,
        "seconds": round(time.monotonic() - started, 1),
    }


def rows(figures: dict[str, Any] | None) -> list[str]:
    """The table's row: RSS at each sample."""
    if not figures:
        return []
    curve = " / ".join(f"{kb / 1024:.2f}" for _, kb in figures["rss_kb"])
    at = "/".join(str(n) for n, _ in figures["rss_kb"])
    return [
        f"| NRI pod churn, RSS at {at} pods (MB) | {curve} ({figures['growth_kb']:+d} kB) "
        "| | | flat |"
    ]
