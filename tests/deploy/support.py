"""Shared helpers of the deploy tests: the repository's files, parsed."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DRIVER = "dra.example.com"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
EXAMPLE_FILES = (DEPLOY / "deployment.yaml", DEPLOY / "multi-nic-deployment.yaml")
CLASS_FILE = DEPLOY / "resourceclass.yaml"
KIND_CONFIG = ROOT / "kind-config.yaml"
# The console script beside this interpreter (the venv's), else the same CLI via -m.
_SCRIPT = Path(sys.executable).parent / "dra-driver"
DRA_DRIVER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "dradriver"]


@cache
def docs(path: Path) -> tuple[dict[str, Any], ...]:
    """The non-empty YAML documents of `path`."""
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d is not None)


def all_docs(paths: tuple[Path, ...] = tuple(MANIFESTS)) -> list[dict[str, Any]]:
    return [d for p in paths for d in docs(p)]


def objects(kind: str, paths: tuple[Path, ...] = tuple(MANIFESTS)) -> list[dict[str, Any]]:
    return [d for d in all_docs(paths) if d.get("kind") == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in objects(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def device_classes() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in objects("DeviceClass")}


def selectors(device_class: dict[str, Any]) -> list[str]:
    return [s["cel"]["expression"] for s in device_class["spec"].get("selectors") or []]


def daemonset() -> dict[str, Any]:
    return one("DaemonSet", "dra-driver")


def driver_container() -> dict[str, Any]:
    (container,) = daemonset()["spec"]["template"]["spec"]["containers"]
    return container


def env_value(name: str) -> str | None:
    for env in driver_container().get("env") or []:
        if env["name"] == name:
            return env.get("value")
    return None


def run_driver(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`dra-driver ARGS` as the installed package runs it (environment cleared of DRA_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_")}
    env.pop("NODE_NAME", None)
    return subprocess.run(
        [*DRA_DRIVER, *args], capture_output=True, text=True, env=env, check=check, cwd=ROOT
    )


def discover(*flags: str) -> list[dict[str, Any]]:
    """Devices `dra-driver discover -o json --node-name n FLAGS` publishes."""
    res = run_driver("discover", "-o", "json", "--node-name", "n", *flags)
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)["items"]
    return [d for item in items for d in item["spec"]["devices"]]


@cache
def network_check() -> ModuleType:
    """deploy/network-check.py as a module."""
    path = DEPLOY / "network-check.py"
    spec = importlib.util.spec_from_file_location("network_check", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["network_check"] = module
    spec.loader.exec_module(module)
    return module


def run_k8scheck(binary: Path, *args: str, cases: list[Any]) -> list[Any]:
    """Run tests/deploy/k8scheck with `cases` on stdin; its results, one per case."""
    res = subprocess.run(
        [str(binary), *args], input=json.dumps(cases), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    results = json.loads(res.stdout)
    assert len(results) == len(cases)
    return list(results)


def _hack_module(name: str) -> ModuleType:
    """hack/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@cache
def gen_manifests() -> ModuleType:
    """hack/gen_manifests.py (the chart -> deploy/ generator) as a module."""
    return _hack_module("gen_manifests")


@cache
def gen_config_policy() -> ModuleType:
    """hack/gen_config_policy.py (`dra-driver admission-policy` -> chart template)."""
    return _hack_module("gen_config_policy")


def makefile_var(name: str) -> str:
    """The default of `NAME ?= value` in the Makefile."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        left, sep, right = line.partition("?=")
        if sep and left.strip() == name:
            return right.strip()
    raise AssertionError(f"Makefile has no {name} ?= ...")


def admission_request(
    obj: dict[str, Any],
    params: list[dict[str, Any]],
    op: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A k8scheck `vap` case: creating (or updating) `obj` with `params` (DeviceClasses)."""
    resources = {
        "ResourceClaim": "resourceclaims",
        "ResourceClaimTemplate": "resourceclaimtemplates",
        "DeviceClass": "deviceclasses",
    }
    return {
        "operation": op,
        "kind": obj["kind"],
        "resource": resources[obj["kind"]],
        "namespace": obj["metadata"].get("namespace", ""),
        "object": obj,
        "oldObject": old,
        "params": params,
    }


def deployed_classes() -> list[dict[str, Any]]:
    """The DeviceClasses of deploy/, as the API server holds them after `make deploy`."""
    return list(device_classes().values())


def generated_objects(driver: str = DRIVER) -> list[dict[str, Any]]:
    """`dra-driver admission-policy --driver-name DRIVER`'s objects."""
    res = run_driver("admission-policy", "--driver-name", driver)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", "the built-in handlers' schema must translate fully"
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def as_installed(
    objects: list[dict[str, Any]],
    labels: dict[str, str],
    failure_policy: str = "Ignore",
    actions: tuple[str, ...] = ("Deny",),
) -> list[dict[str, Any]]:
    """The generator's objects as the chart installs them (its labels, the configPolicy
    settings), sorted by kind and name."""
    out = []
    for obj in copy.deepcopy(objects):
        obj["metadata"]["labels"] = labels
        if obj["kind"] == "ValidatingAdmissionPolicy":
            obj["spec"]["failurePolicy"] = failure_policy
        else:
            obj["spec"]["validationActions"] = list(actions)
        out.append(obj)
    return by_name(out)


def by_name(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["name"]))
