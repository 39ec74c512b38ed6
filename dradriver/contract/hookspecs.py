"""The handler contract: what a device-family plugin implements. Read this first.

A plugin is any object (usually a module) with `@hookimpl` functions:

- `dradriver_handlers()` returns Handler objects; each serves one `type` and some `kinds`
  of opaque config (`{type: netdev, netdev: {kind: macvlan, ...}}` goes to the handler
  with type "netdev" whose kinds include "macvlan").
- `dradriver_discover(context)` returns the devices the plugin offers on this node; they
  are published in the node's ResourceSlice.
- `dradriver_defaults()` says which (type, kind) serves a request whose config names
  none: per published device kind, and per type.

Handlers do kernel work and return data. They never write files and never call the API:
the core writes the CDI spec, the allocation record and the claim status. What handler
families share is in `dradriver.kit`; families never import each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pluggy

PROJECT = "dradriver"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

ATTR_TYPE = "type"
ATTR_KIND = "kind"

# How interfaces reach pods (README, "Injection modes"): the runtime moves them when it
# creates a container (CDI netDevices), or the driver moves them into the pod sandbox's
# network namespace when the runtime creates it (NRI).
CDI = "cdi"
NRI = "nri"
NEEDS_NRI = (
    "needs the NRI injection mode (--injection nri, or auto with NRI enabled in the "
    "container runtime)"
)


@dataclass(frozen=True)
class Version:
    """A semantic-version attribute value (published as `version`, not `string`)."""

    value: str


AttrValue = str | int | bool | Version


@dataclass(frozen=True)
class Capacity:
    """A consumable capacity of a device: total `value`, what a request that does not
    ask takes (`default`), and what a request may ask: at least `minimum`, in multiples
    of `step` from it (both default to `default`: one unit per request, as slots)."""

    value: str
    default: str | None = None
    minimum: str | None = None
    step: str | None = None

    @property
    def per_request(self) -> bool:
        """Whether every request takes exactly `default` (a count of shares)."""
        return (
            self.default is not None
            and self.minimum in (None, self.default)
            and (self.step in (None, self.default))
        )


@dataclass(frozen=True)
class Device:
    """One device as published in the ResourceSlice (attribute names without domain).

    `healthy` and `health_message` are not published; they feed the kubelet's device
    health stream (e.g. a NIC without carrier, an RDMA port that is not ACTIVE).
    """

    name: str
    attributes: Mapping[str, AttrValue]
    capacity: Mapping[str, Capacity] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    healthy: bool = True
    health_message: str = ""

    @property
    def type(self) -> str:
        """The device's `type` attribute (netdev, rdma)."""
        return str(self.attributes.get(ATTR_TYPE, ""))

    @property
    def kind(self) -> str:
        """The device's `kind` attribute (virtual, host-device, sriov-vf, uverbs)."""
        return str(self.attributes.get(ATTR_KIND, ""))


@dataclass(frozen=True)
class HandlerContext:
    """Node facts and operator settings a handler may need.

    `parent_interfaces`: host NICs the operator offers as host-device (patterns).
    `virtual_parents`: interfaces that may parent macvlan/ipvlan/ipoib children (patterns).
    `sriov_pfs`: physical functions whose VFs are offered as sriov-vf (patterns).
    `dev_root`: where device nodes live (/dev), for RDMA character devices.
    `virtual_slots`: how many virtual interfaces the node offers at once.
    `owner`: this driver instance (naming.owner_id), put in the tag of every interface
    it creates; instances never touch interfaces another owner tagged.
    `claim_address_ranges`: networks (CIDR) claims may take their ipAddresses from.
    `multus_resource_name`: published as Multus's resourceName on PCI netdevs ("": none).
    `protected_addresses`: (address, what it is) no claim may take besides the node's
    own addresses and gateways, e.g. the API server's.
    `virtual_bandwidth`: the bits per second the virtual device offers as its
    `bandwidth` capacity (0: none), shared out in multiples of `bandwidth_step`.
    `link_bandwidth`: the bits per second a host NIC, or the VFs of a PF, offer as
    `bandwidth` when the kernel reports no link speed (0: none).
    `cni_bin_dir`, `cni_plugins`: where CNI plugins are, and the ones claims may run;
    `cni_state_dir`: where they keep their state (host-local's leases); `cni_timeout`:
    the seconds a network's plugins may take in all at a sandbox's start.
    """

    driver_name: str
    node_name: str
    sysfs_root: Path
    parent_interfaces: tuple[str, ...] = ()
    virtual_parents: tuple[str, ...] = ()
    sriov_pfs: tuple[str, ...] = ()
    multus_resource_name: str = ""
    dev_root: Path = Path("/dev")
    virtual_slots: int = 128
    owner: str = "000000000000"
    claim_address_ranges: tuple[str, ...] = ()
    protected_addresses: tuple[tuple[str, str], ...] = ()
    virtual_bandwidth: int = 0
    bandwidth_step: int = 1_000_000
    link_bandwidth: int = 0
    cni_bin_dir: Path = Path("/opt/cni/bin")
    cni_state_dir: Path = Path("/var/lib/cni")
    cni_timeout: float = 0.8
    cni_plugins: tuple[str, ...] = ()


