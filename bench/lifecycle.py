"""Figures 3, 5 and 6: restart recovery with 1,000 records, memory over time, start-up."""

from __future__ import annotations

import statistics
import subprocess
import time
from typing import Any

import grpc

from bench.client import Kubelet, get_info
from bench.env import Env, environment, rss_kb
from tests.support import nriruntime
from tests.support.driverproc import RUNNING


def _until_registered(env: Env, *args: str) -> tuple[float, Any]:
    """Exec a driver; seconds until its registration socket answers GetInfo."""
    start = time.perf_counter()
    d = env.driver(*args, wait=False)
    while True:
        if d.reg_socket.exists():
            try:
                get_info(d.reg_socket, timeout=1)
                return time.perf_counter() - start, d
            except grpc.RpcError:
                pass
        if d.proc is not None and d.proc.poll() is not None:
            raise RuntimeError(f"driver exited:\n{d.log()}")
        time.sleep(0.002)


def startup(runs: int) -> dict[str, Any]:
    """Exec to registration socket with no records: CDI mode, and NRI mode with the NRI
    stand-in accepting the plugin (the kubelet is served before the runtime answers)."""
    out: dict[str, Any] = {"runs": runs}
    with environment("startup") as env, nriruntime.fake_runtime() as runtime:
        for mode, args in (
            ("cdi", ("--injection", "cdi")),
            ("nri", ("--injection", "nri", "--nri-socket", str(runtime.path))),
        ):
            times = []
            for _ in range(runs):
                t, d = _until_registered(env, *args)
                times.append(t)
                d.stop()
            out[mode] = {"median_s": statistics.median(times), "max_s": max(times)}
    return out


def restart(records: int, runs: int) -> dict[str, Any]:
    """With N prepared claims on disk: exec to GetInfo, and to the first idempotent prepare."""
    with environment("restart") as env:
        d = env.driver()
        kubelet = Kubelet(d.service_socket)
        claims = [env.claim({"kind": "veth"}) for _ in range(records)]
        for i in range(0, records, 100):
            kubelet.prepare(claims[i : i + 100])
        kubelet.close()
        d.stop()
        to_socket, to_prepare = [], []
        for _ in range(runs):
            start = time.perf_counter()
            t, d = _until_registered(env)
            to_socket.append(t)
            kubelet = Kubelet(d.service_socket)
            kubelet.prepare([claims[0]])
            to_prepare.append(time.perf_counter() - start)
            kubelet.close()
            d.stop()
    return {
        "records": records,
        "runs": runs,
        "to_registration_s": statistics.median(to_socket),
        "to_first_prepare_s": statistics.median(to_prepare),
    }


def memory(cycles: int, batch: int) -> dict[str, Any]:
    """RSS idle, with 128 prepared claims, and across prepare/unprepare cycles."""
    with environment("memory") as env:
        d = env.driver()
        assert d.proc is not None
        pid = d.proc.pid
        time.sleep(3)  # the first publish and the first link-watch wake-up
        idle = rss_kb(pid)
        kubelet = Kubelet(d.service_socket)
        held = [env.claim({"kind": "veth"}) for _ in range(128)]
        kubelet.prepare(held)
        with_128 = rss_kb(pid)
        kubelet.unprepare(held)
        samples = []
        done = 0
        while done < cycles:
            claims = [env.claim({"kind": "veth"}) for _ in range(batch)]
            kubelet.prepare(claims)
            kubelet.unprepare(claims)
            with env.fake.lock:  # the API stand-in must not grow either
                for c in claims:
                    env.fake.claims.pop((c["metadata"]["namespace"], c["metadata"]["name"]))
            done += batch
            if done % 1000 == 0:
                samples.append((done, rss_kb(pid)))
        kubelet.close()
    warm = samples[0][1]
    return {
        "idle_mb": idle / 1024,
        "with_128_mb": with_128 / 1024,
        "after_cycles_mb": samples[-1][1] / 1024,
        "cycles": cycles,
        "growth_from_idle_mb": (samples[-1][1] - idle) / 1024,
        "growth_after_first_1000_mb": (samples[-1][1] - warm) / 1024,
        "samples": [{"cycles": c, "rss_mb": r / 1024} for c, r in samples],
    }


def leftover_drivers() -> list[int]:
    """Driver processes still alive (should be none)."""
    return [
        pid
        for pid in RUNNING
        if subprocess.run(["kill", "-0", str(pid)], capture_output=True, check=False).returncode
        == 0
    ]
