"""The example workloads of deploy/, as close to unchanged as this kernel allows.

An example whose netdev kind the running kernel lacks (this machine has no `dummy`)
gets a veth instead: the pod sees an interface of the same name, MTU and addresses,
only its kind differs. Everything else is left exactly as in deploy/; the RDMA and
RoCE examples stay as they are and stay Pending where no such device exists.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .manifests import DEPLOY

EXAMPLE_FILES = (DEPLOY / "deployment.yaml", DEPLOY / "multi-nic-deployment.yaml")
CNI_EXAMPLES = DEPLOY / "cni-examples.yaml"
# The link kind a CNI plugin of the cni examples makes (what the kernel must have).
CNI_LINK_KINDS = {
    "macvlan": "macvlan", "ipvlan": "ipvlan", "vlan": "vlan", "bridge": "bridge",
    "bandwidth": "ifb",
}  # fmt: skip
STAND_IN_KIND = "veth"
# The fields every netdev kind has (docs/configuration.md, opaque config reference): what a stand-in
# veth keeps of the original's config (a macvlan's parent and mode would be refused).
COMMON_FIELDS = ("interfaceName", "mtu", "macAddress", "ipAddresses")
# How `ip link add` makes a link of each kind the examples use (p0: a parent veth).
_LINK_SETUP = {
    "veth": ["type", "veth", "peer", "name", "p1"],
    "macvlan": ["link", "p0", "type", "macvlan"],
    "ipvlan": ["link", "p0", "type", "ipvlan", "mode", "l2"],
    "dummy": ["type", "dummy"],
    "bridge": ["type", "bridge"],
    "ifb": ["type", "ifb"],  # what a claim's bandwidth limit redirects its pod's traffic to
    "vlan": ["link", "p0", "type", "vlan", "id", "100"],  # the vlan CNI plugin's
}


@dataclass
class Examples:
    """The examples as they run here: files, objects, and what was changed and why."""

    files: list[Path] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def deployments(self) -> list[dict[str, Any]]:
        """The example Deployments."""
        return [d for d in self.docs if d["kind"] == "Deployment"]


@functools.cache
def link_kind_missing(kind: str) -> str | None:
    """None if the running kernel can make a link of `kind`, else why not (probed once,
    in a throw-away network namespace)."""
    if kind not in _LINK_SETUP:
        return f"unknown kernel feature {kind}"
    if shutil.which("ip") is None:
        return "the `ip` command is not installed (Debian package iproute2)"
    if shutil.which("modprobe") is not None:
        subprocess.run(["modprobe", "-q", kind], capture_output=True, check=False)
    ns = f"dralc-probe-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], capture_output=True, check=True)
    try:
        subprocess.run(
            ["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "q0"],
            capture_output=True,
            check=True,
        )
        res = subprocess.run(
            ["ip", "-n", ns, "link", "add", "t0", *_LINK_SETUP[kind]],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            return (
                f"the running kernel lacks link kind {kind} "
                f"({res.stderr.strip() or 'ip link add failed'})"
            )
        return None
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def _netdev_params(template: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for cfg in template["spec"]["spec"]["devices"].get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if params.get("type") == "netdev" and isinstance(params.get("netdev"), dict):
            out.append(params["netdev"])
    return out


def adapt(
    docs: Sequence[dict[str, Any]], missing: Callable[[str], str | None] = link_kind_missing
) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents with every netdev kind the kernel lacks (by `missing`: the reason,
    or None) replaced by veth, and a note per replacement naming the template, the
    interfaces and the reason."""
    out = copy.deepcopy(list(docs))
    notes = []
    for doc in out:
        if doc.get("kind") != "ResourceClaimTemplate":
            continue
        for netdev in _netdev_params(doc):
            kind = str(netdev.get("kind", STAND_IN_KIND))
            reason = missing(kind) if kind != STAND_IN_KIND else None
            if reason is None:
                continue
            for field_name in set(netdev) - {"kind", *COMMON_FIELDS}:
                del netdev[field_name]
            netdev["kind"] = STAND_IN_KIND
            notes.append(
                f"{doc['metadata']['name']}: {reason}, so its interface "
                f"{netdev.get('interfaceName', 'eth1')} is a {STAND_IN_KIND} here "
                "(same name, MTU and addresses in the pod)"
            )
    return out, notes


def write_examples(
    directory: Path, sources: Sequence[Path] = EXAMPLE_FILES, *, nodes: int = 1
) -> Examples:
    """Adapt each example file and write it into `directory` under its own name; with
    several `nodes`, each Deployment runs on every node (`spread`)."""
    directory.mkdir(parents=True, exist_ok=True)
    result = Examples()
    for src in sources:
        docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
        adapted, notes = adapt(docs)
        if nodes > 1:
            adapted = spread(adapted, nodes)
        dst = directory / src.name
        dst.write_text(
            f"# {src.relative_to(DEPLOY.parent)}, adapted to this kernel "
            f"(localcluster/examples.py){', one pod per node' if nodes > 1 else ''}\n"
            + yaml.safe_dump_all(adapted, sort_keys=False)
        )
        result.files.append(dst)
        result.docs.extend(adapted)
        result.notes.extend(notes)
    return result


def write_cni_examples(
    directory: Path, missing: Callable[[str], str | None] = link_kind_missing
) -> Examples:
    """deploy/cni-examples.yaml without the networks whose plugins make a link kind the
    kernel lacks (by `missing`), each left out with a note; the others unchanged. A
    network's NAD and template share its name, its pod is `cni-<name>`."""
    docs = [d for d in yaml.safe_load_all(CNI_EXAMPLES.read_text()) if d]
    result = Examples()
    left_out = set()
    for doc in docs:
        if doc["kind"] != "NetworkAttachmentDefinition":
            continue
        plugins = json.loads(doc["spec"]["config"]).get("plugins") or []
        kinds = [CNI_LINK_KINDS[p["type"]] for p in plugins if p.get("type") in CNI_LINK_KINDS]
        reasons = [r for r in map(missing, kinds) if r is not None]
        if reasons:
            name = doc["metadata"]["name"]
            left_out.add(name)
            result.notes.append(f"{name}: {reasons[0]}, so its pod cni-{name} is left out")
    kept = [d for d in docs if d["metadata"]["name"].removeprefix("cni-") not in left_out]
    directory.mkdir(parents=True, exist_ok=True)
    dst = directory / CNI_EXAMPLES.name
    dst.write_text(
        f"# {CNI_EXAMPLES.relative_to(DEPLOY.parent)}, the networks this kernel can make "
        "(localcluster/examples.py)\n" + yaml.safe_dump_all(kept, sort_keys=False)
    )
    result.files.append(dst)
    result.docs.extend(kept)
    return result


def spread(docs: Sequence[dict[str, Any]], nodes: int) -> list[dict[str, Any]]:
    """The documents with every example Deployment run once per node: `nodes` replicas
    that the scheduler must put on distinct nodes (required anti-affinity on the
    Deployment's own pod labels, by hostname)."""
    out = copy.deepcopy(list(docs))
    for doc in out:
        if doc.get("kind") != "Deployment":
            continue
        spec = doc["spec"]
        spec["replicas"] = nodes
        labels = spec["selector"]["matchLabels"]
        spec["template"]["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": labels},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    return out
