"""A peer driver's binary beside ours on the bench's real node: the Go original
(`cmd/dra-driver` of its repository, built with `go build`), given to `make bench` as
BENCH_PEER_DRIVER, so that its figures and ours come from the same run on the same node.

It runs as its DaemonSet runs it, but as a host process in the node's mount and network
namespaces (as ours does, localcluster/driver.py), with what its binary expects where it
expects it: the in-cluster configuration (KUBERNETES_SERVICE_HOST and _PORT, the token,
CA and namespace under /var/run/secrets/kubernetes.io/serviceaccount, in the node's own
/run), the kubelet's plugin directories under /var/lib/kubelet (links in the node's own
/var/lib to those of the node's kubelet root) and its CDI directory at /etc/cdi
(containerd's, bound there in a mount namespace of its own over an overlay of /etc, so
the host's /etc is not touched). Its token is one of our ServiceAccount's, bound to our
stand-in Pod: the two never run at once, and between them the node's slices of the
driver's name are deleted (`clear_slices`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

from localcluster.driver import HostDriver, kubelet_registrations
from localcluster.driverproc import DRIVER, until_answering
from localcluster.node import LocalNode
from tests.support.waiting import wait_for

ENV = "BENCH_PEER_DRIVER"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KUBELET_ROOT = Path("/var/lib/kubelet")
# Its kubelet plugin helper's defaults (no rolling update: no pod UID is given).
ENDPOINT = KUBELET_ROOT / "plugins" / DRIVER / "dra.sock"
MOUNTS = """set -e
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc
mkdir -p /etc/cdi
mount --bind "$3" /etc/cdi
shift 3
exec "$@"
"""


def peer_binary() -> Path | None:
    """The peer's binary named by BENCH_PEER_DRIVER, or None; an error if it is not one."""
    value = os.environ.get(ENV, "")
    if not value:
        return None
    path = Path(value).resolve()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SystemExit(f"bench: {ENV}={value} is not an executable file")
    return path


def clear_slices(node: LocalNode) -> None:
    """Delete the node's ResourceSlices of the driver's name, as uninstalling one driver
    before installing the other does: each keeps its slices when it stops, and the
    scheduler would otherwise allocate the other's devices."""
    selector = f"spec.driver={DRIVER},spec.nodeName={node.name}"
    base = "/apis/resource.k8s.io/v1/resourceslices"
    for item in node.request("GET", f"{base}?fieldSelector={quote(selector)}")["items"]:
        node.request("DELETE", f"{base}/{item['metadata']['name']}")


class PeerDriver:
    """The peer's binary on `node`, with a token like that of `ours` (see the module)."""

    def __init__(self, node: LocalNode, binary: Path, ours: HostDriver) -> None:
        self.node, self.binary, self.ours = node, binary, ours
        lay = node.lay
        self.dir = lay.driver_dir / "peer"
        self.log_path = lay.driver_dir / "peer.log"
        self.reg_socket = lay.kubelet_registry / f"{DRIVER}-reg.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self._kubelet = lay.private_dir("/var/lib") / "kubelet"
        self._secrets = lay.private_dir("/run") / SERVICE_ACCOUNT.relative_to("/var/run")
        self.env: dict[str, str] = {}  # its in-cluster configuration's, from prepare()

    def prepare(self) -> None:
        """Its in-cluster configuration and its kubelet directory, in the node."""
        lay = self.node.lay
        kubeconfig = self.node.control_plane.bound_token_kubeconfig(
            self.ours.namespace, self.ours.service_account, self.ours.pod, self.node.name
        )
        config = json.loads(kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self._secrets.mkdir(parents=True, exist_ok=True)
        (self._secrets / "token").write_text(user["token"])
        (self._secrets / "ca.crt").write_bytes(
            base64.b64decode(cluster["certificate-authority-data"])
        )
        (self._secrets / "namespace").write_text(self.ours.namespace)
        server = urlsplit(cluster["server"])
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "NODE_NAME": self.node.name,
            "KUBERNETES_SERVICE_HOST": server.hostname or "",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
        }
        for sub in ("plugins", "plugins_registry"):
            link = self._kubelet / sub
            if link.is_symlink():
                continue
            if link.is_dir():
                link.rmdir()  # an error if the node keeps anything there
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(lay.kubelet_root / sub)
        for sub in ("upper", "work"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)

    def start(self, poll: float) -> float:
        """Exec it: seconds until its registration socket answers GetInfo, polled every
        `poll` from outside; then until the kubelet has registered it."""
        seen = self.registrations()
        lay = self.node.lay
        cmd = [
            *lay.enter(),
            *("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", MOUNTS),
            *("sh", str(self.dir / "upper"), str(self.dir / "work"), str(lay.cdi_dir)),
            *(str(self.binary), f"--driver-name={DRIVER}", f"--node-name={self.node.name}"),
        ]
        with self.log_path.open("ab") as log:
            start = time.perf_counter()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        took = until_answering(self.reg_socket, self.proc, self.log, poll, since=start)
        wait_for(
            "the kubelet to register the peer driver",
            lambda: self.registrations() > seen,
            30,
            log=self.log,
        )
        return took

    def registrations(self) -> int:
        """How often the kubelet has registered it."""
        return kubelet_registrations(self.node, self.reg_socket, str(ENDPOINT))

    @property
    def pid(self) -> int:
        """Its process (the binary: every command before it execs the next)."""
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 15 s; its sockets are removed if it left them."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for sock in (self.reg_socket, self.node.lay.kubelet_plugins / DRIVER / "dra.sock"):
            sock.unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Stop it and remove what `prepare` put in the node."""
        self.stop()
        for sub in ("plugins", "plugins_registry"):
            if (self._kubelet / sub).is_symlink():
                (self._kubelet / sub).unlink()
        shutil.rmtree(self._secrets.parent.parent, ignore_errors=True)  # .../secrets
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        """Everything it logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
