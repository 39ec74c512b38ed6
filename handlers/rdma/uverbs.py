"""rdma / uverbs: the allocated RDMA device's character devices, in shared netns mode.

In shared mode (the kernel default, `rdma system set netns shared`) every network
namespace sees every RDMA device, so nothing moves: the container gets the device
nodes and an environment variable naming the device. Exclusive mode would move the
RDMA device into the pod's namespace, which needs the namespace to exist; it is
refused with a clear error until it is built.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from typing import Any

from dradriver.errors import ConfigError, DeviceError
from dradriver.hookspecs import DeviceRequest, Prepared, Validated
from handlers import sysfs
from handlers.rdma import devices

KIND = devices.KIND
ENV_DEVICE = "DRA_RDMA_DEVICE"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string"},
        "netnsMode": {
            "enum": ["shared", "exclusive"],
            "default": "shared",
            "description": "RDMA netns mode; only shared is supported",
        },
    },
    "additionalProperties": False,
}


def rdma_device(req: DeviceRequest) -> devices.RdmaDevice:
    """The allocated RDMA device as it is in sysfs now."""
    published = req.published
    if published is None or published.type != "rdma":
        raise ConfigError(
            f"an RDMA config needs an RDMA device, but the allocated device "
            f"{req.device} is {published.type if published else 'unknown'}; "
            "request the rdma-devices class",
            "$.type",
        )
    dev = devices.read(sysfs.Sysfs(req.context.sysfs_root), str(published.attributes["rdmaDevice"]))
    if dev.uverbs is None:
        raise DeviceError(f"RDMA device {dev.name} has no uverbs device (module ib_uverbs?)")
    return dev


def check_mode(config: Mapping[str, Any], path: str) -> None:
    """Refuse exclusive netns mode."""
    if config.get("netnsMode", "shared") != "shared":
        raise ConfigError(
            "netnsMode exclusive is not supported yet; use shared (the kernel default)",
            f"{path}.netnsMode",
        )


def edits(req: DeviceRequest, dev: devices.RdmaDevice) -> dict[str, Any]:
    """CDI edits: the device's character devices and the variables naming it."""
    nodes = []
    for path in devices.char_devices(req.context, dev):
        try:
            is_char = stat.S_ISCHR(path.stat().st_mode)
        except FileNotFoundError:
            is_char = False
        if not is_char:
            if path.name == "rdma_cm":
                continue  # optional: only present with rdma_ucm loaded
            raise DeviceError(f"character device {path} for RDMA device {dev.name} is missing")
        inside = f"/dev/infiniband/{path.name}"
        node: dict[str, Any] = {"path": inside}
        if str(path) != inside:
            node["hostPath"] = str(path)
        nodes.append(node)
    suffix = re.sub(r"[^A-Z0-9]", "_", req.request.upper())
    return {
        "deviceNodes": nodes,
        "env": [f"{ENV_DEVICE}={dev.name}", f"{ENV_DEVICE}_{suffix}={dev.name}"],
    }


class UverbsHandler:
    """Gives the container the allocated RDMA device's uverbs (and rdma_cm, umad) nodes."""

    type = "rdma"
    kinds = (KIND,)

    def schema(self, kind: str) -> Mapping[str, Any]:
        """kind and netnsMode."""
        return SCHEMA

    def validate(self, req: DeviceRequest) -> Validated:
        """RDMA device allocated, shared mode, character devices present."""
        check_mode(req.config, "$.rdma")
        edits(req, rdma_device(req))
        return Validated()

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Nothing changes on the host: the edits are the whole work."""
        return Prepared(edits=edits(req, rdma_device(req)), undo={})

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Nothing to undo in shared mode."""
