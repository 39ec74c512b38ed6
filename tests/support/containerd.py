"""A real containerd for tests: every path in a temporary directory, NRI on its own socket.

The binary is DRA_CONTAINERD_BIN (hack/node builds one). To serve pods it also needs
containerd-shim-runc-v2, runc (built with seccomp), ctr and a static `pause` beside
it, and Debian's CNI plugins in /usr/lib/cni; it then runs in a throw-away network
namespace so that the pods' bridge stays out of the host's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support import cripods
from tests.support.waiting import wait_for

BIN = os.environ.get("DRA_CONTAINERD_BIN", "")
CNI_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
SANDBOX_IMAGE = "localhost/dra-driver-test/pause:local"
NODE_TOOLS = ("containerd-shim-runc-v2", "runc", "ctr", "pause")


def pods_skip_reason() -> str | None:
    """Why pods cannot run here, or None."""
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


def running_containerd(netns: str = "") -> Iterator[Containerd]:
    """A Containerd in a fresh temporary directory; stopped and removed afterwards."""
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
    """Processes whose command line names something under `root` (shims)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(root) in (proc / "cmdline").read_text():
                found.append(int(proc.name))
        except OSError:
            continue
    return found
