"""deploy/*.yaml: parse, validate against the Kubernetes OpenAPI schemas, and say what
the driver needs (RBAC, admission policy, DaemonSet)."""

from __future__ import annotations

import copy
import fnmatch
import functools
import ipaddress
import re
import subprocess

import kubernetes_validate
import pytest
import yaml
from packaging.version import Version

from dradriver.kubelet.readiness import ReadyFile, container_mark
from tests.deploy.support import (
    DEPLOY,
    DRIVER,
    KIND_CONFIG,
    MANIFESTS,
    daemonset,
    docs,
    driver_container,
    env_value,
    makefile_var,
    objects,
    one,
    run_driver,
)

MIN_VERSION = Version("1.34")
EXPECTED_FILES = {
    "namespace.yaml",
    "driver.yaml",
    "resourceclass.yaml",
    "config-policy.yaml",
    "deployment.yaml",
    "multi-nic-deployment.yaml",
    "selection-examples.yaml",
    "bandwidth-example.yaml",
    "ipam-example.yaml",
    "cni-examples.yaml",
}
# Kinds of a CRD kubernetes-validate has no schema for: checked against the CRD's own.
CRD_KINDS = {("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition")}


# kubernetes-validate parses its (large) schema files on every call: parse each once.
if hasattr(kubernetes_validate.utils, "schema_contents"):
    kubernetes_validate.utils.schema_contents = functools.cache(
        kubernetes_validate.utils.schema_contents
    )


def schema_versions() -> list[str]:
    """Every Kubernetes version >= 1.34 kubernetes-validate ships schemas for."""
    versions = set(kubernetes_validate.utils.all_versions())  # listed once per variant
    found = sorted((v for v in versions if Version(v) >= MIN_VERSION), key=Version)
    assert found, (
        f"kubernetes-validate {kubernetes_validate.__version__} has no schemas >= {MIN_VERSION}"
    )
    return found


def _objects(crd: bool = False) -> list[tuple[str, dict]]:
    out = []
    for path in MANIFESTS:
        for i, doc in enumerate(docs(path)):
            if ((doc.get("apiVersion"), doc.get("kind")) in CRD_KINDS) == crd:
                out.append((f"{path.name}#{i}:{doc.get('kind')}/{doc['metadata']['name']}", doc))
    return out


OBJECTS = _objects()
CRD_OBJECTS = _objects(crd=True)


@pytest.mark.parametrize("label,doc", CRD_OBJECTS, ids=[label for label, _ in CRD_OBJECTS])
def test_network_attachment_definitions_fit_the_crd_and_the_drivers_checks(label, doc):
    """Each example NAD validates against the CRD the chart installs, and the driver
    takes its network with the chart's default plugins."""
    import jsonschema
    from dradriver.handlers.cni import network

    crd = yaml.safe_load(
        (DEPLOY / "helm/dra-driver/files/network-attachment-definition-crd.yaml").read_text()
    )
    [version] = crd["spec"]["versions"]
    jsonschema.validate(doc, version["schema"]["openAPIV3Schema"])
    assert set(doc["spec"]) == {"config"}, label
    net = network.parse(doc["spec"]["config"])
    values = yaml.safe_load((DEPLOY / "helm/dra-driver/values.yaml").read_text())
    network.check_allowed(net, values["settings"]["cniPlugins"], label)
    assert network.node_changes(net) == []
    for _, parent in network.host_interfaces(net):
        assert any(fnmatch.fnmatchcase(parent, p) for p in values["settings"]["virtualParents"])
    assert net.name == doc["metadata"]["name"], "Multus users name a NAD like its network"


def test_expected_files_exist_and_parse():
    assert {p.name for p in MANIFESTS} >= EXPECTED_FILES
    for path in [*MANIFESTS, KIND_CONFIG]:
        parsed = docs(path)
        assert parsed, f"{path} is empty"
        for doc in parsed:
            assert isinstance(doc, dict), f"{path}: a document is not a mapping"
            assert doc.get("apiVersion") and doc.get("kind"), f"{path}: {doc}"


def test_schemas_exist_for_every_kind_used():
    """Each (apiVersion, kind) has a schema in every version we validate against."""
    for version in schema_versions():
        for label, doc in OBJECTS:
            try:
                kubernetes_validate.validate({**doc, "metadata": {}}, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError as exc:
                pytest.fail(
                    f"{label}: no schema in kubernetes-validate for {version}: {exc.message}"
                )
            except kubernetes_validate.ValidationError:
                pass  # validation proper is the next test's job


@pytest.mark.parametrize("version", schema_versions())
@pytest.mark.parametrize("label,doc", OBJECTS, ids=[label for label, _ in OBJECTS])
def test_validates_against_kubernetes_schema(label, doc, version):
    """Strict: unknown fields (a typo such as `capcity`) are errors too."""
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path)
        pytest.fail(f"{label} invalid for Kubernetes {version} at {path}: {exc.message}")


