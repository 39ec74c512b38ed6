"""Keep-alive HTTP(S) connections to the API server, shared by the driver's threads.

A request takes an idle connection or opens one, and gives it back for the next once its
answer is read: claim fetches of a batch run side by side, beside the publisher and the
status writer, so up to POOL_SIZE are kept idle and none is opened and thrown away per
request. A connection the server closed while idle is replaced before use; a request that
finds a reused connection closed before any byte of an answer came is sent once more on a
fresh one if its method is idempotent (not a POST or PATCH: the server may have acted
on it). A watch reads its answer as it comes, can be ended from another thread, and never
gives its connection back.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dradriver.apiserver.transport import (
    Connection,
    Target,
    TcpSocket,
    Timeouts,
    TlsSocket,
    Unreachable,
)

log = logging.getLogger(__name__)

# Claim fetches of a batch run side by side (prepare.py), beside the publisher and the
# status writer: enough connections that none is opened and thrown away per request.
POOL_SIZE = 12
_READ_SIZE = 64 * 1024  # bytes a watch reads at most at once
# Requests the server may get twice with the effect of once (RFC 9110, 9.2.2).
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# What a request meets on a kept-alive connection the server has closed.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


@dataclass(frozen=True)
class Reply:
    """A whole answer: its status, reason phrase and body."""

    status: int
    reason: str
    data: bytes


class ConnectionPool:
    """Keep-alive connections to one API server for any thread; up to `size` kept idle."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: str | None = None,
        ca_data: str | None = None,
        insecure: bool = False,
        cert: tuple[str, str] | None = None,
        server_name: str | None = None,
        size: int = POOL_SIZE,
    ) -> None:
        """Connect to `server` (an http:// or https:// URL); over TLS, trust `ca_file` or
        `ca_data` (or anyone if `insecure`), show `cert` (certificate and key files) and
        check the server's certificate for `server_name` (else the URL's host)."""
        self._target = Target.of(server, ca_file, ca_data, insecure, cert, server_name)
        self._size = size
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeouts: Timeouts,
    ) -> Reply:
        """Send one request and read its whole answer; raise Unreachable if that fails."""
        deadline = None if timeouts.total is None else time.monotonic() + timeouts.total
        conn, _, resp = self._begin(method, path, body, headers, timeouts, deadline)
        try:
            data = _read_all(resp, timeouts)
        except BaseException:
            conn.close()
            raise
        if resp.will_close or conn.sock is None:
            conn.close()
        else:
            self._give(conn)
        return Reply(resp.status, resp.reason, data)

    def stream(self, path: str, headers: Mapping[str, str], timeouts: Timeouts) -> Stream:
        """GET `path` and return its answer to read as it comes; raise Unreachable if the
        request fails."""
        conn, sock, resp = self._begin("GET", path, None, headers, timeouts, None)
        return Stream(conn, sock, resp, timeouts)

    def close(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _begin(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeouts: Timeouts,
        deadline: float | None,
    ) -> tuple[Connection, TcpSocket | TlsSocket, http.client.HTTPResponse]:
        """Send the request and read the head of its answer."""
        conn = self._take()
        url = self._target.prefix + path
        while True:
            sock: TcpSocket | TlsSocket | None = None
            mark = 0
            try:
                sock = conn.ready(timeouts, deadline)
                mark = sock.received
                conn.request(method, url, body, dict(headers))
                return conn, sock, conn.getresponse()
            except Unreachable:
                conn.close()
                raise
            except _STALE as exc:
                conn.close()
                untouched = sock is not None and sock.received == mark
                if not (conn.reused and untouched) or method not in IDEMPOTENT:
                    raise Unreachable(f"Connection aborted: {exc!r}") from None
                conn = Connection(self._target)  # the server closed it while it was idle
            except TimeoutError:
                conn.close()
                raise Unreachable(timeouts.timed_out()) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise Unreachable(f"Connection aborted: {exc!r}") from None
            except BaseException:
                conn.close()
                raise

    def _take(self) -> Connection:
        """An idle connection still open, else a new one (not yet connected)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Connection(self._target)
            if conn.alive():
                return conn
            conn.close()

    def _give(self, conn: Connection) -> None:
        """Keep `conn` for the next request, unless enough are kept already."""
        conn.reused = True
        with self._lock:
            if not self._closed and len(self._idle) < self._size:
                self._idle.append(conn)
                return
        log.debug("%d idle connections kept already: closing one more", self._size)
        conn.close()


class Stream:
    """An answer read as it comes (a watch's events); its connection is never reused."""

    def __init__(
        self,
        conn: Connection,
        sock: TcpSocket | TlsSocket,
        resp: http.client.HTTPResponse,
        timeouts: Timeouts,
    ) -> None:
        """Read `resp`, the answer that came on `conn` over `sock`."""
        self._conn = conn
        self._sock = sock
        self._resp = resp
        self._timeouts = timeouts
        self.status = resp.status
        self.reason = resp.reason

    def lines(self) -> Iterator[bytes]:
        """The body's lines as they come, until the server ends it; Unreachable if the
        answer breaks off (or `shutdown` ended it)."""
        resp = self._resp
        pending = bytearray()
        while True:
            try:
                data = resp.read1(_READ_SIZE)
            except http.client.IncompleteRead:
                raise Unreachable("Response ended prematurely") from None
            except TimeoutError:
                raise Unreachable(self._timeouts.timed_out()) from None
            except (OSError, ValueError, http.client.HTTPException) as exc:
                raise Unreachable(f"Connection broken: {exc!r}") from None
            if not data:
                break
            pending += data
            if b"\n" in data:
                *lines, rest = pending.split(b"\n")
                pending = rest
                yield from map(bytes, lines)
        # http.client reads an answer cut short before its announced length as its end
        if resp.length:
            raise Unreachable("Response ended prematurely")
        if pending:
            yield bytes(pending)

    def body(self) -> bytes:
        """The rest of the answer, read whole (an error's Status)."""
        return _read_all(self._resp, self._timeouts)

    def shutdown(self) -> None:
        """End the answer from any thread: a read blocked on it returns at once."""
        with contextlib.suppress(OSError, ValueError):
            # the TCP socket's own shutdown, also under TLS: the TLS layer stays, and a read
            # blocked in it sees the connection end
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def close(self) -> None:
        """Drop the connection (by the thread that read the answer)."""
        for close in (self._resp.close, self._conn.close, self._sock.close):
            with contextlib.suppress(OSError):
                close()


def _read_all(resp: http.client.HTTPResponse, timeouts: Timeouts) -> bytes:
    """The rest of `resp`, read whole; Unreachable if the answer breaks off or is late."""
    try:
        return resp.read()
    except TimeoutError:
        raise Unreachable(timeouts.timed_out()) from None
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"Connection broken: {exc!r}") from None
