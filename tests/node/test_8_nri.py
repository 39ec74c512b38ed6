"""The NRI injection mode on the real runtime (the node's default: containerd with NRI
on, the driver in `--injection auto`): interfaces move into the pod sandbox's network
namespace at RunPodSandbox, so containers that reference the claim may restart, and
several may reference one claim; the driver's SIGKILL (while pods run, while sandboxes
are created) and containerd's restart lose no pod its interface; with NRI off in
containerd, auto falls back to CDI netDevices.

What a container sees is recorded by the container itself at each start, into an
emptyDir the test reads from the node: the interface's name, MTU, addresses, routes and
a sysctl, once per run."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

from localcluster.driver import HostDriver
from localcluster.examples import adapt
from localcluster.images import BUSYBOX_IMAGE
from localcluster.manifests import DEPLOY
from localcluster.podnet import sandbox_pid, via_exec, via_sandbox
from tests.e2e.cluster import example_objects, template_config
from tests.support import kernel
from tests.support.waiting import wait_for

from .cluster import NodeCluster
from .leftovers import driver_state
from .scenario import SLEEPER, pod, template

NETDEV = {
    "kind": "veth",
    "interfaceName": "net1",
    "mtu": 1400,
    "ipAddresses": ["198.51.100.40/24", "2001:db8:40::40/64"],
    "routes": [{"destination": "203.0.113.0/24", "gateway": "198.51.100.1", "metric": 10}],
    "sysctls": {"net.ipv4.conf.net1.rp_filter": 2},
}
# What a container writes at each start: the interface as it sees it, then it exits
# after 2 s (FLAP) or sleeps (STEADY).
LOOK = (
    '{ echo "=== run"; cat /sys/class/net/net1/mtu; ip -o addr show dev net1; '
    "ip route show dev net1; cat /proc/sys/net/ipv4/conf/net1/rp_filter; "
    'echo "=== end"; } >> "/state/$NAME.log" 2>&1'
)
FLAP = ["sh", "-c", f"{LOOK}; sleep 2; exit 1"]
STEADY = ["sh", "-c", f"{LOOK}; {SLEEPER[2]}"]
RUNS = 3  # starts of a restarting container to see (two restarts)


def _container(name: str, command: list[str], claim: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
        "env": [{"name": "NAME", "value": name}],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
    }
    if claim:
        c["resources"] = {"claims": [{"name": claim}]}
    return c


def _pod(name: str, claim: str, containers: list[tuple[str, list[str]]]) -> dict[str, Any]:
    """A pod whose every container references the claim (from template `claim`)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": claim, "resourceClaimTemplateName": claim}],
            "volumes": [{"name": "state", "emptyDir": {}}],
            "containers": [_container(n, cmd, claim) for n, cmd in containers],
        },
    }


@dataclass(frozen=True)
class Run:
    """What one start of a container saw."""

    mtu: str
    addresses: frozenset[str]
    routes: tuple[str, ...]
    rp_filter: str


def _runs(cluster: NodeCluster, pod: dict[str, Any], container: str) -> list[Run]:
    """Every start of `container` so far, from its log in the pod's emptyDir."""
    uid = pod["metadata"]["uid"]
    log = (
        cluster.local.lay.kubelet_root
        / "pods"
        / uid
        / "volumes/kubernetes.io~empty-dir/state"
        / f"{container}.log"
    )
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    runs = []
    for block in text.split("=== run\n")[1:]:
        if "=== end" not in block:
            continue  # being written
        lines = block.split("=== end")[0].strip().splitlines()
        addrs = frozenset(
            w[i + 1]
            for w in (ln.split() for ln in lines)
            for i, x in enumerate(w)
            if x in ("inet", "inet6")
        )
        routes = tuple(ln.strip() for ln in lines if " via " in ln or ln.startswith("203."))
        runs.append(Run(lines[0], addrs, routes, lines[-1]))
    return runs


def _sees_its_interface(run: Run) -> bool:
    return (
        run.mtu == "1400"
        and set(NETDEV["ipAddresses"]) <= run.addresses
        and any(
            r.startswith("203.0.113.0/24 via 198.51.100.1") and "metric 10" in r for r in run.routes
        )
        and run.rp_filter == "2"
    )


