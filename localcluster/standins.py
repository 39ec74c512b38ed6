"""Objects that stand for what a kubelet would do on a cluster without one (the e2e
tier's): a Node that is Ready, and a Pod bound to it that a driver's token refers to."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .binaries import K8S_VERSION


def node_manifest(
    name: str, resources: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Node as a kubelet would register it: Ready, with allocatable resources."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "e2e stand-in node, no kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": K8S_VERSION,
                "containerRuntimeVersion": "none://0",
                "kernelVersion": "",
                "osImage": "",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kubeProxyVersion": "",
            },
        },
    }


def standin_pod_manifest(name: str, sa_name: str, node_name: str) -> dict[str, Any]:
    """A Pod bound to ``node_name`` that never runs: the object a pod-bound
    ServiceAccount token of the driver refers to."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"dra-e2e/stand-in": "driver"}},
        "spec": {
            "nodeName": node_name,
            "serviceAccountName": sa_name,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "driver", "image": "stand-in.invalid/driver:e2e"}],
        },
    }