def test_strict_validation_catches_typos():
    """The schema check above is not vacuous."""
    template = copy.deepcopy(one("ResourceClaimTemplate", "dummy-net1"))
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capcity"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, schema_versions()[-1], strict=True)
    ds = copy.deepcopy(daemonset())
    ds["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, schema_versions()[-1], strict=True)


def test_names_are_unique():
    seen = set()
    for _, doc in OBJECTS:
        key = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)


def test_namespaced_objects_live_in_dra_system():
    for path in (DEPLOY / "driver.yaml",):
        for doc in docs(path):
            if doc["kind"] in ("ServiceAccount", "DaemonSet"):
                assert doc["metadata"]["namespace"] == "dra-system"
    ns = one("Namespace", "dra-system")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- RBAC --------------------------------------------------------------------------


def _rules(rules):
    out = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, tuple(rule.get("resourceNames") or ()), verb))
    return out


def test_clusterrole_grants_exactly_what_the_driver_needs():
    want = _rules(
        [
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/status"],
                "verbs": ["update", "patch"],
            },
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/driver"],
                "resourceNames": [DRIVER],
                "verbs": ["associated-node:update", "associated-node:patch"],
            },
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices"],
                "verbs": [
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                ],
            },
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["list"]},
            # The NetworkAttachmentDefinition a claim of type cni names.
            {
                "apiGroups": ["k8s.cni.cncf.io"],
                "resources": ["network-attachment-definitions"],
                "verbs": ["get"],
            },
            # Events on the pods of failed claims, in their namespaces, and on its own pod.
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ]
    )
    assert _rules(one("ClusterRole", "dra-driver")["rules"]) == want


def test_the_driver_has_no_namespaced_role():
    """Every grant is in the one ClusterRole the tests above pin."""
    assert [name for name, o in OBJECTS if o["kind"] in ("Role", "RoleBinding")] == []


def test_clusterrolebinding_binds_the_daemonset_service_account():
    binding = one("ClusterRoleBinding", "dra-driver")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "dra-driver",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dra-driver", "namespace": "dra-system"}
    ]
    one("ServiceAccount", "dra-driver")
    assert daemonset()["spec"]["template"]["spec"]["serviceAccountName"] == "dra-driver"


# --- admission policy ----------------------------------------------------------------


