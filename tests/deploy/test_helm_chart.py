"""The Helm chart deploy/helm/dra-driver, rendered by a real helm (hack/build-helm.sh).

- One source of truth: deploy/driver.yaml, deploy/resourceclass.yaml and
  deploy/config-policy.yaml are exactly what the chart renders with its default values
  (hack/gen_manifests.py, `make manifests`); the config policies' template is the
  generator's (test_config_policy.py), their values are test_helm_config_policy.py's.
- Every flag of `dra-driver run` has a value (or a stated reason why a pod sets it
  otherwise), and every value reaches the driver's Settings as given.
- Non-default renderings validate like deploy/ does: Kubernetes' OpenAPI schemas, and
  the renamed DeviceClass selectors and admission policy run by Kubernetes' own code.
- Bad values fail `helm template` (so `helm install`) with a message naming the value.

helm is built the first time (about 4 minutes, then cached in .cache/helm); without a
Go toolchain these tests skip and say so.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dradriver import settings as settings_mod
from dradriver.contract import ipam, quantity
from tests.deploy import cel
from tests.deploy.support import (
    DEPLOY,
    DRIVER,
    discover,
    gen_manifests,
    run_driver,
    run_k8scheck,
)
from tests.deploy.test_k8s_real import policy_mistakes
from tests.deploy.test_manifests import schema_versions
from tests.deploy.test_selectors import constructed_devices
from tests.support.helm import helm_binary, helm_env

gen = gen_manifests()
CHART: Path = gen.CHART
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

OTHER_DRIVER = "net.example.org"
OTHER_NS = "net-system"

# Flags of `dra-driver run` the chart has no value for, and why.
NOT_VALUES = {
    "--node-name": "a pod's node comes from the downward API (spec.nodeName, NODE_NAME)",
    "--pod-uid": "a pod's UID comes from the downward API (metadata.uid, POD_UID)",
    "--pod-name": "a pod's name comes from the downward API (metadata.name, POD_NAME)",
    "--pod-namespace": "from the downward API (metadata.namespace, POD_NAMESPACE)",
    "--kubeconfig": "in a pod the driver uses its ServiceAccount token (in-cluster config)",
    "--sysfs-root": "the kernel's /sys, mounted read-only at /sys; only tests move it",
    "--dev-root": "the node's /dev (RDMA devices: /dev/infiniband is mounted); only tests move it",
    "--ipam-pools": "a list of objects: ipam.pools, as JSON (test_pools_reach_the_driver)",
}

# Every setting and host path away from its default: where a value is mistranslated
# (name, list joining, number format), the driver's Settings show it.
NON_DEFAULT: dict[str, Any] = {
    "driverName": OTHER_DRIVER,
    "settings": {
        "virtualParents": ["eth1", "bond*"],
        "parentInterfaces": ["ens1f0"],
        "sriovPfs": ["ens2f*", "ens3"],
        "claimAddressRanges": ["10.20.0.0/16", "fd00:20::/64"],
        "virtualSlots": 7,
        "virtualBandwidth": "10G",
        "bandwidthStep": "10M",
        "linkBandwidth": "25G",
        "publishInterval": 2.5,
        "callBudget": 12.5,
        "linkDeletionDelay": 0.5,
        "metricsAddr": "127.0.0.1:9400",
        "healthcheckPort": 6000,
        "logLevel": "debug",
        "injection": "nri",
        "nriPluginIndex": "42",
    },
    "hostPaths": {
        "kubeletRegistryDir": "/var/lib/k0s/kubelet/plugins_registry",
        "kubeletPluginsDir": "/var/lib/k0s/kubelet/plugins",
        "cdiDir": "/var/run/cdi",
        "stateDir": "/var/lib/dra-driver/state",
        "nriSocket": "/run/k0s/nri/nri.sock",
    },
    "podNetnsDir": "/run/k0s/containerd/netns",
    "image": {
        "repository": "registry.example.com/dra-driver",
        "tag": "v0.1.0",
        "pullPolicy": "Always",
    },
    "imagePullSecrets": [{"name": "registry"}],
    "fullnameOverride": "netdrv",
    "commonLabels": {"team": "network"},
    "serviceAccount": {"name": "net-sa", "annotations": {"example.com/owner": "network"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "net", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "net", "operator": "In", "values": ["yes"]}]}
                ]
            }
        }
    },
    "priorityClassName": "",
    "resources": {"requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"memory": "150Mi"}},
    "livenessProbe": {"initialDelaySeconds": 5, "periodSeconds": 20},
    "maxSurge": "10%",
    "podAnnotations": {"example.com/note": "x"},
    "metrics": {
        "scrapeAnnotations": True,
        "serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "prom"}},
    },
    "deviceClasses": {
        "networkDevices": {"enabled": True, "name": "net-devices"},
        "virtualNetwork": {"enabled": True, "name": "net-virtual"},
        "rdmaDevices": {"enabled": True, "name": "net-rdma"},
        "roceDevices": {"enabled": True, "name": "net-roce"},
    },
    "configPolicy": {"validationActions": ["Warn", "Audit"], "failurePolicy": "Fail"},
    "ipam": {"pools": [{"name": "data", "ranges": ["10.20.1.0/24"], "gateway": "10.20.1.1"}]},
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(helm: Path, *args: str, **kw: Any) -> list[dict[str, Any]]:
    """The objects `helm template` renders (release dra-driver in dra-system unless
    `release`/`namespace` say otherwise)."""
    return [d for d in yaml.safe_load_all(gen.render(helm, *args, **kw)) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [ds] = by_kind(docs, "DaemonSet")
    [c] = ds["spec"]["template"]["spec"]["containers"]
    return dict(c)


def env_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


def refused(helm: Path, *args: str, **kw: Any) -> str:
    """`helm template` with `args` must fail; its error output."""
    with pytest.raises(SystemExit) as exc:
        gen.render(helm, *args, **kw)
    return str(exc.value)


def camel(flag: str) -> str:
    head, *rest = flag.removeprefix("--").split("-")
    return head + "".join(p.capitalize() for p in rest)


def run_flags() -> list[str]:
    res = run_driver("run", "--help")
    assert res.returncode == 0, res.stderr
    flags = re.findall(r"^\s+(--[a-z][a-z0-9-]*)", res.stdout, re.MULTILINE)
    return [f for f in flags if f != "--help"]


# --- helm lint, one source of truth ------------------------------------------------


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("variant", ["defaults", "non-default"])
def test_helm_lint_strict(helm, tmp_path, variant):
    args = ["-f", values_file(tmp_path, NON_DEFAULT)] if variant == "non-default" else []
    res = subprocess.run(
        [str(helm), "lint", "--strict", "--namespace", gen.NAMESPACE, str(CHART), *args],
        capture_output=True, text=True, env=helm_env(tmp_path), check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in res.stdout
    assert "[ERROR]" not in res.stdout and "[WARNING]" not in res.stdout


def test_deploy_files_are_the_charts_default_rendering(helm):
    """deploy/driver.yaml, resourceclass.yaml, config-policy.yaml, byte for byte (comments
    too)."""
    wanted = gen.manifests(gen.render(helm))
    assert set(wanted) == {"driver.yaml", "resourceclass.yaml", "config-policy.yaml"}
    present = gen.generated_files()
    diff = gen.differences(wanted, present)
    assert not diff, f"deploy/ differs from the chart: run `make manifests`\n{diff}"
    # The explanatory comments of the templates are in the files.
    driver = (DEPLOY / "driver.yaml").read_text()
    assert '# RBAC cannot say "only your own node\'s ResourceSlices"' in driver
    assert "# Seamless upgrade: the new pod starts beside the old one" in driver
    assert "Every selector first checks the driver" in (DEPLOY / "resourceclass.yaml").read_text()
    policies = (DEPLOY / "config-policy.yaml").read_text()
    assert "# (templates/config-policy/), rendered with its default values" in policies
    assert "whose opaque config for dra.example.com\n# the driver would refuse" in policies


def test_drift_and_misplaced_templates_are_caught(helm):
    """The comparison above can fail: a changed line, a missing or stale file."""
    wanted = gen.manifests(gen.render(helm))
    edited = {**wanted, "driver.yaml": wanted["driver.yaml"].replace("maxSurge: 1", "maxSurge: 2")}
    assert "-      maxSurge: 2\n+      maxSurge: 1" in gen.differences(wanted, edited)
    assert "deploy/resourceclass.yaml" in gen.differences(
        wanted, {"driver.yaml": wanted["driver.yaml"]}
    )
    assert "deploy/old.yaml" in gen.differences(wanted, {**wanted, "old.yaml": gen.MARK + "\n"})
    loose = "---\n# Source: dra-driver/templates/loose.yaml\nkind: X\n"
    with pytest.raises(SystemExit, match=r"templates/loose.yaml is not in a subdirectory"):
        gen.manifests(loose)


def test_namespace_file_stays_outside_the_chart(helm):
    """The chart renders no Namespace: Helm keeps its release record in the release
    namespace, which must therefore exist before `helm install`, and an uninstall would
    delete a namespace it owned with everything in it. deploy/namespace.yaml (Pod
    Security labels for the privileged driver) is applied first, by hand or `make`."""
    assert not by_kind(render(helm), "Namespace")
    text = (DEPLOY / "namespace.yaml").read_text()
    assert not text.startswith(gen.MARK)
    [ns] = [d for d in yaml.safe_load_all(text) if d]
    assert ns["metadata"]["name"] == gen.NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


# --- values: every flag, and what reaches the driver --------------------------------


def test_pools_reach_the_driver(helm, tmp_path, monkeypatch):
    """ipam.pools reach the driver as its --ipam-pools, and a Role lets it take blocks."""
    pools = [
        {"name": "data", "ranges": ["10.20.0.0/24"], "gateway": "10.20.0.1", "blockSize": 32},
        {"name": "local", "ranges": ["fd00:20::/120"], "scope": "node", "exclude": ["fd00:20::1"]},
    ]
    docs = render(helm, "-f", values_file(tmp_path, {**NON_DEFAULT, "ipam": {"pools": pools}}))
    monkeypatch.setenv("DRA_IPAM_POOLS", env_of(docs)["DRA_IPAM_POOLS"])
    parser = argparse.ArgumentParser()
    settings_mod.add_flags(parser, run=False)
    ranges = ",".join(NON_DEFAULT["settings"]["claimAddressRanges"])
    got = settings_mod.from_args(
        parser.parse_args(["--node-name", "n", "--claim-address-ranges", ranges])
    )
    assert [(p.name, p.scope, p.block_size) for p in got.ipam_pools] == [
        ("data", "cluster", 32), ("local", "node", 16),
    ]  # fmt: skip
    [role] = by_kind(docs, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["list", "watch", "create"],
        }
    ]
    assert by_kind(render(helm), "Role") == []  # no pools: no Role, no variable
    assert "DRA_IPAM_POOLS" not in env_of(render(helm))
    schema = json.loads((DEPLOY / "helm" / "dra-driver" / "values.schema.json").read_text())
    pool = schema["properties"]["ipam"]["properties"]["pools"]["items"]["properties"]
    assert pool["name"]["pattern"] == ipam.NAME_PATTERN  # the chart refuses what the driver does
    bad = refused(helm, "--set-json", 'ipam.pools=[{"name": "x", "ranges": [], "scope": "zone"}]')
    assert "ipam/pools/0" in bad


def test_every_run_flag_has_a_value():
    """A new flag of `dra-driver run` fails here until values.yaml and values.schema.json
    have it (settings.<flag in camelCase>, or hostPaths.<...> for a path on the node)."""
    flags = run_flags()
    assert "--virtual-parents" in flags and "--state-dir" in flags
    stale = set(NOT_VALUES) - set(flags)
    assert not stale, f"NOT_VALUES names flags `dra-driver run` no longer has: {stale}"
    sections = {"settings": VALUES["settings"], "hostPaths": VALUES["hostPaths"]}
    missing = []
    for flag in flags:
        key = camel(flag)
        found = [s for s, values in sections.items() if key in values]
        if flag in NOT_VALUES:
            assert not found, f"{flag} is in NOT_VALUES and also a value ({found})"
            continue
        if key == "driverName":
            assert "driverName" in VALUES and "driverName" in SCHEMA["properties"]
            continue
        if len(found) != 1:
            missing.append(f"{flag}: no settings.{key} (or hostPaths.{key}) in values.yaml")
            continue
        if key not in SCHEMA["properties"][found[0]]["properties"]:
            missing.append(f"{flag}: no {found[0]}.{key} in values.schema.json")
    assert not missing, "\n".join(missing)
    # ... and no value is left over from a flag that is gone.
    keys = {camel(f) for f in flags}
    for section, values in sections.items():
        assert set(values) <= keys, f"{section} has values of no flag: {set(values) - keys}"
        assert set(SCHEMA["properties"][section]["properties"]) == set(values)


def test_values_reach_the_driver_as_its_settings(helm, tmp_path, monkeypatch):
    """Render with every setting away from its default, give the DaemonSet's environment
    to the driver's own flag parser: each value arrives, typed, under its flag."""
    docs = render(helm, "-f", values_file(tmp_path, NON_DEFAULT))
    env = env_of(docs)
    known = set(re.findall(r"\(env\s+([A-Z0-9_]+)\)", run_driver("run", "--help").stdout))
    assert set(env) <= known, f"not variables of `dra-driver run`: {set(env) - known}"
    for name in list(os.environ):
        if name.startswith("DRA_") or name in ("NODE_NAME", "POD_UID"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        # The downward API fills these in a pod (a node name is a DNS subdomain).
        downward = "from-" + name.lower().replace("_", "-")
        monkeypatch.setenv(name, value if isinstance(value, str) else downward)
    parser = argparse.ArgumentParser()
    settings_mod.add_flags(parser, run=True)
    got = settings_mod.from_args(parser.parse_args([]))
    assert got.driver_name == OTHER_DRIVER
    assert (got.node_name, got.pod_uid) == ("from-node-name", "from-pod-uid")
    for key, value in {**NON_DEFAULT["settings"], **NON_DEFAULT["hostPaths"]}.items():
        field = re.sub(r"([A-Z])", r"_\1", key).lower()
        actual = got.state_dir if field == "state_dir" else getattr(got, field)
        expected: Any = value
        if isinstance(value, list):
            expected = tuple(value)
        elif key in NON_DEFAULT["hostPaths"]:
            expected = Path(value)
        elif key in ("virtualBandwidth", "bandwidthStep", "linkBandwidth"):  # bits per second
            expected = quantity.parse(value)
        assert actual == expected, f"{key}: driver got {actual!r}, values say {value!r}"


def test_host_paths_are_mounted_at_the_same_path(helm, tmp_path):
    """A kubelet whose root is not /var/lib/kubelet finds the driver's sockets: each host
    path is mounted where the driver is told it is."""
    docs = render(helm, "-f", values_file(tmp_path, NON_DEFAULT))
    [ds] = by_kind(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container(docs)["volumeMounts"]}
    env = env_of(docs)
    for key, path in NON_DEFAULT["hostPaths"].items():
        assert env[settings_mod.env_name(re.sub(r"([A-Z])", r"_\1", key).lower())] == path
        where = path if key.endswith("Dir") else str(Path(path).parent)  # a socket's dir
        assert mounts[where]["hostPath"] == {"path": where, "type": "DirectoryOrCreate"}, key
    assert "/var/lib/kubelet" not in yaml.safe_dump(docs)
    # Pods' network namespaces (NRI mode), propagated from the host as the runtime makes them.
    netns = NON_DEFAULT["podNetnsDir"]
    [mount] = [m for m in container(docs)["volumeMounts"] if m["mountPath"] == netns]
    assert mount["mountPropagation"] == "HostToContainer"
    assert mounts[netns]["hostPath"]["path"] == netns
    off = render(helm, "--set", "podNetnsDir=")
    assert not [m for m in container(off)["volumeMounts"] if m["name"] == "pod-netns"]


def test_a_new_flag_is_one_value_and_one_schema_property(helm, tmp_path):
    """The lead's coming flags, added to a copy of the chart the way values.yaml says
    (a value and a schema property, no template change): a setting becomes DRA_<FLAG>,
    a host path that is not a directory (a socket) has its directory mounted."""
    chart = tmp_path / "dra-driver"
    shutil.copytree(CHART, chart)
    values = copy.deepcopy(VALUES)
    values["settings"]["injectionMode"] = "cdi"
    values["hostPaths"]["nriSocket"] = "/var/run/nri/nri.sock"
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    schema = copy.deepcopy(SCHEMA)
    schema["properties"]["settings"]["properties"]["injectionMode"] = {
        "type": "string", "enum": ["cdi", "nri"], "description": "--injection-mode."
    }  # fmt: skip
    schema["properties"]["hostPaths"]["properties"]["nriSocket"] = {
        "$ref": "#/definitions/absolutePath", "description": "--nri-socket."
    }  # fmt: skip
    (chart / "values.schema.json").write_text(json.dumps(schema))
    docs = render(helm, chart=chart)
    env = env_of(docs)
    assert env["DRA_INJECTION_MODE"] == "cdi"
    assert env["DRA_NRI_SOCKET"] == "/var/run/nri/nri.sock"
    [ds] = by_kind(docs, "DaemonSet")
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert mounts["nri-socket"] == "/var/run/nri"
    assert volumes["nri-socket"]["hostPath"] == {
        "path": "/var/run/nri",
        "type": "DirectoryOrCreate",
    }
    assert "nri-socket" not in [v for v in mounts if v.endswith("-dir")]
    bad = refused(helm, "--set", "settings.injectionMode=ebpf", chart=chart)
    assert "/settings/injectionMode" in bad


def test_values_are_documented():
    """Each schema property has a description; each flag's value a comment in values.yaml."""
    undocumented = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                if "description" not in prop:
                    undocumented.append(f"{path}/{name}")
                walk(prop, f"{path}/{name}")
            for name, sub in (node.get("definitions") or {}).items():
                walk(sub, f"#/definitions/{name}")

    walk(SCHEMA, "")
    assert not undocumented, f"values.schema.json properties without description: {undocumented}"
    # values.yaml: every group of top-level keys opens with a comment, and every key of
    # settings and hostPaths (a flag) has its own.
    lines = (CHART / "values.yaml").read_text().splitlines()
    section = ""
    for i, line in enumerate(lines):
        if top := re.match(r"^([A-Za-z]\w*):", line):
            section = top[1]
            assert lines[i - 1].strip(), f"values.yaml: {section} opens a group without a comment"
        elif (key := re.match(r"^  ([A-Za-z]\w*):", line)) and section in ("settings", "hostPaths"):
            assert lines[i - 1].lstrip().startswith("#"), (
                f"values.yaml: {section}.{key[1]} has no comment"
            )


# --- renderings as Kubernetes sees them ----------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        ["-f", "NON_DEFAULT"],
        [
            "--set",
            "settings.healthcheckPort=-1",
            "--set",
            "deviceClasses.rdmaDevices.enabled=false",
        ],
    ],
    ids=["non-default", "no-probe-no-rdma-class"],
)
def test_renderings_validate_against_kubernetes_schema(helm, tmp_path, variant):
    args = [values_file(tmp_path, NON_DEFAULT) if a == "NON_DEFAULT" else a for a in variant]
    docs = render(helm, *args)
    for version in schema_versions():
        for doc in docs:
            if doc["kind"] == "ServiceMonitor":
                continue  # a CRD of the Prometheus Operator: checked below
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path)
                name = f"{doc['kind']}/{doc['metadata']['name']}"
                pytest.fail(f"{name} for Kubernetes {version} at {where}: {exc.message}")


