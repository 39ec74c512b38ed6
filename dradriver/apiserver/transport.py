"""One connection to the API server: where it goes (host, port, path prefix, TLS trust),
connected within its timeouts with the driver's socket options, over sockets that count
what they receive (a reused connection the server closed is told apart) and whose reads
end by the request's deadline."""

from __future__ import annotations

import http.client
import logging
import select
import socket
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dradriver.base.errors import DriverError
from dradriver.base.log import event

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

# No Nagle delay on small requests; TCP keepalive: a connection whose peer vanished (a
# half-open watch after a network failure) fails within about a minute instead of at the
# watch's read timeout.
SOCKET_OPTIONS = (
    (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
)


class Unreachable(DriverError):
    """The API server could not be reached, or broke off an exchange."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds to connect, to wait for each read, and for the whole request if `total`."""

    connect: float = 5.0
    read: float = 20.0
    total: float | None = None

    def timed_out(self) -> str:
        """What to say of a request that ran out of time after connecting."""
        if self.total is not None:
            return f"Read timed out. (timeout={self.total:g} s for the whole request)"
        return f"Read timed out. (read timeout={self.read:g} s)"


@dataclass(frozen=True)
class Target:
    """Where connections go: host, port, path prefix and, over TLS, how to trust it."""

    host: str
    port: int
    prefix: str
    tls: ssl.SSLContext | None
    server_hostname: str | None
    problem: str | None = None  # why no connection can be made to this URL

    @classmethod
    def of(
        cls,
        server: str,
        ca_file: str | None,
        ca_data: str | None,
        insecure: bool,
        cert: tuple[str, str] | None,
        server_name: str | None,
    ) -> Target:
        """The target of `server`, with a TLS context for an https:// one."""
        url = urlsplit(server)
        try:
            port = url.port
        except ValueError as exc:
            return cls("", 0, "", None, None, f"{server!r} is not a URL: {exc}")
        host = url.hostname or ""
        if url.scheme not in ("http", "https") or not host:
            problem = f"{server!r} is not an http:// or https:// URL with a host"
            return cls("", 0, "", None, None, problem)
        prefix = url.path.rstrip("/")
        if url.scheme == "http":
            return cls(host, port or 80, prefix, None, None)
        ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cert is not None:
            ctx.load_cert_chain(*cert)
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.sslsocket_class = TlsSocket
        name = (server_name or host).strip("[]").rstrip(".")
        if ":" in name and "%" in name:  # an IPv6 address's zone is no part of its name
            name = name[: name.rfind("%")]
        return cls(host, port or 443, prefix, ctx, name)


class Connection(http.client.HTTPConnection):
    """One connection to the API server, connected by the pool (never again on its own:
    one the server closed is the pool's to replace)."""

    auto_open = 0

    def __init__(self, target: Target) -> None:
        """A connection to `target`, not yet connected."""
        super().__init__(target.host or "localhost", target.port or None)  # placeholders
        # of a target with a problem: it is never connected
        self.default_port = 443 if target.tls else 80  # the Host header omits it
        self._target = target
        self._sock: TcpSocket | TlsSocket | None = None
        self.reused = False  # given back to the pool once: the server may have closed it

    def ready(self, timeouts: Timeouts, deadline: float | None) -> TcpSocket | TlsSocket:
        """The connected socket, set to wait `timeouts` (reads end by `deadline`)."""
        if self._sock is None:
            self._sock = self._open(timeouts, deadline)
            self.sock = self._sock
        sock = self._sock
        sock.deadline = deadline
        if deadline is None:
            sock.settimeout(timeouts.read)
        else:
            sock.settimeout(_left(deadline))
        return sock

    def alive(self) -> bool:
        """Whether the idle connection is still open: nothing (an end, an error) came."""
        sock = self._sock
        if sock is None or self.sock is None or sock.fileno() < 0:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return False
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)

    def _open(self, timeouts: Timeouts, deadline: float | None) -> TcpSocket | TlsSocket:
        """Connect, and shake hands over TLS, within the connect timeout."""
        target = self._target
        if target.problem:
            raise Unreachable(target.problem)
        limit = timeouts.connect
        if deadline is not None:
            limit = min(limit, deadline - time.monotonic())
        timed_out = Unreachable(f"Connection timed out. (connect timeout={limit:g} s)")
        if limit <= 0:
            raise timed_out
        try:
            sock = connect(target.host, target.port, limit)
        except TimeoutError:
            raise timed_out from None
        except socket.gaierror as exc:
            raise Unreachable(f"Failed to resolve {target.host!r} ({exc})") from None
        except OSError as exc:
            raise Unreachable(f"Failed to establish a new connection: {exc}") from None
        if target.tls is None:
            _connected(target, sock)
            return sock
        try:
            tls = target.tls.wrap_socket(sock, server_hostname=target.server_hostname)
        except TimeoutError:
            sock.close()
            raise timed_out from None
        except ssl.SSLError as exc:
            sock.close()
            raise Unreachable(str(exc)) from None
        except OSError as exc:
            sock.close()
            raise Unreachable(f"TLS handshake failed: {exc!r}") from None
        assert isinstance(tls, TlsSocket)
        _connected(target, tls)
        return tls


class TcpSocket(socket.socket):
    """A TCP socket that counts what it receives and whose reads end by a deadline."""

    received = 0
    deadline: float | None = None

    def recv_into(self, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0) -> int:
        """Receive into `buffer`, waiting no longer than what is left before the deadline."""
        if self.deadline is not None:
            self.settimeout(_left(self.deadline))
        n = super().recv_into(buffer, nbytes, flags)
        self.received += n
        return n


class TlsSocket(ssl.SSLSocket):
    """A TLS socket that counts what it receives and whose reads end by a deadline."""

    received = 0
    deadline: float | None = None

    def recv_into(self, buffer: WriteableBuffer, nbytes: int | None = None, flags: int = 0) -> int:
        """Receive into `buffer`, waiting no longer than what is left before the deadline."""
        if self.deadline is not None:
            self.settimeout(_left(self.deadline))
        n = super().recv_into(buffer, nbytes, flags)
        self.received += n
        return n


def _connected(target: Target, sock: socket.socket) -> None:
    """Log, at debug level, a new connection to the API server."""
    event(
        log,
        logging.DEBUG,
        "connected to the API server",
        address=f"{target.host}:{target.port}",
        local=str(sock.getsockname()[:2]),
        tls=target.tls is not None,
    )


def _left(deadline: float) -> float:
    """Seconds left before `deadline`; TimeoutError if none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def connect(host: str, port: int, timeout: float) -> TcpSocket:
    """A TCP connection to `host` (each of its addresses in turn), with SOCKET_OPTIONS."""
    error: OSError | None = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = TcpSocket(family, kind, proto)
        try:
            for level, option, value in SOCKET_OPTIONS:
                sock.setsockopt(level, option, value)
            sock.settimeout(timeout)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error or OSError(f"no address for {host}")