def test_admission_policy_constrains_only_the_driver_and_only_slices():
    policy = one("ValidatingAdmissionPolicy", "dra-driver-resourceslices")["spec"]
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"]
    assert rule["resources"] == ["resourceslices"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    assert rule["apiVersions"] == ["*"]
    (condition,) = policy["matchConditions"]
    assert condition["expression"].replace(" ", "") == (
        'request.userInfo.username=="system:serviceaccount:dra-system:dra-driver"'
    )
    assert policy["failurePolicy"] == "Fail"
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert (
        "request.userInfo.extra['authentication.kubernetes.io/node-name'][0]"
        in (variables["userNode"])
    )
    # DELETE has no object: the node must come from oldObject there.
    assert "request.operation == 'DELETE' ? ''" in variables["objectNode"]
    assert "oldObject.spec" in variables["oldObjectNode"]
    text = " ".join(v["expression"] for v in policy["validations"])
    assert "variables.userNode != ''" in text
    assert "variables.objectNode == variables.userNode" in text
    assert "variables.oldObjectNode == variables.userNode" in text
    binding = one("ValidatingAdmissionPolicyBinding", "dra-driver-resourceslices")["spec"]
    assert binding["policyName"] == "dra-driver-resourceslices"
    assert binding["validationActions"] == ["Deny"]


# --- DaemonSet -----------------------------------------------------------------------


def test_daemonset_runs_the_driver_privileged_in_the_host_network():
    ds = daemonset()
    pod = ds["spec"]["template"]["spec"]
    container = driver_container()
    assert pod["hostNetwork"] is True
    assert container["securityContext"]["privileged"] is True
    assert container["command"] == ["dra-driver", "run"]
    assert container["image"] == makefile_var("IMAGE"), "make build/load use IMAGE"
    assert container["imagePullPolicy"] == "IfNotPresent", "kind load gives no registry"
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_daemonset_environment():
    env = {e["name"]: e for e in driver_container()["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env_value("DRA_VIRTUAL_PARENTS") == "eth0,cni-br*"
    assert env_value("DRA_HEALTHCHECK_PORT") == "51515"


def test_daemonset_env_vars_are_flags_of_dra_driver_run():
    """A misspelt DRA_* variable would be ignored silently by the daemon."""
    res = run_driver("run", "--help")
    assert res.returncode == 0, res.stderr
    known = set(re.findall(r"\(env\s+([A-Z0-9_]+)\)", res.stdout))
    assert {"NODE_NAME", "POD_UID", "DRA_VIRTUAL_PARENTS", "DRA_HEALTHCHECK_PORT"} <= known
    for env in driver_container()["env"]:
        assert env["name"] in known, f"{env['name']} is no flag of `dra-driver run`"


def test_macvlan_example_parents_are_allowed_by_the_daemonset():
    allowed = [p.strip() for p in (env_value("DRA_VIRTUAL_PARENTS") or "").split(",") if p]
    parents = []
    for template in objects("ResourceClaimTemplate"):
        for config in template["spec"]["spec"]["devices"].get("config") or []:
            netdev = config["opaque"]["parameters"].get("netdev") or {}
            if netdev.get("kind") in ("macvlan", "ipvlan", "ipoib"):
                parents.append(netdev["parent"])
    assert parents, "the examples have a macvlan"
    for parent in parents:
        assert any(fnmatch.fnmatchcase(parent, p) for p in allowed), parent


def test_example_addresses_are_in_the_daemonsets_claim_address_ranges():
    ranges = [
        ipaddress.ip_network(r.strip())
        for r in (env_value("DRA_CLAIM_ADDRESS_RANGES") or "").split(",")
        if r.strip()
    ]
    addresses = []
    for template in objects("ResourceClaimTemplate"):
        for config in template["spec"]["spec"]["devices"].get("config") or []:
            params = config["opaque"]["parameters"]
            for part in (params.get("netdev"), (params.get("combo") or {}).get("netdev")):
                addresses += (part or {}).get("ipAddresses") or []
    assert addresses, "the examples set addresses"
    for address in addresses:
        ip = ipaddress.ip_interface(address).ip
        assert any(ip.version == r.version and ip in r for r in ranges), address


def test_daemonset_liveness_probe_asks_the_loopback_on_the_healthcheck_port():
    probe = driver_container()["livenessProbe"]
    assert probe["httpGet"] == {"host": "127.0.0.1", "path": "/healthz", "port": 51515}
    assert int(env_value("DRA_HEALTHCHECK_PORT") or 0) == 51515


def test_daemonset_readiness_probe_tests_the_drivers_ready_file(tmp_path):
    probe = driver_container()["readinessProbe"]
    ready = env_value("DRA_READY_FILE")
    sh, c, script = probe["exec"]["command"]
    assert (sh, c) == ("sh", "-c")
    assert ready and ready.startswith("/tmp/")  # the pod's own emptyDir, not the node's
    # The probe run as the kubelet runs it, on a file in its place: Ready only with
    # the mark the driver writes for this container, not one a previous container left.
    here = tmp_path / "registered"
    local = script.replace(ready, str(here))
    assert local != script

    def probe_passes() -> tuple[bool, str]:
        run = subprocess.run([sh, c, local], capture_output=True, text=True, timeout=10)
        return run.returncode == 0, run.stdout

    passed, said = probe_passes()
    assert not passed and "kubeletRegistryDir" in said  # what `kubectl describe pod` shows
    ReadyFile(here).mark()
    assert probe_passes() == (True, "")
    here.write_text(str(int(container_mark()) - 1))  # the previous container's
    assert not probe_passes()[0]


def _quantity_mi(text: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text) / 2**20


def test_daemonset_resources_fit_the_daemon():
    resources = driver_container()["resources"]
    limit = _quantity_mi(resources["limits"]["memory"])
    request = _quantity_mi(resources["requests"]["memory"])
    assert 112 <= limit <= 160, "about 128Mi: the daemon idles at 60-70 MB RSS"
    assert 70 <= request <= limit
    assert "cpu" in resources["requests"]


def test_daemonset_mounts_host_paths_at_the_same_path():
    pod = daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in driver_container()["volumeMounts"]}
    host = {}
    for path, mount in mounts.items():
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            assert volume["hostPath"]["path"] == path, f"{path}: same path in and out"
            host[path] = (volume["hostPath"].get("type", ""), mount.get("readOnly", False))
    assert host["/var/lib/kubelet/plugins"][1] is False
    assert host["/var/lib/kubelet/plugins_registry"][1] is False
    assert host["/etc/cdi"][1] is False
    assert host["/sys"] == ("Directory", True)
    # Optional: type "" skips the kubelet's check, so nodes without RDMA run the pod.
    assert host["/dev/infiniband"][0] == ""
    container = driver_container()
    if container["securityContext"].get("readOnlyRootFilesystem"):
        assert "/tmp" in mounts, "a read-only root needs a writable /tmp"
