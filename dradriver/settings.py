"""Every setting of the daemon in one frozen dataclass, read from flags and environment."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from dradriver.contract import ipam, iprules, macs, naming, quantity
from dradriver.state import injection

DEFAULT_DRIVER_NAME = "dra.example.com"
DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"  # NRI's DefaultSocketPath
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the terminating NUL

# Flags whose environment variable is a Kubernetes convention rather than DRA_<FLAG>.
_ENV_OVERRIDES = {
    "node_name": "NODE_NAME",
    "pod_uid": "POD_UID",
    "pod_name": "POD_NAME",
    "pod_namespace": "POD_NAMESPACE",
    "kubeconfig": "KUBECONFIG",
}


@dataclass(frozen=True)
class Settings:
    """Configuration of one driver instance."""

    node_name: str
    driver_name: str = DEFAULT_DRIVER_NAME
    kubeconfig: str | None = None
    kubelet_registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    kubelet_plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    cdi_dir: Path = Path("/etc/cdi")
    state_dir_override: Path | None = None
    sysfs_root: Path = Path("/sys")
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    virtual_slots: int = 128
    virtual_bandwidth: int = 0  # bits per second; 0: none; AUTO_BANDWIDTH: the uplink's
    bandwidth_step: int = 1_000_000
    link_bandwidth: int = 0
    ipam_pools: tuple[ipam.Pool, ...] = ()
    publish_interval: float = 60.0
    claim_prefetch: str = "prepare"  # off | read | prepare
    device_taint_effect: str | None = "NoSchedule"
    metrics_addr: str | None = None
    healthcheck_port: int = -1
    ready_file: Path | None = None
    call_budget: float = 30.0
    link_deletion_delay: float = 1.0
    parent_interfaces: tuple[str, ...] = field(default_factory=tuple)
    virtual_parents: tuple[str, ...] = field(default_factory=tuple)
    sriov_pfs: tuple[str, ...] = field(default_factory=tuple)
    multus_resource_name: str = ""
    claim_address_ranges: tuple[str, ...] = field(default_factory=tuple)
    macvlan_global_macs: tuple[str, ...] = field(default_factory=tuple)
    dev_root: Path = Path("/dev")
    log_level: str = "info"
    injection: str = injection.AUTO
    nri_socket: Path = Path(DEFAULT_NRI_SOCKET)
    nri_plugin_index: str = "10"
    cni_bin_dir: Path = Path("/opt/cni/bin")
    cni_state_dir: Path = Path("/var/lib/cni")
    cni_timeout: float = 0.8
    cni_network_status: bool = False
    cni_plugins: tuple[str, ...] = ()
    nad_namespaces: tuple[str, ...] = ()

    @property
    def state_dir(self) -> Path:
        """Where allocation records live: a subdirectory CDI loaders skip."""
        return self.state_dir_override or self.cdi_dir / f"{self.driver_name}-state"

    @property
    def plugin_dir(self) -> Path:
        """The driver's directory under the kubelet plugins directory."""
        return self.kubelet_plugins_dir / self.driver_name


def env_name(dest: str) -> str:
    """The environment variable that can set the flag stored in `dest`."""
    return _ENV_OVERRIDES.get(dest, "DRA_" + dest.upper())


class Flag(NamedTuple):
    """One flag: `--name` sets the setting `name` (dashes as underscores)."""

    name: str
    default: object
    help: str
    type: Callable[[str], object] = str


