"""Scenario 6: the driver killed with SIGKILL, between prepare and unprepare and in the
middle of a prepare, then started again on the same state."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dradriver.contract import naming
from tests.support import netns
from tests.support.driverproc import DriverProcess
from tests.support.linkwatch import watching
from tests.support.runtime import move_like_runc, seen_in
from tests.support.waiting import wait_for

from .cluster import Cluster
from .conftest import Node
from .kubelet import check_answer, net_devices, record, record_uids, spec_files
from .test_3_capacity import claim_pod, veth_template

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.kind("veth")]

BATCH = 12  # claims of one pod, prepared in one call
DEVICES = 6  # veth requests per claim: a claim's interfaces exist a while before its record


def veth_claim(namespace: str, name: str, index: int) -> dict[str, Any]:
    """A ResourceClaim (not from a template) for DEVICES veths, one slot each."""
    requests, config = [], []
    for j in range(DEVICES):
        requests.append(
            {
                "name": f"r{j}",
                "exactly": {
                    "deviceClassName": "virtual-network",
                    "capacity": {"requests": {"slots": "1"}},
                },
            }
        )
        netdev = {"kind": "veth", "interfaceName": f"n{index}x{j}"}
        config.append(
            {
                "requests": [f"r{j}"],
                "opaque": {
                    "driver": "dra.example.com",
                    "parameters": {"type": "netdev", "netdev": netdev},
                },
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": requests, "config": config}},
    }


def kill_inside_a_claim(d: DriverProcess, node: Node, caller: threading.Thread) -> bool:
    """SIGKILL the driver while a claim has interfaces but no record, once a claim of
    the call is committed; False if the call ended first.

    The kernel announces each link as it is made; at each announcement the driver is
    frozen (SIGSTOP) and looked at: if an interface without a record exists, the kill
    lands exactly there, otherwise the driver goes on (SIGCONT) until the next one. A
    kill sent at the announcement alone races the driver to its record, and lost every
    time in one CI run."""
    assert d.proc is not None
    pid = d.proc.pid
    deadline = time.monotonic() + 30
    start = len(record_uids(d))
    with watching(node.ns) as watch:
        seen = 0
        while time.monotonic() < deadline and caller.is_alive():
            events = watch.events[seen:]
            seen += len(events)
            making = any(e.kind == "new" and naming.is_host_ifname(e.name) for e in events)
            if making and len(record_uids(d)) > start:
                os.kill(pid, signal.SIGSTOP)
                wait_for("the driver to stop", lambda: _state(pid) in ("T", "t", None), 5)
                if leftovers(node, record_uids(d)):
                    d.stop(signal.SIGKILL)
                    return True
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.001)
    return False


def _state(pid: int) -> str | None:
    """The process's state letter (/proc/<pid>/stat), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def leftovers(node: Node, committed: set[str]) -> set[str]:
    """Interfaces of ours (by tag, or untagged with our name shape) without a record."""
    left = {n for n, uid in node.tagged().items() if uid not in committed}
    return left | {n for n, a in node.links().items() if naming.is_host_ifname(n) and not a}


def test_sigkill_between_prepare_and_unprepare(cluster: Cluster, node: Node, kns: str) -> None:
    d = node.start_driver()
    wait_for("the driver's slice", cluster.slices)
    template = veth_template(kns)
    netdev = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["netdev"]
    netdev["ipAddresses"] = ["198.51.100.20/24"]
    cluster.apply(template)
    cluster.apply(claim_pod(kns, "app"))
    pod = cluster.wait_bound(kns, "app")
    [claim] = cluster.kubelet_claims(pod)
    uid = claim["metadata"]["uid"]
    first = d.prepare([claim])
    check_answer(first, [claim])
    [spec] = spec_files(d).values()
    [nd] = net_devices(spec).values()
    pod_ns = node.pod_netns()
    with netns.inside(node.ns):
        move_like_runc(nd["hostInterfaceName"], nd["name"], pod_ns)
    links = node.links()
    specs = spec_files(d)
    saved = record(d, uid)

    assert d.stop(signal.SIGKILL) == -signal.SIGKILL
    node.restart(d)
    loaded = [ln for ln in d.log().splitlines() if 'msg="state loaded"' in ln][-1]
    for fact in ("records=1", "rolled_back=0", "deleted_interfaces=0", "vanished=0"):
        assert fact in loaded.split(), loaded
    # Nothing collected, nothing recreated: the pod keeps its interface.
    assert node.links() == links
    assert seen_in(pod_ns, "net1").addresses == ["198.51.100.20/24"]
    assert spec_files(d) == specs and record(d, uid) == saved
    # The kubelet repeats the prepare (it does after a plugin restart): same answer.
    assert d.prepare([claim]) == first

    # The pod goes: sandbox first, then unprepare, then the pod object.
    node.drop_pod_netns(pod_ns)
    gone = d.unprepare([claim])
    assert gone.claims[uid].error == ""
    assert spec_files(d) == {} and record_uids(d) == set()
    # The veth's host end goes with the pod's namespace, or the driver deletes it a
    # moment after the answer (--link-deletion-delay, 1 s): never left behind.
    wait_for("the veth's host end gone", lambda: node.tagged() == {}, 10)
    assert [n for n in node.links() if naming.is_host_ifname(n)] == []
    cluster.finish_pod_deletion(kns, "app")
    cluster.wait_claims_released(kns, [claim["metadata"]["name"]])


