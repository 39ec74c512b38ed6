"""containerd on the local node: its configuration, the process, and the images."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence

from .binaries import Binaries
from .images import Image, arch
from .layout import NodeLayout
from .nodeconfig import cni_network, containerd_config
from .procs import Component

NAMESPACE = "k8s.io"  # containerd's namespace for everything the CRI does


class Containerd:
    """containerd in the node's namespaces, with runc and the shim of `bins`."""

    def __init__(self, lay: NodeLayout, bins: Binaries) -> None:
        self.lay = lay
        self.bins = bins
        self.config = lay.containerd_dir / "config.toml"
        self.nri = True  # NRI on, as containerd ships it
        env = {**os.environ, "PATH": f"{bins.node}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self.component = Component(
            "containerd",
            [str(bins["containerd"]), f"--config={self.config}"],
            lay.logs / "containerd.log",
            wrap=lay.enter(),
            env=env,
        )

    def start(self) -> None:
        """Write the configuration and the CNI network, start containerd (no wait)."""
        lay = self.lay
        for d in (lay.containerd_dir, lay.cni_conf_dir, lay.cni_ipam_dir, lay.cdi_dir, lay.logs):
            lay.on_host(d).mkdir(parents=True, exist_ok=True)
        self.config.write_text(containerd_config(lay, self.bins["runc"], self.nri))
        (lay.cni_conf_dir / "10-node.conflist").write_text(json.dumps(cni_network(lay), indent=1))
        self.component.start()

    def wait_ready(self, timeout: float = 30) -> None:
        """Until containerd answers on its socket."""
        deadline = time.monotonic() + timeout
        while True:
            self.component.check()
            if self.lay.containerd_socket.exists() and self.ctr("version").returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"containerd not ready after {timeout:.0f}s:\n{self.component.tail()}"
                )
            time.sleep(0.05)

    def ctr(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """`ctr` against this containerd, in its namespace `k8s.io`, inside the node."""
        argv = [
            *self.lay.enter(),
            str(self.bins["ctr"]),
            f"--address={self.lay.containerd_socket}",
            f"--namespace={NAMESPACE}",
            *args,
        ]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if check and res.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {res.stderr.strip()}")
        return res

    def import_images(self, images: Sequence[Image]) -> None:
        """Import image archives where the CRI finds them; check they are there."""
        for image in images:
            self.ctr(
                "images", "import", f"--platform=linux/{arch()}", str(image.archive), check=True
            )
        present = set(self.ctr("images", "list", "--quiet", check=True).stdout.split())
        absent = [i.name for i in images if i.name not in present]
        if absent:
            raise RuntimeError(f"images {absent} not in containerd after import: {sorted(present)}")

    def stop(self) -> None:
        """Stop containerd (the shims and containers keep running)."""
        self.component.stop()

    def restart(self, nri: bool | None = None) -> None:
        """Stop containerd and start it again (with NRI on or off if `nri` says); the
        pods' shims and containers keep running meanwhile, as on a real node."""
        self.stop()
        if nri is not None:
            self.nri = nri
        self.start()
        self.wait_ready()

    def running(self) -> bool:
        """Whether containerd runs."""
        return self.component.running()
