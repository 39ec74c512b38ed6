"""The standard gRPC health service (grpc.health.v1): Check, and Watch's stream of
changes, for the services a server marks serving."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from dradriver.kubelet.grpcserver import Call, Method
from dradriver.kubelet.grpcwire import Status
from dradriver.kubelet.proto import health_v1_pb2 as pb

SERVICE = "/grpc.health.v1.Health"
WAKE_SECONDS = 5.0  # a watch looks again at least this often


class Health:
    """Each service's status; Watch streams end when the call or the server does."""

    def __init__(self) -> None:
        self._status: dict[str, pb.HealthCheckResponse.ServingStatus] = {}
        self._changed = threading.Condition()
        self._shutdown = False

    def methods(self) -> dict[str, Method]:
        """The service's methods, by path."""
        return {
            f"{SERVICE}/Check": Method(pb.HealthCheckRequest, self.check),
            f"{SERVICE}/Watch": Method(pb.HealthCheckRequest, self.watch, streaming=True),
        }

    def set(self, service: str, serving: bool) -> None:
        """Mark `service` ("" for the server as a whole) serving or not."""
        with self._changed:
            if not self._shutdown:
                self._status[service] = _serving(serving)
                self._changed.notify_all()

    def enter_graceful_shutdown(self) -> None:
        """Every service is NOT_SERVING from now on, and stays so."""
        with self._changed:
            self._shutdown = True
            self._status = {name: _serving(False) for name in self._status}
            self._changed.notify_all()

    def check(self, request: Any, call: Call) -> Any:
        """The service's status now (NOT_FOUND for one never set)."""
        with self._changed:
            status = self._status.get(request.service)
        if status is None:
            call.abort(Status.NOT_FOUND, f"unknown service {request.service!r}")
        return pb.HealthCheckResponse(status=status)

    def watch(self, request: Any, call: Call) -> Iterator[Any]:
        """The status now, then each change, until the call ends."""
        call.add_callback(self._wake)
        last: pb.HealthCheckResponse.ServingStatus | None = None
        while call.is_active():
            with self._changed:
                status = self._status.get(request.service, pb.HealthCheckResponse.SERVICE_UNKNOWN)
                if status == last:
                    if call.is_active():  # its end wakes us: _wake needs the lock we hold
                        self._changed.wait(WAKE_SECONDS)
                    continue
            last = status
            yield pb.HealthCheckResponse(status=status)

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


def _serving(serving: bool) -> pb.HealthCheckResponse.ServingStatus:
    return pb.HealthCheckResponse.SERVING if serving else pb.HealthCheckResponse.NOT_SERVING
