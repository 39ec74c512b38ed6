"""A macvlan made by the CNI plugin (a claim of type cni) beside the native macvlan kind:
prepare, then RunPodSandbox, StopPodSandbox with RemovePodSandbox, unprepare, in ms.

In process, on the real kernel, in throw-away namespaces (one for the node with the
parent p0, one per pod sandbox), in the NRI mode; the cni claim runs Debian's macvlan
and static IPAM plugins from /usr/lib/cni (an exec each, which is what it costs)."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dradriver.apiserver.inventory import Inventory
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import NRI, ClaimRef
from dradriver.kernel import netlink
from dradriver.nri import PodSandbox
from dradriver.nrimode.sandboxes import PodSandboxes
from dradriver.state.recordstore import RecordStore
from tests.support import netns
from tests.support.fakeapi import allocated_claim, opaque
from tests.support.handlers import context
from tests.support.statenode import REGISTRY, SCHEMA, Claims

BIN = Path("/usr/lib/cni")
POD_UID = "5a0c6f5e-0000-4000-8000-0000000000cc"
ADDRESS = "10.210.0.2/24"
CNI = {
    "cniVersion": "1.0.0",
    "name": "bench-macvlan",
    "plugins": [
        {
            "type": "macvlan",
            "master": "p0",
            "mode": "bridge",
            "ipam": {"type": "static"},
            "capabilities": {"ips": True},
        }
    ],
}
CONFIGS = {
    "native macvlan": {
        "type": "netdev",
        "netdev": {"kind": "macvlan", "parent": "p0", "interfaceName": "net1",
                   "ipAddresses": [ADDRESS]},
    },
    "macvlan via CNI": {
        "type": "cni",
        "cni": {"config": json.dumps(CNI), "interfaceName": "net1", "ips": [ADDRESS]},
    },
}  # fmt: skip
STEPS = ("prepare", "run_sandbox", "stop_remove", "unprepare")


def _round(root: Path, params: dict[str, Any]) -> dict[str, float]:
    """One claim through its life; each step's milliseconds."""
    ctx = context(
        sysfs_root=root / "sys",
        claim_address_ranges=("10.0.0.0/8",),
        virtual_parents=("p0",),
        cni_bin_dir=BIN,
        cni_plugins=("macvlan", "static"),
        cni_state_dir=root / "cni",
    )
    api = Claims()
    uid = str(uuid.uuid4())
    result = {"request": "nic", "pool": "node-a", "device": "netdev-virtual",
              "shareID": str(uuid.uuid4())}  # fmt: skip
    api.fake.add_claim(allocated_claim("c", [result], uid=uid, config=[opaque(params)],
                                       pods=[POD_UID]))  # fmt: skip
    preparer = Preparer(
        context=ctx, cdi_dir=root / "cdi", records=RecordStore(root / "state"),
        registry=REGISTRY, schema=SCHEMA, inventory=Inventory(REGISTRY, ctx), api=api,
        link_deletion_delay=0,
    )  # fmt: skip
    preparer.injection = NRI
    ref = ClaimRef("default", "c", uid)
    sandboxes = PodSandboxes(preparer.lifecycle, preparer.gate)
    pod_ns = netns.create("cnib")
    pod = PodSandbox("s1", POD_UID, "p", "default", f"/run/netns/{pod_ns}")
    out: dict[str, float] = {}
    try:
        start = time.perf_counter()
        outcome = preparer.prepare([ref])[uid]
        out["prepare"] = (time.perf_counter() - start) * 1e3
        if outcome.error is not None:
            raise RuntimeError(outcome.error)
        start = time.perf_counter()
        sandboxes.run_pod_sandbox(pod)
        out["run_sandbox"] = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        sandboxes.stop_pod_sandbox(pod)
        netns.delete(pod_ns)
        sandboxes.remove_pod_sandbox(PodSandbox("s1", POD_UID, "p", "default", ""))
        out["stop_remove"] = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        outcome = preparer.unprepare([ref])[uid]
        out["unprepare"] = (time.perf_counter() - start) * 1e3
        if outcome.error is not None:
            raise RuntimeError(outcome.error)
    finally:
        netns.delete(pod_ns)
        preparer.reaper.drain(5)
    return out


def cni_attach(rounds: int) -> dict[str, Any]:
    """Per config: each step's median and spread over `rounds` rounds (ms)."""
    out: dict[str, Any] = {}
    if not (BIN / "macvlan").exists():
        return {"skipped": f"no CNI plugins in {BIN} (Debian's containernetworking-plugins)"}
    node = netns.create("bench-cni")
    try:
        netns.ip(node, "link", "add", "p0", "type", "veth", "peer", "name", "q0")
        netns.ip(node, "link", "set", "p0", "up")
        with netns.inside(node):
            netlink.close()  # this thread's socket reopens in the node's namespace
            for name, params in CONFIGS.items():
                runs = []
                for _ in range(rounds):
                    with tempfile.TemporaryDirectory(prefix="drab-cni-") as tmp:
                        (Path(tmp) / "cdi").mkdir()
                        runs.append(_round(Path(tmp), params))
                out[name] = {
                    step: {
                        "median_ms": round(statistics.median(r[step] for r in runs), 2),
                        "min_ms": round(min(r[step] for r in runs), 2),
                        "max_ms": round(max(r[step] for r in runs), 2),
                    }
                    for step in STEPS
                }
            netlink.close()
    finally:
        netns.delete(node)
    return out


def rows(figures: dict[str, Any] | None) -> list[str]:
    """The table's rows: each config's steps, median (min-max) ms."""
    if not figures:
        return []
    if "skipped" in figures:
        return [f"| macvlan via CNI beside native | skipped: {figures['skipped']} | | | |"]
    lines = []
    for name, steps in figures.items():
        parts = ", ".join(
            f"{step} {s['median_ms']:.1f} ({s['min_ms']:.1f}-{s['max_ms']:.1f})"
            for step, s in steps.items()
        )
        lines.append(f"| {name}: median (min-max) ms | {parts} | | | |")
    return lines
