"""kind-config.yaml and the Makefile."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import pytest

from tests.deploy.support import KIND_CONFIG, ROOT, docs
from tests.support import hosttools

TARGETS = [
    *("all", "kind-image", "cluster", "build", "load", "deploy", "undeploy"),
    *("network-test", "network-check", "restart", "logs", "debug", "clean"),
    *("test", "test-faults", "lint", "proto", "config-policy", "test-kernel", "e2e", "bench"),
    *("helm", "manifests", "helm-lint", "helm-install", "helm-uninstall"),
    *("node-build", "demo", "demo-down", "test-node", "image", "test-image"),
]
# Tools replaced by `true` so that `make -n` cannot reach a cluster or an engine.
NO_TOOLS = ["DOCKER=true", "KIND=true", "KUBECTL=true", "SKIP_DUMMY_CHECK=1"]


def kind_config() -> dict:
    (config,) = docs(KIND_CONFIG)
    return config


def test_kind_cluster_shape():
    config = kind_config()
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    known = {
        "kind",
        "apiVersion",
        "name",
        "featureGates",
        "runtimeConfig",
        "networking",
        "nodes",
        "containerdConfigPatches",
        "kubeadmConfigPatches",
    }
    assert set(config) <= known
    for node in config["nodes"]:
        assert set(node) <= {
            "role",
            "image",
            "extraMounts",
            "extraPortMappings",
            "labels",
            "kubeadmConfigPatches",
        }


def test_kind_feature_gates():
    gates = kind_config()["featureGates"]
    for gate in (
        "DynamicResourceAllocation",
        "DRAConsumableCapacity",
        "DRAResourceClaimDeviceStatus",
    ):
        assert gates.get(gate) is True, gate


def test_kind_containerd_patch_enables_cdi():
    """The patch is TOML for containerd 2.x (config version 3) with CDI on."""
    merged: dict = {}
    for patch in kind_config()["containerdConfigPatches"]:
        merged.update(tomllib.loads(patch))
    runtime = merged["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]


def make(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def make_available():
    if reason := hosttools.missing("make"):
        pytest.fail(f"{reason}: the Makefile cannot be checked")


def test_help_is_the_default_goal_and_lists_every_target(make_available):
    res = make()
    assert res.returncode == 0, res.stderr
    listed = dict(re.findall(r"^\s+(\S+)\s+(.+)$", res.stdout, re.MULTILINE))
    for target in TARGETS:
        assert target in listed, f"{target} has no `## help` line"
        assert len(listed[target]) > 10


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "all"])
def test_every_target_dry_runs(make_available, target):
    res = make("-n", target, *NO_TOOLS)
    assert res.returncode == 0, res.stderr


def test_all_runs_the_steps_in_order():
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nall:", 1)[1].split("\n\n", 1)[0]
    steps = re.findall(r"\$\(MAKE\) (\S+)", recipe)
    assert steps == ["cluster", "build", "load", "deploy", "network-test", "network-check"]


@pytest.mark.parametrize(
    "target,command",
    [
        ("test", "-m pytest "),
        ("test", " tests/deploy"),
        ("lint", "-m ruff check ."),
        ("lint", "-m ruff format --check ."),
        ("lint", "-m mypy"),
        ("proto", "hack/gen_proto.py"),
        ("e2e", "tests/e2e"),
        ("bench", "-m bench"),
        ("network-check", "deploy/network-check.py"),
        ("network-test", "apply -f deploy/deployment.yaml -f deploy/multi-nic-deployment.yaml"),
        ("cluster", "--config kind-config.yaml"),
        ("deploy", "-f deploy/namespace.yaml -f deploy/driver.yaml -f deploy/resourceclass.yaml"),
        ("e2e", "hack/build-helm.sh && "),
        ("helm", "hack/build-helm.sh"),
        ("manifests", "hack/gen_manifests.py --helm "),
        ("helm-lint", " lint --strict --namespace dra-system deploy/helm/dra-driver"),
        ("helm-install", "apply -f deploy/namespace.yaml"),
        ("helm-install", " upgrade --install dra-driver deploy/helm/dra-driver"),
        ("helm-install", "rollout status daemonset/dra-driver "),
        ("helm-uninstall", " uninstall dra-driver --kube-context kind-dra-driver"),
        ("deploy", "-f deploy/config-policy.yaml"),
        ("undeploy", "delete --ignore-not-found -f deploy/config-policy.yaml"),
        ("config-policy", "python hack/gen_config_policy.py\n"),
        ("config-policy", "make manifests"),
        ("node-build", "hack/build-k8s.sh\nhack/build-node.sh"),
        ("demo", "-m localcluster demo up --workdir /tmp/dra-demo"),
        ("demo-down", "-m localcluster demo down --workdir /tmp/dra-demo"),
        ("test-node", "-m pytest tests/node"),
        ("image", "IMAGE=dra-driver:dev hack/build-image.sh"),
        ("test-image", "hack/build-image.sh\nDRA_IMAGE_REQUIRED=1 "),
        ("test-image", "-m pytest tests/image"),
        ("build", "true build -t dra-driver:dev ."),
    ],
)
def test_target_commands(make_available, target, command):
    res = make("-n", target, *NO_TOOLS)
    assert command in res.stdout, res.stdout


def test_cluster_local_points_the_checker_at_the_demo_node(make_available):
    """CLUSTER=local: the demo's kubeconfig, and the examples as the demo adapted them."""
    for target, mode in (("network-check", "check"), ("network-test", "wait")):
        res = make("-n", target, "CLUSTER=local", "LOCAL_DIR=/tmp/x")
        assert res.returncode == 0, res.stderr
        assert "--kubeconfig /tmp/x/kubeconfig" in res.stdout
        assert (
            f" {mode} /tmp/x/examples/deployment.yaml /tmp/x/examples/multi-nic-deployment.yaml"
            in (res.stdout)
        )
    res = make("-n", "network-test", "CLUSTER=local", "LOCAL_DIR=/tmp/x")
    # Server-side, as the demo applied them: no warnings about a missing last-applied.
    assert (
        "apply --server-side --force-conflicts -f /tmp/x/examples/deployment.yaml "
        "-f /tmp/x/examples/multi-nic" in res.stdout
    )


def test_python_default_prefers_the_venv(make_available):
    res = make("-n", "test", *NO_TOOLS)
    venv = (ROOT / ".venv" / "bin" / "python").exists()
    pytest_line = res.stdout.splitlines()[-1]  # after the checker's build
    assert pytest_line.startswith(".venv/bin/python -m pytest" if venv else "python3 -m pytest")
    res = make("-n", "test", "PYTHON=/opt/py")
    assert res.stdout.splitlines()[-1].startswith("/opt/py -m pytest")


def test_cluster_checks_for_the_dummy_module(make_available):
    res = make("-n", "check-dummy")
    assert "modinfo dummy" in res.stdout and "/sys/module/dummy" in res.stdout
    assert "ip link add" in res.stdout and "linux-modules-extra" in res.stdout
