"""The two ways interfaces reach a pod, and what each puts in the CDI spec (pure).

CDI mode: the device's CDI edits carry `netDevices`; the runtime (runc >= 1.4) moves the
interface into the container's network namespace when it creates the container, once.
NRI mode: the spec carries no `netDevices`; the driver's NRI plugin moves the interface
into the pod sandbox's namespace when the runtime creates the sandbox, which every
container shares and which outlives container restarts. Device nodes and environment
variables reach containers through CDI in both modes.

Every device with interfaces gets `DRA_NETDEV=<name in the pod>` and
`DRA_NETDEV_<REQUEST>=<name>` in both modes, as RDMA devices get DRA_RDMA_DEVICE: a
container can find its interface, and no device's edits are ever empty.

Every device that goes into the pod (an interface, or RDMA in exclusive mode) also gets
`DRA_CLAIM_<CLAIM UID>=<namespace>/<name>`: in NRI mode the driver sees a container's
environment at CreateContainer and so learns which claims the container uses, even for
a pod the claim was never prepared for (the kubelet prepares a claim once, for the pods
reserved at that moment).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dradriver.contract.hookspecs import CDI, NEEDS_NRI, NRI

AUTO = "auto"
SETTINGS = (AUTO, CDI, NRI)  # what --injection accepts
ENV_NETDEV = "DRA_NETDEV"
ENV_CLAIM = "DRA_CLAIM_"
_CLAIM_VAR = re.compile(r"DRA_CLAIM_([0-9A-F]{8}(?:_[0-9A-F]{4}){3}_[0-9A-F]{12})=")
__all__ = [
    "AUTO",
    "CDI",
    "NEEDS_NRI",
    "NRI",
    "SETTINGS",
    "claim_env",
    "claims_in_env",
    "netdev_env",
    "spec_edits",
]


def env_suffix(request: str) -> str:
    """A request name as an environment variable suffix (DRA_RDMA_DEVICE_<suffix> too)."""
    return re.sub(r"[^A-Z0-9]", "_", request.upper())


def netdev_env(request: str, names: Sequence[str]) -> list[str]:
    """The variables naming a device's interfaces in the pod (the last one wins)."""
    env: list[str] = []
    for name in names:
        env += [f"{ENV_NETDEV}={name}", f"{ENV_NETDEV}_{env_suffix(request)}={name}"]
    return env


def claim_env(claim_uid: str, claim: str) -> str:
    """The variable marking a container as a user of claim `claim` (namespace/name)."""
    return f"{ENV_CLAIM}{env_suffix(claim_uid)}={claim}"


def claims_in_env(env: Iterable[str]) -> list[str]:
    """The claim UIDs a container's environment marks (claim_env), in order, once each."""
    found = (_CLAIM_VAR.match(var) for var in env if var.startswith(ENV_CLAIM))
    uids = (m.group(1).lower().replace("_", "-") for m in found if m)
    return list(dict.fromkeys(uids))


def spec_edits(
    mode: str, request: str, edits: Mapping[str, Any], claim_marker: str = ""
) -> dict[str, Any]:
    """A device's containerEdits as the spec holds them in `mode`: the handler's edits
    plus the DRA_NETDEV variables and `claim_marker` (claim_env, for a device that goes
    into the pod), without `netDevices` in NRI mode."""
    out = dict(edits)
    if claim_marker:
        out["env"] = [*out.get("env", ()), claim_marker]
    devices = list(out.get("netDevices") or ())
    if not devices:
        return out
    out["env"] = [*out.get("env", ()), *netdev_env(request, [str(d["name"]) for d in devices])]
    if mode == NRI:
        del out["netDevices"]
    return out
