"""The HTTP endpoint Prometheus scrapes: a registry's metrics on any path (as
prometheus_client's endpoint had them), each connection on a daemon thread of its own.

A connection has REQUEST_SECONDS to send its request line and headers and as long again
to take the answer; at most MAX_CONNECTIONS are served at once, those beyond are closed
unanswered.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import sys
import threading
import time
from typing import Any

from dradriver.base.exposition import CONTENT_TYPE, Registry

log = logging.getLogger(__name__)

REQUEST_SECONDS = 10.0
MAX_REQUEST = 8192  # bytes of request line and headers read at most
MAX_CONNECTIONS = 32


class MetricsServer(socketserver.ThreadingTCPServer):
    """The HTTP endpoint of one registry, a daemon thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        registry: Registry,
        host: str,
        port: int,
        request_seconds: float = REQUEST_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """Bound to host:port (IPv4 or IPv6, as the host resolves); nothing served yet."""
        family, _, _, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self.address_family = family
        self.registry = registry
        self.request_seconds = request_seconds
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((str(sockaddr[0]), port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, or close it when all are busy."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then free its place."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a failed request: at debug level when the client went away or was too slow."""
        level = logging.DEBUG if isinstance(sys.exc_info()[1], OSError) else logging.WARNING
        log.log(level, "metrics request failed", extra={"client": client_address}, exc_info=True)


class _Handler(socketserver.BaseRequestHandler):
    server: MetricsServer

    def handle(self) -> None:
        conn: socket.socket = self.request
        budget = self.server.request_seconds
        head = _read_head(conn, time.monotonic() + budget)
        if head is None:
            return
        reply = answer(head, self.server.registry)
        conn.settimeout(budget)  # for all of sendall
        conn.sendall(reply)


def _read_head(conn: socket.socket, deadline: float) -> bytes | None:
    """The request line and headers, or None when they do not come whole by `deadline`."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or len(buf) >= MAX_REQUEST:
            return None
        conn.settimeout(left)
        try:
            data = conn.recv(MAX_REQUEST - len(buf))
        except OSError:  # timed out, or reset
            return None
        if not data:
            return None
        buf += data
    return bytes(buf)


def answer(head: bytes, registry: Registry) -> bytes:
    """The HTTP response to a request whose line and headers are `head`."""
    parts = head.split(b"\n", 1)[0].decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1]
    allow = "Allow: OPTIONS,GET\r\n"
    if method == "OPTIONS":
        return _response("200 OK", b"", allow)
    if method != "GET":
        return _response("405 Method Not Allowed", b"use OPTIONS or GET\n", allow)
    if target.split("?", 1)[0] == "/favicon.ico":  # what browsers ask for besides
        return _response("200 OK", b"")
    return _response("200 OK", registry.render().encode(), f"Content-Type: {CONTENT_TYPE}\r\n")


def _response(status: str, body: bytes, headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def start_server(registry: Registry, host: str, port: int) -> MetricsServer:
    """Serve `registry` on host:port from a daemon thread; bound when this returns."""
    server = MetricsServer(registry, host, port)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
