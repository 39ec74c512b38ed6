"""What `make demo` prints about the example workloads: per pod, the interfaces it
got as seen inside it, and the status the driver wrote into each of its claims; for
a pod that cannot run, why."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .node import LocalNode
from .podnet import via_exec

RESOURCE = "/apis/resource.k8s.io/v1"
# Classes whose devices need hardware this machine does not have.
HARDWARE = {
    "rdma-devices": "an RDMA device (InfiniBand or RoCE NIC, or soft-RoCE rdma_rxe)",
    "roce-devices": "a RoCE device (an RDMA device with its own Ethernet netdev)",
    "network-devices": "a host NIC or SR-IOV VF on the driver's allow-lists",
}


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pods_of(node: LocalNode, deployment: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of a Deployment that are not being deleted."""
    ns = deployment["metadata"].get("namespace", "default")
    sel = _selector(deployment["spec"]["selector"]["matchLabels"])
    pods = node.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of an example Deployment or Pod."""
    spec = workload["spec"]
    return dict(spec["template"]["spec"] if workload["kind"] == "Deployment" else spec)


def pods_or_pod(node: LocalNode, workload: dict[str, Any]) -> list[dict[str, Any]]:
    """A Deployment's pods, or the example Pod itself (none if it is gone)."""
    if workload["kind"] == "Deployment":
        return pods_of(node, workload)
    ns = workload["metadata"].get("namespace", "default")
    query = f"fieldSelector=metadata.name%3D{workload['metadata']['name']}"
    return list(node.request("GET", f"/api/v1/namespaces/{ns}/pods?{query}")["items"])


def device_classes(workload: dict[str, Any], docs: Iterable[dict[str, Any]]) -> set[str]:
    """The device classes an example Deployment's or Pod's claims ask for."""
    templates = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ResourceClaimTemplate"}
    out = set()
    for ref in pod_spec(workload).get("resourceClaims") or []:
        template = templates.get(ref.get("resourceClaimTemplateName", ""))
        for req in (template or {}).get("spec", {}).get("spec", {}).get("devices", {}).get(
            "requests"
        ) or []:
            out.add(req["exactly"]["deviceClassName"])
    return out


def why_pending(pod: dict[str, Any]) -> str:
    """Why a pod does not run: unschedulable, or a container waiting and why."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond["type"] == "PodScheduled" and cond["status"] != "True":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}"
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    statuses += (pod.get("status") or {}).get("containerStatuses") or []
    for st in statuses:
        waiting = (st.get("state") or {}).get("waiting")
        if waiting:
            return f"{st['name']}: {waiting.get('reason')}: {waiting.get('message', '')}"
    return str((pod.get("status") or {}).get("phase"))


def claim_lines(node: LocalNode, pod: dict[str, Any]) -> list[str]:
    """One block per claim of the pod: allocated device, networkData, conditions."""
    ns = pod["metadata"]["namespace"]
    lines = []
    for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        name = st.get("resourceClaimName")
        if not name:
            continue
        claim = node.request("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")
        devices = (claim.get("status") or {}).get("devices") or []
        lines.append(f"    claim {name} ({st['name']}):")
        if not devices:
            lines.append("      status.devices: (none yet)")
        for dev in devices:
            where = f"{dev['driver']}/{dev['pool']}/{dev['device']}"
            if dev.get("shareID"):
                where += f" share {dev['shareID'][:8]}"
            nd = dev.get("networkData") or {}
            conds = ", ".join(
                f"{c['type']}={c['status']} ({c.get('reason', '')})"
                for c in dev.get("conditions") or []
            )
            lines.append(f"      device {where}")
            lines.append(
                f"      networkData: interface {nd.get('interfaceName', '-')}, "
                f"ips {', '.join(nd.get('ips') or []) or '-'}, "
                f"mac {nd.get('hardwareAddress', '-')}"
            )
            lines.append(f"      conditions: {conds or '-'}")
    return lines


def describe(node: LocalNode, docs: list[dict[str, Any]]) -> str:
    """Every example Deployment's pods and every example Pod: interfaces inside, claim
    status, or why not."""
    out = []
    for dep in (d for d in docs if d.get("kind") in ("Deployment", "Pod")):
        name = dep["metadata"]["name"]
        app = pod_spec(dep)["containers"][0]["name"]
        classes = device_classes(dep, docs)
        pods = pods_or_pod(node, dep)
        if not pods:
            out.append(f"{name}: no pod")
        for pod in pods:
            pname = pod["metadata"]["name"]
            phase = (pod.get("status") or {}).get("phase")
            where = f" on {pod['spec']['nodeName']}" if pod["spec"].get("nodeName") else ""
            out.append(f"{name}: pod {pname} {phase}{where}")
            if phase == "Running":
                ifaces = via_exec(node.kubectl, pod["metadata"]["namespace"], pname, app)
                out.append(f"    interfaces inside the pod (kubectl exec -c {app}):")
                out += [f"      {i.line()}" for i in ifaces.values() if i.name != "lo"]
            else:
                out.append(f"    not running: {why_pending(pod)}")
                needs = [HARDWARE[c] for c in sorted(classes) if c in HARDWARE]
                if needs:
                    out.append(
                        f"    expected here: it needs {'; '.join(needs)}, which this "
                        "machine does not have, so no ResourceSlice offers one"
                    )
            out += claim_lines(node, pod)
    return "\n".join(out)
