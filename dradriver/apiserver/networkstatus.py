"""The pod annotation Multus users read, `k8s.v1.cni.cncf.io/network-status`: what the
pod's networks made in its sandbox got (interface, addresses, MAC), in Multus's format,
written in the background after the sandbox event (never under the driver's lock, never
holding up the runtime). The operator turns it on (--cni-network-status: it needs
`patch` on pods); a failed write is tried again a few times, then logged."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.log import event

log = logging.getLogger(__name__)

ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
TRIES = 4
FIRST_PAUSE = 1.0  # seconds before the second try; doubled at each try after it
MAX_PENDING = 1024  # pods whose annotation waits to be written


class PodApi(Protocol):
    """The API call the writer needs."""

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str]
    ) -> None:
        """Merge annotations into a pod that still has UID `uid`."""


def entry(network: str, interface: str, ips: Sequence[str], mac: str | None) -> dict[str, Any]:
    """One network's entry, as Multus writes it (addresses without prefix length)."""
    out: dict[str, Any] = {
        "name": network,
        "interface": interface,
        "ips": [ip.split("/")[0] for ip in ips],
        "default": False,
        "dns": {},
    }
    if mac:
        out["mac"] = mac
    return out


@dataclass
class _Pending:
    namespace: str
    name: str
    uid: str
    entries: list[dict[str, Any]]
    tries: int = 0
    due: float = 0.0


class NetworkStatusWriter:
    """A background thread writing pods' network-status annotations."""

    def __init__(self, api: PodApi, first_pause: float = FIRST_PAUSE) -> None:
        """Nothing runs until the first submit."""
        self._api = api
        self._first_pause = first_pause
        self._pending: dict[str, _Pending] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, namespace: str, name: str, uid: str, entries: list[dict[str, Any]]) -> None:
        """Queue the pod's annotation (a newer one replaces a queued one); never blocks."""
        with self._cond:
            if uid not in self._pending and len(self._pending) >= MAX_PENDING:
                event(log, logging.ERROR, "network-status dropped: queue full", pod_uid=uid)
                return
            self._pending[uid] = _Pending(namespace, name, uid, entries)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="network-status", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def pending(self) -> int:
        """How many pods wait for their annotation."""
        with self._cond:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next()
            self._write(job)

    def _next(self) -> _Pending:
        """The next write whose time has come, taken out of the queue (condition held)."""
        while True:
            now = time.monotonic()
            job = min(self._pending.values(), key=lambda j: j.due, default=None)
            if job is not None and job.due <= now:
                del self._pending[job.uid]
                return job
            self._cond.wait(None if job is None else job.due - now)

    def _write(self, job: _Pending) -> None:
        text = json.dumps(job.entries, separators=(",", ":"))
        try:
            self._api.annotate_pod(job.namespace, job.name, job.uid, {ANNOTATION: text})
            return
        except ApiError as exc:
            if exc.status in (404, 409, 422):  # the pod is gone, or another one now
                event(log, logging.INFO, "network-status not written: pod gone",
                      pod_uid=job.uid, error=exc)  # fmt: skip
                return
            error: Exception = exc
        except Exception as exc:  # never let the thread die
            error = exc
        job.tries += 1
        if job.tries >= TRIES:
            event(log, logging.ERROR, "network-status not written", pod_uid=job.uid,
                  pod=f"{job.namespace}/{job.name}", error=error, tries=job.tries)  # fmt: skip
            return
        with self._cond:
            if job.uid not in self._pending:  # a newer one would replace it
                job.due = time.monotonic() + self._first_pause * 2 ** (job.tries - 1)
                self._pending[job.uid] = job
            self._cond.notify_all()
