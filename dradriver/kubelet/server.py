"""The kubelet-facing gRPC services: registration, DRA v1 and v1beta1, health.

The service socket starts first; the registration socket appears only once every
advertised service is serving, because the kubelet calls them right after GetInfo.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from dradriver.base import timing
from dradriver.base.log import event
from dradriver.claims.budget import DEFAULT_CALL_BUDGET, call_budget
from dradriver.claims.outcome import Outcome
from dradriver.claims.prepare import Preparer
from dradriver.contract.hookspecs import ClaimRef, Device
from dradriver.kubelet.grpchealth import Health
from dradriver.kubelet.grpcserver import Call, Method, Server
from dradriver.kubelet.grpcwire import Status
from dradriver.kubelet.liveness import Liveness
from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1alpha1_pb2,
    registration_pb2,
)
from dradriver.kubelet.sockets import SocketPaths, remove_stale_socket

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
DRA_SERVICES = (
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
)
REGISTRATION_SERVICE = "pluginregistration.Registration"
DEVICE_HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
HEALTH_POLL_SECONDS = 5.0
DRA_WORKERS = 8
# The kubelet keeps one health stream per plugin instance (and opens a new one 5 s after
# one ends): two leave room for a reconnect overlapping a stream not yet seen as gone,
# and the other workers for prepare and unprepare.
MAX_HEALTH_STREAMS = 2


class _DRAService:
    """NodePrepareResources / NodeUnprepareResources for one API version."""

    def __init__(
        self, pb2: ModuleType, preparer: Preparer, budget_cap: float, with_share_id: bool
    ) -> None:
        self._pb2 = pb2
        self._preparer = preparer
        self._cap = budget_cap
        self._share = with_share_id

    def NodePrepareResources(self, request: Any, context: Call) -> Any:
        refs = [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]
        resp = self._pb2.NodePrepareResourcesResponse()
        if not refs:  # liveness checks call with no claims: answer without the lock
            return resp
        with timing.timed_call() as clock:
            budget = call_budget(context.time_remaining(), self._cap)
            outcomes = self._preparer.prepare(refs, budget)
            for uid, outcome in outcomes.items():
                resp.claims[uid].CopyFrom(self._prepare_response(outcome))
        self._observe("NodePrepareResources", clock)
        return resp

    def NodeUnprepareResources(self, request: Any, context: Call) -> Any:
        refs = [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]
        resp = self._pb2.NodeUnprepareResourcesResponse()
        with timing.timed_call() as clock:
            budget = call_budget(context.time_remaining(), self._cap)
            outcomes = self._preparer.unprepare(refs, budget)
            for uid, outcome in outcomes.items():
                resp.claims[uid].error = outcome.error or ""
        self._observe("NodeUnprepareResources", clock)
        return resp

    def _observe(self, method: str, clock: timing.PhaseClock) -> None:
        metrics = self._preparer.metrics
        if metrics is not None:
            metrics.observe_call(method, clock)

    def _prepare_response(self, outcome: Outcome) -> Any:
        msg = self._pb2.NodePrepareResourceResponse(error=outcome.error or "")
        for d in outcome.devices:
            device = msg.devices.add(
                request_names=[d.request],
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=list(d.cdi_ids),
            )
            if self._share and d.share_id:
                device.share_id = d.share_id
        return msg


def _dra_methods(
    service: str, pb2: ModuleType, preparer: Preparer, budget_cap: float, with_share_id: bool
) -> dict[str, Method]:
    """NodePrepareResources and NodeUnprepareResources of one DRA API version, by path."""
    dra = _DRAService(pb2, preparer, budget_cap, with_share_id)
    return {
        f"/{service}/NodePrepareResources": Method(
            pb2.NodePrepareResourcesRequest, dra.NodePrepareResources
        ),
        f"/{service}/NodeUnprepareResources": Method(
            pb2.NodeUnprepareResourcesRequest, dra.NodeUnprepareResources
        ),
    }


class _RegistrationService:
    def __init__(self, driver: str, endpoint: Path, on_registered: Callable[[], None]) -> None:
        self._driver = driver
        self._endpoint = endpoint
        self._on_registered = on_registered

    def GetInfo(self, request: Any, context: Call) -> Any:
        return registration_pb2.PluginInfo(
            type="DRAPlugin",
            name=self._driver,
            endpoint=str(self._endpoint.absolute()),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Call) -> Any:
        if request.plugin_registered:
            event(log, logging.INFO, "registered with the kubelet")
            self._on_registered()
        else:
            event(log, logging.ERROR, "kubelet refused the registration", error=request.error)
        return registration_pb2.RegistrationStatusResponse()


class _ResourceHealthService:
    """Streams the health of every device of the pool (full list on each change).

    Each open stream holds a worker of the DRA server, so at most MAX_HEALTH_STREAMS are
    served at once; one more is answered RESOURCE_EXHAUSTED (the kubelet retries every
    5 s). A stream ends as soon as its client goes away or the server stops.
    """

    def __init__(
        self,
        pool: str,
        devices: Callable[[], list[Device]],
        poll_seconds: float = HEALTH_POLL_SECONDS,
        max_streams: int = MAX_HEALTH_STREAMS,
    ) -> None:
        self._pool = pool
        self._devices = devices
        self._poll = poll_seconds
        self._max = max_streams
        self._slots = threading.BoundedSemaphore(max_streams)
        self._open: set[threading.Event] = set()
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """End every open stream now (the driver leaves); new ones end at once."""
        with self._lock:
            self._closed = True
            for gone in self._open:
                gone.set()

    def snapshot(self) -> list[tuple[str, Any, str]]:
        """(device, health, message) for every device, sorted."""
        pb = health_v1alpha1_pb2
        return sorted(
            (d.name, pb.HEALTHY if d.healthy else pb.UNHEALTHY, d.health_message)
            for d in self._devices()
        )

    def NodeWatchResources(self, request: Any, context: Call) -> Iterator[Any]:
        if not self._slots.acquire(blocking=False):
            event(log, logging.WARNING, "health stream refused: too many open", limit=self._max)
            context.abort(
                Status.RESOURCE_EXHAUSTED,
                f"{self._max} health streams are open already, the most this driver "
                "serves at once; retry later",
            )
        try:
            yield from self._watch(context)
        finally:
            self._slots.release()

    def _watch(self, context: Call) -> Iterator[Any]:
        gone = threading.Event()
        context.add_callback(gone.set)  # cancelled, deadline, client gone, server stopped
        with self._lock:
            self._open.add(gone)
            if self._closed:
                gone.set()
        try:
            yield from self._stream(context, gone)
        finally:
            with self._lock:
                self._open.discard(gone)

    def _stream(self, context: Call, gone: threading.Event) -> Iterator[Any]:
        pb = health_v1alpha1_pb2
        last: list[tuple[str, Any, str]] | None = None
        while context.is_active() and not gone.is_set():
            current = self.snapshot()
            if current != last:
                now = int(time.time())
                yield pb.NodeWatchResourcesResponse(
                    devices=[
                        pb.DeviceHealth(
                            device=pb.DeviceIdentifier(pool_name=self._pool, device_name=name),
                            health=state,
                            last_updated_time=now,
                            message=message[:1024],
                        )
                        for name, state, message in current
                    ]
                )
                last = current
            gone.wait(self._poll)


class KubeletServer:
    """Both gRPC servers of one driver instance and their sockets."""

    def __init__(
        self,
        paths: SocketPaths,
        driver: str,
        pool: str,
        preparer: Preparer,
        devices: Callable[[], list[Device]],
        on_registered: Callable[[], None] = lambda: None,
        budget_cap: float = DEFAULT_CALL_BUDGET,
    ) -> None:
        """Build the services; nothing listens until `start`. A call's budget is derived
        from its gRPC deadline, at most `budget_cap` seconds (--call-budget)."""
        self.paths = paths
        self._driver = driver
        self.health = Health()
        self._device_health = _ResourceHealthService(pool, devices)
        service = {
            **_dra_methods(DRA_SERVICES[0], dra_v1_pb2, preparer, budget_cap, True),
            **_dra_methods(DRA_SERVICES[1], dra_v1beta1_pb2, preparer, budget_cap, False),
            f"/{DEVICE_HEALTH_SERVICE}/NodeWatchResources": Method(
                health_v1alpha1_pb2.NodeWatchResourcesRequest,
                self._device_health.NodeWatchResources,
                streaming=True,
            ),
            **self.health.methods(),
        }
        self._service = Server(service, DRA_WORKERS, "dra")
        registration = _RegistrationService(driver, paths.service, on_registered)
        self._registration = Server(
            {
                f"/{REGISTRATION_SERVICE}/GetInfo": Method(
                    registration_pb2.InfoRequest, registration.GetInfo
                ),
                f"/{REGISTRATION_SERVICE}/NotifyRegistrationStatus": Method(
                    registration_pb2.RegistrationStatus, registration.NotifyRegistrationStatus
                ),
            },
            2,
            "registration",
        )
        self._gate = preparer.gate
        self._liveness: Liveness | None = None

    def start(self, healthcheck_port: int = -1) -> None:
        """Serve the DRA socket, then register (the kubelet may call at once)."""
        for path in (self.paths.registration, self.paths.service):
            path.parent.mkdir(parents=True, exist_ok=True)
            if remove_stale_socket(path):
                event(log, logging.INFO, "removed stale socket", path=str(path))
        self._service.start(self.paths.service)
        for name in ("", *DRA_SERVICES):
            self.health.set(name, serving=True)
        self._registration.start(self.paths.registration)
        if healthcheck_port >= 0:  # its first check asks both sockets: they serve now
            self._liveness = Liveness(self.paths, healthcheck_port, self._gate.busy)
            self._liveness.start()
        event(
            log,
            logging.INFO,
            "serving",
            registration=str(self.paths.registration),
            service=str(self.paths.service),
        )

    def deregister(self) -> None:
        """Leave the kubelet (remove the registration socket); calls are still served."""
        self.paths.registration.unlink(missing_ok=True)
        self._registration.stop(0)
        self.health.enter_graceful_shutdown()
        self._device_health.close()

    def stop(self, grace: float = 5.0) -> None:
        """Deregister, then stop serving (calls still running after `grace` are cancelled:
        drain the preparer's gate first so that none is)."""
        self.deregister()
        self._service.stop(grace)
        if self._liveness is not None:
            self._liveness.stop()
        self.paths.service.unlink(missing_ok=True)