# The flags by concern, in the order of the docs' settings table.
IDENTITY = (
    Flag("--node-name", None, "name of this node; names the ResourceSlice pool"),
    Flag("--driver-name", DEFAULT_DRIVER_NAME, "DRA driver name"),
)
OFFERED = (  # what the node offers, and where it looks for it
    Flag("--parent-interfaces", "", "comma-separated host interfaces (globs) offered to "
         "pods as host-device (default none)"),
    Flag("--virtual-parents", "", "comma-separated interfaces (globs) that may parent "
         "macvlan/ipvlan/ipoib (default none)"),
    Flag("--sriov-pfs", "", "comma-separated physical functions (globs) whose VFs are "
         "offered (default none)"),
    Flag("--multus-resource-name", "", "resource name (domain/name) published as "
         "k8s.cni.cncf.io/resourceName on host NICs and VFs, for Multus (default none)"),
    Flag("--virtual-slots", 128, "slots capacity of netdev-virtual", int),
    Flag("--sysfs-root", "/sys", "root of sysfs for device discovery"),
    Flag("--dev-root", "/dev", "where device nodes live (RDMA character devices)"),
)  # fmt: skip
CLAIM_LIMITS = (  # what a claim's config may set
    Flag("--claim-address-ranges", "", "comma-separated networks (CIDR) claims may take "
         "ipAddresses from (default none: claims may not set addresses)"),
    Flag("--macvlan-global-macs", "", "comma-separated globally administered MAC addresses "
         "a macvlan claim may set (default none: locally administered addresses only)"),
    Flag("--ipam-pools", "", "address pools claims take addresses from (ipam: {pool: "
         "<name>}), as a JSON list of {name, ranges, exclude, gateway, routes, scope: "
         "cluster|node, blockSize}; every range inside --claim-address-ranges (default none)"),
)  # fmt: skip
# Debian's containernetworking-plugins minus dhcp (a daemon of its own), portmap and
# firewall (they change the node's packet filter for every pod) and ptp (it puts an
# address and routes on the node's end of each pod's link).
DEFAULT_CNI_PLUGINS = (
    "bandwidth,bridge,host-device,host-local,ipvlan,loopback,macvlan,sbr,static,tuning,vlan,vrf"
)
CNI = (  # claims of type cni (docs/cni.md)
    Flag("--cni-bin-dir", "/opt/cni/bin", "where the CNI plugins claims run are"),
    Flag("--cni-state-dir", "/var/lib/cni", "where CNI plugins keep their state (host-local's "
         "leases in networks/<network>)"),
    Flag("--cni-timeout", 0.8, "most seconds a network's plugins may take, all of them, at "
         "a pod sandbox's start (within the 1.5 s the driver answers the runtime in)", float),
    Flag("--cni-plugins", DEFAULT_CNI_PLUGINS, "comma-separated CNI plugins (and IPAM "
         "plugins) a claim's network may run"),
    Flag("--cni-network-status", "off", "on: write each pod's k8s.v1.cni.cncf.io/"
         "network-status annotation, as Multus does, for its networks of type cni (needs "
         "patch on pods); off: do not"),
    Flag("--nad-namespaces", "", "comma-separated namespaces whose "
         "NetworkAttachmentDefinitions any claim may name, besides its own namespace's; * "
         "for every namespace (default none)"),
)  # fmt: skip
BANDWIDTH = (
    Flag("--virtual-bandwidth", "", "bandwidth capacity of netdev-virtual in bits per second "
         "(e.g. 10G), or auto (the link speed of the interface holding the default route "
         "when the driver starts): what the rate limits of veth claims share (default none: "
         "no capacity, no limits)"),
    Flag("--bandwidth-step", "1M", "what a claim's bandwidth request is a multiple of, in "
         "bits per second"),
    Flag("--link-bandwidth", "", "bandwidth capacity in bits per second of a host NIC, or of "
         "the VFs of a PF, whose link speed the kernel does not report (default none: such "
         "devices offer no bandwidth)"),
)  # fmt: skip
# Only `dra-driver run`'s:
PLACES = (  # the API server, the kubelet, the files, this driver's pod
    Flag("--kubeconfig", None, "kubeconfig file; in-cluster config when unset"),
    Flag("--kubelet-registry-dir", "/var/lib/kubelet/plugins_registry",
         "kubelet plugin registration directory"),
    Flag("--kubelet-plugins-dir", "/var/lib/kubelet/plugins",
         "kubelet plugins directory (service socket lives below it)"),
    Flag("--cdi-dir", "/etc/cdi", "directory for CDI specs"),
    Flag("--state-dir", None, "allocation records (default <cdi-dir>/<driver>-state)"),
    Flag("--pod-uid", None, "UID of this driver pod; enables seamless rolling update"),
    Flag("--pod-name", None, "name of this driver pod: Events about it are recorded"),
    Flag("--pod-namespace", None, "namespace of this driver pod"),
)  # fmt: skip
SERVING = (  # how claims and slices are served
    Flag("--publish-interval", 60.0, "seconds between ResourceSlice refreshes", float),
    Flag("--claim-prefetch", "prepare", "read: watch the pods bound to this node and read "
         "their claims as they are bound, not inside the kubelet's prepare call (needs list "
         "and watch of pods); prepare: also prepare them then, before the kubelet asks; off: "
         "neither"),
    Flag("--device-taint-effect", "NoSchedule", "effect of the taint an unhealthy device "
         "carries in the ResourceSlice: NoSchedule (no new pods on it), NoExecute (also "
         "evicts the pods using it), or Off (no taint)"),
    Flag("--call-budget", 30.0, "most seconds one prepare or unprepare call may take (at "
         "most 2/3 of the kubelet's deadline); claims not done in time get an error and the "
         "kubelet retries", float),
    Flag("--link-deletion-delay", 1.0, "seconds after an unprepare's answer to delete the "
         "links it released (if the pod's namespace has not taken them with it); keeps the "
         "kernel's wait off the call", float),
)  # fmt: skip
INJECTION = (
    Flag("--injection", injection.AUTO, "how interfaces reach pods: cdi (CDI netDevices: the "
         "runtime moves them into the first container that references the claim), nri (the "
         "driver's NRI plugin moves them into the pod sandbox's namespace: containers may "
         "restart), auto (nri when the runtime's NRI socket accepts the plugin at start, "
         "else cdi)"),
    Flag("--nri-socket", DEFAULT_NRI_SOCKET, "the container runtime's NRI socket "
         "(containerd: [plugins.'io.containerd.nri.v1.nri'] socket_path)"),
    Flag("--nri-plugin-index", "10", "two digits: where the runtime calls the driver's NRI "
         "plugin among its plugins"),
)  # fmt: skip
OPERATIONS = (  # what the operator watches
    Flag("--metrics-addr", None, "host:port for Prometheus metrics (off if unset)"),
    Flag("--healthcheck-port", -1, "TCP port on 127.0.0.1 of the liveness probe's HTTP "
         "endpoint, /healthz (-1: off)", int),
    Flag("--ready-file", None, "file created once the kubelet has registered this instance "
         "and removed when it stops, for a readiness probe (off if unset)"),
    Flag("--log-level", "info", "debug, info, warning or error"),
)  # fmt: skip
EVERY_COMMAND = (*IDENTITY, *OFFERED, *CLAIM_LIMITS, *CNI, *BANDWIDTH)
RUN_ONLY = (*PLACES, *SERVING, *INJECTION, *OPERATIONS)


