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
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dradriver.contract.hookspecs import CDI, NEEDS_NRI, NRI

AUTO = "auto"
SETTINGS = (AUTO, CDI, NRI)  # what --injection accepts
ENV_NETDEV = "DRA_NETDEV"
__all__ = ["AUTO", "CDI", "NEEDS_NRI", "NRI", "SETTINGS", "netdev_env", "spec_edits"]


def env_suffix(request: str) -> str:
    """A request name as an environment variable suffix (DRA_RDMA_DEVICE_<suffix> too)."""
    return re.sub(r"[^A-Z0-9]", "_", request.upper())


def netdev_env(request: str, names: Sequence[str]) -> list[str]:
    """The variables naming a device's interfaces in the pod (the last one wins)."""
    env: list[str] = []
    for name in names:
        env += [f"{ENV_NETDEV}={name}", f"{ENV_NETDEV}_{env_suffix(request)}={name}"]
    return env


def spec_edits(mode: str, request: str, edits: Mapping[str, Any]) -> dict[str, Any]:
    """A device's containerEdits as the spec holds them in `mode`: the handler's edits
    plus the DRA_NETDEV variables, without `netDevices` in NRI mode."""
    out = dict(edits)
    devices = list(out.get("netDevices") or ())
    if not devices:
        return out
    out["env"] = [*out.get("env", ()), *netdev_env(request, [str(d["name"]) for d in devices])]
    if mode == NRI:
        del out["netDevices"]
    return out
