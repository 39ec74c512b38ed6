"""What the driver tells the operator about settings that cannot work on this node.

Each finding is a line in the driver's log and, when the driver runs in a pod (POD_NAME,
POD_NAMESPACE and POD_UID from the downward API), a Warning Event on that pod, so
`kubectl describe pod` on the driver pod shows it. The driver keeps running: a finding
never ends in a crash loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from dradriver.apiserver import deviceclasses
from dradriver.apiserver.events import WARNING, EventRecorder, ObjectRef
from dradriver.apiserver.kubeapi import ApiError, KubeApi
from dradriver.base.log import event
from dradriver.contract import ipam
from dradriver.contract.hookspecs import HandlerContext
from dradriver.kernel import netlink
from dradriver.kit import hostaddr, sysfs
from dradriver.settings import Settings

logger = logging.getLogger(__name__)

# The chart's value behind each allow-list flag, for messages an operator acts on.
ALLOW_LISTS = {
    "--virtual-parents": ("virtual_parents", "settings.virtualParents"),
    "--parent-interfaces": ("parent_interfaces", "settings.parentInterfaces"),
    "--sriov-pfs": ("sriov_pfs", "settings.sriovPfs"),
}
DEVICE_CLASS_DELAY = 10.0  # seconds after start: helm creates the classes with the pods
NAG_SECONDS = 30.0  # how often what keeps the driver from working is reported
SERVICE_CIDRS = "/apis/networking.k8s.io/v1/servicecidrs"


class Reporter:
    """Logs findings and records each as an Event on the driver's pod, if it has one."""

    def __init__(self, recorder: EventRecorder | None, pod: ObjectRef | None) -> None:
        """`recorder` and `pod`: where Events go (both None: the log only)."""
        self._recorder = recorder
        self._pod = pod

    def report(self, level: int, reason: str, message: str, **fields: str) -> None:
        """Log `message` with `fields`; as an Event: the message and the fields."""
        event(logger, level, message, **fields)
        if self._recorder is not None and self._pod is not None:
            details = "; ".join(f"{k}: {v}" for k, v in fields.items())
            note = f"{message} ({details})" if details else message
            self._recorder.record(self._pod, WARNING, reason, note)

    def stop(self) -> None:
        """Post the Events still queued."""
        if self._recorder is not None:
            self._recorder.stop()


def reporter_for(settings: Settings, recorder: EventRecorder) -> Reporter:
    """A Reporter recording Events on the driver's pod when the settings name it."""
    if not (settings.pod_name and settings.pod_namespace and settings.pod_uid):
        return Reporter(recorder, None)
    pod = ObjectRef("Pod", settings.pod_namespace, settings.pod_name, settings.pod_uid)
    return Reporter(recorder, pod)


def check_allow_lists(settings: Settings, reporter: Reporter) -> None:
    """Warn about allow-list patterns no interface of this node matches: the claims that
    need such an interface fail at prepare, which the operator should hear at start."""
    try:
        names = [link.name for link in netlink.links()]
    except OSError as exc:
        event(logger, logging.WARNING, "cannot list the node's interfaces", error=exc)
        return
    for flag, (attribute, value) in ALLOW_LISTS.items():
        patterns: tuple[str, ...] = getattr(settings, attribute)
        for pattern in sysfs.unmatched(patterns, names):
            reporter.report(
                logging.WARNING,
                "AllowListUnmatched",
                f"no interface of this node matches {flag} pattern: the claims that need "
                "one fail at prepare on this node",
                pattern=pattern,
                value=value,
                interfaces=",".join(sorted(names)),
            )


def cluster_ranges(api: KubeApi, node: str) -> list[tuple[str, str]]:
    """The cluster's own ranges the driver can read: this node's pod ranges (the Node's
    spec.podCIDRs) and the Service ranges (ServiceCIDR objects); what cannot be read
    (RBAC, an older cluster) is left out, logged."""
    out: list[tuple[str, str]] = []
    try:
        spec = api.get_node(node).get("spec") or {}
        out += [(str(c), "this node's pod range") for c in spec.get("podCIDRs") or ()]
    except (ApiError, OSError) as exc:
        event(logger, logging.INFO, "cannot read the node's pod ranges", error=exc)
    try:
        items, _ = api.list_at(SERVICE_CIDRS, {})
        for item in items:
            cidrs = (item.get("spec") or {}).get("cidrs") or ()
            out += [(str(c), "the cluster's Service range") for c in cidrs]
    except (ApiError, OSError) as exc:
        event(logger, logging.INFO, "cannot read the cluster's Service ranges", error=exc)
    return out


