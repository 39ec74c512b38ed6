"""The NRI plugin runtime against a real containerd (>= 2.0; the team pins v2.2.9).

Set DRA_CONTAINERD_BIN to a containerd binary (hack/node builds one). Each test starts
it as root with every path in a temporary directory and NRI on a socket of its own
there. The first needs no pods: NRI starts with containerd's CRI service. The second
creates real pod sandboxes through the CRI; it also needs containerd-shim-runc-v2, runc
(built with seccomp), ctr and a static `pause` beside the containerd binary, as
hack/node puts them, and Debian's CNI plugins in /usr/lib/cni. containerd runs in a
throw-away network namespace there, so the pods' bridge stays out of the host's.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dradriver.nri import NriPlugin, PodSandbox
from tests.support import cripods
from tests.support.waiting import wait_for

pytestmark = pytest.mark.root
BIN = os.environ.get("DRA_CONTAINERD_BIN", "")


def _skip_reason() -> str | None:
    if not BIN:
        return "DRA_CONTAINERD_BIN is not set: point it at a containerd >= 2.0 binary"
    if not os.access(BIN, os.X_OK):
        return f"DRA_CONTAINERD_BIN={BIN} is not an executable file"
    return None


if _skip_reason():
    pytestmark = [pytestmark, pytest.mark.skip(reason=_skip_reason() or "")]


CNI_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
SANDBOX_IMAGE = "localhost/dra-driver-test/pause:local"
NODE_TOOLS = ("containerd-shim-runc-v2", "runc", "ctr", "pause")


def _pods_skip_reason() -> str | None:
    bin_dir = Path(BIN).parent
    missing = [t for t in NODE_TOOLS if not os.access(bin_dir / t, os.X_OK)]
    if missing:
        return f"no {', '.join(missing)} beside {BIN} (hack/node builds them)"
    if not all((CNI_DIR / p).exists() for p in ("bridge", "host-local", "loopback")):
        return f"no CNI plugins in {CNI_DIR} (Debian package containernetworking-plugins)"
    if not shutil.which("nsenter"):
        return "no nsenter (Debian package util-linux)"
    return None


class Containerd:
    """One containerd process with everything under `root`; restartable."""

    def __init__(self, root: Path, netns: str = "") -> None:
        self.root = root
        self.netns = netns  # run inside this network namespace, and serve pods
        self.nri_socket = root / "nri.sock"
        self.config = root / "config.toml"
        self.config.write_text(self._config())
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def _config(self) -> str:
        r = self.root
        return f"""version = 3
root = "{r}/root"
state = "{r}/state"
imports = []
[grpc]
  address = "{r}/containerd.sock"
[ttrpc]
  address = "{r}/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "{r}/opt"
[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = "{r}/image-verifier"
[plugins.'io.containerd.nri.v1.nri']
  socket_path = "{self.nri_socket}"
  plugin_path = "{r}/nri-plugins"
  plugin_config_path = "{r}/nri-conf"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{SANDBOX_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["{r}/cdi"]
  # Root here lacks CAP_SYS_RESOURCE: negative OOM scores cannot be set.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{Path(BIN).parent / "runc"}"
  Root = "{r}/runc"
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{CNI_DIR}"]
  conf_dir = "{r}/cni"
"""

    def _cni(self) -> None:
        """A bridge network for the pods, inside containerd's own network namespace."""
        conf = self.root / "cni"
        conf.mkdir(exist_ok=True)
        network = {
            "cniVersion": "1.0.0",
            "name": "nri-test",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.root / "ipam"),
                        "ranges": [[{"subnet": "10.250.7.0/24"}]],
                    },
                }
            ],
        }
        (conf / "10-nri-test.conflist").write_text(json.dumps(network))

    def import_pause_image(self) -> None:
        """Import the sandbox image the config pins (nothing can be pulled here)."""
        archive = self.root / "pause.tar"
        cripods.pause_image(Path(BIN).parent / "pause", SANDBOX_IMAGE, archive)
        ctr = [str(Path(BIN).parent / "ctr"), "--address", str(self.socket), "-n", "k8s.io"]
        subprocess.run([*ctr, "images", "import", str(archive)], check=True, capture_output=True)

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket (the CRI)."""
        return self.root / "containerd.sock"

    def start(self) -> None:
        """Start containerd and wait for its NRI socket."""
        self.nri_socket.unlink(missing_ok=True)
        log = self.root / f"containerd-{len(self.logs)}.log"
        self.logs.append(log)
        argv = [BIN, "--config", str(self.config)]
        if self.netns:  # nsenter, not `ip netns exec`: that remounts /sys, hiding cgroups
            self._cni()
            argv = ["nsenter", f"--net=/run/netns/{self.netns}", *argv]
        env = {**os.environ, "PATH": f"{Path(BIN).parent}:{os.environ.get('PATH', '/usr/bin')}"}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        wait_for("containerd's NRI socket", self.nri_socket.exists, timeout=30, log=self.log)

    def stop(self) -> None:
        """SIGTERM (the way systemd stops it), SIGKILL after 15 s."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def log(self) -> str:
        """Everything containerd logged so far, across restarts (quotes unescaped)."""
        text = "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())
        return text.replace('\\"', '"')


