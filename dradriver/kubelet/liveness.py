"""The liveness probe's endpoint: plain HTTP on the node's loopback, answered by a thread
of its own from what a checker thread last found.

The driver's pod is in the host network, so a port it opens on every address is open to
every pod and host that reaches the node. The probe's port is bound to 127.0.0.1 only
(the kubelet's HTTP probe asks `host: 127.0.0.1`, from the node's own network
namespace). Its one thread never waits on the driver: it answers from the checker's
last result; a connection may hold at most one read of 1 KiB for 2 s, and at most 256
are open at once (the oldest goes first: a probe sends its request as soon as it
connects, requests are read before more connections are taken, and at most 32 are taken
between two reads).

The checker asks both kubelet sockets every few seconds, as the kubelet would: the
registration socket's GetInfo, and an empty NodePrepareResources on the service socket.
A service that does not answer while it has calls in flight is busy, and alive.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dradriver.base.log import event
from dradriver.kubelet import grpcclient
from dradriver.kubelet.grpcwire import RpcError, Status
from dradriver.kubelet.proto import dra_v1_pb2, registration_pb2
from dradriver.kubelet.sockets import SocketPaths

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
PATH = "/healthz"
CHECK_PERIOD = 5.0  # seconds between two checks of the sockets
CHECK_TIMEOUT = 5.0  # a socket's answer is waited for this long
MAX_CONNECTIONS = 256
BACKLOG = 128
# Connections taken per round, each round after the requests that came: one taken now is
# read in each of the next seven rounds before 256 newer ones can make it the oldest, so
# a probe whose request comes a little after its connection (a busy client) is answered.
ACCEPTS_PER_ROUND = MAX_CONNECTIONS // 8
CONNECTION_BUDGET = 2.0  # seconds a connection may stay open
MAX_REQUEST = 1024  # bytes read of a request


@dataclass
class Finding:
    """What the last check found."""

    alive: bool
    reason: str
    at: float  # time.monotonic() of the check


def check_sockets(
    paths: SocketPaths, busy: Callable[[], bool], timeout: float = CHECK_TIMEOUT
) -> Finding:
    """Ask both kubelet sockets as the kubelet would; a busy service counts as alive."""
    now = time.monotonic()
    try:
        grpcclient.call(
            paths.registration,
            "/pluginregistration.Registration/GetInfo",
            registration_pb2.InfoRequest(),
            registration_pb2.PluginInfo,
            timeout,
        )
    except RpcError as exc:
        return Finding(False, f"the registration socket did not answer: {exc.code.name}", now)
    try:
        grpcclient.call(
            paths.service,
            "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
            dra_v1_pb2.NodePrepareResourcesRequest(),
            dra_v1_pb2.NodePrepareResourcesResponse,
            timeout,
        )
    except RpcError as exc:
        if exc.code == Status.DEADLINE_EXCEEDED and busy():
            return Finding(True, "busy: the service's calls are in flight", now)
        return Finding(False, f"the service socket did not answer: {exc.code.name}", now)
    return Finding(True, "ok", now)


def answer(finding: Finding | None, now: float, period: float = CHECK_PERIOD) -> bytes:
    """The HTTP response to a probe: 200 while the last check, made recently, passed."""
    if finding is None:
        status, body = "200 OK", "starting"  # the probe's initial delay covers a start
    elif now - finding.at > 3 * period + CHECK_TIMEOUT * 2:
        status, body = "503 Service Unavailable", "the checks have stopped"
    elif finding.alive:
        status, body = "200 OK", finding.reason
    else:
        status, body = "503 Service Unavailable", finding.reason
    data = (body + "\n").encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + data


class Liveness:
    """The probe's HTTP endpoint on the loopback and the checker behind it."""

    def __init__(
        self,
        paths: SocketPaths,
        port: int,
        busy: Callable[[], bool],
        period: float = CHECK_PERIOD,
    ) -> None:
        """Nothing listens until `start`; `busy` says whether calls are in flight."""
        self._paths, self._port, self._busy, self._period = paths, port, busy, period
        self._finding: Finding | None = None
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        """The port listened on (the one given, or the kernel's choice for 0)."""
        return self._listener.getsockname()[1] if self._listener else self._port

    def start(self) -> None:
        """Listen on the loopback and start both threads."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # The old and the new pod of a rolling update share the node's network.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((HOST, self._port))
        listener.listen(BACKLOG)  # a burst waits here; the thread takes it at once
        listener.setblocking(False)
        self._listener = listener
        for name, target in (("liveness", self._serve), ("liveness-check", self._check)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        event(log, logging.INFO, "liveness probe served", address=f"{HOST}:{self.port}{PATH}")

    def stop(self) -> None:
        """Stop both threads and close the port."""
        self._stop.set()
        for thread in self._threads:
            thread.join(CHECK_TIMEOUT * 2 + 1)
        if self._listener is not None:
            self._listener.close()

    def _check(self) -> None:
        while not self._stop.is_set():
            finding = check_sockets(self._paths, self._busy)
            if not finding.alive and (self._finding is None or self._finding.alive):
                event(log, logging.WARNING, "liveness check failed", reason=finding.reason)
            self._finding = finding
            self._stop.wait(self._period)

    def _serve(self) -> None:
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        open_: dict[socket.socket, tuple[float, bytearray]] = {}  # oldest first
        try:
            while not self._stop.is_set():
                ready = [key.fileobj for key, _ in sel.select(timeout=0.5)]
                for conn in ready:  # requests first, then new connections
                    if conn is not self._listener:
                        self._read(sel, open_, conn)  # type: ignore[arg-type]
                if self._listener in ready:
                    for _ in range(ACCEPTS_PER_ROUND):
                        if not self._accept(sel, open_):
                            break
                now = time.monotonic()
                for conn in [c for c, (at, _) in open_.items() if now - at > CONNECTION_BUDGET]:
                    _close(sel, open_, conn)
        finally:
            for conn in list(open_):
                _close(sel, open_, conn)
            sel.close()

    def _accept(self, sel: selectors.BaseSelector, open_: dict[socket.socket, Any]) -> bool:
        """Take one waiting connection; False when none waits."""
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # aborted before it was taken, or out of files: try later
            return False
        if len(open_) >= MAX_CONNECTIONS:
            _close(sel, open_, next(iter(open_)))
        conn.setblocking(False)
        open_[conn] = (time.monotonic(), bytearray())
        sel.register(conn, selectors.EVENT_READ)
        return True

    def _read(
        self, sel: selectors.BaseSelector, open_: dict[socket.socket, Any], conn: socket.socket
    ) -> None:
        try:
            data = conn.recv(MAX_REQUEST)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            _close(sel, open_, conn)
            return
        buf = open_[conn][1]
        buf += data
        if b"\r\n\r\n" in buf or b"\n\n" in buf or len(buf) >= MAX_REQUEST:
            if buf.startswith(b"GET " + PATH.encode()):
                reply = answer(self._finding, time.monotonic(), self._period)
            else:
                reply = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            with contextlib.suppress(OSError):
                conn.send(reply)  # small: fits the socket's buffer
            _close(sel, open_, conn)


def _close(
    sel: selectors.BaseSelector, open_: dict[socket.socket, Any], conn: socket.socket
) -> None:
    open_.pop(conn, None)
    with contextlib.suppress(KeyError, ValueError):
        sel.unregister(conn)
    conn.close()
