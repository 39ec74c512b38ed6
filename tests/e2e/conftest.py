"""Fixtures of the end-to-end tier: one real control plane per session, a node whose
driver runs in a throw-away network namespace, and a namespace per test.

Teardown runs on failure and on Ctrl-C as well (pytest runs fixture finalizers on
KeyboardInterrupt; SIGTERM is turned into one while the control plane runs): driver
processes are stopped, network namespaces deleted, directories removed, the control
plane killed and its work directory removed. The repository's tests/conftest.py then
checks that no namespace, link or driver process is left.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dradriver.contract import naming
from localcluster.apiclient import dns_label
from localcluster.binaries import default_bin_dir, missing_binaries
from localcluster.controlplane import ControlPlane
from localcluster.forward import Forwarder
from localcluster.manifests import daemonset_env
from tests.support import netns
from tests.support.driverproc import DriverProcess
from tests.support.runtime import links_in

from .cluster import Cluster

NODE = "e2e-node"
PARENT = "eth0"  # the node's interface the macvlan examples hang off (as in kind)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "apiserver_restart(order=0): restarts kube-apiserver (runs last, by order)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart kube-apiserver run last: after a restart the scheduler's
    informers back off on the errors they met while it was down and may take up to
    ~30 s to bind pods again, which the other tests need not wait for."""

    def key(item: pytest.Item) -> tuple[bool, int]:
        mark = item.get_closest_marker("apiserver_restart")
        return (mark is not None, mark.kwargs.get("order", 0) if mark else 0)

    items.sort(key=key)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager for the session."""
    if missing := missing_binaries(default_bin_dir()):
        pytest.skip(f"{', '.join(missing)} not built: run hack/build-k8s.sh")
    if os.geteuid() != 0:
        pytest.skip("needs root (the driver runs in network namespaces)")
    workdir = tempfile.mkdtemp(prefix="dra-e2e-")
    with ControlPlane(workdir) as cp:
        yield cp


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> Cluster:
    """The deploy manifests applied (RBAC, policy, classes) and a Node for this machine."""
    c = Cluster(control_plane, NODE)
    c.setup()
    return c


@pytest.fixture
def kns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A Kubernetes namespace for one test; at the end its pods are finished like the
    kubelet would and every claim in it is released, so the next test starts with the
    node's devices free."""
    name = naming_label(f"t-{request.node.name}")
    cluster.create_namespace(name)
    try:
        yield name
    finally:
        cluster.remove_namespace(name)


def naming_label(text: str) -> str:
    """A unique DNS label from a test name."""
    return f"{dns_label(text)[:50].rstrip('-')}-{uuid.uuid4().hex[:5]}"


class Node:
    """The node's network namespace (with its eth0), the API forwarder into it, the
    kubelet and CDI directories, and the driver processes started on it."""

    def __init__(self, cluster: Cluster, ns: str, root: Path, kubeconfig: Path) -> None:
        self.cluster = cluster
        self.name = cluster.node
        self.ns = ns
        self.root = root
        self.kubeconfig = kubeconfig
        self.drivers: list[DriverProcess] = []
        self.pod_namespaces: list[str] = []

    def start_driver(self, *args: str, wait: bool = True) -> DriverProcess:
        """`dra-driver run` in the node's namespace with the driver's own token, and the
        claim address ranges deploy/driver.yaml gives the DaemonSet."""
        ranges = daemonset_env("DRA_CLAIM_ADDRESS_RANGES") or ""
        d = DriverProcess(
            self.root,
            self.ns,
            self.kubeconfig,
            node=self.name,
            args=args,
            env={"DRA_CLAIM_ADDRESS_RANGES": ranges},
        )
        self.drivers.append(d)
        return d.start(wait=wait)

    def restart(self, d: DriverProcess) -> DriverProcess:
        """Start the same driver again (same directories, same flags)."""
        d.start()
        return d

    def pod_netns(self) -> str:
        """A network namespace standing for a pod sandbox (deleted at the end)."""
        name = netns.create("e2e-pod")
        self.pod_namespaces.append(name)
        return name

    def drop_pod_netns(self, name: str) -> None:
        """The sandbox goes away: the kernel destroys the virtual links in it."""
        netns.delete(name)
        self.pod_namespaces.remove(name)

    def links(self) -> dict[str, str | None]:
        """Links in the node's namespace (but lo): name -> alias."""
        return {ln["name"]: ln["alias"] for ln in links_in(self.ns)}

    def tagged(self) -> dict[str, str]:
        """Links the driver owns by its ifalias tag: name -> claim UID."""
        out = {}
        for name, alias in self.links().items():
            parsed = naming.parse_ifalias(alias)
            if parsed:
                out[name] = parsed[0]
        return out

    def link(self, name: str) -> dict[str, Any]:
        """`ip -details addr show` of one link in the node's namespace, as JSON."""
        [out] = json.loads(netns.ip(self.ns, "-d", "-j", "addr", "show", "dev", name))
        return dict(out)

    def close(self) -> None:
        """Stop every driver (SIGTERM, then SIGKILL), delete the pod namespaces."""
        for d in self.drivers:
            if d.proc is not None:
                d.stop()  # also closes the log of one that already exited
        for pod_ns in self.pod_namespaces:
            netns.delete(pod_ns)
        self.pod_namespaces.clear()

    def logs(self) -> str:
        return "\n".join(f"--- driver {i} ---\n{d.log()}" for i, d in enumerate(self.drivers))


