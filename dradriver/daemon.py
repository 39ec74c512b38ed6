"""`dra-driver run`: wires the components, reconciles, serves until SIGTERM/SIGINT."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import ipaddress
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from dradriver import injectionmode
from dradriver.apiserver.events import EventRecorder
from dradriver.apiserver.inventory import Inventory
from dradriver.apiserver.ipamblocks import Blocks
from dradriver.apiserver.kubeapi import KubeApi
from dradriver.apiserver.publisher import Publisher
from dradriver.apiserver.status import StatusWriter
from dradriver.base import log
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.claims import reconcile
from dradriver.claims.ahead import PrepareAhead
from dradriver.claims.budget import CallGate
from dradriver.claims.failures import FailureEvents
from dradriver.claims.ipam import AddressBook
from dradriver.claims.prefetch import ClaimPrefetch
from dradriver.claims.prepare import Preparer
from dradriver.contract import naming
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import NRI, HandlerContext
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel.linkreaper import LinkReaper
from dradriver.kit import shaping
from dradriver.kubelet.readiness import ReadyFile
from dradriver.kubelet.server import KubeletServer
from dradriver.kubelet.sockets import SerializeLock, socket_paths
from dradriver.selfcheck import (
    Reporter,
    check_allow_lists,
    check_pools,
    keep_reporting,
    reporter_for,
)
from dradriver.settings import AUTO_BANDWIDTH, Settings
from dradriver.state.ipamstore import IpamStore
from dradriver.state.records import ClaimRecord
from dradriver.state.recordstore import RecordStore

logger = logging.getLogger(__name__)

REAPER_DRAIN_SECONDS = 5.0  # shutdown: for the deletion of links unprepares released
# How long shutdown waits for the calls in flight beyond their budget: a draining call
# stops waiting at once and finishes only the claim it is working on.
DRAIN_SLACK_SECONDS = 10.0
# glibc gives each thread that allocates its own malloc arena (up to 8 per core), each
# keeping freed memory: with ~25 threads that was 1.4 MB more resident after the first
# calls. Two arenas serve a process whose Python code runs one thread at a time anyway.
MALLOC_ARENA_MAX = 2
_M_ARENA_MAX = -8  # mallopt parameter, <malloc.h>


def context_of(settings: Settings, api_server: str | None = None) -> HandlerContext:
    """The node facts handlers see; `api_server`: the URL of the API server the driver
    uses, whose address no claim may take (when the URL holds an IP address)."""
    return HandlerContext(
        driver_name=settings.driver_name,
        node_name=settings.node_name,
        sysfs_root=settings.sysfs_root,
        parent_interfaces=settings.parent_interfaces,
        virtual_parents=settings.virtual_parents,
        sriov_pfs=settings.sriov_pfs,
        multus_resource_name=settings.multus_resource_name,
        dev_root=settings.dev_root,
        virtual_slots=settings.virtual_slots,
        virtual_bandwidth=_virtual_bandwidth(settings),
        bandwidth_step=settings.bandwidth_step,
        link_bandwidth=settings.link_bandwidth,
        owner=naming.owner_id(settings.driver_name, os.path.realpath(settings.state_dir)),
        claim_address_ranges=settings.claim_address_ranges,
        protected_addresses=_api_server_address(api_server),
        cni_bin_dir=settings.cni_bin_dir,
        cni_state_dir=settings.cni_state_dir,
        cni_timeout=settings.cni_timeout,
        cni_plugins=settings.cni_plugins,
    )


def _virtual_bandwidth(settings: Settings) -> int:
    """--virtual-bandwidth in bits per second; `auto`: the uplink's speed now, kept
    while the driver runs (a figure that fell would leave allocated shares beyond it)."""
    if settings.virtual_bandwidth != AUTO_BANDWIDTH:
        return settings.virtual_bandwidth
    bits = shaping.uplink_bandwidth(settings.sysfs_root, settings.bandwidth_step)
    if bits:
        event(logger, logging.INFO, "virtual bandwidth from the uplink", bits=bits)
    else:
        event(
            logger,
            logging.WARNING,
            "--virtual-bandwidth auto: no interface holding the default route reports a "
            "link speed of at least --bandwidth-step: the virtual device offers no "
            "bandwidth; set a figure (chart: settings.virtualBandwidth), or restart the "
            "driver once the uplink has its link",
        )
    return bits


def _api_server_address(url: str | None) -> tuple[tuple[str, str], ...]:
    """The API server's address if its URL names one (a host name is not resolved)."""
    try:
        host = urlsplit(url or "").hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return ()
    return ((str(address), f"the address of the API server the driver uses ({url})"),)


