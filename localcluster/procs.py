"""Long-running child processes of a local cluster: the control-plane components and
the node's containerd and kubelet.

Each component runs in its own session (so its own process group), with its
output in a log file, and with the parent-death signal set to SIGKILL so that
it dies with the Python process even if that one is killed outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file (without the flag dump components log at start)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no log)"
    # Skip the flag dump every Kubernetes component logs at start (--v >= 1).
    kept = [ln for ln in data.splitlines() if "] FLAG: --" not in ln]
    return "\n".join(kept[-lines:])


class Component:
    """One long-running process: a control-plane component, or one of a node's.

    ``wrap`` is put before ``argv`` when the process starts, e.g.
    ``["nsenter", "--net=/run/netns/n", "--"]`` to run it in a network namespace;
    ``argv`` stays the component's own command line (a restart may change it).
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        wrap: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.wrap = list(wrap)
        self.env = dict(env) if env is not None else None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str] | None = None) -> None:
        """Start the process (not running yet), its output appended to its log."""
        if self.running():
            raise RuntimeError(f"{self.name} is already running")
        with self.log.open("ab") as out:
            out.write(f"=== {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [*self.wrap, *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Only prctl() runs there, which is async-signal-safe enough; the
                # parent-death signal has no other way in from Python.
                preexec_fn=_die_with_parent,  # noqa: PLW1509
                env=env if env is not None else self.env,
                close_fds=True,
            )

    @property
    def pid(self) -> int | None:
        """The pid of the running process, None if not started."""
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with code {self.proc.returncode}; "
                f"last log lines:\n{tail(self.log)}"
            )

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the child leads its group
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Reap stragglers left in the group (none expected: Go binaries don't fork).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        """The last `lines` lines of its log."""
        return tail(self.log, lines)


class SigtermAsInterrupt:
    """While installed, SIGTERM raises KeyboardInterrupt like Ctrl-C does, so
    ``with`` blocks and pytest fixture teardown run (the default SIGTERM action
    ends Python at once, leaving the children to the parent-death signal and
    the files behind). Only from the main thread, where signals are handled."""

    def __init__(self) -> None:
        self._old: Any = None

    def install(self) -> None:
        """Turn SIGTERM into KeyboardInterrupt (main thread only)."""
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handler)

    def restore(self) -> None:
        """Put the previous SIGTERM handler back."""
        if self._old is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old)
        self._old = None

    @staticmethod
    def _handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
