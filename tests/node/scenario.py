"""Objects the node tier's tests create: claim templates and pods, written the way
the examples in deploy/ are (the claim referenced from an init container, an app
container that exits at once on SIGTERM, a short grace period)."""

from __future__ import annotations

from typing import Any

from localcluster.images import BUSYBOX_IMAGE
from tests.support.driverproc import DRIVER

# An app that sleeps and exits at once on SIGTERM (busybox sleep itself ignores it).
SLEEPER = ["sh", "-c", "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"]


def template(
    name: str,
    netdev: dict[str, Any],
    *,
    request: str = "nic",
    device_class: str = "virtual-network",
    driver: str = DRIVER,
) -> dict[str, Any]:
    """A ResourceClaimTemplate: one request of `device_class`, a netdev config for
    `driver`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {
                                "driver": driver,
                                "parameters": {"type": "netdev", "netdev": netdev},
                            },
                        }
                    ],
                }
            }
        },
    }


def pod(
    name: str,
    templates: list[str],
    *,
    from_init: bool = True,
    app_command: list[str] | None = None,
    restart_policy: str = "Always",
) -> dict[str, Any]:
    """A pod with one claim per template, named after the template. With `from_init`
    (the examples' way) an init container references the claims and the app does not;
    otherwise the app container references them itself."""
    refs = [{"name": t} for t in templates]
    app: dict[str, Any] = {
        "name": "app",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": app_command or SLEEPER,
    }
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": restart_policy,
        "containers": [app],
    }
    if templates:
        spec["resourceClaims"] = [{"name": t, "resourceClaimTemplateName": t} for t in templates]
    if templates and from_init:
        spec["initContainers"] = [
            {
                "name": "attach-net",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["true"],
                "resources": {"claims": refs},
            }
        ]
    elif templates:
        app["resources"] = {"claims": refs}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def plain_pod(name: str) -> dict[str, Any]:
    """The same pod without a claim (the baseline for start-up latency): the init
    container stays, so the difference is the claim's own cost."""
    obj = pod(name, [])
    obj["spec"]["initContainers"] = [
        {
            "name": "attach-net",
            "image": BUSYBOX_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["true"],
        }
    ]
    return obj
