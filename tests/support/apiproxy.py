"""An HTTP proxy in front of the API stand-in that injects faults per class of request.

The daemon reaches the API through it (its kubeconfig names the proxy), so every fault
travels over a real TCP connection as a real API server's would: an HTTP error with a
metav1.Status body (500, 404, 409), a connection reset (RST, as a crashing server or a
load balancer sends), or a server that accepts and never answers. Requests it does not
fault are forwarded unchanged to the stand-in, one upstream connection per client
connection (keep-alive on both sides).

Request classes: `claim-get` (GET of a ResourceClaim), `status-apply` (PATCH of a claim's
status), `slices` (any ResourceSlice call), `node` (GET of a Node), `other`.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import urlparse

from tests.support import netns

CLASSES = ("claim-get", "status-apply", "slices", "node", "other")
FAULTS = ("500", "404", "409", "reset", "hang")
_REASONS = {"500": "InternalError", "404": "NotFound", "409": "Conflict"}
_STATUS_TEXT = {"500": "Internal Server Error", "404": "Not Found", "409": "Conflict"}
_CLAIM = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+$")
_STATUS = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+/status$")


def classify(method: str, target: str) -> str:
    """The request class of one HTTP request."""
    path = urlparse(target).path
    if method == "GET" and _CLAIM.match(path):
        return "claim-get"
    if method == "PATCH" and _STATUS.match(path):
        return "status-apply"
    if path.startswith("/apis/resource.k8s.io/v1/resourceslices"):
        return "slices"
    if method == "GET" and path.startswith("/api/v1/nodes/"):
        return "node"
    return "other"


@dataclass(frozen=True)
class Seen:
    """One request the proxy got, and what it did with it."""

    cls: str
    method: str
    path: str
    outcome: str  # "forwarded" or a fault


class ApiProxy:
    """Forwards to `upstream`, faulting the request classes a test names."""

    def __init__(self, upstream: str, namespace: str | None = None) -> None:
        url = urlparse(upstream)
        self.upstream = (url.hostname or "127.0.0.1", url.port or 80)
        self.namespace = namespace
        self.seen: list[Seen] = []
        self._faults: dict[str, tuple[str, int | None]] = {}
        self._delays: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.url = ""

    # -- what to inject -----------------------------------------------------------------

    def fail(self, cls: str, fault: str, times: int | None = None) -> None:
        """Answer requests of class `cls` with `fault` (`times` of them, or until healed)."""
        assert cls in CLASSES and fault in FAULTS, (cls, fault)
        with self._lock:
            self._faults[cls] = (fault, times)

    def slow(self, cls: str, seconds: float) -> None:
        """Forward requests of class `cls` only after `seconds` (a slow API server; each
        request waits on its own connection, so concurrent requests overlap)."""
        assert cls in CLASSES, cls
        with self._lock:
            self._delays[cls] = seconds

    def heal(self, cls: str | None = None) -> None:
        """Forward requests of `cls` (every class if None) again, without delay."""
        with self._lock:
            if cls is None:
                self._faults.clear()
                self._delays.clear()
            else:
                self._faults.pop(cls, None)
                self._delays.pop(cls, None)

    def count(self, cls: str, outcome: str | None = None) -> int:
        """How many requests of `cls` arrived (with `outcome`, if given)."""
        with self._lock:
            return sum(
                1 for s in self.seen if s.cls == cls and (outcome is None or s.outcome == outcome)
            )

    def _decide(self, method: str, target: str) -> tuple[str, str, float]:
        cls = classify(method, target)
        with self._lock:
            delay = self._delays.get(cls, 0.0)
            fault, times = self._faults.get(cls, ("forwarded", None))
            if times is not None:
                if times <= 1:
                    del self._faults[cls]
                else:
                    self._faults[cls] = (fault, times - 1)
            self.seen.append(Seen(cls, method, urlparse(target).path, fault))
        return cls, fault, delay

    # -- serving ------------------------------------------------------------------------

    @contextmanager
    def serving(self) -> Iterator[str]:
        """Listen on 127.0.0.1 (in the namespace, if any); yield the proxy's URL."""
        proxy = self

        class Handler(_Connection):
            owner = proxy

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        server.daemon_threads = True
        if self.namespace:
            server.socket.close()
            with netns.inside(self.namespace):
                server.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.server_bind()
        server.server_activate()
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self.url
        finally:
            self._stopping.set()  # hanging connections end
            server.shutdown()
            server.server_close()
            thread.join(5)

    def connect_upstream(self) -> socket.socket:
        """A connection to the stand-in, made in the namespace the stand-in listens in."""
        if self.namespace:
            with netns.inside(self.namespace):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        else:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(30)
        sock.connect(self.upstream)
        return sock


class _Connection(socketserver.BaseRequestHandler):
    """One client connection: requests are read, faulted or forwarded, one after another."""

    owner: ApiProxy

    def handle(self) -> None:
        client: socket.socket = self.request
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = client.makefile("rb")
        upstream: socket.socket | None = None
        upstream_reader: BinaryIO | None = None
        try:
            while not self.owner._stopping.is_set():
                request = _read_message(reader)
                if request is None:
                    return
                start_line = request.split(b"\r\n", 1)[0].decode("latin-1")
                method, target, _ = start_line.split(" ", 2)
                cls, fault, delay = self.owner._decide(method, target)
                if fault == "reset":
                    # SO_LINGER with a zero timeout: close() sends RST, not FIN (closed
                    # here: socketserver would shut the socket down first, sending FIN).
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                    return
                if fault == "hang":
                    self._hang(client)
                    return
                if fault in _REASONS:
                    client.sendall(_status_response(fault, cls))
                    continue
                if delay and self.owner._stopping.wait(delay):
                    return
                if upstream is None:
                    upstream = self.owner.connect_upstream()
                    upstream_reader = upstream.makefile("rb")
                assert upstream_reader is not None
                upstream.sendall(request)
                response = _read_message(upstream_reader)
                if response is None:
                    return
                client.sendall(response)
        except OSError:
            return
        finally:
            if upstream is not None:
                upstream.close()

    def _hang(self, client: socket.socket) -> None:
        """Accepted, never answered: wait until the client gives up or the proxy stops."""
        client.settimeout(0.2)
        while not self.owner._stopping.is_set():
            try:
                if client.recv(65536) == b"":
                    return
            except TimeoutError:
                continue
            except OSError:
                return


def _read_message(reader: BinaryIO) -> bytes | None:
    """One HTTP/1.1 message (head and Content-Length body) as raw bytes; None at EOF."""
    head = b""
    while True:
        line = reader.readline(65537)
        if not line:
            return None
        if line in (b"\r\n", b"\n") and not head:
            continue  # stray blank line between keep-alive requests
        head += line
        if line in (b"\r\n", b"\n"):
            break
    length = 0
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        if name.strip().lower() == b"transfer-encoding":
            raise ValueError("chunked messages are not supported by the test proxy")
    body = reader.read(length) if length else b""
    return head + body


def _status_response(code: str, cls: str) -> bytes:
    """An error as kube-apiserver sends it: a metav1.Status with code and reason."""
    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f"injected {code} for {cls}",
            "reason": _REASONS[code],
            "code": int(code),
        }
    ).encode()
    head = (
        f"HTTP/1.1 {code} {_STATUS_TEXT[code]}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
