"""What the cluster tier does with the local cluster: the chart installed the way an
operator installs it, its driver pods, their credentials, and what each node holds."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster.cluster import LocalCluster
from localcluster.helmrelease import NAMESPACE, Release, operator_values
from localcluster.images import Image
from localcluster.node import LocalNode
from tests.node.cluster import NodeCluster
from tests.node.leftovers import DriverState, driver_state
from tests.support.waiting import wait_for

DAEMONSET = "dra-driver"  # the chart's full name for this release
SELECTOR = "app.kubernetes.io/name=dra-driver"


class ChartCluster:
    """The local cluster, the chart's release on it, and the API as admin."""

    def __init__(self, local: LocalCluster, release: Release, image: Image) -> None:
        self.local = local
        self.release = release
        self.image = image
        self.api = NodeCluster(local.nodes[0])

    @property
    def node_names(self) -> list[str]:
        """The names of the nodes whose kubelet runs, in order."""
        return [n.name for n in self.local.nodes if n.kubelet is not None and n.kubelet.running()]

    def node(self, name: str) -> LocalNode:
        """The local node called `name`."""
        return self.local.node(name)

    def kubectl(self, *args: str, check: bool = True) -> Any:
        """kubectl as admin."""
        return self.local.kubectl(*args, check=check)

    # ------------------------------------------------------------ the driver
    def driver_pods(self) -> list[dict[str, Any]]:
        """The DaemonSet's pods (any phase)."""
        return self.api.pods(NAMESPACE, SELECTOR)

    def driver_pod(self, node: str, replacing: str = "") -> dict[str, Any]:
        """The one running, Ready driver pod of `node` (waited for); with `replacing`,
        one whose driver container is another than that one (`driver_container`)."""

        def ready() -> dict[str, Any] | None:
            pods = [
                p
                for p in self.driver_pods()
                if p["spec"].get("nodeName") == node
                and not p["metadata"].get("deletionTimestamp")
                and _ready(p)
                and driver_container(p) != replacing
            ]
            return pods[0] if len(pods) == 1 else None

        return wait_for(f"one Ready driver pod on {node}", ready, 120, log=self.describe_drivers)

    @contextlib.contextmanager
    def installed(self, values: dict[str, Any]) -> Iterator[None]:
        """The release upgraded to `values` and rolled out for the block; then back to
        the operator's defaults, rolled out again."""
        self.release.install(values, upgrade=True)
        try:
            self.wait_rollout()
            yield
        finally:
            self.release.install(operator_values(self.image), upgrade=True)
            self.wait_rollout()

    def wait_rollout(self, timeout: float = 180) -> None:
        """Until the DaemonSet has one updated, Ready pod per node and no other."""

        def done() -> bool:
            ds = self.api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{DAEMONSET}")
            st, want = ds.get("status") or {}, len(self.node_names)
            return bool(
                st.get("observedGeneration") == ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled") == want
                and st.get("numberAvailable") == want
                and st.get("currentNumberScheduled") == want
                and len(self.driver_pods()) == want
            )

        wait_for("the driver DaemonSet's rollout", done, timeout, log=self.describe_drivers)

    def describe_drivers(self) -> str:
        """The driver pods' states and events, for messages."""
        return "\n".join(
            self.api.describe_pod(NAMESPACE, p["metadata"]["name"]) for p in self.driver_pods()
        )

    def driver_log(self, pod: dict[str, Any], previous: bool = False) -> str:
        """`kubectl logs` of a driver pod."""
        args = ["-n", NAMESPACE, "logs", pod["metadata"]["name"]]
        return str(self.kubectl(*args, *(["--previous"] if previous else [])).stdout)

    def pod_token(self, pod: dict[str, Any]) -> str:
        """The ServiceAccount token the kubelet projected into `pod` (as it reads it:
        the projected volume is a tmpfs in the node's mount namespace)."""
        node = self.node(pod["spec"]["nodeName"])
        volumes = node.lay.kubelet_root / "pods" / pod["metadata"]["uid"] / "volumes"
        res = subprocess.run(
            [*node.lay.enter(), "sh", "-c", f"cat {volumes}/kubernetes.io~projected/*/token"],
            capture_output=True,
            text=True,
            check=True,
        )
        return res.stdout.strip()

    def held(self, node: str) -> DriverState:
        """What the driver keeps on `node`: links, CDI specs, records."""
        return driver_state(self.node(node).lay)

    def wait_nothing_held(self, timeout: float = 60) -> None:
        """Until no node holds a link, spec or record of any claim."""

        def empty() -> bool:
            return all(
                not (s.links or s.specs or s.records) for s in map(self.held, self.node_names)
            )

        wait_for(
            "every node to hold nothing of the driver",
            empty,
            timeout,
            log=lambda: "\n".join(f"{n}: {self.held(n)}" for n in self.node_names),
        )


def driver_container(pod: dict[str, Any]) -> str:
    """The ID of a driver pod's container as its status has it ("" before it has one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return str(statuses[0].get("containerID", ""))


def _ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return bool(cond["status"] == "True")
    return False


def pinned(obj: dict[str, Any], node: str) -> dict[str, Any]:
    """A pod placed on `node` by the scheduler (nodeSelector; never nodeName, which
    would skip the scheduler and so the claims' allocation)."""
    obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return obj


def elapsed_since(timestamp: str) -> float:
    """Seconds since an API timestamp (RFC 3339, UTC)."""
    return time.time() - time.mktime(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")) + time.timezone


def host_path(node: LocalNode, path: str) -> Path:
    """Where the host sees `path` of `node`."""
    return node.lay.on_host(Path(path))