def limit_malloc_arenas() -> None:
    """Cap glibc's malloc arenas before any thread starts, unless the operator set
    MALLOC_ARENA_MAX (glibc reads it itself); a C library without mallopt is left alone."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, MALLOC_ARENA_MAX)


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def make_directories(settings: Settings) -> None:
    """The CDI and state directories; a failure is logged and the driver goes on (each
    claim that needs them says what is wrong)."""
    for directory in (settings.cdi_dir, settings.state_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            event(
                logger,
                logging.ERROR,
                "cannot create directory",
                directory=str(directory),
                error=exc,
            )


def run(settings: Settings) -> int:
    """Run the driver until a termination signal; return the exit code."""
    started = time.monotonic()
    log.setup(settings.log_level)
    stop = stop_on_signals()

    ready = ReadyFile.cleared(settings.ready_file)
    registry = HandlerRegistry()
    schema = ConfigSchema(
        registry, settings.driver_name, settings.macvlan_global_macs, settings.cni_plugins
    )
    api = KubeApi(settings.kubeconfig)
    context = context_of(settings, api.server)
    records = RecordStore(settings.state_dir)
    recorder = EventRecorder(api, settings.driver_name, settings.node_name)
    reporter = reporter_for(settings, recorder)
    make_directories(settings)
    check_allow_lists(settings, reporter)
    refused = check_pools(settings, context, reporter, api)
    paths = socket_paths(settings)
    lock = SerializeLock(paths.lock)
    metrics = serve_metrics(settings.metrics_addr)
    inventory = Inventory(registry, context, records.held_devices)
    status = StatusWriter(
        api,
        settings.driver_name,
        settings.node_name,
        metrics,
        still_prepared=lambda uid: os.path.exists(records.path(uid)),  # noqa: PTH110
    )
    gate = CallGate(lock)
    prefetch = ClaimPrefetch(
        api, settings.node_name, settings.driver_name, enabled=settings.claim_prefetch != "off"
    )
    failures = FailureEvents(recorder)
    preparer = Preparer(
        context=context,
        cdi_dir=settings.cdi_dir,
        records=records,
        registry=registry,
        schema=schema,
        inventory=inventory,
        api=api,
        status=status,
        metrics=metrics,
        gate=gate,
        link_deletion_delay=settings.link_deletion_delay,
        failures=failures,
        metadata_root=settings.plugin_dir,
        early=prefetch.take,
        addresses=address_book(settings, api, lock, refused, reporter),
        nads=api,
        nad_namespaces=settings.nad_namespaces,
    )
    loaded, unusable, report = start_up(settings, preparer, lock, prefetch, metrics)
    plugin = injectionmode.nri_plugin(
        settings, preparer, gate, metrics, status, failures, prefetch, api
    )
    nri_claims = [r.claim.uid for r in loaded if r.injection == NRI]
    log_state(report, unusable, metrics)

    publisher = Publisher(
        api,
        inventory,
        settings.driver_name,
        settings.node_name,
        settings.publish_interval,
        metrics,
        taint_effect=settings.device_taint_effect,
    )
    server = KubeletServer(
        paths,
        settings.driver_name,
        settings.node_name,
        preparer,
        inventory.devices,
        on_registered=ready.marking(publisher.trigger),
        budget_cap=settings.call_budget,
    )
    start_status(status, records, report.reprepared_claims)
    publisher.start()
    serve_kubelet(server, preparer, prefetch, settings, started)
    preparer.injection, plugin_needed = injectionmode.choose(settings, plugin, nri_claims)
    metrics.set_injection(preparer.injection)
    log_startup("ready", settings, started)
    keep_reporting(
        stop,
        settings,
        api,
        reporter,
        nri_lost=lambda: plugin_needed and not plugin.connected,
        registered=ready.registered.is_set,
    )
    ready.clear()  # not Ready while it stops
    plugin.stop()  # first: the runtime stops calling this instance (the new one, if any, stays)
    shutdown(server, gate, lock, settings.call_budget + DRAIN_SLACK_SECONDS, preparer.reaper)
    publisher.stop()
    prefetch.stop()
    status.stop()
    reporter.stop()
    return 0


def serve_kubelet(
    server: KubeletServer,
    preparer: Preparer,
    prefetch: ClaimPrefetch,
    settings: Settings,
    started: float,
) -> None:
    """Serve the kubelet, before the runtime has answered the NRI plugin (a socket round
    trip, seconds if the runtime is slow): prepares wait for the mode instead. Prepares
    ahead too: the pod watch starts only once they would wait."""
    preparer.choosing_injection()
    prefetch.start()
    # What start-up made lives as long as the process: out of the collector's reach, a
    # full collection inside a kubelet call no longer walks it (~35,000 objects, 8-40 ms).
    # The collector was off until now (dradriver.__main__): start-up's collections walked
    # the same objects (~13 ms of exec to socket).
    gc.freeze()
    gc.enable()
    server.start(settings.healthcheck_port)
    log_startup("serving the kubelet", settings, started)


def serve_metrics(addr: str | None) -> Metrics:
    """The driver's metrics, served on `addr` when it is set."""
    metrics = Metrics()
    if addr:
        metrics.serve(addr)
    return metrics


