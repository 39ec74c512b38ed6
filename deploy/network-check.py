#!/usr/bin/env python3
"""Wait for the example workloads, or check their interfaces inside the pods.

    network-check.py wait   [--timeout 300] [FILE...]   (make network-test)
    network-check.py check  [FILE...]                   (make network-check)

What is expected comes from the example files themselves (default: deployment.yaml and
multi-nic-deployment.yaml beside this script, DeviceClass config from
resourceclass.yaml): for every Deployment, every claim its container references, the
opaque config of each request, class config first and claim config merged over it, as
the driver merges them. `check` execs into each running pod and compares, per
interface: it exists (`/sys/class/net/<if>/mtu` reads), its MTU when one is configured,
and every configured address (`ip -o addr show dev <if>`); for RDMA, a uverbs device in
/dev/infiniband. It prints what it found and exits 1 on any mismatch.

Examples that need hardware (classes network-devices, rdma-devices, roce-devices) are
expected only when some ResourceSlice of the driver publishes a device of that class;
otherwise they are reported as skipped (--require-all turns that into a failure).
Needs kubectl and PyYAML only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dradriver.claims import resolution
from dradriver.contract.hookspecs import ClaimRef
from dradriver.kit.netconfig import DEFAULT_INTERFACE_NAME

DRIVER = "dra.example.com"
HERE = Path(__file__).resolve().parent
DEFAULT_FILES = (HERE / "deployment.yaml", HERE / "multi-nic-deployment.yaml")
CLASS_FILE = HERE / "resourceclass.yaml"
DEFAULT_INTERFACE = DEFAULT_INTERFACE_NAME

Attrs = Mapping[str, Any]
# Classes whose devices only nodes with such hardware publish; virtual-network is on
# every node. Kept equal to resourceclass.yaml's selectors by tests/deploy.
HARDWARE_CLASSES: dict[str, Callable[[Attrs], bool]] = {
    "network-devices": lambda a: (
        a.get("type") == "netdev" and a.get("kind") in ("host-device", "sriov-vf")
    ),
    "rdma-devices": lambda a: a.get("type") == "rdma",
    "roce-devices": lambda a: a.get("type") == "rdma" and a.get("roce") is True,
}
# Config a request without any gets, by class (the driver's default for the device).
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "virtual-network": {"type": "netdev", "netdev": {"kind": "veth"}},
    "network-devices": {"type": "netdev", "netdev": {"kind": "host-device"}},
    "rdma-devices": {"type": "rdma", "rdma": {"kind": "uverbs"}},
    "roce-devices": {"type": "combo", "combo": {"kind": "roce"}},
}


@dataclass(frozen=True)
class Expectation:
    """What one request of one claim must give one container."""

    namespace: str
    deployment: str
    selector: Mapping[str, str]
    container: str
    claim: str
    request: str
    device_class: str
    interface: str | None = None
    mtu: int | None = None
    addresses: tuple[str, ...] = ()
    rdma: bool = False

    def describe(self) -> str:
        """One line naming what is expected."""
        what = []
        if self.interface:
            what.append(self.interface)
            if self.mtu:
                what.append(f"mtu {self.mtu}")
            what.extend(self.addresses)
        if self.rdma:
            what.append("uverbs")
        return f"{self.claim}/{self.request} ({self.device_class}): {', '.join(what)}"


@dataclass
class Report:
    """Collected results: lines printed as they come, failures counted."""

    failures: int = 0
    skipped: list[str] = field(default_factory=list)

    def ok(self, text: str) -> None:
        print(f"ok    {text}")

    def fail(self, text: str) -> None:
        self.failures += 1
        print(f"FAIL  {text}")

    def skip(self, text: str) -> None:
        self.skipped.append(text)
        print(f"skip  {text}")


def load_docs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of `paths`."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _ours(configs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [c for c in configs if (c.get("opaque") or {}).get("driver") == DRIVER]


def class_configs(docs: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """DeviceClass name -> parameters of its opaque configs for our driver."""
    return {
        d["metadata"]["name"]: [
            c["opaque"].get("parameters") for c in _ours(d["spec"].get("config") or [])
        ]
        for d in docs
        if d.get("kind") == "DeviceClass"
    }


def request_parameters(
    request: str,
    device_class: str,
    claim_configs: Sequence[Mapping[str, Any]],
    classes: Mapping[str, list[Any]],
) -> dict[str, Any]:
    """The config the driver will use for `request`: its own claim resolution (class
    configs first, then the claim's, request-scoped ones only for their request)."""
    configs = [
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": p}}
        for p in classes.get(device_class, [])
    ]
    configs += [{**c, "source": "FromClaim"} for c in _ours(claim_configs)]
    claim = {
        "metadata": {"uid": "check"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": request, "driver": DRIVER, "pool": "", "device": ""}],
                    "config": configs,
                }
            }
        },
    }
    [device] = resolution.resolve(claim, ClaimRef("", "", "check"), DRIVER).devices
    return dict(device.parameters or CLASS_DEFAULTS.get(device_class, {}))