UNKNOWN_DEVICE = ""  # Default.device_kind of a config checked without a device


@dataclass(frozen=True)
class Default:
    """The handler (type, kind) a request gets when its config does not name it.

    With `device_kind`, for requests allocated a device published with that `kind`
    attribute (and no `type` in their config); `UNKNOWN_DEVICE` for a config checked
    without a device (`dra-driver validate-config`); without it (None), the kind a
    config gets when it names only `type`.
    """

    type: str
    kind: str
    device_kind: str | None = None


@dataclass(frozen=True)
class ClaimRef:
    """The claim a device belongs to, as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _no_journal(undo: Mapping[str, Any]) -> None:
    """Default journal: nothing to persist (used when a handler is called directly)."""


@dataclass(frozen=True)
class DeviceRequest:
    """One allocated device of a claim, with the merged config for its request.

    Before a handler creates or changes anything (a link, a host NIC, a VF's settings)
    it calls `journal(undo)` with what `unprepare` needs to undo it; the core keeps it
    (a record in phase "preparing"), so a crash in between is undone at the next start.

    `injection` is how the claim's interfaces reach the pod: CDI (the runtime moves
    them at container creation and keeps the addresses it finds on the host side) or
    NRI (the driver moves them into the pod's namespace and configures them there:
    the host never holds a claim's addresses, and routes, sysctls and exclusive RDMA
    become possible).

    `consumed` is what the request takes of the device's capacities, as quantities by
    capacity name (`{"bandwidth": "100M"}`): what the scheduler gave it of a shareable
    device, what it asked of a whole one (whose capacity covers it).
    """

    claim: ClaimRef
    request: str
    pool: str
    device: str
    share_id: str | None
    key: str
    kind: str
    config: Mapping[str, Any]
    published: Device | None
    context: HandlerContext
    journal: Callable[[Mapping[str, Any]], None] = field(
        default=_no_journal, compare=False, repr=False
    )
    injection: str = CDI
    consumed: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Validated:
    """What a valid request will give the container, known before any kernel work."""

    container_interfaces: tuple[str, ...] = ()
    pod_rdma: bool = False  # an RDMA device that follows the pod's namespace (exclusive)

    @property
    def into_pod(self) -> bool:
        """Whether the device goes into one pod's network namespace, so that the claim
        can serve only one pod (an interface lives in one namespace at a time)."""
        return bool(self.container_interfaces) or self.pod_rdma


@dataclass(frozen=True)
class NetworkData:
    """What the container will see, reported in the claim's status.devices."""

    interface_name: str
    ips: tuple[str, ...] = ()
    hardware_address: str | None = None


@dataclass(frozen=True)
class PodRoute:
    """A route the NRI mode installs in the pod's namespace, on the claim's interface."""

    destination: str  # a network in CIDR form, e.g. 10.20.0.0/16 or 0.0.0.0/0
    gateway: str | None = None
    metric: int | None = None

    @property
    def kernel_metric(self) -> int:
        """The metric the kernel gives the route: IPv4 0 without one; IPv6 1024 without
        one or for 0 (the kernel reads an IPv6 metric of 0 as its default)."""
        if ":" in self.destination:
            return self.metric or 1024
        return self.metric or 0


@dataclass(frozen=True)
class PodSysctl:
    """A per-interface sysctl the NRI mode writes in the pod's namespace:
    net.<family>.conf.<interface>.<key> = value."""

    family: str  # ipv4 or ipv6
    key: str
    value: str


@dataclass(frozen=True)
class PodInterface:
    """An interface the NRI mode moves into the pod's network namespace (what a CDI
    netDevices entry says, plus what a move loses and what only the pod may hold).

    `returns`: a physical interface (host NIC, VF, RoCE netdev) the kernel gives back to
    the host when the namespace goes; the driver moves it back itself when the sandbox
    stops, and restores it as unprepare does. A virtual one dies with the namespace.
    """

    host: str
    container: str
    addresses: tuple[str, ...] = ()
    routes: tuple[PodRoute, ...] = ()
    sysctls: tuple[PodSysctl, ...] = ()
    returns: bool = False