def start_up(
    settings: Settings,
    preparer: Preparer,
    lock: SerializeLock,
    prefetch: ClaimPrefetch,
    metrics: Metrics,
) -> tuple[list[ClaimRecord], list[str], reconcile.Report]:
    """Under the cross-instance lock (another instance of a rolling update may be
    preparing right now): the records loaded and reconciled, the pools' addresses
    rebuilt from the prepared ones, the claims prepared ahead picked up."""
    with lock:
        loaded, unusable = preparer.records.load_all()
        report = reconcile.reconcile(
            loaded, settings.cdi_dir, settings.driver_name, preparer.lifecycle
        )
        if preparer.addresses is not None:
            preparer.addresses.rebuild_from(preparer.records)  # as reconciliation left them
        prepare_ahead(settings, preparer, prefetch, metrics)  # marks read under the lock
    return loaded, unusable, report


def address_book(
    settings: Settings,
    api: KubeApi,
    lock: SerializeLock,
    refused: dict[str, str],
    reporter: Reporter,
) -> AddressBook | None:
    """The pools of --ipam-pools on this node (None without pools); cluster pools take
    their blocks through Leases in the driver's namespace (--pod-namespace)."""
    if not settings.ipam_pools:
        return None
    blocks = None
    if settings.pod_namespace:
        blocks = Blocks(api, settings.driver_name, settings.pod_namespace, settings.node_name)
    store = IpamStore(settings.state_dir)
    return AddressBook(
        settings.ipam_pools, store, blocks, lambda: lock, refused, report=reporter.report
    )


def prepare_ahead(
    settings: Settings,
    preparer: Preparer,
    prefetch: ClaimPrefetch,
    metrics: Metrics,
) -> PrepareAhead:
    """The worker that prepares claims as they are read ahead (--claim-prefetch prepare)
    and releases those whose pod is done before the kubelet asked, including those an
    earlier run prepared ahead (their marks read after start-up reconciliation)."""
    ahead = PrepareAhead(
        preparer,
        prefetch.take,
        prefetch.pods,
        metrics,
        prepare_new=settings.claim_prefetch == "prepare",
    )
    if settings.claim_prefetch != "off":
        prefetch.on_read, prefetch.on_pods = ahead.claim_read, ahead.pods_changed
    preparer.ahead.load(preparer.records)
    pending = preparer.ahead.candidates()
    if pending and settings.claim_prefetch == "off":
        event(
            logger,
            logging.WARNING,
            "claims prepared ahead by an earlier run: without a pod watch (--claim-prefetch "
            "off) they are released only if the kubelet asks for them and then unprepares "
            "them; start with --claim-prefetch read to have those of ended pods released",
            claims=",".join(sorted(pending)),
        )
    return ahead


def start_status(status: StatusWriter, records: RecordStore, uids: Sequence[str]) -> None:
    """Start the status writer with the status of the claims prepared again at start-up
    queued (their interfaces, MACs, are new)."""
    status.start()
    for uid in uids:
        with contextlib.suppress(DriverError, OSError):
            if (record := records.load(uid)) is not None:
                status.submit(record)


def log_state(report: reconcile.Report, unusable: Sequence[object], metrics: Metrics) -> None:
    """Log what start-up reconciliation found and did; count the prepared claims."""
    prepared = len(report.prepared_claims)
    metrics.prepared_claims.set(prepared)
    event(
        logger,
        logging.INFO if not (unusable or report.problems) else logging.WARNING,
        "state loaded",
        records=prepared,
        unusable=len(unusable),
        rolled_back=len(report.rolled_back_claims),
        reprepared=len(report.reprepared_claims),
        finished=len(report.finished_claims),
        vanished=len(report.vanished),
        restored_specs=len(report.restored_specs),
        deleted_interfaces=len(report.deleted_interfaces),
        removed_specs=len(report.removed_specs),
        problems="; ".join(report.problems) or None,
    )


def log_startup(message: str, settings: Settings, started: float) -> None:
    """Log a step of the start-up with the seconds since `started`."""
    event(
        logger,
        logging.INFO,
        message,
        node=settings.node_name,
        driver=settings.driver_name,
        startup_seconds=round(time.monotonic() - started, 3),
    )


def shutdown(
    server: KubeletServer, gate: CallGate, lock: SerializeLock, wait: float, reaper: LinkReaper
) -> None:
    """Leave the kubelet, refuse new work, let the calls in flight finish (or refuse what
    they have not begun), delete the links unprepares released, and only then let go of
    the cross-instance lock."""
    started = time.monotonic()
    event(logger, logging.INFO, "shutting down: draining calls in flight")
    server.deregister()
    drained = gate.drain(wait)
    if left := reaper.drain(REAPER_DRAIN_SECONDS):
        event(
            logger,
            logging.WARNING,
            "released interfaces not deleted at shutdown: the next start deletes them",
            claims=left,
        )
    server.stop()
    closed = lock.close(timeout=0 if not drained else 5.0)
    event(
        logger,
        logging.INFO if drained and closed else logging.ERROR,
        "calls drained, lock released"
        if drained and closed
        else "calls still running after the drain wait: the lock is kept until they end",
        seconds=round(time.monotonic() - started, 3),
    )
