"""Fixtures of the deploy tests that build a tool: the Kubernetes-library checker."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.support import ROOT

K8SCHECK_SOURCE = Path(__file__).resolve().parent / "k8scheck"


@pytest.fixture(scope="session")
def k8scheck() -> Path:
    """tests/deploy/k8scheck built (Kubernetes' CEL and admission code; see test_k8s_real)."""
    if os.environ.get("DRA_SKIP_K8S_LIBS"):
        pytest.skip("DRA_SKIP_K8S_LIBS is set")
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.skip("no Go toolchain: cannot build the Kubernetes-library checker")
    out = ROOT / ".cache" / "deploy-tests" / "k8scheck"
    res = subprocess.run(
        [str(ROOT / "hack" / "build-k8scheck.sh")], capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip
    assert res.returncode == 0, f"building k8scheck failed:\n{res.stderr[-4000:]}"
    return out