def test_sigkill_during_a_prepare_leaks_nothing(cluster: Cluster, node: Node, kns: str) -> None:
    d = node.start_driver()
    wait_for("the driver's slice", cluster.slices)
    names = [f"c{i:02d}" for i in range(BATCH)]
    cluster.apply([veth_claim(kns, n, i) for i, n in enumerate(names)])
    pod = claim_pod(kns, "big")
    pod["spec"]["resourceClaims"] = [{"name": n, "resourceClaimName": n} for n in names]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": n} for n in names]
    cluster.apply(pod)
    pod = cluster.wait_bound(kns, "big")
    claims = cluster.kubelet_claims(pod)
    assert len(claims) == BATCH
    uids = {c["metadata"]["uid"] for c in claims}

    # The kubelet's one call with every claim of the pod, killed inside the batch; after
    # each restart the kubelet calls again, until a kill caught a claim half prepared.
    leaked_total: set[str] = set()
    for _ in range(10):  # a prepare is fast: a kill lands between two claims as often
        errors: list[BaseException] = []

        def call(errors: list[BaseException] = errors) -> None:
            try:
                d.prepare(claims)
            except BaseException as exc:
                errors.append(exc)

        before = record_uids(d)
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        killed = kill_inside_a_claim(d, node, caller)
        caller.join(10)
        assert not caller.is_alive(), "the kubelet's call must end"
        committed = record_uids(d)
        assert before < committed, "a claim of the call was committed before the kill"
        if not killed:  # the whole batch was prepared before the watch saw a link made
            assert not errors and committed == uids, d.log()
        elif committed < uids:  # no answer goes out before every claim is committed
            assert errors, "the kubelet's call must fail with the driver killed under it"
        leaked = leftovers(node, committed)
        leaked_total |= leaked

        if killed:
            node.restart(d)
        # Every interface the driver owns belongs to a committed claim, every spec too,
        # and every record is complete.
        after = record_uids(d)
        assert after == committed
        assert {record(d, uid)["phase"] for uid in after} == {"prepared"}
        assert leftovers(node, after) == set(), "interfaces without a record survived"
        assert set(node.tagged().values()) == after
        specs = {f.split("_", 1)[1].removesuffix(".json") for f in spec_files(d)}
        assert specs == after
        if leaked:
            break
        if committed == uids:  # the kill came after the last claim: the batch again
            gone = d.unprepare(claims)
            assert {e.error for e in gone.claims.values()} == {""}
            wait_for("the batch's interfaces gone", lambda: node.tagged() == {}, 10)
    assert leaked_total, "no kill caught a claim with interfaces but no record"
    # What the kill left half made was rolled back from the claim's journal.
    assert "rolling back interrupted prepare" in d.log()

    # The kubelet retries the pod: all claims prepared, each with its own interfaces.
    resp = d.prepare(claims)
    check_answer(resp, claims)
    assert record_uids(d) == uids
    assert sorted(node.tagged().values()) == sorted(2 * DEVICES * list(uids))

    gone = d.unprepare(claims)
    assert {e.error for e in gone.claims.values()} == {""}
    assert node.tagged() == {} and spec_files(d) == {} and list(d.state.iterdir()) == []
