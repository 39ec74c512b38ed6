"""WatchedCopy: the node's slices kept from one list and the watch's events."""

from __future__ import annotations

import logging
import queue
import time
from typing import Any

import pytest

from dradriver.apiserver.kubeapi import ApiError
from dradriver.apiserver.watchcopy import WatchedCopy
from tests.support.queuedwatch import QueuedWatch
from tests.support.waiting import wait_for


def _slice(name: str, rv: str, devices: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"devices": [{}] * devices}}


class _Api:
    def __init__(self) -> None:
        self.items = [_slice("a", "5")]
        self.lists: list[str] = []
        self.watched: list[str] = []
        self.events: queue.Queue[Any] = queue.Queue()
        self.refuse: ApiError | None = None
        self.refuse_list: ApiError | None = None

    def list_slices_at(self, driver: str, node: str) -> tuple[list[dict[str, Any]], str]:
        self.lists.append(node)
        if self.refuse_list is not None:
            raise self.refuse_list
        return list(self.items), "10"

    def watch_slices(self, driver: str, node: str, version: str, seconds: int) -> QueuedWatch:
        if self.refuse is not None:
            raise self.refuse
        self.watched.append(version)
        return QueuedWatch(self.events)


def _started(
    api: _Api, backoff: tuple[float, float] = (0.01, 0.02), watching: bool = True
) -> tuple[WatchedCopy, list[int]]:
    changes: list[int] = []
    w = WatchedCopy(
        "ResourceSlices",
        lambda: api.list_slices_at("drv", "node"),
        lambda version, seconds: api.watch_slices("drv", "node", version, seconds),
        lambda: changes.append(1),
        backoff=backoff,
    )
    w.start()
    if watching:
        wait_for("the first watch", lambda: api.watched)
    return w, changes


def test_events_keep_the_copy_and_each_is_announced() -> None:
    api = _Api()
    w, changes = _started(api)
    try:
        assert w.snapshot() == {"a": _slice("a", "5")}
        api.events.put({"type": "ADDED", "object": _slice("b", "11")})
        api.events.put({"type": "MODIFIED", "object": _slice("a", "12", devices=2)})
        api.events.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}})
        api.events.put({"type": "DELETED", "object": _slice("b", "14")})
        wait_for("the deletion", lambda: len(changes) == 4)
        assert w.snapshot() == {"a": _slice("a", "12", devices=2)}
        api.events.put(None)  # the server's end of the watch: opened again where it was
        wait_for("the second watch", lambda: len(api.watched) == 2)
        assert api.watched == ["10", "14"] and api.lists == ["node"]
    finally:
        w.stop()


def test_a_version_too_old_lists_again() -> None:
    api = _Api()
    w, _ = _started(api)
    try:
        api.items = [_slice("c", "20")]
        api.events.put({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})
        wait_for("a second list", lambda: len(api.lists) == 2)
        wait_for("the copy from it", lambda: w.snapshot() == {"c": _slice("c", "20")})
    finally:
        w.stop()


def test_without_a_watch_there_is_no_copy_and_it_is_tried_again() -> None:
    api = _Api()
    api.refuse = ApiError(405, "MethodNotAllowed", "no watch")
    w, _ = _started(api, watching=False)
    try:
        wait_for("lists again", lambda: len(api.lists) >= 3)
        wait_for("no copy to trust", lambda: w.snapshot() is None)
        api.refuse = None
        wait_for("a watch once allowed", lambda: api.watched)
        assert w.snapshot() == {"a": _slice("a", "5")}
    finally:
        w.stop()
    assert not w._thread.is_alive()


def test_a_forbidden_list_is_said_once_and_asked_again_at_the_longest_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RBAC not granted yet (a chart install's binding comes after the pod), or taken
    away: one ERROR, the list asked again at the longest pause, the copy once allowed."""
    api = _Api()
    api.refuse_list = ApiError(403, "Forbidden", "resourceslices is forbidden")
    with caplog.at_level(logging.ERROR):
        w, _ = _started(api, backoff=(0.01, 0.05), watching=False)
        try:
            wait_for("asked three times", lambda: len(api.lists) >= 3)
            assert w.snapshot() is None
            refusals = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refusals) == 1, [r.getMessage() for r in refusals]
            api.refuse_list = None
            wait_for("the copy once allowed", lambda: w.snapshot() == {"a": _slice("a", "5")})
        finally:
            w.stop()


def test_stored_writes_are_in_the_copy_before_their_events() -> None:
    api = _Api()
    w, _ = _started(api)
    try:
        api.events.put({"type": "ADDED", "object": _slice("b", "11")})
        wait_for("b", lambda: "b" in (w.snapshot() or {}))
        w.stored(_slice("a", "30"))
        w.deleted("b")
        assert w.snapshot() == {"a": _slice("a", "30")}
        # The event of that write, or of an earlier one, comes later: the copy keeps 30.
        api.events.put({"type": "MODIFIED", "object": _slice("a", "29")})
        api.events.put({"type": "MODIFIED", "object": _slice("a", "30")})
        api.events.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "31"}}})
        api.events.put(None)
        wait_for("the next watch", lambda: len(api.watched) == 2)
        assert w.snapshot() == {"a": _slice("a", "30")}
        # A write whose answer comes after the watch told of a later version is not kept.
        api.events.put({"type": "MODIFIED", "object": _slice("a", "33")})
        wait_for("33", lambda: (w.snapshot() or {})["a"]["metadata"]["resourceVersion"] == "33")
        w.stored(_slice("a", "32"))
        assert (w.snapshot() or {})["a"]["metadata"]["resourceVersion"] == "33"
    finally:
        w.stop()


def test_a_refused_watch_and_an_error_event_list_again_after_a_pause() -> None:
    api = _Api()
    w, _ = _started(api)
    try:
        api.refuse = ApiError(410, "Gone", "too old")  # as an HTTP status on opening
        api.events.put(None)
        # Lists again (more than once while refused: the pauses are short here).
        wait_for("a second list", lambda: len(api.lists) >= 2)
        api.refuse = None
        wait_for("a watch again", lambda: len(api.watched) == 2)
        lists = len(api.lists)
        api.events.put({"type": "ERROR", "object": {"code": 500, "reason": "InternalError"}})
        wait_for("a list after the error", lambda: len(api.lists) == lists + 1)
        wait_for("a third watch", lambda: len(api.watched) == 3)
    finally:
        w.stop()


def test_watches_that_end_at_once_are_not_opened_in_a_tight_loop() -> None:
    api = _Api()
    for _ in range(100):
        api.events.put(None)  # every watch ends at once, without an event
    w, _ = _started(api, backoff=(0.2, 0.4), watching=False)
    try:
        wait_for("a second watch", lambda: len(api.watched) >= 2)
        time.sleep(1.0)  # a tight loop would open the other 98 by now
        assert len(api.watched) <= 8, api.watched
    finally:
        w.stop()
