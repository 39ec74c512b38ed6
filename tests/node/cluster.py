"""What the node tier's tests do with the cluster: the e2e tier's readers (pods,
claims, slices) against the local node's control plane, but with a real kubelet:
nothing here finishes a pod's deletion or plays the kubelet; objects are deleted the
way a user deletes them and the kubelet does the rest."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from localcluster.node import LocalNode
from tests.e2e.cluster import CONTROLLERS, Cluster
from tests.support.waiting import wait_for

EVENTS = "/api/v1/namespaces/{ns}/events"


class NodeCluster(Cluster):
    """The local node's cluster. `self.node` is the Node's name, registered by its
    kubelet; the driver objects of deploy/ are applied by localcluster/driver.py."""

    def __init__(self, node: LocalNode) -> None:
        super().__init__(node.control_plane, node.name)
        self.local = node

    def setup(self) -> None:
        raise NotImplementedError("the kubelet registers the node; see install_driver_objects")

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Events about object `name` in `namespace`, oldest first."""
        query = urlencode({"fieldSelector": f"involvedObject.name={name}"})
        items = self.get(f"{EVENTS.format(ns=namespace)}?{query}")["items"]
        return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def describe_pod(self, namespace: str, name: str) -> str:
        """The pod's phase, conditions, container states and events, for messages."""
        pod = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}", missing_ok=True)
        if pod is None:
            return f"pod {namespace}/{name} does not exist"
        status = pod.get("status") or {}
        lines = [f"pod {namespace}/{name}: phase {status.get('phase')}"]
        for cond in status.get("conditions") or []:
            lines.append(f"  {cond['type']}={cond['status']} {cond.get('message', '')}")
        for st in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            lines.append(f"  container {st['name']}: {st.get('state')}")
        for ev in self.events(namespace, name):
            lines.append(f"  event {ev.get('reason')}: {ev.get('message', '')}")
        return "\n".join(lines)

    def wait_running(
        self, namespace: str, name: str, timeout: float = CONTROLLERS
    ) -> dict[str, Any]:
        """The pod once it is Running (its init containers done, its app started)."""

        def running() -> dict[str, Any] | None:
            pod = self.pod(namespace, name)
            return pod if (pod.get("status") or {}).get("phase") == "Running" else None

        return wait_for(
            f"pod {namespace}/{name} to run",
            running,
            timeout,
            log=lambda: self.describe_pod(namespace, name),
        )

    def delete_and_wait(self, namespace: str, name: str, timeout: float = CONTROLLERS) -> None:
        """A user's DELETE, then until the kubelet has finished the pod (its containers
        stopped, its claims unprepared) and the object is gone."""
        self.delete_pod(namespace, name)
        self.wait_pod_gone(namespace, name, timeout)

    def remove_namespace(self, name: str, timeout: float = CONTROLLERS) -> None:
        """Delete a test namespace and wait until the kubelet has finished every pod of
        it and the claim controller has released every claim. Controllers first, then
        the pods (a user's DELETE each: quicker than waiting for the namespace
        controller's back-off), then the namespace with what is left."""
        base = f"/apis/apps/v1/namespaces/{name}"
        for kind in ("deployments", "replicasets"):
            for obj in self.get(f"{base}/{kind}")["items"]:
                self.delete(f"{base}/{kind}/{obj['metadata']['name']}")
        for pod in self.pods(name):
            self.delete_pod(name, pod["metadata"]["name"])
        wait_for(f"pods of namespace {name} to go", lambda: not self.pods(name), timeout)
        self.delete(f"/api/v1/namespaces/{name}")
        wait_for(
            f"claims of namespace {name} to be released",
            lambda: not [c for c in self.claims(name) if (c.get("status") or {}).get("allocation")],
            timeout,
        )
