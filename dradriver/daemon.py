"""`dra-driver run`: wires the components, reconciles, serves until SIGTERM/SIGINT."""

from __future__ import annotations

import ipaddress
import logging
import signal
import threading
import time
from urllib.parse import urlsplit

from dradriver import gc, log
from dradriver.config import ConfigSchema
from dradriver.hookspecs import HandlerContext
from dradriver.inventory import Inventory
from dradriver.kubeapi import KubeApi
from dradriver.kubelet.server import KubeletServer
from dradriver.kubelet.sockets import SerializeLock, socket_paths
from dradriver.log import event
from dradriver.metrics import Metrics
from dradriver.prepare import Preparer
from dradriver.publisher import Publisher
from dradriver.records import PREPARED, RecordStore
from dradriver.registry import HandlerRegistry
from dradriver.settings import Settings
from dradriver.status import StatusWriter

logger = logging.getLogger(__name__)


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
    settings.cdi_dir.mkdir(parents=True, exist_ok=True)
    records = RecordStore(settings.state_dir)
    paths = socket_paths(settings)
    lock = SerializeLock(paths.lock)
    metrics = Metrics()
    if settings.metrics_addr:
        metrics.serve(settings.metrics_addr)
    inventory = Inventory(registry, context)
    status = StatusWriter(api, settings.driver_name, settings.node_name, metrics)
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
    )

    with lock:  # another instance (rolling update) may be preparing right now
        loaded, corrupt = records.load_all()
        report = gc.reconcile(loaded, settings.cdi_dir, settings.driver_name, preparer.roll_back)
    prepared = sum(1 for r in loaded if r.phase == PREPARED)
    metrics.prepared_claims.set(prepared)
    event(
        logger,
        logging.INFO,
        "state loaded",
        records=prepared,
        corrupt=len(corrupt),
        rolled_back=len(report.rolled_back_claims),
        deleted_interfaces=len(report.deleted_interfaces),
        removed_specs=len(report.removed_specs),
        vanished=len(report.vanished),
    )

    publisher = Publisher(
        api, inventory, settings.driver_name, settings.node_name, settings.publish_interval, metrics
    )
    server = KubeletServer(
        paths,
        settings.driver_name,
        settings.node_name,
        preparer,
        lock,
        inventory.devices,
        on_registered=publisher.trigger,
    )
    status.start()
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
    event(logger, logging.INFO, "shutting down")
    server.stop()
    publisher.stop()
    status.stop()
    lock.close()
    return 0
