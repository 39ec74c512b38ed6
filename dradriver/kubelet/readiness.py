"""The readiness marker: a file that exists exactly while this instance is registered
with the kubelet and not stopping, for an exec readiness probe (`test -e <file>`).

A probe on the health port cannot tell instances apart: during a rolling update the
old and the new driver pod of a node share the node's network and so the port, and
the old one would answer the new one's probe. The file lives in the pod's own /tmp.

That /tmp is an emptyDir, which outlives a container: a driver killed (a liveness
restart, the OOM killer) leaves its marker to the next container of the pod, whose
first probes may run before it removes it. So the marker holds this container's mark,
the start time of its first process, and the probe compares it with /proc/1/stat: a
previous container's marker never makes the new one Ready before it is registered."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from dradriver.base.log import event

log = logging.getLogger(__name__)

INIT_STAT = Path("/proc/1/stat")


def container_mark(stat: Path = INIT_STAT) -> str:
    """This container's mark: when its first process started (field 22 of its
    /proc/<pid>/stat, clock ticks after boot); "" if that cannot be read."""
    try:
        text = stat.read_text()
    except OSError:
        return ""
    fields = text.rpartition(")")[2].split()  # after the command, which may hold spaces
    return fields[19] if len(fields) > 19 else ""


class ReadyFile:
    """The marker at `path` (None: no marker, every method does nothing)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.registered = threading.Event()  # set once the kubelet has registered us

    @classmethod
    def cleared(cls, path: Path | None) -> ReadyFile:
        """The marker at `path`, removed if a previous container of the pod left it."""
        ready = cls(path)
        ready.clear()
        return ready

    def clear(self) -> None:
        """Remove the marker (at start: one left by a previous container of the pod)."""
        if self.path is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as exc:
                event(
                    log,
                    logging.ERROR,
                    "cannot remove the ready file",
                    path=str(self.path),
                    error=exc,
                )

    def marking(self, then: Callable[[], None]) -> Callable[[], None]:
        """A callback that creates the marker, then calls `then`."""

        def registered() -> None:
            self.registered.set()
            self.mark()
            then()

        return registered

    def mark(self) -> None:
        """Create the marker, with this container's mark (the kubelet has registered
        this instance)."""
        if self.path is not None:
            try:
                self.path.write_text(container_mark())
            except OSError as exc:
                event(
                    log,
                    logging.ERROR,
                    "cannot create the ready file: the pod stays not Ready",
                    path=str(self.path),
                    error=exc,
                )