def test_containers_referencing_the_claim_restart_and_see_it_every_time(
    cluster: NodeCluster, driver: HostDriver, kns
):
    assert 'msg="injection mode" mode=nri' in driver.log(), driver.log()[-2000:]
    cluster.apply(template("t", NETDEV), kns)
    cluster.apply(template("u", NETDEV), kns)
    cluster.apply(_pod("single", "t", [("app", FLAP)]), kns)  # its only container
    cluster.apply(_pod("pair", "u", [("steady", STEADY), ("flappy", FLAP)]), kns)
    pods = {name: cluster.wait_running(kns, name) for name in ("single", "pair")}
    watched = [("single", "app"), ("pair", "flappy")]
    wait_for(
        f"the restarting containers to start {RUNS} times",
        lambda: all(len(_runs(cluster, pods[p], c)) >= RUNS for p, c in watched),
        90,
        log=lambda: "\n".join(cluster.describe_pod(kns, p) for p in pods),
    )
    for p, c in [*watched, ("pair", "steady")]:
        runs = _runs(cluster, pods[p], c)
        assert runs and all(_sees_its_interface(r) for r in runs), (p, c, runs)
    for p, c in watched:

        def status(p: str = p, c: str = c) -> dict[str, Any]:
            statuses = cluster.pod(kns, p)["status"]["containerStatuses"]
            [found] = [s for s in statuses if s["name"] == c]
            return dict(found)

        # The kubelet reports restarts in the pod status a moment after the run itself.
        wait_for(f"{p}/{c} restartCount", lambda: status()["restartCount"] >= RUNS - 1, 30)
        assert "RunContainerError" not in str(status())
    # Both containers of the pair share the one interface, moved once into the sandbox.
    assert "net1" in via_exec(cluster.local.kubectl, kns, "pair", "steady")


def _pods_have_their_interface(cluster: NodeCluster, kns: str, names: list[str]) -> None:
    for name in names:
        cluster.wait_running(kns, name)
        inside = via_exec(cluster.local.kubectl, kns, name, "app")
        assert "net1" in inside and "198.51.100.40/24" in inside["net1"].addresses, (name, inside)


def _claims_of(cluster: NodeCluster, kns: str, names: list[str]) -> set[str]:
    return {
        cluster.claim(kns, c)["metadata"]["uid"]
        for name in names
        for c in cluster.pod_claim_names(cluster.pod(kns, name))
    }


def test_driver_sigkill_while_pods_run_and_while_sandboxes_are_created(
    cluster: NodeCluster, drivers, kns
):
    lay = cluster.local.lay
    d = drivers.start()
    cluster.apply(template("t", NETDEV), kns)
    running = [f"p{i}" for i in range(3)]
    for name in running:
        cluster.apply(pod(name, ["t"], from_init=False, app_command=SLEEPER), kns)
    _pods_have_their_interface(cluster, kns, running)

    # The driver dies; meanwhile p0's sandbox dies too (its pause process is killed)
    # and the kubelet makes a new one, which the runtime creates without the plugin.
    d.kill()
    uid = cluster.pod(kns, "p0")["metadata"]["uid"]
    old = sandbox_pid(lay, uid)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    wait_for(
        "p0's new sandbox to run without the driver",
        lambda: (pid := sandbox_pid(lay, uid)) is not None and pid != old,
        60,
        log=lambda: cluster.describe_pod(kns, "p0"),
    )
    assert "net1" not in via_sandbox(lay, uid)  # nobody moved it: the driver is down
    d.start()  # its Synchronize gives the running sandbox the claim again
    wait_for("p0's new sandbox to get net1", lambda: "net1" in via_sandbox(lay, uid), 30, log=d.log)
    _pods_have_their_interface(cluster, kns, running)

    # Now pods are created and the driver dies as soon as containerd has begun creating
    # their sandboxes (so the kubelet had every prepare answered: one it never read is
    # retried only at its resync, 60-90 s later): their NRI events come while it dies
    # or is dead.
    created = [f"q{i}" for i in range(4)]
    for name in created:
        cluster.apply(pod(name, ["t"], from_init=False, app_command=SLEEPER), kns)
    log = lay.logs / "containerd.log"
    wait_for(
        "containerd to begin creating the new pods' sandboxes",
        lambda: all(f'RunPodSandbox for name:\\"{n}\\"' in log.read_text() for n in created),
        60,
        interval=0.01,
        log=d.log,
    )
    d.kill()
    time.sleep(1)
    d.start()
    _pods_have_their_interface(cluster, kns, running + created)

    uids = _claims_of(cluster, kns, running + created)
    state = driver_state(lay)
    assert state.records == uids and state.specs == uids and state.links == uids
    assert not state.untagged
    for name in running + created:
        cluster.delete_pod(kns, name)
    for name in running + created:
        cluster.wait_pod_gone(kns, name)
    wait_for("every claim unprepared", lambda: not driver_state(lay).records, 30, log=d.log)
    state = driver_state(lay)
    assert not (state.links or state.specs or state.untagged), state
    assert "Traceback" not in d.log()