def check_pools(
    settings: Settings, context: HandlerContext, reporter: Reporter, api: KubeApi | None = None
) -> dict[str, str]:
    """The pools that could hand out an address this node uses (its own addresses, its
    routes' gateways, the API server's) or the cluster routes elsewhere (its pod and
    Service ranges, read from `api`), each with why: refused on this node, so no claim
    takes such an address, and reported at start."""
    if not settings.ipam_pools:
        return {}
    refused: dict[str, str] = {}
    pools = {p.name: p for p in settings.ipam_pools}
    ranges = cluster_ranges(api, settings.node_name) if api is not None else []
    for pool, problem in ipam.overlaps(pools, ranges):
        refused.setdefault(pool, problem)
        reporter.report(logging.ERROR, "PoolRefused", f"ipam {problem}; refused on this node",
                        pool=pool)  # fmt: skip
    try:
        view = hostaddr.host_view(context)
    except OSError as exc:
        event(logger, logging.WARNING, "cannot read the node's addresses", error=exc)
        return refused
    used = [
        (str(network.network_address), what)
        for network, what in view.taken
        if network.prefixlen == network.max_prefixlen
    ]
    for problem in ipam.collisions(pools, used):
        pool = problem.split()[1]
        refused.setdefault(pool, problem)
        reporter.report(
            logging.ERROR, "PoolRefused", f"ipam {problem}; refused on this node", pool=pool
        )
    return refused


def check_device_classes(settings: Settings, api: KubeApi, reporter: Reporter) -> None:
    """Warn when no DeviceClass can select this driver's devices: no claim is ever
    allocated one, and the pods that ask stay Pending."""
    try:
        classes = api.list_device_classes()
    except ApiError as exc:
        event(
            logger,
            logging.INFO,
            "cannot check the DeviceClasses for this driver's name",
            error=exc,
        )
        return
    driver = settings.driver_name
    if deviceclasses.classes_for(driver, classes):
        return
    reporter.report(
        logging.WARNING,
        "NoDeviceClass",
        f"no DeviceClass selects driver {driver}: no claim can get a device of this "
        "driver. Is driverName the driver the DeviceClasses select (their "
        "device.driver), and are the chart's deviceClasses enabled?",
        driverName=driver,
        classes=_describe(deviceclasses.named_drivers(classes)) or "none",
    )


def _describe(named: Mapping[str, list[str]]) -> str:
    """`driver (class, class), ...` for a message."""
    return ", ".join(f"{d} ({', '.join(c)})" for d, c in sorted(named.items()))


def nag(settings: Settings, reporter: Reporter, nri_lost: bool, registered: bool) -> None:
    """Report what keeps the driver from working (called every half minute)."""
    if nri_lost:
        reporter.report(
            logging.ERROR,
            "NriDisconnected",
            "the NRI plugin is not connected to the runtime: pods of claims prepared in "
            "NRI mode get no interfaces until it is",
            socket=str(settings.nri_socket),
        )
    if not registered:
        reporter.report(
            logging.ERROR,
            "NotRegistered",
            "the kubelet has not registered the driver: no pod can get a claim of it on this "
            "node. The kubelet looks for registration sockets in <its --root-dir>/"
            "plugins_registry: is --kubelet-registry-dir (the chart's "
            "hostPaths.kubeletRegistryDir) that directory, and --kubelet-plugins-dir its "
            "plugins directory?",
            registry=str(settings.kubelet_registry_dir),
        )


def keep_reporting(
    stop: threading.Event,
    settings: Settings,
    api: KubeApi,
    reporter: Reporter,
    *,
    nri_lost: Callable[[], bool],
    registered: Callable[[], bool],
) -> None:
    """Until `stop` is set: check the DeviceClasses once, then nag every NAG_SECONDS."""
    if stop.wait(DEVICE_CLASS_DELAY):
        return
    check_device_classes(settings, api, reporter)
    while not stop.wait(NAG_SECONDS):
        nag(settings, reporter, nri_lost(), registered())
