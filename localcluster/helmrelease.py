"""helm against a local cluster: the binary hack/build-helm.sh builds, its own files
kept out of the user's home, and one release of the project's chart."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from .binaries import REPO_ROOT
from .driverimage import repository_and_tag
from .images import Image
from .manifests import DEPLOY

BUILD = REPO_ROOT / "hack" / "build-helm.sh"
CHART = DEPLOY / "helm" / "dra-driver"
NAMESPACE = "dra-system"  # deploy/namespace.yaml's, labelled for privileged pods
RELEASE = "dra-driver"


def operator_values(image: Image, **settings: Any) -> dict[str, Any]:
    """The values an operator sets on a local cluster: the image (imported into the
    nodes, never pulled) and the one path of its layout that is not the chart's
    default (containerd's second CDI directory, /var/run/cdi); `settings` go under
    `settings`."""
    repo, tag = repository_and_tag(image.name)
    values: dict[str, Any] = {
        "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
        "hostPaths": {"cdiDir": "/var/run/cdi"},
    }
    if settings:
        values["settings"] = settings
    return values


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


def build_helm() -> Path:
    """helm, built by hack/build-helm.sh if needed (a no-op when up to date)."""
    res = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"hack/build-helm.sh failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    out = subprocess.run([str(BUILD), "--bin"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


class Release:
    """One release of the chart in `namespace`, through helm at `binary`."""

    def __init__(
        self, binary: Path, kubeconfig: Path, home: Path, name: str, namespace: str
    ) -> None:
        self.binary = binary
        self.env = helm_env(home, kubeconfig)
        self.home, self.name, self.namespace = home, name, namespace
        home.mkdir(parents=True, exist_ok=True)

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run helm; the result whatever its exit status."""
        return subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def values_file(self, label: str, values: dict[str, Any]) -> Path:
        """`values` written to a file for --values."""
        path = self.home / f"{label}.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        return path

    def install(self, values: dict[str, Any], *extra: str, upgrade: bool = False) -> None:
        """`helm install` (or `helm upgrade`) of the chart with `values`; raises with
        helm's message when it refuses."""
        verb = "upgrade" if upgrade else "install"
        res = self(
            verb,
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "--values",
            str(self.values_file(verb, values)),
            *extra,
        )
        if res.returncode != 0:
            raise RuntimeError(f"helm {verb} {self.name}: {res.stderr.strip()}")

    def uninstall(self) -> None:
        """`helm uninstall --wait`; nothing if the release is not installed."""
        res = self("uninstall", self.name, "--namespace", self.namespace, "--wait")
        if res.returncode != 0 and "not found" not in res.stderr:
            raise RuntimeError(f"helm uninstall {self.name}: {res.stderr.strip()}")

    def manifest(self) -> list[dict[str, Any]]:
        """The objects of the release's current revision, as helm recorded them."""
        res = self("get", "manifest", self.name, "--namespace", self.namespace)
        if res.returncode != 0:
            raise RuntimeError(f"helm get manifest {self.name}: {res.stderr.strip()}")
        return [d for d in yaml.safe_load_all(res.stdout) if d]
