"""Fixtures of the deploy tests that build a tool: the Kubernetes-library checker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy.support import ROOT

# How hack/build-k8scheck.sh begins what it prints when it builds nothing.
SKIPPED = "build-k8scheck: not built"


@pytest.fixture(scope="session")
def k8scheck() -> Path:
    """tests/deploy/k8scheck built (Kubernetes' CEL and admission code; see test_k8s_real)
    by hack/build-k8scheck.sh, which says why when it builds nothing (no Go toolchain, or
    DRA_SKIP_K8S_LIBS set): the tests skip with its words."""
    out = ROOT / ".cache" / "deploy-tests" / "k8scheck"
    res = subprocess.run(
        [str(ROOT / "hack" / "build-k8scheck.sh")], capture_output=True, text=True,
        timeout=1200, check=False,
    )  # fmt: skip
    assert res.returncode == 0, f"building k8scheck failed:\n{res.stderr[-4000:]}"
    if res.stdout.startswith(SKIPPED):
        pytest.skip(res.stdout.strip())
    return out
