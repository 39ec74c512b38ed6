"""The container-restart limit of CDI mode (docs/known-limits.md), on the real
runtime, with the driver in `--injection cdi` (what a node without NRI gets): a
container that references a netdev claim and restarts is never started again (runc
cannot find the host interface it moved the first time: `move netDevice`); a container
that does not reference it (the examples' way: an init container does) restarts freely
and keeps the interface, which stays in the pod's network namespace. In NRI mode, the
node's default, such a container restarts and keeps it: test_8_nri.py."""

from __future__ import annotations

import time
from typing import Any

from localcluster.podnet import via_exec, via_sandbox
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .scenario import SLEEPER, pod, template

# First run: leave a mark on the pod's emptyDir and fail; any later run sleeps.
FAIL_ONCE = [
    "sh",
    "-c",
    "if [ ! -e /state/ran ]; then touch /state/ran; sleep 2; exit 1; fi; " + SLEEPER[2],
]


def _with_state_volume(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    spec["volumes"] = [{"name": "state", "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "state", "mountPath": "/state"}]
    return obj


def _app(cluster: NodeCluster, kns: str) -> dict[str, Any]:
    [status] = cluster.pod(kns, "p")["status"].get("containerStatuses") or [{}]
    return dict(status)


CDI = ("--injection", "cdi")


def test_app_referencing_the_claim_is_never_started_again(cluster: NodeCluster, drivers, kns):
    assert 'msg="injection mode" mode=cdi' in drivers.start(*CDI).log()
    cluster.apply(template("t", {"kind": "veth", "interfaceName": "net1"}), kns)
    cluster.apply(_with_state_volume(pod("p", ["t"], from_init=False, app_command=FAIL_ONCE)), kns)
    p = cluster.wait_running(kns, "p")
    assert "net1" in via_sandbox(cluster.local.lay, p["metadata"]["uid"])

    def refused() -> str | None:
        waiting = (_app(cluster, kns).get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "RunContainerError":
            return str(waiting.get("message", ""))
        for ev in cluster.events(kns, "p"):
            if "move netDevice" in ev.get("message", ""):
                return str(ev["message"])
        return None

    message = wait_for("the restarted container to be refused", refused, 60)
    assert "move netDevice" in message, message
    # Never running again: sampled over a while (the kubelet keeps retrying, backing off).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        state = _app(cluster, kns).get("state") or {}
        assert "running" not in state, state
        time.sleep(0.5)
    # The interface stays where the first start put it: in the pod's namespace.
    assert "net1" in via_sandbox(cluster.local.lay, p["metadata"]["uid"])


def test_app_not_referencing_the_claim_restarts_and_keeps_it(cluster: NodeCluster, drivers, kns):
    drivers.start(*CDI)
    cluster.apply(template("t", {"kind": "veth", "interfaceName": "net1"}), kns)
    cluster.apply(_with_state_volume(pod("p", ["t"], app_command=FAIL_ONCE)), kns)

    def restarted_and_running() -> bool:
        st = _app(cluster, kns)
        return st.get("restartCount", 0) >= 1 and "running" in (st.get("state") or {})

    wait_for("the app to run again after its failure", restarted_and_running, 90)
    assert "net1" in via_exec(cluster.local.kubectl, kns, "p", "app")