@dataclass(frozen=True)
class Prepared:
    """Result of a prepare: CDI container edits plus everything unprepare needs.

    `undo` must be JSON-serialisable; it is stored in the allocation record and handed
    back to `unprepare` (possibly by another process, after a restart).
    `created_interfaces` are the tagged interfaces this prepare created (start-up
    reconciliation deletes tagged interfaces no record lists); `host_interfaces` are
    those that stay on the host while prepared (a missing one is reported at start).
    `pod_interfaces` and `pod_rdma` are what the NRI mode moves into the pod's
    namespace: interfaces (in CDI mode the edits' netDevices say the same to the
    runtime; a handler that leaves them empty gets each netDevice moved as it is) and
    RDMA devices in exclusive netns mode. `pod_attach`: the container interface an
    AttachingHandler makes inside the sandbox itself, instead of any move.
    """

    edits: Mapping[str, Any]
    undo: Mapping[str, Any]
    network_data: NetworkData | None = None
    created_interfaces: tuple[str, ...] = ()
    host_interfaces: tuple[str, ...] = ()
    pod_interfaces: tuple[PodInterface, ...] = ()
    pod_rdma: tuple[str, ...] = ()
    pod_attach: str = ""


@dataclass(frozen=True)
class PodSandbox:
    """A pod sandbox a device is attached in (NRI mode): the runtime's sandbox ID, its
    network namespace's path (it may be gone by a detach) and its pod."""

    id: str
    netns: str
    pod_uid: str
    pod_namespace: str = ""
    pod_name: str = ""


@dataclass(frozen=True)
class Attached:
    """What attaching a device in a sandbox did: `state` (JSON-serialisable, kept in
    the record and handed back to `detach` and `check`), what the pod got, and the
    network's name as the pod's `k8s.v1.cni.cncf.io/network-status` names it."""

    state: Mapping[str, Any]
    network_data: NetworkData | None = None
    network: str = ""


class Handler(Protocol):
    """Serves the kinds of one config type. Methods raise DriverError subclasses."""

    @property
    def type(self) -> str:
        """The config type served (`netdev`, `rdma`, `combo`)."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of that type served."""

    def schema(self, kind: str) -> Mapping[str, Any]:
        """JSON Schema of the `<type>` config object when its kind is `kind` (the keywords of
        dradriver.contract.schemacheck)."""

    def validate(self, req: DeviceRequest) -> Validated:
        """Check the config against the allocated device without changing anything."""

    def prepare(self, req: DeviceRequest) -> Prepared:
        """Create or claim the kernel objects; on failure undo own partial work and raise."""

    def unprepare(self, undo: Mapping[str, Any]) -> None:
        """Undo exactly what `prepare` did; idempotent, tolerant of objects already gone."""


class AttachingHandler(Handler, Protocol):
    """A handler whose devices are made inside each pod sandbox rather than moved in
    (a CNI network: `Prepared.pod_attach` names the container interface). The NRI mode
    attaches at RunPodSandbox and detaches when the sandbox stops or goes, or the claim
    is unprepared; a crash in between is detached at the next start from the record."""

    def attach(self, undo: Mapping[str, Any], sandbox: PodSandbox) -> Attached:
        """Make the device in the sandbox; on failure undo own partial work and raise."""

    def detach(
        self, undo: Mapping[str, Any], sandbox: PodSandbox, state: Mapping[str, Any] | None
    ) -> None:
        """Undo an attach (`state` None: it may have been cut short); idempotent."""

    def check(self, undo: Mapping[str, Any], sandbox: PodSandbox, state: Mapping[str, Any]) -> None:
        """Raise if what an attach made is no longer as it made it."""


class HandlerSpec:
    """Hook specifications a handler plugin implements (any subset)."""

    @hookspec
    def dradriver_handlers(self) -> list[Handler]:  # type: ignore[empty-body]
        """Return the handlers this plugin provides."""

    @hookspec
    def dradriver_discover(self, context: HandlerContext) -> list[Device]:  # type: ignore[empty-body]
        """Return the devices this plugin offers on this node."""

    @hookspec
    def dradriver_defaults(self) -> list[Default]:  # type: ignore[empty-body]
        """Return the defaults this plugin's handlers provide (at most one per key)."""
