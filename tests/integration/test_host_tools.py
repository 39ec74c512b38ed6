"""The kernel-feature probes on a machine without optional host tools (a fresh machine).

A fresh machine of this project's kind has no `modprobe` (package kmod): the probes once
died there with FileNotFoundError, failing 16 tests with errors instead of probing. They
run here in a child process whose PATH holds only the commands we choose to give it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json; from tests.support import kernel; "
    "print(json.dumps({f: kernel.missing(f) for f in ('veth', 'dummy', 'rdma')}))"
)


def probe_with(tmp_path: Path, tools: list[str]) -> dict[str, str | None]:
    """Run the probes with a PATH holding only `tools` (symlinks to the real ones)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        real = shutil.which(tool)
        assert real, f"this test needs {tool} on the host to hand it to the probe"
        (bin_dir / tool).symlink_to(real)
    res = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


@pytest.mark.root
def test_probes_work_without_modprobe(tmp_path):
    found = probe_with(tmp_path, ["ip"])
    assert found["veth"] is None  # built into every kernel this project runs on
    if found["rdma"] is not None and not Path("/sys/module/rdma_rxe").exists():
        assert "kmod" in found["rdma"], found["rdma"]  # says what to install


@pytest.mark.root
def test_probes_without_ip_name_the_package(tmp_path):
    found = probe_with(tmp_path, [])
    assert found["veth"] == "the `ip` command is not installed (Debian package iproute2)"
    assert found["dummy"] == found["veth"]
