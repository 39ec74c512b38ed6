"""Smoke test of the control plane itself (localcluster/controlplane.py, no driver).

Needs the binaries from ``hack/build-k8s.sh``; skipped without them.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.binaries import default_bin_dir, missing_binaries
from localcluster.controlplane import ControlPlane
from localcluster.tokens import NODE_NAME_EXTRA
from tests.support import hosttools
from tests.support.waiting import wait_for

BIN_DIR = default_bin_dir()
_MISSING = missing_binaries(BIN_DIR)
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(_MISSING),
        reason=f"control-plane binaries not built ({', '.join(_MISSING)} missing in {BIN_DIR}): "
        "run hack/build-k8s.sh",
    ),
]

NODE = "e2e-node-1"
NAMESPACE = "smoke"
DRIVER = "smoke.dra.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIM_OBJECTS = f"""
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: smoke}}
spec:
  selectors: [{{cel: {{expression: 'device.driver == "{DRIVER}"'}}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-slot, namespace: {NAMESPACE}}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly:
          deviceClassName: smoke
          capacity: {{requests: {{slots: "1"}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: with-claim, namespace: {NAMESPACE}}}
spec:
  resourceClaims: [{{name: dev, resourceClaimTemplateName: one-slot}}]
  containers:
  - name: c
    image: stand-in.invalid/user:e2e
    resources: {{claims: [{{name: dev}}]}}
"""


def slice_manifest(node_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{NODE}-{DRIVER}",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": NODE,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "dev0",
                    "allowMultipleAllocations": True,
                    "attributes": {"model": {"string": "smoke"}},
                    "capacity": {"slots": {"value": "4", "requestPolicy": {"default": "1"}}},
                }
            ],
        },
    }


def consumable_fields(obj: dict[str, Any]) -> tuple[Any, Any]:
    dev = obj["spec"]["devices"][0]
    return dev.get("allowMultipleAllocations"), dev["capacity"]["slots"].get("requestPolicy")


def pgrep(pattern: str) -> list[str]:
    out = hosttools.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def test_control_plane_smoke() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="dra-e2e-cp-"))
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    cp = ControlPlane(workdir, bin_dir=BIN_DIR)
    with cp:
        timings["start"] = cp.startup_seconds or 0.0
        pids = cp.pids()
        assert set(pids) == {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}

        # A Node for this machine, and the scheduler binds a pod to it.
        node_uid = cp.create_node(NODE)
        node = cp.request("GET", f"/api/v1/nodes/{NODE}")
        assert node["metadata"]["uid"] == node_uid
        assert node["status"]["allocatable"]["pods"] == "110"
        assert not node["spec"].get("taints"), node["spec"]
        cp.create_namespace(NAMESPACE)
        t = time.monotonic()
        cp.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: sleeper, namespace: {NAMESPACE}}}
spec:
  containers: [{{name: c, image: stand-in.invalid/sleeper:e2e}}]
""")
        bound = wait_for(
            "the scheduler to bind the pod",
            lambda: cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/sleeper")["spec"].get(
                "nodeName"
            ),
        )
        assert bound == NODE
        timings["schedule"] = time.monotonic() - t

        # ResourceSlice with DRAConsumableCapacity on: the fields survive.
        want = slice_manifest(node_uid)
        created = cp.request("POST", SLICES, want)
        assert consumable_fields(created) == (True, {"default": "1"})
        read = cp.request("GET", f"{SLICES}/{want['metadata']['name']}")
        assert consumable_fields(read) == (True, {"default": "1"})

        # The resourceclaim controller makes a claim from the template, and the
        # scheduler allocates one slot of the shared device and binds the pod.
        t = time.monotonic()
        cp.apply(CLAIM_OBJECTS)
        wait_for(
            "the pod with a claim to be bound",
            lambda: cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/with-claim")[
                "spec"
            ].get("nodeName"),
        )
        claim_pod = cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/with-claim")
        claim_name = claim_pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        claim = cp.request(
            "GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{claim_name}"
        )
        result = claim["status"]["allocation"]["devices"]["results"][0]
        assert (result["pool"], result["device"]) == (NODE, "dev0")
        assert result["consumedCapacity"] == {"slots": "1"} and result["shareID"]
        timings["claim"] = time.monotonic() - t

        # A pod-bound token of the driver's ServiceAccount carries the node name.
        t = time.monotonic()
        kubeconfig = cp.serviceaccount_kubeconfig("dra-smoke", "driver", NODE)
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        user = cp.whoami(token)
        assert user["username"] == "system:serviceaccount:dra-smoke:driver"
        assert user["extra"][NODE_NAME_EXTRA] == [NODE]
        timings["sa_kubeconfig"] = time.monotonic() - t

        # The API server without the gate drops them from a newly written slice.
        t = time.monotonic()
        cp.restart_apiserver({"DRAConsumableCapacity": False})
        timings["restart_apiserver"] = time.monotonic() - t
        # Stored before: still there on read, and kept on update (the strategy
        # only drops disabled fields the old object did not use).
        read = cp.request("GET", f"{SLICES}/{want['metadata']['name']}")
        assert consumable_fields(read) == (True, {"default": "1"})
        update = copy.deepcopy(read)
        update["spec"]["pool"]["generation"] = 2
        updated = cp.request("PUT", f"{SLICES}/{want['metadata']['name']}", update)
        assert consumable_fields(updated) == (True, {"default": "1"})
        # Written anew: dropped, with the rest of the device intact.
        cp.request("DELETE", f"{SLICES}/{want['metadata']['name']}")
        recreated = cp.request("POST", SLICES, want)
        assert consumable_fields(recreated) == (None, None)
        assert recreated["spec"]["devices"][0]["capacity"]["slots"] == {"value": "4"}
        read = cp.request("GET", f"{SLICES}/{want['metadata']['name']}")
        assert consumable_fields(read) == (None, None)

        # The rest of the control plane kept working across the restart.
        t = time.monotonic()
        cp.apply(f"""
apiVersion: v1
kind: Pod
metadata: {{name: sleeper-2, namespace: {NAMESPACE}}}
spec:
  containers: [{{name: c, image: stand-in.invalid/sleeper:e2e}}]
""")
        wait_for(
            "the scheduler to bind the second pod",
            lambda: cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/sleeper-2")["spec"].get(
                "nodeName"
            ),
        )
        timings["schedule_after_restart"] = time.monotonic() - t
        t = time.monotonic()
    timings["stop"] = time.monotonic() - t
    timings["total"] = time.monotonic() - t0

    # Nothing survives the stop: no process, no file.
    assert not pgrep(str(workdir)), pgrep(str(workdir))
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()
    print(
        "\ncontrol plane smoke timings: " + ", ".join(f"{k}={v:.1f}s" for k, v in timings.items())
    )
