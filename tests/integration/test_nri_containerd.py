"""The NRI plugin runtime against a real containerd (>= 2.0; the team pins v2.2.9).

Set DRA_CONTAINERD_BIN to a containerd binary (hack/node builds one). Each test starts
it as root with every path in a temporary directory, NRI on a socket of its own there,
and no pods: NRI starts with containerd's CRI service, which needs no pod to run.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dradriver.nri import NriPlugin
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


class Containerd:
    """One containerd process with everything under `root`; restartable."""

    def __init__(self, root: Path) -> None:
        self.root = root
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
[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = ["{r}/cdi"]
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{r}/cni-bin"]
  conf_dir = "{r}/cni"
"""

    def start(self) -> None:
        """Start containerd and wait for its NRI socket."""
        self.nri_socket.unlink(missing_ok=True)
        log = self.root / f"containerd-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [BIN, "--config", str(self.config)], stdout=out, stderr=subprocess.STDOUT
            )
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


@pytest.fixture
def containerd() -> Iterator[Containerd]:
    root = Path(tempfile.mkdtemp(prefix="nri-ctrd-", dir="/tmp"))  # short: socket paths
    runtime = Containerd(root)
    try:
        yield runtime
    finally:
        runtime.stop()
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(root))
        ]
        for mount in reversed(mounts):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(root, ignore_errors=True)


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