def test_the_plugin_reconnects_after_a_containerd_restart(
    cluster: NodeCluster, driver: HostDriver, kns
):
    cluster.apply(template("t", NETDEV), kns)
    cluster.apply(pod("before", ["t"], from_init=False, app_command=SLEEPER), kns)
    _pods_have_their_interface(cluster, kns, ["before"])
    synced = driver.log().count("synchronized with the runtime")
    cluster.local.containerd.restart()
    wait_for(
        "the driver's NRI plugin to reconnect",
        lambda: driver.log().count("synchronized with the runtime") > synced,
        60,
        log=driver.log,
    )
    cluster.apply(pod("after", ["t"], from_init=False, app_command=SLEEPER), kns)
    _pods_have_their_interface(cluster, kns, ["before", "after"])


def test_auto_falls_back_to_cdi_when_nri_is_off_in_containerd(cluster: NodeCluster, drivers, kns):
    containerd = cluster.local.containerd
    containerd.restart(nri=False)
    try:
        d = drivers.start()
        line = next(ln for ln in d.log().splitlines() if 'msg="injection mode"' in ln)
        assert "mode=cdi" in line and "auto:" in line and "nri_plugin=off" in line, line
        # The examples' single-container way: an init container references the claim.
        netdev = {k: v for k, v in NETDEV.items() if k not in ("routes", "sysctls")}
        cluster.apply([template("t", netdev), pod("p", ["t"])], kns)
        cluster.wait_running(kns, "p")
        inside = via_exec(cluster.local.kubectl, kns, "p", "app")
        assert set(inside["net1"].addresses) == set(NETDEV["ipAddresses"]), inside
        [record] = [
            r for r in (cluster.local.lay.cdi_dir / "dra.example.com-state").glob("*.alloc.json")
        ]
        assert '"injection": "cdi"' in record.read_text()
        # What CDI mode refuses, naming the field and why.
        cluster.apply([template("nri-only", NETDEV), pod("q", ["nri-only"])], kns)

        def refused() -> str | None:
            for ev in cluster.events(kns, "q"):
                if "needs the NRI injection mode" in ev.get("message", ""):
                    return str(ev["message"])
            return None

        message = wait_for("the NRI-only fields to be refused", refused, 60)
        assert "$.netdev.routes" in message and "$.netdev.sysctls" in message
        _single_nic_examples_run(cluster, kns)
    finally:
        containerd.restart(nri=True)  # (the driver stays, in CDI mode, for the teardown)


def _single_nic_examples_run(cluster: NodeCluster, kns: str) -> None:
    """deploy/deployment.yaml's single-NIC examples (as the kernel allows: a veth where
    it lacks dummy) reach their pods through CDI netDevices, with the examples' settings.
    The RDMA and RoCE examples need hardware this machine lacks: left out."""
    docs, _notes = adapt(example_objects(DEPLOY / "deployment.yaml", kns), kernel.missing)
    wanted = ("dummy-net1", "macvlan-data0")
    docs = [d for d in docs if d["metadata"]["name"] in wanted]
    cluster.apply(docs, kns)
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    for app in wanted:
        config = template_config(templates[app])
        running = wait_for(
            f"the {app} example to run",
            lambda app=app: next(
                (
                    p
                    for p in cluster.pods(kns, f"app={app}")
                    if p["status"].get("phase") == "Running"
                ),
                None,
            ),
            90,
        )
        inside = via_exec(cluster.local.kubectl, kns, running["metadata"]["name"], "app")
        iface = inside[config["interfaceName"]]
        assert iface.mtu == config["mtu"], iface
        assert set(iface.addresses) == set(config["ipAddresses"]), iface
