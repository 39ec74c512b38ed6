"""ResourceClaim status.devices: written in the background after a successful prepare."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from dradriver.log import event
from dradriver.metrics import Metrics
from dradriver.records import ClaimRecord

log = logging.getLogger(__name__)

_RETRIES = 3


class StatusApi(Protocol):
    """The API call the writer needs."""

    def apply_claim_status(
        self, namespace: str, name: str, body: Mapping[str, Any], manager: str
    ) -> None:
        """Server-side apply a claim status."""


def status_body(record: ClaimRecord, driver: str, node_name: str, now: float) -> dict[str, Any]:
    """The server-side-apply body of a claim's status.devices entries for our devices."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    devices = []
    for d in record.devices:
        entry: dict[str, Any] = {
            "driver": driver,
            "pool": d.pool,
            "device": d.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Prepared",
                    "message": f"prepared by {driver} on node {node_name}",
                    "lastTransitionTime": stamp,
                }
            ],
        }
        if d.share_id:
            entry["shareID"] = d.share_id
        if d.network_data:
            nd = {k: v for k, v in d.network_data.items() if v}
            if nd:
                entry["networkData"] = nd
        devices.append(entry)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": record.claim.name, "namespace": record.claim.namespace},
        "status": {"devices": devices},
    }


class StatusWriter:
    """A background thread that applies claim statuses; failures are logged and counted."""

    def __init__(
        self, api: StatusApi, driver: str, node_name: str, metrics: Metrics | None = None
    ) -> None:
        """Prepare the queue; `start` launches the thread."""
        self._api = api
        self._driver = driver
        self._node = node_name
        self._metrics = metrics
        self._queue: queue.Queue[ClaimRecord | None] = queue.Queue(maxsize=4096)
        self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)

    def start(self) -> None:
        """Start writing queued statuses."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the queued writes (up to `timeout`) and stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def submit(self, record: ClaimRecord) -> None:
        """Queue a status write; if the queue is full the write is dropped and counted."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._failed(record, "status queue full")

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            try:
                if record is None:
                    return
                self._write(record)
            finally:
                self._queue.task_done()

    def _write(self, record: ClaimRecord) -> None:
        body = status_body(record, self._driver, self._node, time.time())
        for attempt in range(_RETRIES):
            try:
                self._api.apply_claim_status(
                    record.claim.namespace, record.claim.name, body, self._driver
                )
                return
            except Exception as exc:
                if attempt == _RETRIES - 1:
                    self._failed(record, str(exc))
                    return
                time.sleep(0.2 * 2**attempt)

    def _failed(self, record: ClaimRecord, reason: str) -> None:
        event(
            log,
            logging.ERROR,
            "writing claim status failed",
            claim=record.claim.uid,
            ref=str(record.claim),
            error=reason,
        )
        if self._metrics:
            self._metrics.status_failures.inc()