_node_count = itertools.count(1)


@pytest.fixture
def node(cluster: Cluster) -> Iterator[Node]:
    """A new node for one test, empty: no driver runs yet, no slice is published.

    A Node of its own (with its own pool) per test: what earlier tests allocated can
    never count against it, even while the scheduler's caches still hold claims that
    were just deleted (the scheduler does not retry an unschedulable pod when a claim
    is deleted, only when one is deallocated). While the test runs, `cluster.node`,
    `cluster.node_uid` and `cluster.driver_kubeconfig` are this node's.
    """
    with contextlib.ExitStack() as cleanup:  # every step undone, even if one fails
        session_node = (cluster.node, cluster.node_uid, cluster.driver_kubeconfig)
        name = f"{NODE}-{next(_node_count)}"
        cleanup.callback(setattr_all, cluster, session_node)
        # Last: no driver is connected any more, so the kubelet would remove the node's
        # slices; then the Node goes.
        cleanup.callback(cluster.remove_node, name)
        cluster.node_uid, cluster.driver_kubeconfig = cluster.add_node(name)
        cluster.node = name

        port = int(cluster.cp.server.rsplit(":", 1)[1])
        ns, root, fwd = cleanup.enter_context(node_machine(port))
        kubeconfig = forwarded(cluster.driver_kubeconfig, fwd, root / "kubeconfig")
        n = Node(cluster, ns, root, kubeconfig)
        cleanup.callback(n.close)
        yield n


@contextlib.contextmanager
def node_machine(apiserver_port: int) -> Iterator[tuple[str, Path, Forwarder]]:
    """What stands for a node's machine: a network namespace with the node's eth0, a
    directory for its kubelet and CDI files, and the API server forwarded into the
    namespace. All of it is removed at the end."""
    with contextlib.ExitStack() as cleanup:
        root = Path(tempfile.mkdtemp(prefix="dra-e2e-", dir="/tmp"))  # short: socket paths
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        ns = netns.create("e2e-node")
        cleanup.callback(netns.delete, ns)
        # The node's own NIC, the parent the macvlan examples name.
        netns.ip(ns, "link", "add", PARENT, "type", "veth", "peer", "name", f"{PARENT}-peer")
        netns.ip(ns, "link", "set", PARENT, "up")
        netns.ip(ns, "link", "set", f"{PARENT}-peer", "up")
        fwd = Forwarder(ns, apiserver_port)
        fwd.start()
        cleanup.callback(fwd.stop)
        yield ns, root, fwd


def forwarded(kubeconfig: Path, fwd: Forwarder, dest: Path) -> Path:
    """A copy of `kubeconfig` at `dest` whose server is reached through `fwd`."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{fwd.port}"
    dest.write_text(yaml.safe_dump(config))
    return dest


def setattr_all(cluster: Cluster, values: tuple[str, str, Path]) -> None:
    cluster.node, cluster.node_uid, cluster.driver_kubeconfig = values


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, attach the driver logs and the control-plane log tails."""
    report = yield
    if report.failed:
        funcargs: dict[str, Any] = getattr(item, "funcargs", {})
        for n in funcargs.values():
            if isinstance(n, Node):
                report.sections.append(("driver logs", n.logs()[-20000:]))
        c = funcargs.get("cluster")
        if isinstance(c, Cluster):
            report.sections.append(("control plane logs", c.cp.logs(30)))
    return report