def add_flags(parser: argparse.ArgumentParser, *, run: bool) -> None:
    """Add the driver's flags to `parser`; `run` adds the ones only the daemon needs.
    Each flag's default comes from its environment variable when that is set."""
    for flag in (*EVERY_COMMAND, *RUN_ONLY) if run else EVERY_COMMAND:
        dest = flag.name[2:].replace("-", "_")
        var = env_name(dest)
        parser.add_argument(
            flag.name,
            dest=dest,
            default=os.environ.get(var, flag.default),
            help=f"{flag.help} (env {var})",
            type=flag.type,
        )


def from_args(args: argparse.Namespace) -> Settings:
    """Build Settings from parsed flags, checking the values a typo could break."""
    if not args.node_name:
        raise SystemExit("--node-name (or NODE_NAME) is required")
    slots = int(args.virtual_slots)
    if not 0 <= slots <= 4096:
        raise SystemExit(f"--virtual-slots must be between 0 and 4096, got {slots}")
    if hasattr(args, "call_budget") and not 0.1 <= float(args.call_budget) <= 300:
        raise SystemExit(f"--call-budget must be 0.1 to 300 seconds, got {args.call_budget}")
    if hasattr(args, "link_deletion_delay") and not 0 <= float(args.link_deletion_delay) <= 60:
        raise SystemExit(
            f"--link-deletion-delay must be 0 to 60 seconds, got {args.link_deletion_delay}"
        )
    if not naming.is_dns_subdomain(args.driver_name):
        raise SystemExit(f"--driver-name must be a DNS subdomain, got {args.driver_name!r}")
    if not naming.is_dns_subdomain(args.node_name):
        raise SystemExit(f"--node-name must be a Kubernetes node name, got {args.node_name!r}")
    bandwidth, step = _bandwidth(args.virtual_bandwidth, args.bandwidth_step)
    link_bandwidth = _link_bandwidth(args.link_bandwidth)
    ranges = split_list(args.claim_address_ranges)
    try:
        iprules.parse_ranges(ranges)
    except ValueError as exc:
        raise SystemExit(f"--claim-address-ranges: {exc}") from None
    pools = _pools(args.ipam_pools, ranges)
    try:
        global_macs = macs.allowed_global(split_list(args.macvlan_global_macs))
    except ValueError as exc:
        raise SystemExit(f"--macvlan-global-macs: {exc}") from None
    multus = str(args.multus_resource_name)
    if multus and not naming.is_resource_name(multus):
        raise SystemExit(
            f"--multus-resource-name must be <domain>/<name> (e.g. example.com/sriov), "
            f"at most 63 characters, got {multus!r}"
        )
    values: dict[str, object] = {
        "node_name": args.node_name,
        "driver_name": args.driver_name,
        "sysfs_root": Path(args.sysfs_root),
        "virtual_slots": slots,
        "virtual_bandwidth": bandwidth,
        "bandwidth_step": step,
        "link_bandwidth": link_bandwidth,
        "parent_interfaces": split_list(args.parent_interfaces),
        "virtual_parents": split_list(args.virtual_parents),
        "sriov_pfs": split_list(args.sriov_pfs),
        "multus_resource_name": multus,
        "claim_address_ranges": ranges,
        "ipam_pools": pools,
        "macvlan_global_macs": global_macs,
        "dev_root": Path(args.dev_root),
        **_cni_settings(args),
    }
    if hasattr(args, "cdi_dir"):
        values |= {
            "kubeconfig": args.kubeconfig or None,
            "kubelet_registry_dir": Path(args.kubelet_registry_dir),
            "kubelet_plugins_dir": Path(args.kubelet_plugins_dir),
            "cdi_dir": Path(args.cdi_dir),
            "state_dir_override": Path(args.state_dir) if args.state_dir else None,
            "pod_uid": args.pod_uid or None,
            **_pod_settings(args),
            "publish_interval": float(args.publish_interval),
            "claim_prefetch": _prefetch(args.claim_prefetch),
            "device_taint_effect": _taint_effect(args.device_taint_effect),
            "metrics_addr": args.metrics_addr or None,
            "healthcheck_port": int(args.healthcheck_port),
            "ready_file": Path(args.ready_file) if args.ready_file else None,
            "call_budget": float(args.call_budget),
            "link_deletion_delay": float(args.link_deletion_delay),
            "log_level": args.log_level,
            **_nri_settings(args),
        }
    return Settings(**values)  # type: ignore[arg-type]


