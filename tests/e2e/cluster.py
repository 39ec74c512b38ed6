"""What the scenario tests do with the control plane: the deploy manifests, pods and
claims, and the parts of a kubelet's job that no kubelet does here.

There is no kubelet. The tests play it: they take the claims of a pod bound to the
node exactly as the kubelet would send them, call the driver over its sockets, and
finish a pod's deletion the way the kubelet does after its containers stopped (a
DELETE with grace period 0, see `Cluster.finish_pod_deletion`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import yaml

from localcluster.apiclient import ApiError, load_documents
from localcluster.controlplane import ControlPlane
from localcluster.manifests import DEPLOY, DRIVER_NAMESPACE, DRIVER_SA, driver_manifests
from tests.support.driverproc import DRIVER
from tests.support.waiting import wait_for

RESOURCE = "/apis/resource.k8s.io/v1"
SLICES = f"{RESOURCE}/resourceslices"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
CONFIG_POLICY = DEPLOY / "config-policy.yaml"
# Set by the resourceclaim controller on the claims it generates from a pod's templates.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
# How long to wait for kube-scheduler or kube-controller-manager to act. Normally well
# under a second; after a kube-apiserver restart their informers back off on the errors
# they met meanwhile (up to client-go's 30 s cap) before they see changes again.
CONTROLLERS = 90.0


def config_policy_manifests() -> list[dict[str, Any]]:
    """deploy/config-policy.yaml: the opaque-config admission policies and bindings."""
    return load_documents(CONFIG_POLICY)


def config_probes() -> dict[str, dict[str, Any]]:
    """For each config policy, a claim only it refuses (created with dryRun: nothing stays).
    The merged policy (the one with DeviceClass params) sees a macvlan without parent,
    the other an MTU of 1."""
    probes = {}
    for doc in config_policy_manifests():
        if doc["kind"] != "ValidatingAdmissionPolicy":
            continue
        netdev = {"kind": "macvlan"} if "paramKind" in doc["spec"] else {"mtu": 1}
        params = {"type": "netdev", "netdev": netdev}
        probes[doc["metadata"]["name"]] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "e2e-config-policy-probe", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "nic", "exactly": {"deviceClassName": "virtual-network"}}
                    ],
                    "config": [{"opaque": {"driver": DRIVER, "parameters": params}}],
                }
            },
        }
    return probes


def example_objects(path: Path, namespace: str) -> list[dict[str, Any]]:
    """The objects of an example manifest, moved into `namespace` (nothing else changed)."""
    docs = copy.deepcopy(load_documents(path))
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


def netdev_kind_of_template(template: dict[str, Any]) -> str | None:
    """The netdev kind a ResourceClaimTemplate of ours asks for (macvlan, dummy...)."""
    for cfg in template["spec"]["spec"]["devices"].get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if (cfg.get("opaque") or {}).get("driver") == DRIVER and params.get("type") == "netdev":
            return str(params["netdev"].get("kind"))
    return None


def template_config(template: dict[str, Any]) -> dict[str, Any]:
    """The netdev config of one of our ResourceClaimTemplates."""
    for cfg in template["spec"]["spec"]["devices"].get("config") or []:
        if (cfg.get("opaque") or {}).get("driver") == DRIVER:
            return dict(cfg["opaque"]["parameters"]["netdev"])
    raise LookupError(f"no {DRIVER} config in template {template['metadata']['name']}")


class Cluster:
    """The session's control plane, with the driver's manifests applied and a Node."""

    def __init__(self, cp: ControlPlane, node: str) -> None:
        self.cp = cp
        self.node = node
        self.node_uid = ""
        self.driver_kubeconfig = Path()

    def setup(self) -> None:
        """namespace.yaml, driver.yaml (but the DaemonSet) and resourceclass.yaml as they
        are; the Node; a token of the driver's ServiceAccount bound to a pod on it."""
        self.cp.apply(DEPLOY / "namespace.yaml")
        self.cp.apply(driver_manifests())
        self.cp.apply(DEPLOY / "resourceclass.yaml")
        self.cp.apply(config_policy_manifests())
        self.node_uid, self.driver_kubeconfig = self.add_node(self.node)
        self.wait_policy_enforced()
        self.wait_config_policy(enforced=True)

    def add_node(self, name: str) -> tuple[str, Path]:
        """A Node, and a kubeconfig with a token of the driver's ServiceAccount bound to
        a stand-in pod on it (as the DaemonSet's pod would have); the Node's UID."""
        uid = self.cp.create_node(name)
        return uid, self.cp.serviceaccount_kubeconfig(DRIVER_NAMESPACE, DRIVER_SA, name)

    def remove_node(self, name: str) -> None:
        """The node leaves: its driver's slices, the stand-in pod, the Node."""
        self.delete_slices(name)
        for pod in self.pods(DRIVER_NAMESPACE):
            if pod["spec"].get("nodeName") == name:
                self.finish_pod_deletion(DRIVER_NAMESPACE, pod["metadata"]["name"])
        self.delete(f"/api/v1/nodes/{name}")

    def wait_policy_enforced(
        self,
        kubeconfig: Path | None = None,
        policy: str = "dra-driver-resourceslices",
        driver: str = DRIVER,
    ) -> None:
        """A new ValidatingAdmissionPolicy is enforced only once the API server's policy
        informer has it (about 0.5 s): until then probe with a slice for a node that
        does not exist, written with the driver's token (of `kubeconfig`), and remove it
        if it got in."""
        token = self.kubeconfig_token(kubeconfig or self.driver_kubeconfig)
        probe = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "e2e-policy-probe"},
            "spec": {
                "driver": driver,
                "nodeName": "e2e-policy-probe",
                "pool": {"name": "e2e-policy-probe", "resourceSliceCount": 1},
                "devices": [],
            },
        }

        def refused() -> bool:
            try:
                self.cp.request("POST", SLICES, probe, token=token)
            except ApiError as e:
                if f"'{policy}'" in str(e):
                    return True  # denied by the policy (its answer code is tested apart)
                raise
            self.delete(f"{SLICES}/e2e-policy-probe")
            return False

        wait_for(f"admission policy {policy} to be enforced", refused, 30)

    def refusal(self, namespace: str, obj: dict[str, Any]) -> str | None:
        """The API server's refusal of creating `obj` (a ResourceClaim or template, in a
        dry run: nothing is stored), or None when it would be created."""
        kind = {
            "ResourceClaim": "resourceclaims",
            "ResourceClaimTemplate": "resourceclaimtemplates",
        }
        path = f"{RESOURCE}/namespaces/{namespace}/{kind[obj['kind']]}?dryRun=All"
        try:
            self.cp.request("POST", path, obj)
        except ApiError as e:
            return str(e)
        return None

    @contextlib.contextmanager
    def chart_objects(
        self, template: str, *values: str, kinds: Iterable[str] = ()
    ) -> Iterator[list[dict[str, Any]]]:
        """The chart's objects of `template` (under templates/driver/; only those of
        `kinds` if given) rendered with `values` (helm --set/--set-json arguments) and
        applied for the block. Removed after the block, last first."""
        from tests.deploy.support import gen_manifests
        from tests.support.helm import helm_binary

        rendered = gen_manifests().render(
            helm_binary(), *values, "--show-only", f"templates/driver/{template}"
        )
        objects = [d for d in yaml.safe_load_all(rendered) if d]
        objects = [o for o in objects if o["kind"] in kinds] if kinds else objects
        try:
            self.apply(objects, DRIVER_NAMESPACE)
            yield objects
        finally:
            for obj in reversed(objects):
                self.delete(self.cp.rest.object_path(obj, DRIVER_NAMESPACE))

    @contextlib.contextmanager
    def chart_policy(self, template: str, *values: str) -> Iterator[str]:
        """The chart's admission policy of `template` applied for the block (as
        `chart_objects`); its name."""
        with self.chart_objects(template, *values) as objects:
            [name] = [
                o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
            ]
            yield name

    def config_policy_refuses(self, policy: str, claim: dict[str, Any]) -> bool:
        """Whether `policy` refuses to create `claim` now (a dry run: nothing is stored)."""
        path = f"{RESOURCE}/namespaces/default/resourceclaims?dryRun=All"
        try:
            self.cp.request("POST", path, claim)
        except ApiError as e:
            if e.code == 422 and f"ValidatingAdmissionPolicy '{policy}'" in str(e):
                return True
            raise
        return False

    def wait_config_policy(self, enforced: bool, timeout: float = 30) -> None:
        """Like the slice policy, the config policies (and the DeviceClass params of the
        merged one) act only once the API server's informers have them: probe each with
        a claim that only it refuses until it is (or, after a binding's removal, is no
        longer) refused."""
        state = "enforced" if enforced else "lifted"
        for policy, claim in config_probes().items():

            def reached(p: str = policy, c: dict[str, Any] = claim) -> bool:
                return self.config_policy_refuses(p, c) == enforced

            wait_for(f"admission policy {policy} to be {state}", reached, timeout)

    @contextlib.contextmanager
    def config_policy_lifted(self) -> Iterator[None]:
        """The config policies' bindings removed for a while (a cluster that has not
        installed deploy/config-policy.yaml), and back afterwards, enforced again."""
        bindings = [
            d for d in config_policy_manifests() if d["kind"] == "ValidatingAdmissionPolicyBinding"
        ]
        for binding in bindings:
            self.delete(
                f"{ADMISSION}/validatingadmissionpolicybindings/{binding['metadata']['name']}"
            )
        try:
            self.wait_config_policy(enforced=False)
            yield
        finally:
            self.cp.apply(bindings)
            self.wait_config_policy(enforced=True)

    # ------------------------------------------------------------------ raw
    def get(self, path: str, missing_ok: bool = False) -> Any:
        try:
            return self.cp.request("GET", path)
        except ApiError as e:
            if missing_ok and e.code == 404:
                return None
            raise

    def delete(self, path: str, **query: Any) -> Any:
        if query:
            path += "?" + urlencode(query)
        try:
            return self.cp.request("DELETE", path)
        except ApiError as e:
            if e.code != 404:
                raise
            return None

    def apply(self, objs: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.cp.apply(objs, namespace)

    def kubeconfig_token(self, kubeconfig: Path) -> str:
        return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])

    # --------------------------------------------------------------- slices
    def slices(self, node: str | None = None, driver: str = DRIVER) -> list[dict[str, Any]]:
        selector = f"spec.driver={driver},spec.nodeName={node or self.node}"
        got = self.get(f"{SLICES}?{urlencode({'fieldSelector': selector})}")
        return list(got.get("items") or [])

    def delete_slices(self, node: str | None = None, driver: str = DRIVER) -> None:
        """What the kubelet does when a driver's last instance went away."""
        for s in self.slices(node, driver):
            self.delete(f"{SLICES}/{s['metadata']['name']}")

    def devices(self, node: str | None = None) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for s in self.slices(node) for d in s["spec"].get("devices") or []}

    # ----------------------------------------------------------------- pods
    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        query = f"?{urlencode({'labelSelector': selector})}" if selector else ""
        return list(self.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"])

    def wait_bound(self, namespace: str, name: str, timeout: float = CONTROLLERS) -> dict[str, Any]:
        """The pod once the scheduler bound it to a node."""

        def bound() -> dict[str, Any] | None:
            pod = self.pod(namespace, name)
            return pod if pod["spec"].get("nodeName") else None

        return wait_for(
            f"pod {namespace}/{name} to be scheduled",
            bound,
            timeout,
            log=lambda: self.scheduling_state(namespace, name),
        )

    def scheduling_state(self, namespace: str, name: str) -> str:
        """Why a pod is not scheduled, for a failure message: its PodScheduled condition
        and its claims' allocation and reservations."""
        pod = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}", missing_ok=True)
        if pod is None:
            return f"pod {namespace}/{name} does not exist"
        lines = [f"PodScheduled: {self.condition(pod, 'PodScheduled')}"]
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        lines.append(f"resourceClaimStatuses: {statuses}")
        for s in statuses:
            claim = self.claim(namespace, s.get("resourceClaimName") or "", missing_ok=True)
            status = (claim or {}).get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
            allocated = [(r["pool"], r["device"], r.get("shareID")) for r in results or []]
            reserved = [r.get("name") for r in status.get("reservedFor") or []]
            lines.append(
                f"claim {s.get('resourceClaimName')}: exists={claim is not None} "
                f"allocated={allocated} reservedFor={reserved}"
            )
        return "\n".join(lines)

    def condition(self, pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond["type"] == kind:
                return dict(cond)
        return None

    def claim(self, namespace: str, name: str, missing_ok: bool = False) -> Any:
        return self.get(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{quote(name)}", missing_ok
        )

    def claims(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"])

    def pod_claim_names(self, pod: dict[str, Any]) -> list[str]:
        """The ResourceClaim names of a pod, resolved as the kubelet does: a direct
        `resourceClaimName`, or the generated name from `status.resourceClaimStatuses`.

        kube-controller-manager v1.36.3 can drop entries of a pod with two or more
        generated claims from `status.resourceClaimStatuses`, and then keeps flapping
        between partial lists until the pod is deleted (kubernetes/kubernetes#138407,
        fixed by #138408, not in v1.36.3). A missing entry is therefore resolved the way
        that controller finds a claim it generated: owned by the pod, annotated with
        the pod claim's name (exactly one such claim, else there is no claim yet)."""
        generated = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        names = []
        for ref in pod["spec"].get("resourceClaims") or []:
            name = ref.get("resourceClaimName") or generated.get(ref["name"])
            if not name and ref.get("resourceClaimTemplateName"):
                name = self._generated_claim_name(pod, ref["name"])
            if not name:
                raise AssertionError(f"pod claim {ref['name']} has no ResourceClaim yet")
            names.append(name)
        return names

    def _generated_claim_name(self, pod: dict[str, Any], pod_claim: str) -> str | None:
        """The claim the resourceclaim controller generated for `pod_claim` of `pod`, by
        owner and annotation; None unless there is exactly one."""
        uid = pod["metadata"]["uid"]
        found = [
            c["metadata"]["name"]
            for c in self.claims(pod["metadata"]["namespace"])
            if (c["metadata"].get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == pod_claim
            and any(
                o.get("uid") == uid and o.get("controller")
                for o in c["metadata"].get("ownerReferences") or []
            )
        ]
        return found[0] if len(found) == 1 else None

    def kubelet_claims(self, pod: dict[str, Any], driver: str = DRIVER) -> list[dict[str, Any]]:
        """The claims the kubelet hands to `driver` for this pod, in one call: those of
        the pod's claims that are allocated, reserved for the pod, and have a result of
        `driver` (the DriverProcess client sends their namespace, uid and name)."""
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        out = []
        for name in self.pod_claim_names(pod):
            claim = self.claim(ns, name)
            status = claim.get("status") or {}
            reserved = {r.get("uid") for r in status.get("reservedFor") or []}
            assert uid in reserved, f"claim {ns}/{name} is not reserved for pod {uid}"
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
            if any(r["driver"] == driver for r in results or []):
                out.append(claim)
        return out

    def delete_pod(self, namespace: str, name: str) -> None:
        """A user's DELETE: graceful, so the pod only gets a deletionTimestamp (the
        kubelet would now stop its containers and unprepare its claims)."""
        self.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def report_pod_running(self, namespace: str, name: str) -> dict[str, Any]:
        """The kubelet's status report once a pod's containers started (without a
        readiness probe, a started container is ready): phase Running, Ready. A
        DaemonSet's rolling update waits for this before it deletes the old pod."""
        pod = self.pod(namespace, name)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        kinds = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": [{"type": k, "status": "True", "lastTransitionTime": now} for k in kinds],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in pod["spec"]["containers"]
            ],
        }
        return dict(
            self.cp.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                {"status": status},
                content_type="application/strategic-merge-patch+json",
            )
        )

    def finish_pod_deletion(self, namespace: str, name: str) -> None:
        """The kubelet's last step once the pod's containers stopped and its claims
        were unprepared: DELETE with grace period 0, which removes the object. Only
        then does the resourceclaim controller (kube-controller-manager) take the pod
        out of its claims' `reservedFor`, deallocate them and delete the claims it
        generated from templates; without a kubelet a graceful delete would leave
        the pod terminating, and its claims allocated, forever."""
        self.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", gracePeriodSeconds=0)

    def wait_pod_gone(self, namespace: str, name: str, timeout: float = CONTROLLERS) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        wait_for(f"pod {namespace}/{name} to go", lambda: self.get(path, True) is None, timeout)

    def wait_claims_released(
        self, namespace: str, names: Iterable[str], timeout: float = CONTROLLERS
    ) -> None:
        """Until each claim is deleted or at least deallocated."""
        names = list(names)

        def released() -> bool:
            for name in names:
                claim = self.claim(namespace, name, missing_ok=True)
                if claim is not None and (claim.get("status") or {}).get("allocation"):
                    return False
            return True

        wait_for(f"claims {names} in {namespace} to be released", released, timeout)

    def force_delete_pods(self, namespace: str) -> None:
        for pod in self.pods(namespace):
            self.finish_pod_deletion(namespace, pod["metadata"]["name"])

    def create_namespace(self, name: str) -> None:
        """A namespace, once pods can be created there (the controller manager made its
        default ServiceAccount)."""
        self.cp.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        self.cp.wait_namespace(name, timeout=CONTROLLERS)

    def remove_namespace(self, name: str, timeout: float = CONTROLLERS) -> None:
        """Delete a test namespace so that nothing of it holds devices any more: the
        controllers own the pods (Deployments), so they go first; pods are finished
        like the kubelet would; then every claim must be released."""
        base = f"/apis/apps/v1/namespaces/{name}"
        for kind in ("deployments", "replicasets"):
            for obj in self.get(f"{base}/{kind}")["items"]:
                self.delete(f"{base}/{kind}/{obj['metadata']['name']}")
        self.delete(f"/api/v1/namespaces/{name}")

        def pods_gone() -> bool:
            self.force_delete_pods(name)
            return not self.pods(name)

        wait_for(f"pods of namespace {name} to go", pods_gone, timeout)
        wait_for(
            f"claims of namespace {name} to go",
            lambda: not [c for c in self.claims(name) if (c.get("status") or {}).get("allocation")],
            timeout,
        )
