"""This node's ResourceSlices as the API server has them, kept by one list and a watch.

The publisher compares what it wants with this copy instead of listing the slices each
time, so a node at rest costs the API server one open watch and nothing else; a slice a
user or the kubelet deletes or changes comes back as an event, and the publisher puts it
right within its debounce. The watch is opened again where the last one ended (bookmarks
keep that point fresh), and only a watch the server refuses as too old (410) or an error
lists again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError, Watch
from dradriver.base.log import event

log = logging.getLogger(__name__)

# The server ends each watch after a time in this range (client-go's reflector: 5-10 min),
# so the watches of many nodes do not all open again at once.
WATCH_SECONDS = (300, 600)
BACKOFF = (1.0, 30.0)  # first and longest pause before listing again after an error
SHORT_WATCH = 1.0  # seconds: a watch that ends sooner with no event counts as a failure


class SliceApi(Protocol):
    """The API calls the watch needs."""

    def list_slices_at(self, driver: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """The node's slices and the list's resourceVersion."""

    def watch_slices(self, driver: str, node_name: str, version: str, seconds: int) -> Watch:
        """A watch of the node's slices from `version`."""


class SliceWatch:
    """The driver's ResourceSlices of one node, by name, while the watch is in step."""

    def __init__(
        self,
        api: SliceApi,
        driver: str,
        node_name: str,
        on_change: Callable[[], None],
        backoff: tuple[float, float] = BACKOFF,
    ) -> None:
        """`on_change` is called after every change the watch hears and when it (re)syncs
        or loses step; `start` launches the thread."""
        self._api = api
        self._driver = driver
        self._node = node_name
        self._on_change = on_change
        self._backoff = backoff
        self._slices: dict[str, dict[str, Any]] = {}
        self._synced = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: Watch | None = None
        self._thread = threading.Thread(target=self._run, name="slice-watch", daemon=True)

    def start(self) -> None:
        """List and start watching."""
        self._thread.start()

    def stop(self) -> None:
        """End the watch and the thread."""
        self._stopping.set()
        with self._lock:
            current = self._open
        if current is not None:
            current.close()
        self._thread.join(5)

    def snapshot(self) -> dict[str, dict[str, Any]] | None:
        """The slices by name, or None while the watch is not in step (list them instead)."""
        with self._lock:
            return dict(self._slices) if self._synced else None

    def in_step(self) -> bool:
        """Whether the copy follows the API server (`snapshot` is not None)."""
        with self._lock:
            return self._synced

    def stored(self, obj: dict[str, Any]) -> None:
        """Remember what a write of ours returned (its event may come a moment later),
        unless the watch already told of a later version."""
        with self._lock:
            name = obj["metadata"]["name"]
            if not _older(obj, self._slices.get(name)):
                self._slices[name] = obj

    def deleted(self, name: str) -> None:
        """Forget a slice we deleted."""
        with self._lock:
            self._slices.pop(name, None)

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                version = self._list()
                while not self._stopping.is_set():
                    version = self._watch(version)
                    failures = 0
            except _Expired:
                # Listed again at once; a watch that expires again right after is not a
                # reason to list in a tight loop: the pauses grow as after an error.
                delay = 0.0
                if failures:
                    self._lose_step()
                    delay = self._pause(failures)
                failures += 1
                event(log, logging.INFO, "slice watch expired: listing again", after=delay)
                self._stopping.wait(delay)
            except Exception as exc:  # API down, a bad answer: list again after a pause
                if self._stopping.is_set():
                    return
                self._lose_step()
                delay = self._pause(failures)
                failures += 1
                event(
                    log,
                    logging.WARNING,
                    "watching ResourceSlices failed: comparing with a list until it is back",
                    error=exc,
                    retry_in=round(delay, 1),
                )
                self._stopping.wait(delay)

    def _pause(self, failures: int) -> float:
        """The jittered back-off after `failures` failures in a row."""
        first, longest = self._backoff
        return float(min(longest, first * 2**failures) * random.uniform(0.5, 1.0))

    def _list(self) -> str:
        items, version = self._api.list_slices_at(self._driver, self._node)
        with self._lock:
            self._slices = {s["metadata"]["name"]: s for s in items}
            self._synced = True
        self._on_change()
        return version

    def _watch(self, version: str) -> str:
        """Follow one watch to its end; return the version to go on from."""
        seconds = random.randint(*WATCH_SECONDS)
        try:
            opened = self._api.watch_slices(self._driver, self._node, version, seconds)
        except ApiError as exc:
            if exc.status == 410:
                raise _Expired from None
            raise
        with self._lock:
            self._open = opened
        if self._stopping.is_set():  # stop() came before the watch was kept: end it here
            opened.close()
        began, heard = time.monotonic(), False
        try:
            for ev in opened.events():
                heard = True
                version = self._apply(ev) or version
        finally:
            with self._lock:
                self._open = None
            opened.release()
        if not heard and time.monotonic() - began < SHORT_WATCH:
            # A server that ends every watch at once must not be asked in a tight loop.
            raise ApiError(0, "ShortWatch", "the API server ended the watch at once")
        return version

    def _apply(self, ev: dict[str, Any]) -> str | None:
        """Apply one event; return its resourceVersion."""
        kind, obj = ev.get("type"), ev["object"]
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise ApiError(
                int(obj.get("code") or 0), str(obj.get("reason")), str(obj.get("message"))
            )
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            return str(version) if version else None
        name = meta.get("name")
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not name:
            return None
        with self._lock:
            if kind == "DELETED":
                self._slices.pop(name, None)
            elif not _older(obj, self._slices.get(name)):  # not the event of a write we hold
                self._slices[name] = obj
        self._on_change()
        return str(version) if version else None

    def _lose_step(self) -> None:
        with self._lock:
            was, self._synced = self._synced, False
        if was:
            self._on_change()


def _older(obj: dict[str, Any], than: dict[str, Any] | None) -> bool:
    """Whether `obj` is an older version of `than`. resourceVersions are opaque, but
    those of one object's writes grow; ones that are not integers are not compared."""
    if than is None:
        return False
    mine = str(obj["metadata"].get("resourceVersion", ""))
    theirs = str(than["metadata"].get("resourceVersion", ""))
    return mine.isdigit() and theirs.isdigit() and int(mine) < int(theirs)


class _Expired(Exception):
    """The server no longer has the version the watch asked for (410 Gone)."""
