"""Figure 1 (prepare/unprepare latency per kind) and figure 2 (batches of virtual claims)."""

from __future__ import annotations

import json
import time
from typing import Any

from bench import floors
from bench.client import Kubelet
from bench.env import Env, environment
from bench.stats import summary, timed
from dradriver.contract.hookspecs import Device
from tests.support import netns
from tests.support.handlers import context, prepare
from tests.support.runtime import move_like_runc, return_to_host

KINDS: dict[str, dict[str, Any]] = {
    "veth": {"netdev": {"kind": "veth"}, "args": ()},
    "macvlan": {
        "netdev": {"kind": "macvlan", "parent": "mparent"},
        "args": ("--virtual-parents", "mparent"),
    },
    "host-device": {
        "netdev": {"kind": "host-device", "mtu": 1400},
        "args": ("--parent-interfaces", "nic*"),
    },
}


def _setup(env: Env, kind: str, n: int) -> None:
    if kind == "macvlan":
        netns.ip(env.ns, "link", "add", "mparent", "type", "veth", "peer", "name", "mpeer")
    if kind == "host-device":
        for i in range(n):
            netns.ip(env.ns, "link", "add", f"nic{i}", "type", "veth", "peer", "name", f"nicp{i}")


def _claims(env: Env, kind: str, n: int, offset: int = 0) -> list[dict[str, Any]]:
    spec = KINDS[kind]
    out = []
    for i in range(n):
        netdev = {**spec["netdev"], "interfaceName": f"c{i}"}
        if kind == "host-device":
            out.append(env.claim(netdev, device=f"nic-nic{offset + i}", share=False))
        else:
            out.append(env.claim(netdev))
    return out


def _host_names(env: Env, claims: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(host name, container name) of each claim, from its CDI spec on disk."""
    out = []
    for c in claims:
        [spec] = env.drivers[0].cdi.glob(f"*_{c['metadata']['uid']}.json")
        [nd] = json.loads(spec.read_text())["devices"][0]["containerEdits"]["netDevices"]
        out.append((nd["hostInterfaceName"], nd["name"]))
    return out


def kind_latency(kind: str, n: int) -> dict[str, Any]:
    """Prepare and unprepare latency over the socket, in both unprepare cases, plus floors."""
    with environment(kind) as env:
        _setup(env, kind, 2 * n)
        d = env.driver(*KINDS[kind]["args"])
        kubelet = Kubelet(d.service_socket)
        prep: list[float] = []
        gone_claims = _claims(env, kind, n)
        host_claims = _claims(env, kind, n, offset=n)
        for c in gone_claims + host_claims:
            prep.append(timed(lambda c=c: kubelet.prepare([c]))[0])
        # Case 2 first: the pod never started, the interface is still on the host.
        # (Measured before any namespace teardown: the kernel finishes destroying a
        # namespace in the background, and that work would slow these deletions.)
        on_host = [timed(lambda c=c: kubelet.unprepare([c]))[0] for c in host_claims]
        # Case 1, the usual one: the runtime moved the interface into the pod and the
        # pod's namespace is gone (virtual links die with it; a NIC comes back).
        pod = netns.create("pod")
        for host, inner in _host_names(env, gone_claims):
            with netns.inside(env.ns):
                move_like_runc(host, inner, pod)
            if kind == "host-device":
                return_to_host(pod, env.ns, inner)
        netns.delete(pod)
        time.sleep(3)  # let the kernel finish destroying the namespace
        gone = [timed(lambda c=c: kubelet.unprepare([c]))[0] for c in gone_claims]
        kubelet.close()
        floor = _floor(env, kind, n)
        handler = _in_process(env, kind, n)
    return {
        "kind": kind,
        "prepare": summary(prep),
        "unprepare_ns_gone": summary(gone),
        "unprepare_on_host": summary(on_host),
        "handler": handler,
        "floor": floor,
    }


def _floor(env: Env, kind: str, n: int) -> dict[str, Any]:
    writes, removes = floors.files_floor(n, env.root)
    if kind == "host-device":
        create = floors.set_floor(env.ns, n)
        delete = create  # giving a NIC back is one `link set` as well
    else:
        create, delete = floors.link_floor(env.ns, kind, n)
    prep = [c + w for c, w in zip(create, writes, strict=True)]
    return {
        "link_create": summary(create),
        "link_delete": summary(delete),
        "two_files": summary(writes),
        "prepare": summary(prep),
        "unprepare_on_host": summary([d + r for d, r in zip(delete, removes, strict=True)]),
        "unprepare_ns_gone": summary(removes),
    }


def _in_process(env: Env, kind: str, n: int) -> dict[str, Any]:
    """The handler alone, called in-process in the node's namespace."""
    ctx = context(virtual_parents=("mparent",), parent_interfaces=("nic*",))
    prep, unprep = [], []
    with netns.inside(env.ns):
        for i in range(n):
            params = {"type": "netdev", "netdev": KINDS[kind]["netdev"]}
            device = (
                Device(
                    f"nic-nic{i}",
                    {"type": "netdev", "kind": "host-device", "interfaceName": f"nic{i}"},
                )
                if kind == "host-device"
                else None
            )
            t, (handler, _, prepared) = timed(
                lambda p=params, dv=device: prepare(p, device=dv, ctx=ctx)
            )
            prep.append(t)
            unprep.append(timed(lambda h=handler, pr=prepared: h.unprepare(pr.undo))[0])
    return {"prepare": summary(prep), "unprepare_on_host": summary(unprep)}


def batches(sizes: tuple[int, ...], rounds: int) -> list[dict[str, Any]]:
    """One NodePrepareResources with N virtual claims, and the matching unprepare."""
    rows = []
    with environment("batch") as env:
        d = env.driver()
        kubelet = Kubelet(d.service_socket)
        for size in sizes:
            prep, unprep = [], []
            for _ in range(rounds):
                claims = [env.claim({"kind": "veth", "interfaceName": "eth1"}) for _ in range(size)]
                prep.append(timed(lambda cl=claims: kubelet.prepare(cl))[0])
                unprep.append(timed(lambda cl=claims: kubelet.unprepare(cl))[0])
            p50_prep, p50_unprep = sorted(prep)[len(prep) // 2], sorted(unprep)[len(unprep) // 2]
            rows.append(
                {
                    "claims": size,
                    "prepare_total_ms": p50_prep * 1e3,
                    "prepare_per_claim_ms": p50_prep * 1e3 / size,
                    "unprepare_total_ms": p50_unprep * 1e3,
                    "unprepare_per_claim_ms": p50_unprep * 1e3 / size,
                }
            )
        kubelet.close()
    return rows
