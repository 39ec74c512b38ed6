"""A copy of some of the API server's objects, kept by one list and then a watch.

The node's ResourceSlices (the publisher compares what it wants with this copy instead of
listing them each time) and the node's Pods (claims read before the kubelet asks,
prefetch.py) are kept this way, so a node at rest costs the API server open watches and
nothing else. The watch is opened again where the last one ended (bookmarks keep that
point fresh), and only a watch the server refuses as too old (410) or an error lists
again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from dradriver.apiserver.kubeapi import ApiError, Watch
from dradriver.base.log import event

log = logging.getLogger(__name__)

# The server ends each watch after a time in this range (client-go's reflector: 5-10 min),
# so the watches of many nodes do not all open again at once.
WATCH_SECONDS = (300, 600)
BACKOFF = (1.0, 30.0)  # first and longest pause before listing again after an error
SHORT_WATCH = 1.0  # seconds: a watch that ends sooner with no event counts as a failure


Lister = Callable[[], tuple[list[dict[str, Any]], str]]  # the objects and the list's version
Watcher = Callable[[str, int], Watch]  # a watch from a version, ended after some seconds
Key = Callable[[dict[str, Any]], str]
LISTED = "LISTED"  # on_event's type for an object found by a list rather than an event


def by_name(obj: dict[str, Any]) -> str:
    """An object's name (the key of cluster-scoped objects of one node)."""
    return str(obj["metadata"]["name"])


def by_uid(obj: dict[str, Any]) -> str:
    """An object's UID."""
    return str(obj["metadata"]["uid"])


class WatchedCopy:
    """Objects of one collection, by key, while the watch is in step."""

    def __init__(
        self,
        what: str,
        lister: Lister,
        watcher: Watcher,
        on_change: Callable[[], None],
        backoff: tuple[float, float] = BACKOFF,
        key: Key = by_name,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        """`what` names the objects in logs; `on_change` is called after every change the
        watch hears and when it (re)syncs or loses step; `on_event(type, object)` after
        each ADDED, MODIFIED or DELETED event and for each listed object (as ADDED);
        `start` launches the thread. A 403 or 404 on the list is logged once and asked
        again at the longest pause."""
        self._what = what
        self._lister = lister
        self._watcher = watcher
        self._on_change = on_change
        self._on_event = on_event
        self._key = key
        self._backoff = backoff
        self._objects: dict[str, dict[str, Any]] = {}
        self._synced = False
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: Watch | None = None
        name = what.lower().replace(" ", "-") + "-watch"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

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
        """The objects by key, or None while the watch is not in step (list them instead)."""
        with self._lock:
            return dict(self._objects) if self._synced else None

    def get(self, key: str) -> dict[str, Any] | None:
        """One object, or None when it is not there or the watch is not in step."""
        with self._lock:
            return self._objects.get(key) if self._synced else None

    def in_step(self) -> bool:
        """Whether the copy follows the API server (`snapshot` is not None)."""
        with self._lock:
            return self._synced

    def stored(self, obj: dict[str, Any]) -> None:
        """Remember what a write of ours returned (its event may come a moment later),
        unless the watch already told of a later version."""
        with self._lock:
            key = self._key(obj)
            if not _older(obj, self._objects.get(key)):
                self._objects[key] = obj

    def deleted(self, key: str) -> None:
        """Forget an object we deleted."""
        with self._lock:
            self._objects.pop(key, None)

    def _run(self) -> None:
        failures = 0
        refused = False
        while not self._stopping.is_set():
            try:
                version = self._list()
                refused = False
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
                event(log, logging.INFO, f"{self._what} watch expired: listing again", after=delay)
                self._stopping.wait(delay)
            except _Refused as exc:
                # Not allowed (RBAC not granted yet, or taken away) or not served: said
                # once, and asked again only at the longest pause.
                self._lose_step()
                if not refused:
                    event(
                        log,
                        logging.ERROR,
                        f"listing {self._what} refused: going on without them, asking "
                        f"again every {self._backoff[1]:.0f} s",
                        error=exc.__cause__,
                    )
                refused = True
                self._stopping.wait(self._backoff[1])
                continue
            except Exception as exc:  # API down, a bad answer: list again after a pause
                if self._stopping.is_set():
                    return
                self._lose_step()
                delay = self._pause(failures)
                failures += 1
                event(
                    log,
                    logging.WARNING,
                    f"watching {self._what} failed: listing again after a pause",
                    error=exc,
                    retry_in=round(delay, 1),
                )
                self._stopping.wait(delay)

    def _pause(self, failures: int) -> float:
        """The jittered back-off after `failures` failures in a row."""
        first, longest = self._backoff
        return float(min(longest, first * 2**failures) * random.uniform(0.5, 1.0))

    def _list(self) -> str:
        try:
            items, version = self._lister()
        except ApiError as exc:
            if exc.status in (403, 404):  # not allowed (RBAC), or not served: not a blip
                raise _Refused from exc
            raise
        with self._lock:
            self._objects = {self._key(o): o for o in items}
            self._synced = True
        if self._on_event is not None:
            for obj in items:
                self._on_event(LISTED, obj)
        self._on_change()
        return version

    def _watch(self, version: str) -> str:
        """Follow one watch to its end; return the version to go on from."""
        seconds = random.randint(*WATCH_SECONDS)
        try:
            opened = self._watcher(version, seconds)
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
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not meta.get("name"):
            return None
        key = self._key(obj)
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(key, None)
            elif not _older(obj, self._objects.get(key)):  # not the event of a write we hold
                self._objects[key] = obj
        if self._on_event is not None:
            self._on_event(str(kind), obj)
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


class _Refused(Exception):
    """The server will not list these objects for us (403 or 404)."""


class _Expired(Exception):
    """The server no longer has the version the watch asked for (410 Gone)."""
