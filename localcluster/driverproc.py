"""The real driver daemon (`dra-driver run` of this checkout) as a child process,
in a network namespace, with its kubelet directories; ready once its registration
socket answers GetInfo, as the kubelet's plugin watcher would ask it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from dradriver.contract import naming
from dradriver.kubelet.proto import registration_pb2, registration_pb2_grpc
from dradriver.kubelet.sockets import SocketPaths, socket_paths
from dradriver.settings import DEFAULT_DRIVER_NAME, Settings

from .binaries import REPO_ROOT

DRIVER = DEFAULT_DRIVER_NAME
# Pids of the daemons started here and not stopped yet (the tests check at the end of
# a session that none is left).
RUNNING: set[int] = set()


class DriverProcess:
    """`dra-driver run` with its own kubelet directories under `root` (or the given
    ones: a real kubelet's, on a local node)."""

    def __init__(
        self,
        root: Path,
        ns: str,
        kubeconfig: Path,
        node: str = "node-a",
        pod_uid: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        driver: str = DRIVER,
        own_flags: bool = True,
        *,
        registry: Path | None = None,
        plugins: Path | None = None,
        cdi: Path | None = None,
        enter: Sequence[str] | None = None,
    ) -> None:
        """`own_flags` False: only --kubeconfig and `args` are given, everything else comes
        from `env` (as in a pod of the DaemonSet), whose directories must be root's.
        `enter`: the command prefix that puts it in its namespaces (default: `ip netns
        exec <ns>`, the network namespace only)."""
        self.root = root
        self.driver = driver
        self.ns = ns
        self.registry = registry or root / "registry"
        self.plugins = plugins or root / "plugins"
        self.cdi = cdi or root / "cdi"
        self.state = self.cdi / f"{driver}-state"
        self.node = node
        self.pod_uid = pod_uid
        self.log_path = root / f"driver-{pod_uid or 'main'}.log"
        self.cmd = [
            *(enter if enter is not None else ("ip", "netns", "exec", ns)),
            *(sys.executable, "-m", "dradriver", "run"),
            *("--kubeconfig", str(kubeconfig)),
        ]
        if own_flags:
            self.cmd += [
                *("--node-name", node),
                *("--kubelet-registry-dir", str(self.registry)),
                *("--kubelet-plugins-dir", str(self.plugins)),
                *("--cdi-dir", str(self.cdi)),
                *("--publish-interval", "2"),
            ]
        self.cmd += args
        if pod_uid and own_flags:
            self.cmd += ["--pod-uid", pod_uid]
        self.env = {**os.environ, **(env or {})}
        # Entering the node's mount namespace leaves the process in "/", where `-m
        # dradriver` would import whatever the interpreter's editable install points at
        # (another checkout sharing the venv): this checkout's package comes first.
        paths = (str(REPO_ROOT), self.env.get("PYTHONPATH", ""))
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def _paths(self) -> SocketPaths:
        return socket_paths(
            Settings(
                node_name=self.node,
                driver_name=self.driver,
                kubelet_registry_dir=self.registry,
                kubelet_plugins_dir=self.plugins,
                pod_uid=self.pod_uid,
            )
        )

    @property
    def owner(self) -> str:
        """The owner ID this instance tags its interfaces with."""
        return naming.owner_id(self.driver, os.path.realpath(self.state))

    @property
    def reg_socket(self) -> Path:
        """Its registration socket (the kubelet's plugin watcher finds it)."""
        return self._paths.registration

    @property
    def service_socket(self) -> Path:
        """Its DRA service socket (the kubelet calls prepare and unprepare there)."""
        return self._paths.service

    def start(self, wait: bool = True) -> DriverProcess:
        """Start the daemon, its output appended to its log; with `wait`, until ready."""
        self.logf = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=self.env, cwd=REPO_ROOT
        )
        RUNNING.add(self.proc.pid)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until its registration socket answers GetInfo; fails if it exits first."""
        until_answering(self.reg_socket, self.proc, self.log, poll=0.05, timeout=timeout)

    def log(self) -> str:
        """Everything it logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send `sig` and wait (SIGKILL after `timeout`); its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        RUNNING.discard(self.proc.pid)
        self.logf.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would end it."""
        self.stop(signal.SIGKILL)

    def get_info(self, timeout: float = 5.0) -> registration_pb2.PluginInfo:
        """GetInfo on its registration socket, as the kubelet's plugin watcher asks."""
        return get_info(self.reg_socket, timeout)


def until_answering(
    reg_socket: Path,
    proc: subprocess.Popen[bytes] | None,
    log: Callable[[], str],
    poll: float,
    timeout: float = 30.0,
    since: float | None = None,
) -> float:
    """Seconds since `since` (a `time.perf_counter()` taken before the exec; now if
    None) until a plugin's registration socket answers GetInfo, asked every `poll`
    seconds from outside the process, as a plugin watcher finds it; fails if `proc`
    exits first or after `timeout`."""
    start = time.perf_counter() if since is None else since
    while time.perf_counter() - start < timeout:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"driver exited with {proc.returncode}:\n{log()}")
        if reg_socket.exists():
            try:
                get_info(reg_socket, timeout=max(poll, 2.0))
                return time.perf_counter() - start
            except grpc.RpcError:
                pass
        time.sleep(poll)
    raise AssertionError(f"driver not answering GetInfo after {timeout}s:\n{log()}")


def get_info(reg_socket: Path, timeout: float = 5.0) -> registration_pb2.PluginInfo:
    """GetInfo on a plugin's registration socket, as the kubelet's plugin watcher asks."""
    with grpc.insecure_channel(f"unix://{reg_socket}") as ch:
        info: registration_pb2.PluginInfo = registration_pb2_grpc.RegistrationStub(ch).GetInfo(
            registration_pb2.InfoRequest(), timeout=timeout
        )
        return info
