"""The Kubernetes-library checker (tests/deploy/k8scheck), built once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.support import ROOT

SOURCE = Path(__file__).resolve().parent / "k8scheck"


@pytest.fixture(scope="session")
def k8scheck() -> Path:
    """The checker binary, built with Go (skips without a Go toolchain)."""
    if os.environ.get("DRA_SKIP_K8S_LIBS"):
        pytest.skip("DRA_SKIP_K8S_LIBS is set")
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.skip("no Go toolchain: cannot build the Kubernetes-library checker")
    out = ROOT / ".cache" / "deploy-tests" / "k8scheck"
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=readonly -modcacherw",
        "GOCACHE": os.environ.get("GOCACHE", str(ROOT / ".cache" / "go" / "build")),
        "GOMODCACHE": os.environ.get("GOMODCACHE", str(ROOT / ".cache" / "go" / "mod")),
    }
    res = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=SOURCE, env=env, capture_output=True,
        text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert res.returncode == 0, f"building k8scheck failed:\n{res.stderr[-4000:]}"
    return out
