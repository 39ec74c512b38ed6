"""What the NRI mode moves into a pod's network namespace, and where it is: record data.

A claim prepared in NRI mode keeps, per device, the moves (interfaces with what to apply
in the pod, RDMA devices in exclusive netns mode) and its placement: where they are
now. Both live in the allocation record (`moves`, `placement`); nothing of it is kept
only in memory, since two driver instances may both handle a pod's events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dradriver.contract.hookspecs import PodInterface, PodRoute, PodSysctl, Prepared

# Where a device's interfaces are, in the NRI mode (a record's `placement`, by device
# key; no entry: on the host as prepare left them, ready to move).
MOVING = "moving"  # a move into `sandbox` has begun (a journal: finish or give up)
IN = "in"  # in `sandbox`'s network namespace, configured
LEAVING = "leaving"  # the move back out of `sandbox` has begun (sandbox stop)
SPENT = "spent"  # used by a sandbox that stopped or went: prepare again before a move


@dataclass(frozen=True)
class Move:
    """One thing the NRI mode moves into a pod's namespace for a device: an interface
    (with what to apply there), or an RDMA device in exclusive netns mode."""

    host: str = ""  # the interface's name on the host
    container: str = ""  # its name in the pod
    addresses: tuple[str, ...] = ()
    routes: tuple[PodRoute, ...] = ()
    sysctls: tuple[PodSysctl, ...] = ()
    returns: bool = False  # physical: back to the host when the sandbox stops
    rdma: str = ""  # an RDMA device instead of an interface
    attach: bool = False  # made in the sandbox by its handler (AttachingHandler), not moved

    @classmethod
    def of(cls, pod: PodInterface) -> Move:
        """The move of one interface a handler described."""
        return cls(pod.host, pod.container, pod.addresses, pod.routes, pod.sysctls, pod.returns)

    def describe(self) -> str:
        """As errors name it."""
        if self.rdma:
            return f"RDMA device {self.rdma}"
        if self.attach:
            return f"network {self.container} (made in the pod)"
        return f"interface {self.host} (in the pod: {self.container})"

    def to_json(self) -> dict[str, Any]:
        """As stored in a record's `moves`."""
        if self.rdma:
            return {"rdma": self.rdma}
        if self.attach:
            return {"attach": True, "container": self.container}
        return {
            "host": self.host,
            "container": self.container,
            "addresses": list(self.addresses),
            "routes": [{k: v for k, v in vars(r).items() if v is not None} for r in self.routes],
            "sysctls": [vars(s) for s in self.sysctls],
            "returns": self.returns,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Move:
        """Read a stored move (unknown keys ignored)."""
        if doc.get("rdma"):
            return cls(rdma=str(doc["rdma"]), returns=True)
        if doc.get("attach"):
            return cls(container=str(doc["container"]), attach=True)
        return cls(
            host=str(doc["host"]),
            container=str(doc["container"]),
            addresses=tuple(doc.get("addresses") or ()),
            routes=tuple(
                PodRoute(str(r["destination"]), r.get("gateway"), r.get("metric"))
                for r in doc.get("routes") or ()
            ),
            sysctls=tuple(
                PodSysctl(str(x["family"]), str(x["key"]), str(x["value"]))
                for x in doc.get("sysctls") or ()
            ),
            returns=bool(doc.get("returns")),
        )


def moves_of(prepared: Prepared) -> list[Move]:
    """What the NRI mode moves for one prepared device: the interfaces its handler
    described (else each CDI netDevice as it is) and its RDMA devices; or the one
    interface its handler makes in the sandbox itself."""
    if prepared.pod_attach:
        return [Move(container=prepared.pod_attach, attach=True)]
    pods = list(prepared.pod_interfaces) or [
        PodInterface(str(nd["hostInterfaceName"]), str(nd["name"]))
        for nd in prepared.edits.get("netDevices") or ()
    ]
    return [Move.of(p) for p in pods] + [Move(rdma=r, returns=True) for r in prepared.pod_rdma]


def placement(
    state: str,
    sandbox: str,
    netns: str,
    pod: str = "",
    since: float | None = None,
    attached: str = "",
) -> dict[str, str]:
    """A record's placement entry for one device: STATE in (or out of) `sandbox` of the
    pod with UID `pod` (records before 0.2 do not name the pod), since wall-clock time
    `since` (records before 0.3 do not say); `attached`: what its handler's attach
    returned (Attached.state as JSON text), for a device made in the sandbox."""
    where = {"state": state, "sandbox": sandbox, "netns": netns}
    if pod:
        where["pod"] = pod
    if since is not None:
        where["since"] = f"{since:.6f}"
    if attached:
        where["attached"] = attached
    return where


def placed_after(where: Mapping[str, str], moment: float) -> bool:
    """Whether a placement was made after wall-clock time `moment` (a runtime's snapshot
    of its sandboxes taken before cannot know that sandbox)."""
    try:
        return float(where.get("since") or 0) > moment
    except ValueError:
        return False


Placement = Mapping[str, Mapping[str, str]]  # a record's `placement`, by device key
_PLACED = (MOVING, IN, LEAVING)  # in a sandbox, or part-way into or out of it


def is_in(where: Mapping[str, str] | None, sandbox: str) -> bool:
    """Whether a device's placement says it is in `sandbox`, configured."""
    return where is not None and where.get("state") == IN and where.get("sandbox") == sandbox


def placed_in(placements: Placement, sandbox: str) -> list[str]:
    """The devices placed (or part-way) in `sandbox`."""
    return [
        k
        for k, w in placements.items()
        if w.get("sandbox") == sandbox and w.get("state") in _PLACED
    ]


def leaving_in(placements: Placement, sandbox: str) -> bool:
    """Whether a stop of `sandbox` was interrupted for one of the claim's devices."""
    return any(
        w.get("state") == LEAVING and w.get("sandbox") == sandbox for w in placements.values()
    )


def other_pod(
    placements: Placement, keys: Sequence[str], sandbox: str, pod: str, pods: Sequence[str]
) -> str | None:
    """The pod (or, in a record before 0.2, the sandbox) holding one of the devices `keys`
    in a sandbox other than `sandbox` of pod `pod`, unless it is an earlier sandbox of
    that pod (`pods`: the pods the claim was prepared for)."""
    for key in keys:
        where = placements.get(key)
        if where is None or where.get("sandbox") == sandbox or where.get("state") not in _PLACED:
            continue
        holder = where.get("pod")
        if holder == pod or (holder is None and list(pods) == [pod]):
            continue  # an earlier sandbox of this pod: its devices are used up
        return holder or f"unknown (sandbox {where.get('sandbox')})"
    return None


def holder(placements: Placement, pods: Sequence[str], pod: str) -> str | None:
    """The pod holding a claim's devices if pod `pod` may not use them: the pod whose
    sandbox has them, else, when `pod` is not among them, the pods it was prepared for."""
    for where in placements.values():
        owner = where.get("pod")  # records before 0.2 do not say: the pod list decides
        if where.get("state") in _PLACED and owner is not None and owner != pod:
            return owner
    if pods and pod not in pods:
        return ", ".join(pods)
    return None
