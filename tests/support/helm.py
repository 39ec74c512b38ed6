"""helm for the tests: the binary hack/build-helm.sh builds, and an environment that
keeps helm's own files out of the user's home."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "build-helm.sh"


def _have_go() -> bool:
    return bool(shutil.which("go")) or os.access("/usr/local/go/bin/go", os.X_OK)


@cache
def helm_binary() -> Path:
    """helm, built by hack/build-helm.sh if needed (a no-op when up to date); skips the
    test when there is no Go toolchain to build it with, or DRA_SKIP_HELM is set."""
    if os.environ.get("DRA_SKIP_HELM"):
        pytest.skip("DRA_SKIP_HELM is set")
    if not _have_go():
        pytest.skip("no Go toolchain (golang, or /usr/local/go): cannot build helm")
    res = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800, check=False)
    assert res.returncode == 0, (
        f"hack/build-helm.sh failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}"
    )
    out = subprocess.run([str(BUILD), "--bin"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def helm_env(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment for helm: its cache, config and data under `home`, and only
    `kubeconfig` (if any) as the cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.pop("KUBECONFIG", None)
    for kind in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{kind}_HOME"] = str(home / kind.lower())
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env
