"""Publishes this node's ResourceSlices: on start, on link changes, on registration, when
the watch hears a slice change, and by timer (rediscovery; it costs the API nothing while
the watch is in step)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dradriver.apiserver import slices
from dradriver.apiserver.inventory import Inventory
from dradriver.apiserver.kubeapi import ApiError, KubeApi
from dradriver.apiserver.watchcopy import WatchedCopy
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.kernel import netlink

log = logging.getLogger(__name__)

_DEBOUNCE_SECONDS = 0.5
_RETRY_SECONDS = 5.0


class Publisher:
    """Keeps the node's pool in the API equal to the inventory."""

    def __init__(
        self,
        api: KubeApi,
        inventory: Inventory,
        driver: str,
        node_name: str,
        interval: float,
        metrics: Metrics | None = None,
        taint_effect: str | None = None,
    ) -> None:
        """Set up; `start` launches the publishing and link-watching threads. Unhealthy
        devices carry a taint with `taint_effect` (None: no taints)."""
        self._api = api
        self._inventory = inventory
        self._driver = driver
        self._node = node_name
        self._interval = interval
        self._metrics = metrics
        self._taint_effect = taint_effect
        self._node_uid: str | None = None
        self._listed = 0.0  # time.monotonic() of the last list of the slices
        # Per slice: what was last sent, and the resourceVersion the API server gave it.
        self._wrote: dict[str, tuple[Any, Any]] = {}
        self._last_desired: list[Any] | None = None
        self._wake = threading.Event()
        self._force = True
        self._stopping = threading.Event()
        self._watch = WatchedCopy(
            "ResourceSlices",
            lambda: api.list_slices_at(driver, node_name),
            lambda version, seconds: api.watch_slices(driver, node_name, version, seconds),
            lambda: self.trigger(force=False),
        )
        self._threads = [
            threading.Thread(target=self._loop, name="publisher", daemon=True),
            threading.Thread(target=self._watch_links, name="link-watch", daemon=True),
        ]

    def start(self) -> None:
        """Publish now and keep publishing."""
        for thread in self._threads:
            thread.start()
        self._watch.start()

    def stop(self) -> None:
        """Stop the threads (slices stay: the kubelet removes them when we are gone)."""
        self._stopping.set()
        self._wake.set()
        self._watch.stop()
        self._threads[0].join(5)

    def trigger(self, force: bool = True) -> None:
        """Publish soon; `force` compares with the API even if nothing changed locally."""
        if force:  # never cleared here: a concurrent forced trigger is not lost
            self._force = True
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            force, self._force = self._force, False
            try:
                self.publish(force=force)
                delay = self._interval
            except Exception as exc:  # API down, conflict: retry soon, never die
                event(log, logging.ERROR, "publishing ResourceSlices failed", error=exc)
                if self._metrics:
                    self._metrics.publishes.labels("error").inc()
                self._force = True
                delay = min(_RETRY_SECONDS, self._interval)
            if self._wake.wait(delay):
                time.sleep(_DEBOUNCE_SECONDS)  # coalesce bursts of link and watch events
                self._wake.clear()
            if not self._watch.in_step() and time.monotonic() - self._listed >= self._interval:
                self._force = True  # no watch: heal slices the kubelet or a user removed

    def publish(self, force: bool = True) -> bool:
        """Make the API match the inventory; return whether anything was written. The
        slices are compared with the watch's copy; without one (or with `force`) they are
        listed, and `force` reads the Node's UID again too."""
        devices = self._inventory.refresh()
        if force:
            # The Node may have been deleted and registered again under a new UID: a
            # slice owned by the old UID is deleted by the garbage collector at once.
            self._node_uid = None
        cached = None if force else self._watch.snapshot()
        desired = self._desired(devices)
        contents = [slices.content(s) for s in desired]
        if cached is None and not force and contents == self._last_desired:
            return False
        existing = cached
        if existing is None:
            self._listed = time.monotonic()
            existing = {
                s["metadata"]["name"]: s
                for s in self._api.list_slices_at(self._driver, self._node)[0]
            }
        if self._matches(desired, existing):
            self._last_desired = contents
            return False
        if not force and any(s["metadata"]["name"] not in existing for s in desired):
            # A slice is created: the Node's UID is read again first (a re-created Node's
            # garbage collector deletes the slices of the old one, which brings us here).
            self._node_uid = None
            desired = self._desired(devices)
        try:
            generation = self._write(desired, existing)
        except ApiError as exc:
            if exc.status in (404, 409) and cached is not None:  # the copy was behind: list
                return self.publish(force=True)
            raise
        if generation is None:
            return self.publish(force=True)
        self._last_desired = contents
        event(
            log,
            logging.INFO,
            "published ResourceSlices",
            slices=len(desired),
            devices=len(devices),
            generation=generation,
        )
        if self._metrics:
            self._metrics.publishes.labels("success").inc()
        return True

    def _desired(self, devices: list[Any]) -> list[dict[str, Any]]:
        return slices.build_slices(
            self._driver,
            self._node,
            self._node_uid_cached(),
            devices,
            generation=0,
            taint_effect=self._taint_effect,
        )

    def _matches(self, desired: list[dict[str, Any]], existing: dict[str, dict[str, Any]]) -> bool:
        """Whether the stored slices are the desired ones, no more. A slice the API server
        stored in its own form (a quantity of 1000 as `1k`) matches what was sent for it
        as long as it is the version that write returned."""
        if len(existing) != len(desired):
            return False
        for s in desired:
            name = s["metadata"]["name"]
            stored = existing.get(name)
            if stored is None:
                return False
            want = _owned_content(s)
            if _owned_content(stored) != want and self._wrote.get(name) != (
                want,
                stored["metadata"].get("resourceVersion"),
            ):
                return False
        return True

    def _write(
        self, desired: list[dict[str, Any]], existing: dict[str, dict[str, Any]]
    ) -> int | None:
        """Write `desired` over `existing`; the pool's new generation, or None if the API
        server dropped fields and the slices must be built again."""
        slices.keep_taint_times(desired, existing.values())
        generation = 1 + max(
            (s["spec"]["pool"].get("generation", 0) for s in existing.values()), default=0
        )
        for body in desired:
            sent = _owned_content(body)
            body["spec"]["pool"]["generation"] = generation
            name = body["metadata"]["name"]
            if name in existing:
                body["metadata"]["resourceVersion"] = existing[name]["metadata"]["resourceVersion"]
                stored = self._api.update_slice(body)
            else:
                stored = self._api.create_slice(body)
            self._wrote[name] = (sent, stored["metadata"].get("resourceVersion"))
            self._watch.stored(stored)
            if self._check_dropped(body, stored):
                return None
        for name in set(existing) - {s["metadata"]["name"] for s in desired}:
            self._api.delete_slice(name)
            self._watch.deleted(name)
        return generation

    def _check_dropped(self, sent: dict[str, Any], stored: dict[str, Any]) -> bool:
        """Publish without what the API server dropped: device taints (said once), or
        shared devices (single-allocation ones instead); whether to publish again."""
        tainted = slices.dropped_taints(sent["spec"]["devices"], stored)
        if tainted and self._taint_effect is not None:
            event(
                log,
                logging.WARNING,
                "API server dropped device taints (feature gate DRADeviceTaints off?): "
                "unhealthy devices are published without one, the scheduler may place pods "
                "on them; the kubelet still hears of their health",
                devices=",".join(tainted),
            )
            self._taint_effect = None
            return True
        dropped = slices.dropped_fields(sent["spec"]["devices"], stored)
        if not dropped or self._inventory.fallback:
            return False
        shared = sorted(d.name for d in self._inventory.devices() if slices.share_count(d))
        instead = ", ".join(f"{name}-<n>" for name in shared)
        event(
            log,
            logging.ERROR,
            "API server dropped consumable-capacity fields (feature gate "
            f"DRAConsumableCapacity off?); publishing single-allocation devices {instead} "
            "instead",
            dropped=",".join(dropped),
        )
        self._inventory.set_fallback(True)
        return True

    def _node_uid_cached(self) -> str:
        if self._node_uid is None:
            self._node_uid = str(self._api.get_node(self._node)["metadata"]["uid"])
        return self._node_uid

    def _watch_links(self) -> None:
        """Wake the publisher on every rtnetlink link event (add, remove, change)."""
        try:
            events = netlink.link_events()
        except OSError as exc:
            event(log, logging.WARNING, "cannot watch link events; relying on the timer", error=exc)
            return
        with events:
            while not self._stopping.is_set():
                if not events.wait(1.0):
                    continue
                self.trigger(force=False)
                # One wake-up per debounce period: a burst of prepares or unprepares
                # must not keep this thread competing for the GIL on every event.
                self._stopping.wait(_DEBOUNCE_SECONDS)
                events.drain()


def _owned_content(slice_: dict[str, Any]) -> Any:
    """What must match for a stored slice to need no update: its content and owner."""
    return slices.content(slice_), slice_["metadata"].get("ownerReferences")