def test_optional_objects_and_metrics(helm, tmp_path):
    defaults = render(helm)
    assert {d["kind"] for d in defaults} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        "DeviceClass",
    }  # fmt: skip
    [ds] = by_kind(defaults, "DaemonSet")
    assert "annotations" not in ds["spec"]["template"]["metadata"]
    assert "ports" not in container(defaults)

    docs = render(helm, "-f", values_file(tmp_path, NON_DEFAULT))
    [ds] = by_kind(docs, "DaemonSet")
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "example.com/note": "x",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
    }
    assert container(docs)["ports"] == [
        {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}
    ]
    assert container(docs)["livenessProbe"] == {
        "httpGet": {"host": "127.0.0.1", "path": "/healthz", "port": 6000},
        "initialDelaySeconds": 5, "periodSeconds": 20,
        "timeoutSeconds": 5, "failureThreshold": 3,
    }  # fmt: skip
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": "10%", "maxUnavailable": 0}
    [svc] = by_kind(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    [sm] = by_kind(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    for doc in docs:
        assert doc["metadata"]["labels"]["team"] == "network", doc["kind"]

    off = render(
        helm,
        "--set",
        "settings.healthcheckPort=-1",
        "--set",
        "settings.readyFile=",
        "--set",
        "deviceClasses.rdmaDevices.enabled=false",
    )
    assert "livenessProbe" not in container(off)
    assert "readinessProbe" not in container(off)
    assert env_of(off)["DRA_HEALTHCHECK_PORT"] == "-1"
    assert {d["metadata"]["name"] for d in by_kind(off, "DeviceClass")} == {
        "network-devices", "virtual-network", "roce-devices"
    }  # fmt: skip
    assert len(by_kind(defaults, "ValidatingAdmissionPolicy")) == 4
    no_config_policy = render(helm, "--set", "configPolicy.enabled=false")
    assert [
        p["metadata"]["name"] for p in by_kind(no_config_policy, "ValidatingAdmissionPolicy")
    ] == ["dra-driver-claim-sharing", "dra-driver-resourceslices"]
    assert [
        b["spec"]["policyName"]
        for b in by_kind(no_config_policy, "ValidatingAdmissionPolicyBinding")
    ] == ["dra-driver-claim-sharing", "dra-driver-resourceslices"]
    neither = render(
        helm, "--set", "configPolicy.enabled=false", "--set", "claimSharingPolicy.enabled=false"
    )
    assert [p["metadata"]["name"] for p in by_kind(neither, "ValidatingAdmissionPolicy")] == [
        "dra-driver-resourceslices"
    ]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--set", "settings.virtualParent=eth0"],
            "additional properties 'virtualParent' not allowed",
        ),
        (["--set", "settings.virtualSlots=5000"], "/settings/virtualSlots"),
        (["--set", "settings.virtualSlots=many"], "/settings/virtualSlots"),
        (["--set", "settings.virtualBandwidth=10 Gbit"], "/settings/virtualBandwidth"),
        (["--set", "settings.bandwidthStep="], "/settings/bandwidthStep"),
        (["--set", "driverName=Net_Driver"], "/driverName"),
        (["--set", "settings.logLevel=verbose"], "/settings/logLevel"),
        (["--set", "settings.virtualParents={eth0,eth1 eth2}"], "/settings/virtualParents/1"),
        (["--set", "hostPaths.cdiDir=etc/cdi"], "/hostPaths/cdiDir"),
        (["--set", "settings.claimAddressRanges={192.0.2.0/24,eth0}"], "/claimAddressRanges/1"),
        (["--set", "settings.claimAddressRanges={192.0.2.1}"], "/claimAddressRanges/0"),
        (["--set", "settings.claimAddressRanges={10.0.0.0/33}"], "/claimAddressRanges/0"),
        (["--set", "settings.claimAddressRanges={fd00::/129}"], "/claimAddressRanges/0"),
        (["--set", "deviceClasses.rdma.enabled=false"], "additional properties 'rdma' not allowed"),
        (["--set", "metrics.scrapeAnnotations=true"], "need settings.metricsAddr"),
        (["--set", "metrics.serviceMonitor.enabled=true"], "need settings.metricsAddr"),
    ],
)
def test_bad_values_fail_naming_the_value(helm, args, message):
    assert message in refused(helm, *args)