def _netdev_fields(netdev: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "interface": netdev.get("interfaceName", DEFAULT_INTERFACE),
        "mtu": netdev.get("mtu"),
        "addresses": tuple(netdev.get("ipAddresses") or ()),
    }


def what_container_gets(params: Mapping[str, Any]) -> dict[str, Any]:
    """Interface name, MTU, addresses and RDMA of one request's merged config."""
    type_ = params.get("type")
    body = (params.get(type_) or {}) if isinstance(type_, str) else {}
    if type_ == "netdev":
        return _netdev_fields(body)
    if type_ == "rdma":
        return {"rdma": True}
    if type_ == "combo":
        return {**_netdev_fields(body.get("netdev") or {}), "rdma": True}
    raise ValueError(f"unknown config type {type_!r}")


def expectations(
    docs: Sequence[Mapping[str, Any]], classes: Mapping[str, list[Any]]
) -> list[Expectation]:
    """Everything the Deployments in `docs` must have, one entry per container request."""
    templates = {
        (d["metadata"].get("namespace", "default"), d["metadata"]["name"]): d["spec"]["spec"]
        for d in docs
        if d.get("kind") == "ResourceClaimTemplate"
    }
    out: list[Expectation] = []
    for dep in docs:
        if dep.get("kind") != "Deployment":
            continue
        ns = dep["metadata"].get("namespace", "default")
        pod = dep["spec"]["template"]["spec"]
        claims = {c["name"]: c for c in pod.get("resourceClaims") or []}
        # Every container shares the pod's network namespace: what an init container
        # received is looked at from the first app container, which is still running.
        viewer = (pod.get("containers") or [{}])[0].get("name", "")
        for container in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            for ref in (container.get("resources") or {}).get("claims") or []:
                source = claims[ref["name"]]
                if "resourceClaimTemplateName" not in source:
                    raise ValueError(f"{dep['metadata']['name']}: only templates are supported")
                spec = templates[(ns, source["resourceClaimTemplateName"])]["devices"]
                for req in spec.get("requests") or []:
                    if ref.get("request") and ref["request"] != req["name"]:
                        continue
                    device_class = req["exactly"]["deviceClassName"]
                    params = request_parameters(
                        req["name"], device_class, spec.get("config") or [], classes
                    )
                    out.append(
                        Expectation(
                            namespace=ns,
                            deployment=dep["metadata"]["name"],
                            selector=dep["spec"]["selector"]["matchLabels"],
                            container=container["name"]
                            if container in (pod.get("containers") or [])
                            else viewer,
                            claim=ref["name"],
                            request=req["name"],
                            device_class=device_class,
                            **what_container_gets(params),
                        )
                    )
    return out