def cni_plugins(text: str) -> tuple[str, ...]:
    """The plugins of a --cni-plugins value, checked: their names become file names."""
    plugins = split_list(text)
    bad = [p for p in plugins if not naming.is_dns_label(p.replace("_", "-").lower())]
    if bad:
        raise SystemExit(f"--cni-plugins: {bad[0]!r} is not a plugin's file name")
    return plugins


def _cni_settings(args: argparse.Namespace) -> dict[str, object]:
    """--cni-bin-dir, --cni-plugins and --nad-namespaces, checked: namespaces reach URLs."""
    plugins = cni_plugins(args.cni_plugins)
    timeout = float(args.cni_timeout)
    if not 0.1 <= timeout <= 60:
        raise SystemExit(f"--cni-timeout must be 0.1 to 60 seconds, got {args.cni_timeout}")
    if str(args.cni_network_status) not in ("off", "on"):
        raise SystemExit(f"--cni-network-status must be off or on, got {args.cni_network_status!r}")
    spaces = split_list(args.nad_namespaces)
    if any(n != "*" and not naming.is_dns_label(n) for n in spaces):
        raise SystemExit(f"--nad-namespaces: namespace names or *, got {args.nad_namespaces!r}")
    return {
        "cni_bin_dir": Path(args.cni_bin_dir),
        "cni_state_dir": Path(args.cni_state_dir),
        "cni_timeout": timeout,
        "cni_network_status": str(args.cni_network_status) == "on",
        "cni_plugins": plugins,
        "nad_namespaces": spaces,
    }


def _prefetch(value: object) -> str:
    """--claim-prefetch, checked: off, read or prepare (`on`, which earlier manifests
    set, is read)."""
    if str(value) == "on":
        return "read"
    if str(value) not in ("off", "read", "prepare"):
        raise SystemExit(f"--claim-prefetch must be off, read or prepare, got {value!r}")
    return str(value)


def _taint_effect(value: object) -> str | None:
    """--device-taint-effect, checked: NoSchedule, NoExecute or Off (no taints)."""
    effects = {"NoSchedule": "NoSchedule", "NoExecute": "NoExecute", "Off": None}
    if str(value) not in effects:
        raise SystemExit(
            f"--device-taint-effect must be NoSchedule, NoExecute or Off, got {value!r}"
        )
    return effects[str(value)]


