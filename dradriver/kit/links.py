"""The links the driver makes for a netdev device: their names and tags, creating them,
the undo payload that deletes them, and where a claim's addresses go.

Links the driver creates get a deterministic host name (`naming.host_ifname`) and an
ifalias tag naming their owner (`naming.ifalias`), are configured while down on the
host, and are moved into the container by the runtime (CDI netDevices) or into the pod
sandbox's namespace by the driver (NRI). In NRI mode the host never holds a claim's
addresses: they, the routes and the sysctls are applied inside the pod after the move
(`netconfig.pod_interface` describes it). A link is configured from the claim's config by
`netconfig.configure`.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dradriver.base.errors import DeviceError
from dradriver.contract import naming
from dradriver.contract.hookspecs import NRI, DeviceRequest
from dradriver.kernel import linkreaper, netlink


@dataclass(frozen=True)
class CreatedLinks:
    """Undo payload of a device whose links the driver created: delete them if still ours.

    `container` names the links that go into the container (they may carry the claim's
    addresses while on the host); unset in records of older drivers.
    """

    interfaces: tuple[str, ...]
    alias: str
    container: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The payload as stored in the allocation record."""
        out: dict[str, Any] = {"interfaces": list(self.interfaces), "alias": self.alias}
        if self.container:
            out["container"] = list(self.container)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CreatedLinks:
        """Read a stored payload (unknown keys ignored)."""
        return cls(
            tuple(data.get("interfaces") or ()),
            str(data.get("alias") or ""),
            tuple(data.get("container") or ()),
        )


def host_name(req: DeviceRequest, role: str = "c") -> str:
    """The host-side name of this device's interface (see naming.host_ifname)."""
    return naming.host_ifname(req.claim.uid, req.key, role)


def tag(req: DeviceRequest) -> str:
    """The ifalias tag naming this device's claim and the driver instance that owns it."""
    return naming.ifalias(req.context.owner, req.claim.uid, req.key)


def clear_leftover(name: str, alias: str) -> None:
    """Delete a link with our deterministic `name` left by an earlier attempt of this device.

    A link of that name with another owner's tag is never touched: that is an error.
    """
    link = netlink.find(name)
    if link is None:
        return
    if link.alias not in (None, "", alias):
        raise DeviceError(f"interface {name} exists and belongs to someone else ({link.alias})")
    netlink.delete(name)


def on_host(req: DeviceRequest) -> bool:
    """Whether a claim's addresses go on the host side (CDI mode) or only into the pod."""
    return req.injection != NRI


def create(
    req: DeviceRequest, name: str, kind: str, peer: str | None = None, **attrs: Any
) -> netlink.Link:
    """Create a down link of `kind` called `name` (and its veth `peer`).

    On a name clash, our own leftover of the same device (an earlier attempt whose
    record was lost) is deleted and the creation retried; anyone else's link stays.
    """
    if peer is not None:
        attrs["peer"] = peer
    try:
        netlink.create(name, kind, kind, **attrs)
    except netlink.NetlinkError as exc:
        if exc.errno != errno.EEXIST:
            raise
        for leftover in (name, peer):
            if leftover is not None:
                clear_leftover(leftover, tag(req))
        netlink.create(name, kind, kind, **attrs)
    return netlink.require(name, kind)


def net_devices_edit(host: str, container: str) -> dict[str, Any]:
    """The CDI edit that makes the runtime move `host` into the container as `container`."""
    return {"netDevices": [{"hostInterfaceName": host, "name": container}]}


def delete_own(links: CreatedLinks) -> None:
    """Delete the links we created, if still present and still ours.

    In an unprepare whose container links have left the host (the pod took them), the
    links left on the host (a veth's host end) are deleted a moment after the answer
    (dradriver.kernel.linkreaper); a container link still on the host (the pod never started)
    may hold the claim's addresses, so then everything is deleted at once.
    """
    if links.container and all(netlink.find(name) is None for name in links.container):
        staying = [name for name in links.interfaces if name not in links.container]
        if not staying or linkreaper.defer(staying, links.alias):
            return
    for name in links.interfaces:
        link = netlink.find(name)
        if link is not None and link.alias in (links.alias, None, ""):
            netlink.delete(name)
