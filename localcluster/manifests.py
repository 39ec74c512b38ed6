"""The driver's manifests in deploy/, read as they are, for a cluster where the driver
runs outside its DaemonSet (a host process with a pod's identity)."""

from __future__ import annotations

from typing import Any

from .apiclient import load_documents
from .binaries import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
DRIVER_NAMESPACE = "dra-system"
DRIVER_SA = "dra-driver"


def driver_manifests() -> list[dict[str, Any]]:
    """deploy/driver.yaml without its DaemonSet (no kubelet could run it), unchanged."""
    return [d for d in load_documents(DEPLOY / "driver.yaml") if d["kind"] != "DaemonSet"]


def daemonset_env(name: str) -> str | None:
    """The value of environment variable `name` of the driver container in deploy/driver.yaml."""
    for doc in load_documents(DEPLOY / "driver.yaml"):
        if doc["kind"] == "DaemonSet":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for env in container.get("env") or []:
                    if env["name"] == name:
                        value: str | None = env.get("value")
                        return value
    return None