def _pod_settings(args: argparse.Namespace) -> dict[str, object]:
    """--pod-name and --pod-namespace, checked: they reach URLs."""
    name, namespace = args.pod_name or None, args.pod_namespace or None
    if name is not None and not naming.is_dns_subdomain(name):
        raise SystemExit(f"--pod-name must be a Kubernetes object name, got {name!r}")
    if namespace is not None and not naming.is_dns_label(namespace):
        raise SystemExit(f"--pod-namespace must be a namespace name, got {namespace!r}")
    return {"pod_name": name, "pod_namespace": namespace}


def _nri_settings(args: argparse.Namespace) -> dict[str, object]:
    """--injection, --nri-socket and --nri-plugin-index, checked."""
    mode = str(args.injection).strip().lower()
    if mode not in injection.SETTINGS:
        raise SystemExit(
            f"--injection must be one of {', '.join(injection.SETTINGS)}, got {args.injection!r}"
        )
    socket = str(args.nri_socket)
    if not socket.startswith("/") or len(socket.encode()) > MAX_SOCKET_PATH:
        raise SystemExit(
            f"--nri-socket must be an absolute path of at most {MAX_SOCKET_PATH} bytes, "
            f"got {socket!r}"
        )
    index = str(args.nri_plugin_index)
    if not (len(index) == 2 and index.isascii() and index.isdigit()):
        raise SystemExit(f"--nri-plugin-index must be two digits, e.g. 10, got {index!r}")
    return {"injection": mode, "nri_socket": Path(socket), "nri_plugin_index": index}


def split_list(value: object) -> tuple[str, ...]:
    """A comma-separated flag's items, stripped, empty ones left out."""
    return tuple(p.strip() for p in str(value or "").split(",") if p.strip())


AUTO_BANDWIDTH = -1  # --virtual-bandwidth auto: the uplink's link speed, read at start
MIN_BANDWIDTH_STEP = 1000  # bits per second: a token bucket needs whole bytes
MAX_BANDWIDTH = 10**13  # 10 Tbit/s


def _bandwidth(total: str, step: str) -> tuple[int, int]:
    """--virtual-bandwidth and --bandwidth-step in bits per second, checked (`auto`:
    AUTO_BANDWIDTH, the uplink's speed, which the daemon reads at start)."""
    auto = str(total) == "auto"
    bits = 0 if auto else _bits("--virtual-bandwidth", total or "0")
    unit = _bits("--bandwidth-step", step)
    if not MIN_BANDWIDTH_STEP <= unit <= MAX_BANDWIDTH:
        raise SystemExit(f"--bandwidth-step must be 1k to 10T bits per second, got {step}")
    if auto:
        return AUTO_BANDWIDTH, unit
    if bits and not unit <= bits <= MAX_BANDWIDTH:
        raise SystemExit(f"--virtual-bandwidth must be {step} to 10T bits per second, got {total}")
    if bits % unit:
        raise SystemExit(
            f"--virtual-bandwidth {total} is not a multiple of --bandwidth-step {step}: "
            "a request of all of it would be rounded beyond it"
        )
    return bits, unit


def _link_bandwidth(text: str) -> int:
    """--link-bandwidth in bits per second (0: none), checked: whole megabits, the unit
    a VF's rate limit is set in."""
    bits = _bits("--link-bandwidth", text or "0")
    if bits and not (1_000_000 <= bits <= MAX_BANDWIDTH and bits % 1_000_000 == 0):
        raise SystemExit(
            f"--link-bandwidth must be whole megabits per second up to 10T, got {text}"
        )
    return bits


def _bits(flag: str, text: str) -> int:
    """A bandwidth flag's quantity in bits per second, or why not."""
    try:
        return quantity.parse(str(text))
    except ValueError as exc:
        raise SystemExit(f"{flag}: {exc}") from None


def _pools(text: str, ranges: tuple[str, ...]) -> tuple[ipam.Pool, ...]:
    """--ipam-pools, checked: each range inside --claim-address-ranges."""
    try:
        pools = ipam.parse_pools(str(text or ""))
    except ipam.PoolError as exc:
        raise SystemExit(f"--ipam-pools: {exc}") from None
    allowed = iprules.parse_ranges(ranges)
    for pool in pools.values():
        for network in pool.ranges:
            if not any(network.version == a.version and network.subnet_of(a) for a in allowed):  # type: ignore[arg-type]
                raise SystemExit(
                    f"--ipam-pools: pool {pool.name}.ranges: {network} is not inside "
                    f"--claim-address-ranges ({','.join(ranges) or 'none'}): claims may "
                    "take addresses only from those"
                )
    return tuple(pools.values())