def _make_containerd(netns: str = "") -> Iterator[Containerd]:
    root = Path(tempfile.mkdtemp(prefix="nri-ctrd-", dir="/tmp"))  # short: socket paths
    runtime = Containerd(root, netns)
    try:
        yield runtime
    finally:
        runtime.stop()
        for pid in _processes_under(root):  # shims left by a test that failed half-way
            os.kill(pid, signal.SIGKILL)
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(root))
        ]
        for mount in reversed(mounts):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(root, ignore_errors=True)


def _processes_under(root: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(root) in (proc / "cmdline").read_text():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
def containerd() -> Iterator[Containerd]:
    """containerd with NRI, serving no pods."""
    yield from _make_containerd()


@pytest.fixture
def pod_runtime(ns: str) -> Iterator[Containerd]:
    """containerd able to run pod sandboxes, inside the throw-away namespace `ns`."""
    reason = _pods_skip_reason()
    if reason:
        pytest.skip(reason)
    yield from _make_containerd(ns)


class Pods:
    """A SandboxHandler that queues what it is called with."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[str, object]] = queue.Queue()

    def synchronize(self, pods):
        self.calls.put(("sync", list(pods)))

    def run_pod_sandbox(self, pod):
        self.calls.put(("run", pod))

    def stop_pod_sandbox(self, pod):
        self.calls.put(("stop", pod))

    def remove_pod_sandbox(self, pod):
        self.calls.put(("remove", pod))


def test_registers_is_configured_synchronizes_and_survives_restarts(containerd, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.nri")
    containerd.start()
    pods = Pods()
    plugin = NriPlugin(containerd.nri_socket, pods, name="dra-driver", index="10", backoff_max=1.0)
    plugin.start()
    try:
        assert plugin.wait_registered(20), containerd.log()
        assert pods.calls.get(timeout=1) == ("sync", [])  # a runtime without pods
        wait_for(
            "containerd to list the plugin",
            lambda: (
                f'plugin "external:10-dra-driver[{os.getpid()}]" registered as "10-dra-driver"'
                in containerd.log()
                and 'plugin "10-dra-driver" connected and synchronized' in containerd.log()
            ),
            timeout=10,
            log=containerd.log,
        )
        configured = [r for r in caplog.records if r.getMessage() == "configured by the runtime"]
        assert configured[0].runtime == "containerd"
        assert configured[0].request_timeout == 2.0  # NRI's default plugin_request_timeout

        # containerd goes away (it says nothing to its plugins) and comes back.
        containerd.stop()
        wait_for("the plugin to notice", lambda: not plugin.connected, timeout=10)
        containerd.start()
        assert plugin.wait_registered(20), containerd.log()
        assert pods.calls.get(timeout=1) == ("sync", [])
        wait_for(
            "containerd to list the plugin again",
            lambda: (
                containerd.log().count('plugin "10-dra-driver" connected and synchronized') == 2
            ),
            timeout=10,
            log=containerd.log,
        )
    finally:
        plugin.stop()
    # A clean stop: the runtime sees the connection close and drops the plugin.
    wait_for(
        "containerd to drop the plugin",
        lambda: 'connection to plugin "10-dra-driver" closed' in containerd.log(),
        timeout=10,
        log=containerd.log,
    )
    assert not plugin.connected
    assert pods.calls.empty()
    # What nri's adaptation logs when it gives up on a plugin (pkg/adaptation).
    for failure in (
        "failed to create external plugin",
        "failed to start external plugin",
        "failed to synchronize plugin",
        "closing plugin",
    ):
        assert failure not in containerd.log()


class Recorder(Pods):
    """Pods, also noting whether the pod's netns existed when the call came."""

    def __init__(self, fail_uid: str = "", hang_uid: str = "", hang: float = 0.0) -> None:
        super().__init__()
        self.fail_uid, self.hang_uid, self.hang = fail_uid, hang_uid, hang

    def run_pod_sandbox(self, pod):
        self.calls.put(("run", pod, bool(pod.netns) and Path(pod.netns).exists()))
        if pod.uid == self.fail_uid:
            raise RuntimeError("no interface for this pod")
        if pod.uid == self.hang_uid:
            threading.Event().wait(self.hang)

    def stop_pod_sandbox(self, pod):
        self.calls.put(("stop", pod, bool(pod.netns) and Path(pod.netns).exists()))


def test_real_pod_sandboxes_reach_the_handler(pod_runtime, ns):
    """RunPodSandbox, StopPodSandbox, RemovePodSandbox through containerd's CRI."""
    rt = pod_runtime
    rt.start()
    rt.import_pause_image()
    pods = Recorder(fail_uid="uid-fails", hang_uid="uid-hangs", hang=1.5)
    plugin = NriPlugin(rt.nri_socket, pods, event_timeout=0.5, backoff_max=1.0)
    plugin.start()
    cri = cripods.Cri(rt.socket)
    created: list[str] = []
    cgroup = rt.root.name  # the pods' cgroup parent: this test's own, removed at the end
    try:
        assert plugin.wait_registered(20), rt.log()
        assert pods.calls.get(timeout=1) == ("sync", [])

        def config(name: str, uid: str, host: bool = False) -> bytes:
            logs = rt.root / "logs" / uid
            return cripods.sandbox_config(name, uid, "default", logs, cgroup, host)

        # A pod with its own network namespace: the handler sees its path, existing,
        # at run and stop (CNI set up, not yet torn down); at remove there is none.
        sid = cri.run(config("web", "uid-web"))
        created.append(sid)
        what, pod, existed = pods.calls.get(timeout=5)
        assert (what, pod.id, pod.uid, pod.name, pod.namespace) == (
            "run",
            sid,
            "uid-web",
            "web",
            "default",
        )
        assert existed
        assert re.fullmatch(rf"{rt.root}/state/.*/netns/cni-[0-9a-f-]+", pod.netns)
        cri.stop(sid)
        assert pods.calls.get(timeout=5) == ("stop", pod, True)
        cri.remove(sid)
        created.remove(sid)
        assert pods.calls.get(timeout=5) == (
            "remove",
            PodSandbox(sid, "uid-web", "web", "default", ""),
        )

        # A host-network pod has no netns of its own.
        sid = cri.run(config("host", "uid-host", host=True))
        created.append(sid)
        assert pods.calls.get(timeout=5)[1:] == (
            PodSandbox(sid, "uid-host", "host", "default", ""),
            False,
        )
        cri.stop(sid)
        cri.remove(sid)
        created.remove(sid)
        assert [pods.calls.get(timeout=5)[0] for _ in range(2)] == ["stop", "remove"]

        # A handler that raises fails the sandbox, with our message; containerd then
        # stops and removes it, and keeps the plugin.
        with pytest.raises(grpc.RpcError) as err:
            cri.run(config("broken", "uid-fails"))
        assert "NRI RunPodSandbox failed" in err.value.details()
        assert (
            "dra-driver: RunPodSandbox of pod default/broken (uid uid-fails): "
            "no interface for this pod" in err.value.details()
        )
        assert [pods.calls.get(timeout=5)[0] for _ in range(3)] == ["run", "stop", "remove"]
        assert plugin.connected

        # A handler that hangs: the sandbox fails with our time-out, not containerd's
        # (which would drop the plugin); the pod's teardown runs once the handler returns.
        with pytest.raises(grpc.RpcError) as err:
            cri.run(config("slow", "uid-hangs"))
        assert "not handled within 0.50s" in err.value.details()
        assert [pods.calls.get(timeout=5)[0] for _ in range(3)] == ["run", "stop", "remove"]
        assert plugin.connected
        assert "closing plugin" not in rt.log()
    finally:
        for sid in created:
            try:
                cri.stop(sid)
                cri.remove(sid)
            except grpc.RpcError:
                pass
        cri.close()
        plugin.stop()
        rt.stop()
        cripods.remove_cgroup(cgroup)
