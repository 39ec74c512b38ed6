"""One connection to the runtime's NRI socket: the multiplexer over a real unix socket.

The reader loop runs on the caller's thread: it reads frames, reassembles the ttrpc
messages of connection 1 (our Plugin service) and connection 2 (the runtime's Runtime
service), hands them to the server and client endpoints, and enforces their deadlines.
Any thread may send; writes are serialised and bounded in time.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dradriver.base.log import event
from dradriver.nri.mux import (
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    FrameDecoder,
    MuxError,
    encode_frames,
)
from dradriver.nri.rpc import ClientEndpoint, Handler, Send, ServerEndpoint
from dradriver.nri.ttrpc import MessageReader

log = logging.getLogger(__name__)

SEND_TIMEOUT = 5.0  # a runtime that takes no bytes for this long is treated as gone
READ_CHUNK = 65536


def connect(path: Path, timeout: float = SEND_TIMEOUT) -> socket.socket:
    """Connect to the runtime's NRI unix socket; raises OSError if nothing listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


class Connection:
    """The plugin's side of one NRI socket: serve on connection 1, call on connection 2."""

    def __init__(self, sock: socket.socket, handlers: dict[tuple[str, str], Handler]) -> None:
        self._sock = sock
        self._sock.settimeout(SEND_TIMEOUT)  # bounds sendall; reads wait in poll()
        self._write_lock = threading.Lock()
        self._closed = threading.Event()
        self._close_reason = "closed by the plugin"
        self._frames = FrameDecoder()
        self._readers = {
            PLUGIN_SERVICE_CONN: MessageReader(),
            RUNTIME_SERVICE_CONN: MessageReader(),
        }
        self._dropped: set[int] = set()
        self._give_up: tuple[float, Callable[[], bool], str] | None = None
        self.server = ServerEndpoint(handlers, self._sender(PLUGIN_SERVICE_CONN))
        self.client = ClientEndpoint(self._sender(RUNTIME_SERVICE_CONN))

    def _sender(self, conn_id: int) -> Send:
        def send(message: bytes) -> None:
            data = encode_frames(conn_id, message)
            with self._write_lock:
                if self._closed.is_set():
                    raise OSError("NRI connection is closed")
                try:
                    self._sock.sendall(data)
                except OSError as exc:
                    self.close(f"could not write to the runtime: {exc}")
                    raise

        return send

    def give_up_at(self, deadline: float, unless_done: Callable[[], bool], reason: str) -> None:
        """End the connection at `deadline` (monotonic) if `unless_done()` is still False."""
        self._give_up = (deadline, unless_done, reason)

    def close(self, reason: str = "") -> None:
        """Shut the socket down; the reader loop returns `reason` soon after. Idempotent."""
        if self._closed.is_set():
            return
        if reason:
            self._close_reason = reason
        self._closed.set()
        with contextlib.suppress(OSError):  # not connected any more: nothing to shut down
            self._sock.shutdown(socket.SHUT_RDWR)

    def serve(self) -> str:
        """Read and dispatch until the connection ends; return why it ended."""
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        try:
            while not self._closed.is_set():
                if self._give_up and time.monotonic() >= self._give_up[0]:
                    _, done, reason = self._give_up
                    self._give_up = None
                    if not done():
                        return reason
                timeout_ms = self._expire()
                if not poller.poll(timeout_ms):
                    continue
                try:
                    data = self._sock.recv(READ_CHUNK)
                except (BlockingIOError, InterruptedError, TimeoutError):
                    continue
                if not data:
                    if self._closed.is_set():
                        break
                    pending = self._frames.pending
                    return "runtime closed the connection" + (
                        f" in the middle of a frame ({pending} bytes unread)" if pending else ""
                    )
                self._route(data)
            return self._close_reason
        except (MuxError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            self.close()
            self.server.close()
            self.client.close("the NRI connection is gone")
            self._sock.close()

    def _expire(self) -> int | None:
        """Answer or fail what is overdue; milliseconds until the next deadline (None: none)."""
        now = time.monotonic()
        self.server.expire(now)
        self.client.expire(now)
        candidates = (
            self.server.next_deadline(),
            self.client.next_deadline(),
            self._give_up[0] if self._give_up else None,
        )
        deadlines = [d for d in candidates if d is not None]
        if not deadlines:
            return None
        return max(0, math.ceil((min(deadlines) - time.monotonic()) * 1000))

    def _route(self, data: bytes) -> None:
        for conn_id, payload in self._frames.feed(data):
            reader = self._readers.get(conn_id)
            if reader is None:
                if conn_id not in self._dropped:  # upstream drops these too; say so once
                    self._dropped.add(conn_id)
                    event(
                        log,
                        logging.WARNING,
                        "dropped frames of an unknown NRI connection",
                        conn=conn_id,
                    )
                continue
            endpoint = self.server if conn_id == PLUGIN_SERVICE_CONN else self.client
            for msg in reader.feed(payload):
                endpoint.receive(msg)