class Kubectl:
    """Runs kubectl with fixed leading arguments (e.g. --context)."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def json(self, *args: str) -> Any:
        res = self.run(*args, "-o", "json")
        if res.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {res.stderr.strip()}")
        return json.loads(res.stdout)


def published_attributes(kubectl: Kubectl) -> list[dict[str, Any]]:
    """Attributes (unqualified, plain values) of every device our driver publishes."""
    out = []
    for item in kubectl.json("get", "resourceslices")["items"]:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRIVER:
            continue
        for device in spec.get("devices") or []:
            attrs = {}
            for name, typed in (device.get("attributes") or {}).items():
                domain, _, short = name.rpartition("/")
                if domain in ("", DRIVER) and typed:
                    attrs[short] = next(iter(typed.values()))
            out.append(attrs)
    return out


def missing_hardware(exp: Expectation, published: Sequence[Attrs]) -> str | None:
    """Why `exp` cannot be met on this cluster (None if a device of its class exists)."""
    match = HARDWARE_CLASSES.get(exp.device_class)
    if match is None or any(match(a) for a in published):
        return None
    return f"no {exp.device_class} device in any ResourceSlice of {DRIVER}"


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def running_pods(kubectl: Kubectl, exp: Expectation) -> list[str]:
    """Names of the Deployment's running pods (not being deleted)."""
    pods = kubectl.json("get", "pods", "-n", exp.namespace, "-l", _selector(exp.selector))
    return sorted(
        p["metadata"]["name"]
        for p in pods["items"]
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


_ADDR = re.compile(r"\binet6?\s+(\S+)")


def check_pod(kubectl: Kubectl, exp: Expectation, pod: str, report: Report) -> None:
    """Compare one pod's container with `exp`, printing what was found."""
    where = f"{exp.namespace}/{pod} [{exp.container}] {exp.claim}/{exp.request}"

    def exec_(*cmd: str) -> subprocess.CompletedProcess[str]:
        return kubectl.run("exec", "-n", exp.namespace, pod, "-c", exp.container, "--", *cmd)

    if exp.interface:
        ifname = exp.interface
        res = exec_("cat", f"/sys/class/net/{ifname}/mtu")
        if res.returncode != 0:
            report.fail(f"{where}: interface {ifname} missing ({res.stderr.strip()})")
        else:
            mtu = int(res.stdout.strip())
            res = exec_("ip", "-o", "addr", "show", "dev", ifname)
            if res.returncode != 0:  # an ip without -o
                res = exec_("ip", "addr", "show", "dev", ifname)
            found = _ADDR.findall(res.stdout)
            problems = []
            if exp.mtu is not None and mtu != exp.mtu:
                problems.append(f"mtu {mtu}, want {exp.mtu}")
            missing = [a for a in exp.addresses if a not in found]
            if missing:
                problems.append(f"missing address {', '.join(missing)}")
            text = f"{where}: {ifname} mtu {mtu} addresses {', '.join(found) or '-'}"
            if problems:
                report.fail(f"{text}: {'; '.join(problems)}")
            else:
                report.ok(text)
    if exp.rdma:
        res = exec_("ls", "/dev/infiniband")
        verbs = sorted(n for n in res.stdout.split() if re.fullmatch(r"uverbs\d+", n))
        if res.returncode != 0 or not verbs:
            report.fail(
                f"{where}: no uverbs device in /dev/infiniband "
                f"({res.stdout.strip() or res.stderr.strip()})"
            )
        else:
            report.ok(f"{where}: /dev/infiniband/{', '.join(verbs)}")


def _usable(
    exps: Sequence[Expectation], kubectl: Kubectl, report: Report, require_all: bool
) -> list[Expectation]:
    """The expectations this cluster's hardware allows; report the others."""
    published = published_attributes(kubectl)
    usable: list[Expectation] = []
    for exp in exps:
        reason = missing_hardware(exp, published)
        if reason is None:
            usable.append(exp)
        elif require_all:
            report.fail(f"{exp.namespace}/{exp.deployment}: {reason}")
        else:
            report.skip(f"{exp.namespace}/{exp.deployment}: {reason}")
    skipped = {(e.namespace, e.deployment) for e in exps if e not in usable}
    return [e for e in usable if (e.namespace, e.deployment) not in skipped]


def wait(
    kubectl: Kubectl, exps: Sequence[Expectation], timeout: float, report: Report, require_all: bool
) -> None:
    """`kubectl rollout status` for every Deployment this cluster can run."""
    deadline = time.monotonic() + timeout
    done: set[tuple[str, str]] = set()
    for exp in _usable(exps, kubectl, report, require_all):
        key = (exp.namespace, exp.deployment)
        if key in done:
            continue
        done.add(key)
        left = max(1, int(deadline - time.monotonic()))
        res = kubectl.run(
            "rollout",
            "status",
            f"deployment/{exp.deployment}",
            "-n",
            exp.namespace,
            f"--timeout={left}s",
            timeout=left + 30,
        )
        if res.returncode == 0:
            report.ok(f"{exp.namespace}/{exp.deployment} is available")
        else:
            report.fail(
                f"{exp.namespace}/{exp.deployment} not available: "
                f"{(res.stderr or res.stdout).strip()}; see `make debug`"
            )


def check(kubectl: Kubectl, exps: Sequence[Expectation], report: Report, require_all: bool) -> None:
    """Every expected interface in every running pod of every usable Deployment."""
    for exp in _usable(exps, kubectl, report, require_all):
        print(f"      expect {exp.namespace}/{exp.deployment} {exp.describe()}")
        pods = running_pods(kubectl, exp)
        if not pods:
            report.fail(f"{exp.namespace}/{exp.deployment}: no running pod")
        for pod in pods:
            check_pod(kubectl, exp, pod, report)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("wait", "check"))
    parser.add_argument("files", nargs="*", type=Path, default=list(DEFAULT_FILES))
    parser.add_argument(
        "--classes",
        type=Path,
        default=CLASS_FILE,
        help="file with the DeviceClasses (for their config)",
    )
    parser.add_argument("--kubectl", default="kubectl", help="kubectl command (split on spaces)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--timeout", type=float, default=300, help="wait: seconds in all")
    parser.add_argument(
        "--require-all",
        action="store_true",
        help="fail instead of skipping examples whose hardware is missing",
    )
    args = parser.parse_args(argv)

    command = args.kubectl.split()
    if args.context:
        command += ["--context", args.context]
    kubectl = Kubectl(command)
    exps = expectations(load_docs(args.files), class_configs(load_docs([args.classes])))
    report = Report()
    try:
        if args.mode == "wait":
            wait(kubectl, exps, args.timeout, report, args.require_all)
        else:
            check(kubectl, exps, report, args.require_all)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        report.fail(str(exc))
    print(f"{args.mode}: {report.failures} failed, {len(report.skipped)} skipped")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
