"""helm for the tests: the binary hack/build-helm.sh builds, and an environment that
keeps helm's own files out of the user's home."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.helmrelease import helm_env

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


def device_classes(prefix: str) -> dict[str, dict[str, Any]]:
    """The chart's `deviceClasses` value with every class enabled and its default name
    prefixed: a release's classes beside deploy/'s in one cluster."""
    defaults = {
        "networkDevices": "network-devices",
        "virtualNetwork": "virtual-network",
        "rdmaDevices": "rdma-devices",
        "roceDevices": "roce-devices",
    }
    return {key: {"enabled": True, "name": prefix + name} for key, name in defaults.items()}


def pod_env(pod: dict[str, Any]) -> dict[str, str]:
    """The driver container's environment as the kubelet would give it: values, and the
    downward API's fields of this pod."""
    [container] = pod["spec"]["containers"]
    fields = {
        "spec.nodeName": pod["spec"]["nodeName"],
        "metadata.uid": pod["metadata"]["uid"],
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"]["namespace"],
    }
    env = {}
    for var in container["env"]:
        if "valueFrom" in var:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = var.get("value", "")
    return env


class Helm:
    """helm for one release, against the cluster of `kubeconfig`, its files in `home`."""

    def __init__(self, kubeconfig: Path, home: Path, release: str, namespace: str) -> None:
        self.binary = helm_binary()
        self.env = helm_env(home, kubeconfig)
        self.home, self.release, self.namespace = home, release, namespace
        home.mkdir(parents=True, exist_ok=True)

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env,
            timeout=300, check=False,
        )  # fmt: skip
        if check:
            assert res.returncode == 0, f"helm {' '.join(args)}:\n{res.stdout}\n{res.stderr}"
        return res

    def values(self, name: str, values: dict[str, Any]) -> str:
        """`values` written to a file for --values."""
        path = self.home / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        return str(path)

    def releases(self) -> list[dict[str, Any]]:
        """`helm list` of the release's namespace."""
        out = self("list", "--namespace", self.namespace, "--output", "yaml").stdout
        return list(yaml.safe_load(out) or [])

    def manifest(self) -> list[dict[str, Any]]:
        """The objects of the release's current revision, as helm recorded them."""
        out = self("get", "manifest", self.release, "--namespace", self.namespace).stdout
        return [d for d in yaml.safe_load_all(out) if d]