def test_the_default_namespace_is_refused(helm):
    assert 'the release namespace is "default"' in refused(helm, namespace="default")
    assert render(helm, "--set", "allowDefaultNamespace=true", namespace="default")


@pytest.mark.timeout(1500)
def test_driver_name_and_namespace_flow_everywhere(helm, k8scheck, tmp_path):
    """Renamed driver, namespace, ServiceAccount, release: no trace of the defaults, and
    Kubernetes' own CEL and admission code give the renamed selectors and policy the
    meaning the default ones have."""
    values = {"driverName": OTHER_DRIVER, "serviceAccount": {"name": "net-sa"}}
    text = gen.render(helm, "-f", values_file(tmp_path, values), release="net", namespace=OTHER_NS)
    assert DRIVER not in text and gen.NAMESPACE not in text
    docs = [d for d in yaml.safe_load_all(text) if d]
    user = f"system:serviceaccount:{OTHER_NS}:net-sa"
    [role] = by_kind(docs, "ClusterRole")
    assert [r["resourceNames"] for r in role["rules"] if "resourceNames" in r] == [[OTHER_DRIVER]]
    [binding] = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "net-sa", "namespace": OTHER_NS}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "net-dra-driver"
    [ds] = by_kind(docs, "DaemonSet")
    assert ds["metadata"]["namespace"] == OTHER_NS
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "net-sa"
    assert env_of(docs)["DRA_DRIVER_NAME"] == OTHER_DRIVER
    [roce] = [d for d in by_kind(docs, "DeviceClass") if d["metadata"]["name"] == "roce-devices"]
    assert roce["spec"]["config"][0]["opaque"]["driver"] == OTHER_DRIVER

    # The policy, by Kubernetes' admission code, for the renamed service account (the
    # config policies, which follow the driver name, are test_helm_config_policy.py's).
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        "---\n".join(t for path, t in gen.documents(text) if path.startswith("driver/"))
    )
    assert policy_mistakes(k8scheck, policy_file, sa=user) == []
    # The selectors, by Kubernetes' CEL: same verdicts for the renamed driver's devices
    # as the default classes give dra.example.com's, and none for dra.example.com's.
    default_classes = {d["metadata"]["name"]: d for d in by_kind(render(helm), "DeviceClass")}
    renamed = {d["metadata"]["name"]: d for d in by_kind(docs, "DeviceClass")}
    devices = constructed_devices() + discover()
    cases, expected = [], []
    for name, dc in renamed.items():
        default_exprs = [s["cel"]["expression"] for s in default_classes[name]["spec"]["selectors"]]
        for i, sel in enumerate(dc["spec"]["selectors"]):
            for device in devices:
                want = cel.evaluate(default_exprs[i], DRIVER, device)
                cases.append(
                    {"expr": sel["cel"]["expression"], "driver": OTHER_DRIVER, "device": device}
                )
                expected.append(want)
                cases.append({"expr": sel["cel"]["expression"], "driver": DRIVER, "device": device})
                expected.append(False)
    assert any(expected), "some device must match some renamed class"
    got = run_k8scheck(k8scheck, "cel", cases=cases)
    wrong = [
        f"{c['expr']} on {c['device']['name']} of {c['driver']}: {g} (want {w})"
        for c, g, w in zip(cases, got, expected, strict=True)
        if g.get("value") != w
    ]
    assert not wrong, "\n".join(wrong[:20])


def test_pods_are_readable_only_while_claims_are_read_ahead(helm):
    """settings.claimPrefetch prepare (the default) and read grant list and watch of
    pods, and nothing else of them; off grants no access to pods and tells the driver
    so; anything else is refused by the schema."""

    def pod_rules(docs):
        [role] = by_kind(docs, "ClusterRole")
        return [r for r in role["rules"] if "pods" in r["resources"]]

    def env(docs):
        return {e["name"]: e.get("value") for e in container(docs)["env"]}

    watching = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    default = render(helm)
    assert pod_rules(default) == watching
    assert env(default)["DRA_CLAIM_PREFETCH"] == "prepare"
    read = render(helm, "--set", "settings.claimPrefetch=read")
    assert pod_rules(read) == watching
    assert env(read)["DRA_CLAIM_PREFETCH"] == "read"
    off = render(helm, "--set", "settings.claimPrefetch=off")
    assert pod_rules(off) == []
    assert env(off)["DRA_CLAIM_PREFETCH"] == "off"
    assert "/settings/claimPrefetch" in refused(helm, "--set", "settings.claimPrefetch=on")
