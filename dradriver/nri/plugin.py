"""The NRI plugin runtime: connect, register, serve, and reconnect with back-off.

One thread ("nri") connects to the runtime's socket, registers, and then reads and
dispatches until the connection ends; the core's handlers run on at most
`max_handler_threads` more, started when first needed.
"""

from __future__ import annotations

import logging
import random
import re
import socket
import threading
import time
from pathlib import Path

from dradriver.base.log import event
from dradriver.nri.connection import Connection, connect
from dradriver.nri.dispatch import HandlerRunner
from dradriver.nri.pods import SandboxHandler
from dradriver.nri.proto import api_pb2
from dradriver.nri.service import RUNTIME_SERVICE, PluginService
from dradriver.nri.ttrpc import TtrpcError

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/run/nri/nri.sock")  # NRI's DefaultSocketPath
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the terminating NUL
# After registering, the runtime configures and synchronizes the plugin, each within its
# request timeout, but synchronizing also waits for pod sandboxes being created. A
# connection not synchronized this long after registration is stuck: start over.
SETUP_TIMEOUT = 60.0


class Backoff:
    """Exponential delays with jitter: each one a random 50-100 % of min(max, first * 2^n)."""

    def __init__(self, first: float, maximum: float, rng: random.Random | None = None) -> None:
        if not 0 < first <= maximum:
            raise ValueError(f"back-off needs 0 < first ({first}) <= maximum ({maximum})")
        self._first = first
        self._max = maximum
        self._n = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The delay before the next attempt."""
        ceiling = min(self._max, self._first * 2 ** min(self._n, 32))
        self._n += 1
        return float(ceiling * self._rng.uniform(0.5, 1.0))

    def reset(self) -> None:
        """Start again from the first delay (after a connection that worked)."""
        self._n = 0


class NriPlugin:
    """An NRI plugin inside the driver process, subscribed to pod sandbox events."""

    def __init__(
        self,
        socket: Path,
        handler: SandboxHandler,
        *,
        name: str = "dra-driver",
        index: str = "10",
        event_timeout: float = 1.5,
        registration_timeout: float = 5.0,
        backoff_first: float = 0.5,
        backoff_max: float = 30.0,
        max_handler_threads: int = 2,
    ) -> None:
        """Check the settings; nothing connects until `start`."""
        if not name or "/" in name:
            raise ValueError(f"NRI plugin name {name!r} must be non-empty and without '/'")
        if not re.fullmatch(r"[0-9]{2}", index):
            raise ValueError(f"NRI plugin index {index!r} must be two digits, e.g. '10'")
        if event_timeout <= 0 or registration_timeout <= 0:
            raise ValueError("NRI event and registration timeouts must be positive")
        if len(str(socket).encode()) > MAX_SOCKET_PATH:
            raise ValueError(f"NRI socket path {socket} is longer than {MAX_SOCKET_PATH} bytes")
        self.socket = socket
        self.name = name
        self.index = index
        self._handler = handler
        self._event_timeout = event_timeout
        self._registration_timeout = registration_timeout
        self._backoff = Backoff(backoff_first, backoff_max)
        self._runner = HandlerRunner(max_handler_threads)
        self._stopping = threading.Event()
        self._registered = threading.Event()
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self._synchronized_once = False
        self._tried = threading.Event()  # a first connection attempt was made
        self._unreachable: str | None = None  # why the last attempt failed (None: it did not)

    @property
    def connected(self) -> bool:
        """Whether the runtime has us registered and synchronized now (events will come)."""
        return self._registered.is_set()

    @property
    def started(self) -> bool:
        """Whether `start` was called and `stop` was not."""
        return self._thread is not None and not self._stopping.is_set()

    def first_attempt(self, timeout: float) -> str | None:
        """Wait for the first connection attempt; why it failed (nothing listens on the
        socket, no socket), or None if it connected (or made no attempt in time)."""
        self._tried.wait(timeout)
        return self._unreachable

    def wait_registered(self, timeout: float) -> bool:
        """Wait until the runtime has registered and synchronized us; False on time-out."""
        return self._registered.wait(timeout)

    def start(self) -> None:
        """Start the background thread that connects, registers and reconnects."""
        if self._thread is not None:
            raise RuntimeError("NRI plugin already started")
        self._thread = threading.Thread(target=self._run, name="nri", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Disconnect and stop the thread; running handlers are not waited for."""
        self._stopping.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close("the plugin is stopping")
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                event(log, logging.WARNING, "NRI plugin thread did not stop in time")
        self._runner.shutdown()
        self._registered.clear()

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                sock = connect(self.socket)
            except OSError as exc:
                self._unreachable = exc.strerror or str(exc)
                self._tried.set()
                delay = self._backoff.next()
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                event(
                    log,
                    level,
                    "NRI socket not available, will retry",
                    socket=str(self.socket),
                    error=exc,
                    retry_in=round(delay, 2),
                    attempts=failures,
                )
                self._stopping.wait(delay)
                continue
            failures = 0
            self._unreachable = None
            self._tried.set()
            event(log, logging.INFO, "connected to the NRI socket", socket=str(self.socket))
            started = time.monotonic()
            try:
                reason = self._session(sock)
            except Exception as exc:  # a bug here must not end the plugin for good
                log.exception("NRI connection failed unexpectedly")
                sock.close()
                reason = f"internal error: {exc!r}"
            self._registered.clear()
            if self._stopping.is_set():
                break
            if self._synchronized_once:
                self._backoff.reset()
            delay = self._backoff.next()
            event(
                log,
                logging.WARNING,
                "NRI connection ended, will reconnect",
                reason=reason,
                lasted=round(time.monotonic() - started, 1),
                retry_in=round(delay, 2),
            )
            self._stopping.wait(delay)
        event(log, logging.INFO, "NRI plugin stopped")

    def _session(self, sock: socket.socket) -> str:
        """Register on a fresh connection and serve it until it ends; return why it ended."""
        self._synchronized_once = False

        def synchronized() -> None:
            self._synchronized_once = True
            self._registered.set()

        service = PluginService(self._handler, self._runner, self._event_timeout, synchronized)
        conn = Connection(sock, service.handlers())
        with self._lock:
            if self._stopping.is_set():
                conn.close("the plugin is stopping")
            self._conn = conn
        # The runtime must register, configure and synchronize us within its own timeouts;
        # if it has not after all of them, something is stuck: start over.
        conn.give_up_at(
            time.monotonic() + self._registration_timeout + SETUP_TIMEOUT,
            self._registered.is_set,
            "the runtime did not configure and synchronize the plugin in time",
        )

        def registered(payload: bytes | None, error: TtrpcError | None) -> None:
            if error is not None:
                event(
                    log,
                    logging.ERROR,
                    "NRI registration failed",
                    plugin=self._full_name,
                    error=error,
                )
                conn.close(f"registration failed: {error}")
            else:
                event(log, logging.INFO, "registered with the runtime", plugin=self._full_name)

        request = api_pb2.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.index)
        conn.client.call(
            RUNTIME_SERVICE,
            "RegisterPlugin",
            request.SerializeToString(),
            self._registration_timeout,
            registered,
        )
        try:
            return conn.serve()
        finally:
            with self._lock:
                self._conn = None

    @property
    def _full_name(self) -> str:
        return f"{self.index}-{self.name}"
