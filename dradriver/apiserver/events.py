"""Kubernetes Events (events.k8s.io/v1) the driver records, so `kubectl describe` shows them.

Events are posted from one background thread: recording never waits for the API server.
Each distinct event is posted once per process (a message repeated every half minute in
the log is one Event, a claim the kubelet retries with the same error is one Event), at
most BURST at once and one per REFILL_SECONDS after that (a stream of failing pods cannot
flood the API server), and the queue is bounded; what does not fit is dropped: Events
are best effort, the log line beside each one is the record that counts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError, segment
from dradriver.base.log import event
from dradriver.contract import naming

log = logging.getLogger(__name__)

EVENTS_API = "/apis/events.k8s.io/v1"
NORMAL, WARNING = "Normal", "Warning"
MAX_QUEUED = 32
MAX_REMEMBERED = 256  # distinct events this process will not post again
POST_TIMEOUT = 5.0  # seconds one POST may take
NOTE_LIMIT = 1024  # events.k8s.io/v1 refuses a longer note
FIELD_LIMIT = 128  # reason, action, reportingInstance
BURST = 10  # Events posted at once, at most
REFILL_SECONDS = 6.0  # then one more per this many seconds: at most 10 a minute


class EventApi(Protocol):
    """The API call the recorder needs."""

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send one request."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (a namespaced one: the Event lives beside it)."""

    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "v1"

    def __post_init__(self) -> None:
        """Refuse names that could not be a Kubernetes object's: they reach a URL."""
        if not naming.is_dns_label(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a Kubernetes namespace name")
        if not naming.is_dns_subdomain(self.name):
            raise ValueError(f"name {self.name!r} is not a Kubernetes object name")


def event_body(
    regarding: ObjectRef,
    kind: str,
    reason: str,
    note: str,
    controller: str,
    instance: str,
    now: float,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about `regarding`, cut to the API's limits."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    micros = int((now % 1) * 1_000_000)
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {  # as client-go names them: generateName may not end in a dot
            "name": f"{regarding.name[:200]}.{int(now * 1e9):x}",
            "namespace": regarding.namespace,
        },
        "eventTime": f"{seconds}.{micros:06d}Z",
        "reportingController": controller,
        "reportingInstance": instance[:FIELD_LIMIT],
        "action": reason[:FIELD_LIMIT],
        "reason": reason[:FIELD_LIMIT],
        "type": kind,
        "note": note if len(note) <= NOTE_LIMIT else note[: NOTE_LIMIT - 3] + "...",
        "regarding": {
            "apiVersion": regarding.api_version,
            "kind": regarding.kind,
            "namespace": regarding.namespace,
            "name": regarding.name,
            "uid": regarding.uid,
        },
    }


class EventRecorder:
    """Posts Events about objects in the background, each distinct one once."""

    def __init__(
        self,
        api: EventApi,
        driver_name: str,
        node_name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Events are reported by controller `<driver_name>/driver`, instance `node_name`."""
        self._api = api
        self._clock = clock
        self._tokens = float(BURST)
        self._filled = clock()
        self._controller = f"{driver_name}/driver"
        self._instance = node_name
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(MAX_QUEUED)
        self._seen: dict[tuple[str, str, str], None] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def record(self, regarding: ObjectRef, kind: str, reason: str, note: str) -> None:
        """Queue an Event about `regarding` unless this process posted the same one."""
        key = (regarding.uid, reason, note)
        with self._lock:
            if key in self._seen:
                return
            if not self._take_token():  # not remembered: a later repeat may get through
                event(log, logging.INFO, "event dropped: rate limit", reason=reason, note=note)
                return
            self._seen[key] = None
            if len(self._seen) > MAX_REMEMBERED:
                del self._seen[next(iter(self._seen))]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="events", daemon=True)
                self._thread.start()
        body = event_body(
            regarding, kind, reason, note, self._controller, self._instance, time.time()
        )
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            event(log, logging.DEBUG, "event dropped: queue full", reason=reason)

    def _take_token(self) -> bool:
        """Whether the rate limit lets one more Event through now (under the lock)."""
        now = self._clock()
        self._tokens = min(float(BURST), self._tokens + (now - self._filled) / REFILL_SECONDS)
        self._filled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Post what is queued (within `timeout` seconds) and stop the thread."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            namespace = segment(body["metadata"]["namespace"])
            try:
                self._api.request(
                    "POST",
                    f"{EVENTS_API}/namespaces/{namespace}/events",
                    body,
                    timeout=POST_TIMEOUT,
                )
            except ApiError as exc:
                event(
                    log,
                    logging.WARNING,
                    "cannot record an event",
                    reason=body["reason"],
                    regarding=body["regarding"]["name"],
                    error=exc,
                )
