"""The real Kubernetes control plane as plain processes: the one way a local cluster
starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager.

Built by ``hack/build-k8s.sh``, with a throw-away PKI, free ports and everything under
one work directory that is removed on stop. Where it runs is the one choice:

* on the host's 127.0.0.1 (the default), for Nodes without a kubelet: ``create_node``
  makes a Ready stand-in Node for this machine, and pods bound to it stay Pending
  unless someone plays the kubelet (the e2e tier);
* inside the network namespace of a real node (``node_netns=``), for that node's
  kubelet: kube-apiserver can reach it (exec, logs), the node lifecycle controller and
  the not-ready taint do their usual job, and a forwarder on the host's 127.0.0.1 at
  the API server's own port leads into the namespace, so one kubeconfig serves the
  host and the node (``LocalNode``, node.py: ``make demo`` and the node tier).

    with ControlPlane(workdir) as cp:
        node_uid = cp.create_node("node-1")
        cp.apply(Path("deploy/driver.yaml"))
        kubeconfig = cp.serviceaccount_kubeconfig("dra", "dra-driver", "node-1")

Every process runs in its own process group and is killed on ``stop()``, which
also runs on an exception in the ``with`` block, on Ctrl-C and on SIGTERM (turned
into KeyboardInterrupt while the control plane runs), at interpreter exit, and,
as a last resort, by the kernel (parent-death signal) if Python itself is killed.

As a pytest session fixture (a test's failure does not reach the fixture, so
call ``cp.print_logs()`` from a ``pytest_runtest_makereport`` hook to see why):

    @pytest.fixture(scope="session")
    def control_plane() -> Iterator[ControlPlane]:
        if missing := missing_binaries(default_bin_dir()):
            pytest.skip(f"{missing} not built: run hack/build-k8s.sh")
        with ControlPlane(tempfile.mkdtemp(prefix="dra-e2e-")) as cp:
            yield cp
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from . import audit
from . import netns as netns_
from .apiclient import ApiError, Rest, Source
from .audit import AuditLog
from .binaries import default_bin_dir, missing_binaries
from .certs import (
    CertificateAuthority,
    issue_control_plane_certs,
    write_kubeconfig,
    write_signing_key,
)
from .components import (
    HTTPS_PORT,
    Layout,
    apiserver_argv,
    controller_manager_argv,
    etcd_argv,
    scheduler_argv,
)
from .forward import Forwarder
from .procs import Component, SigtermAsInterrupt, free_port
from .standins import node_manifest
from .tokens import ServiceAccountTokens

# What the DRA driver needs from 1.36. All three are beta and on by default in
# 1.36; set explicitly so the intent shows and a restart can turn one off.
DRA_FEATURE_GATES: dict[str, bool] = {
    "DRAConsumableCapacity": True,  # allowMultipleAllocations, capacity requestPolicy
    "DRAResourceClaimDeviceStatus": True,  # status.devices written by the driver
    "DRAResourceClaimGranularStatusAuthorization": True,  # resourceclaims/driver RBAC
}


class ControlPlane(ServiceAccountTokens):
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager (see the module
    docstring): on the host for stand-in Nodes, or in `node_netns` for a real node's
    kubelet. `bin_dir`: where the binaries are (default: hack/build-k8s.sh's)."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        node_netns: str | None = None,
        advertise: str | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        bin_dir: Path | str | None = None,
        verbosity: int = 2,
        keep_workdir: bool | None = None,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else default_bin_dir()
        self.workdir = Path(workdir)
        self.netns = node_netns
        real_nodes = node_netns is not None
        if advertise is not None and node_netns is None:
            raise ValueError("a control plane with an advertised address runs in a namespace")
        self.layout = Layout(
            self.bin_dir, self.workdir, verbosity, real_nodes=real_nodes, advertise=advertise
        )
        self.forwarder: Forwarder | None = None
        self.feature_gates: dict[str, bool] = {**DRA_FEATURE_GATES, **(feature_gates or {})}
        self.apiserver_feature_gates = dict(self.feature_gates)
        self.verbosity = verbosity
        self.keep_workdir = (
            os.environ.get("E2E_KEEP_WORKDIR") == "1" if keep_workdir is None else keep_workdir
        )
        self.components: dict[str, Component] = {}
        self.startup_seconds: float | None = None
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.audit = AuditLog(audit.log_path(self.workdir))  # what the driver asked for
        self.rest: Rest | None = None
        self._started = False
        self._sigterm = SigtermAsInterrupt()

    # ----------------------------------------------------------------- life
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.print_logs()
        self.stop()

    @property
    def server(self) -> str:
        """The API server's URL (on the host's 127.0.0.1 either way)."""
        return f"https://127.0.0.1:{self.layout.ports['apiserver']}"

    @property
    def node_server(self) -> str:
        """The API server's URL for kubelets: a cluster's address on its network, else
        `server` (a lone node shares the control plane's namespace)."""
        if self.layout.advertise is not None:
            return f"https://{self.layout.advertise}:{HTTPS_PORT}"
        return self.server

    def start(self) -> None:
        """Start every component, wait until each is healthy (the work directory: empty)."""
        if self._started:
            raise RuntimeError("control plane already started")
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise FileNotFoundError(
                f"missing {', '.join(missing)} in {self.bin_dir}: run hack/build-k8s.sh"
            )
        t0 = time.monotonic()
        if self.workdir.exists() and any(self.workdir.iterdir()):
            raise FileExistsError(f"workdir {self.workdir} is not empty")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._started = True
        atexit.register(self.stop)
        self._sigterm.install()
        try:
            self._prepare()
            if self.netns is not None:
                port = self.layout.ports["apiserver"]
                inside = HTTPS_PORT if self.layout.advertise else port
                self.forwarder = Forwarder(None, inside, connect_ns=self.netns, port=port)
                self.forwarder.start()
            # All at once: each retries its server until it is up, which
            # overlaps the start-up work of all four (~1 s saved).
            for name in self.components:
                self._run(name)
            self._wait("etcd", self._etcd_healthy, 30, inside=True)
            self._wait("kube-apiserver", lambda: self._rest().healthy("/readyz"), 90)
            self._wait(
                "kube-scheduler", lambda: self._component_healthy("scheduler"), 60, inside=True
            )
            self._wait(
                "kube-controller-manager", lambda: self._component_healthy("kcm"), 60, inside=True
            )
            # ServiceAccount admission rejects pods until the controller made "default".
            self._wait("kube-controller-manager", lambda: self._has_default_sa("default"), 60)
        except BaseException:
            self.print_logs()
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """Kill every component, then remove the work directory. Idempotent."""
        if not self._started:
            return
        self._started = False
        # Reverse start order: the clients first, etcd last.
        for name in reversed(list(self.components)):
            self.components[name].stop()
        self.components.clear()
        if self.forwarder is not None:
            self.forwarder.stop()
            self.forwarder = None
        if self.rest is not None:
            self.rest.close()
            self.rest = None
        self._sigterm.restore()
        atexit.unregister(self.stop)
        if self.keep_workdir:
            print(f"control plane: kept {self.workdir}", file=sys.stderr)
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self, feature_gates: Mapping[str, bool] | None = None) -> None:
        """Restart kube-apiserver (same port, same etcd), with ``feature_gates``
        merged over its current ones; kube-scheduler and kube-controller-manager
        keep running and reconnect."""
        self.apiserver_feature_gates.update(feature_gates or {})
        comp = self.components["kube-apiserver"]
        comp.stop()
        comp.argv = apiserver_argv(self.layout, self.apiserver_feature_gates)
        self._rest().forget_discovery()
        comp.start()
        self._wait("kube-apiserver", lambda: self._rest().healthy("/readyz"), 90)

    # --------------------------------------------------------------- config
    def _prepare(self) -> None:
        lay = self.layout
        lay.ports = {
            name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "kcm")
        }
        ca = self.ca = CertificateAuthority(self.workdir / "pki")
        lay.pki = issue_control_plane_certs(ca, (lay.advertise,) if lay.advertise else ())
        lay.ca_cert = ca.pair.cert
        lay.sa_key, lay.sa_pub = write_signing_key(self.workdir / "pki")
        # The scheduler and the controller manager run beside kube-apiserver.
        inside = f"https://127.0.0.1:{HTTPS_PORT}" if lay.advertise else self.server
        for user in ("admin", "scheduler", "kcm"):
            write_kubeconfig(
                lay.kubeconfig(user),
                server=self.server if user == "admin" else inside,
                ca_pem=ca.pair.cert_pem(),
                user=user,
                client=lay.pki[user],
            )
        self.rest = Rest(self.server, ca.pair.cert, lay.pki["admin"])
        gates = self.feature_gates
        argvs = {
            "etcd": etcd_argv(lay),
            "kube-apiserver": apiserver_argv(lay, self.apiserver_feature_gates),
            "kube-controller-manager": controller_manager_argv(lay, gates),
            "kube-scheduler": scheduler_argv(lay, gates),
        }
        wrap = ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []
        self.components = {
            name: Component(name, argv, self.workdir / f"{name}.log", wrap)
            for name, argv in argvs.items()
        }

    # -------------------------------------------------------------- waiting
    def _run(self, name: str) -> None:
        self.components[name].start()

    def _wait(
        self, name: str, ready: Callable[[], bool], timeout: float, *, inside: bool = False
    ) -> None:
        """Until `ready()`; `inside`: probed from the control plane's namespace (where
        every component but the forwarded API server listens)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            for comp in self.components.values():
                comp.check()
            try:
                with self._in_netns() if inside else contextlib.nullcontext():
                    if ready():
                        return
            except (OSError, ApiError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready after {timeout:.0f}s")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    @contextlib.contextmanager
    def _in_netns(self) -> Iterator[None]:
        """Probe the components where they listen (only the API server is forwarded)."""
        if self.netns is None:
            yield
            return
        with netns_.inside(self.netns):
            yield

    def _etcd_healthy(self) -> bool:
        return self._rest().plain_health(f"http://127.0.0.1:{self.layout.ports['etcd']}/health")

    def _component_healthy(self, key: str) -> bool:
        return self._rest().healthy("/healthz", base=f"https://127.0.0.1:{self.layout.ports[key]}")

    def _has_default_sa(self, namespace: str) -> bool:
        return (
            self._rest().get(
                f"/api/v1/namespaces/{namespace}/serviceaccounts/default", missing_ok=True
            )
            is not None
        )

    def _rest(self) -> Rest:
        if self.rest is None:
            raise RuntimeError("control plane not started")
        return self.rest

    # ------------------------------------------------------------------ logs
    def logs(self, lines: int = 40) -> str:
        """The last `lines` lines of each component's log."""
        parts = []
        for name, comp in self.components.items():
            parts.append(f"----- {name} (pid {comp.pid}, {comp.log}) -----\n{comp.tail(lines)}")
        return "\n".join(parts)

    def print_logs(self, lines: int = 40) -> None:
        """Print the components' log tails to stderr."""
        if self.components:
            print(
                f"\n===== control plane logs (last {lines} lines each) =====\n{self.logs(lines)}",
                file=sys.stderr,
            )

    def pids(self) -> dict[str, int]:
        """The pid of each running component."""
        return {n: c.pid for n, c in self.components.items() if c.pid is not None}

    # ------------------------------------------------------------ the API
    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A raw API call as admin; returns the decoded JSON answer."""
        return self._rest().request(method, path, body, **kw)

    def apply(self, path_or_yaml: Source, namespace: str | None = None) -> list[dict[str, Any]]:
        """Server-side apply (forced, field manager ``dra-e2e``) of every object of a
        YAML file (``Path`` or path string), a YAML string, an object or a list of
        them, in order; returns what the server stored. After a Namespace it waits
        until pods can be created there (its default ServiceAccount exists)."""
        return self._rest().apply(path_or_yaml, namespace, after_namespace=self.wait_namespace)

    def wait_namespace(self, name: str, timeout: float = 30) -> None:
        """Wait until pods can be created in ``name`` (its default ServiceAccount exists)."""
        self._wait(f"namespace {name}", lambda: self._has_default_sa(name), timeout)

    def create_namespace(self, name: str) -> None:
        """Create a namespace, once pods can be created there."""
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin: bin_dir's (K8S_VERSION, built by hack/build-k8s.sh unless
        K8S_BUILD_KUBECTL=0), else the one on PATH (the image's is v1.32)."""
        exe = self.bin_dir / "kubectl"
        binary = str(exe) if exe.exists() else shutil.which("kubectl")
        if binary is None:
            raise FileNotFoundError("no kubectl: run hack/build-k8s.sh")
        return subprocess.run(
            # Its discovery cache in the work directory, not in ~/.kube/cache.
            [
                binary,
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--cache-dir={self.kubectl_cache}",
                *args,
            ],
            check=check,
            text=True,
            capture_output=True,
            input=input,
        )

    @property
    def kubectl_cache(self) -> Path:
        """kubectl's discovery cache (in the work directory)."""
        return self.workdir / "kubectl-cache"

    def create_node(
        self,
        name: str,
        *,
        cpu: str = "2",
        memory: str = "8Gi",
        pods: str = "110",
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """A Ready, untainted Node standing for this machine; returns its UID."""
        node = node_manifest(name, {"cpu": cpu, "memory": memory, "pods": pods}, labels)
        created = self.request("POST", "/api/v1/nodes", node)
        if not created.get("status", {}).get("allocatable"):  # status dropped on create
            created["status"] = node["status"]
            created = self.request("PUT", f"/api/v1/nodes/{name}/status", created)
        return str(created["metadata"]["uid"])
