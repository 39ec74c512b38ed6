"""`dra-driver run`: wires the components, reconciles, serves until SIGTERM/SIGINT."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import threading
import time
from urllib.parse import urlsplit

from dradriver import gc, log, naming
from dradriver.calls import CallGate
from dradriver.config import ConfigSchema
from dradriver.errors import DriverError
from dradriver.hookspecs import HandlerContext
from dradriver.inventory import Inventory
from dradriver.kubeapi import KubeApi
from dradriver.kubelet.server import KubeletServer
from dradriver.kubelet.sockets import SerializeLock, socket_paths
from dradriver.linkreaper import LinkReaper
from dradriver.log import event
from dradriver.metrics import Metrics
from dradriver.prepare import Preparer
from dradriver.publisher import Publisher
from dradriver.records import RecordStore
from dradriver.registry import HandlerRegistry
from dradriver.settings import Settings
from dradriver.status import StatusWriter

logger = logging.getLogger(__name__)

REAPER_DRAIN_SECONDS = 5.0  # shutdown: for the deletion of links unprepares released
# How long shutdown waits for the calls in flight beyond their budget: a draining call
# stops waiting at once and finishes only the claim it is working on.
DRAIN_SLACK_SECONDS = 10.0


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
        dev_root=settings.dev_root,
        virtual_slots=settings.virtual_slots,
        owner=naming.owner_id(settings.driver_name, os.path.realpath(settings.state_dir)),
        claim_address_ranges=settings.claim_address_ranges,
        protected_addresses=_api_server_address(api_server),
    )


def _api_server_address(url: str | None) -> tuple[tuple[str, str], ...]:
    """The API server's address if its URL names one (a host name is not resolved)."""
    try:
        host = urlsplit(url or "").hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return ()
    return ((str(address), f"the address of the API server the driver uses ({url})"),)


def run(settings: Settings) -> int:
    """Run the driver until a termination signal; return the exit code."""
    started = time.monotonic()
    log.setup(settings.log_level)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    registry = HandlerRegistry()
    schema = ConfigSchema(registry, settings.driver_name)
    api = KubeApi(settings.kubeconfig)
    context = context_of(settings, api.server)
    records = RecordStore(settings.state_dir)
    for directory in (settings.cdi_dir, settings.state_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # keep serving: each claim that needs it says what is wrong
            event(
                logger,
                logging.ERROR,
                "cannot create directory",
                directory=str(directory),
                error=exc,
            )
    paths = socket_paths(settings)
    lock = SerializeLock(paths.lock)
    metrics = Metrics()
    if settings.metrics_addr:
        metrics.serve(settings.metrics_addr)
    inventory = Inventory(registry, context)
    status = StatusWriter(
        api,
        settings.driver_name,
        settings.node_name,
        metrics,
        still_prepared=lambda uid: records.path(uid).exists(),
    )
    gate = CallGate(lock)
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
    )

    with lock:  # another instance (rolling update) may be preparing right now
        loaded, unusable = records.load_all()
        report = gc.reconcile(loaded, settings.cdi_dir, settings.driver_name, preparer.lifecycle)
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

    publisher = Publisher(
        api, inventory, settings.driver_name, settings.node_name, settings.publish_interval, metrics
    )
    server = KubeletServer(
        paths,
        settings.driver_name,
        settings.node_name,
        preparer,
        inventory.devices,
        on_registered=publisher.trigger,
        budget_cap=settings.call_budget,
    )
    status.start()
    for uid in report.reprepared_claims:  # their interfaces (and MACs) are new
        with contextlib.suppress(DriverError, OSError):
            if (record := records.load(uid)) is not None:
                status.submit(record)
    publisher.start()
    server.start(settings.healthcheck_port)
    event(
        logger,
        logging.INFO,
        "ready",
        node=settings.node_name,
        driver=settings.driver_name,
        startup_seconds=round(time.monotonic() - started, 3),
    )
    stop.wait()
    shutdown(server, gate, lock, settings.call_budget + DRAIN_SLACK_SECONDS, preparer.reaper)
    publisher.stop()
    status.stop()
    return 0


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
