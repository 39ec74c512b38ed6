"""The API client's connections, against real HTTP and HTTPS servers in this process:
keep-alive reuse, connections the server closed, watches ended from another thread, the
whole-request timeout and fresh credentials after a 401."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dradriver.apiserver import transport
from dradriver.apiserver.connections import ConnectionPool, Timeouts
from dradriver.apiserver.kubeapi import ApiError, KubeApi
from dradriver.apiserver.kubeconfig import ApiConfig, Credentials
from localcluster.certs import CertificateAuthority


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("pki"))


def serving_context(ca: CertificateAuthority, client_certs: bool = False) -> ssl.SSLContext:
    """A throw-away serving certificate for 127.0.0.1, signed by `ca`."""
    pair = ca.issue("server", "localhost", server=True, ips=("127.0.0.1",))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.pair.cert))
    ctx.verify_mode = ssl.CERT_OPTIONAL if client_certs else ssl.CERT_NONE
    ctx.load_cert_chain(str(pair.cert), str(pair.key))
    return ctx


def send_json(handler: BaseHTTPRequestHandler, code: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class Server:
    """HTTP/1.1 on 127.0.0.1 (over TLS with `tls`): `handle` answers every request; each
    request is recorded with the client port of its connection."""

    def __init__(
        self,
        handle: Callable[[BaseHTTPRequestHandler], None],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.requests: list[tuple[int, str, str]] = []  # (client port, method, path)
        self.stop = threading.Event()  # ends what handlers wait for
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def serve(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.client_address[1], self.command, self.path))
                handle(self)

            do_GET = do_POST = serve

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def ports(self) -> list[int]:
        return [port for port, _, _ in self.requests]

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class RawServer:
    """TCP on 127.0.0.1 where `script(server, number, sock)` plays each connection
    (numbered from 0) byte by byte: what a well-behaved HTTP server never does."""

    def __init__(self, script: Callable[[RawServer, int, socket.socket], None]) -> None:
        self.connections = 0
        self.requests: list[tuple[int, bytes]] = []  # (connection number, request line)
        self.stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._script = script
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            number, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._play, args=(number, sock), daemon=True).start()

    def _play(self, number: int, sock: socket.socket) -> None:
        with sock, contextlib.suppress(OSError):
            self._script(self, number, sock)

    def read_request(self, number: int, sock: socket.socket) -> bool:
        """Read one request off `sock`; False when the client closed the connection."""
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                return False
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
                while len(body) < length:
                    body += sock.recv(65536)
        self.requests.append((number, head.split(b"\r\n")[0]))
        return True

    def close(self) -> None:
        self.stop.set()
        self._listener.close()


def ok(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.fixture
def servers() -> Iterator[list[Server | RawServer]]:
    made: list[Server | RawServer] = []
    yield made
    for server in made:
        server.close()


def api_for(url: str, ca: CertificateAuthority | None = None, **kwargs: Any) -> KubeApi:
    ca_file = str(ca.pair.cert) if ca is not None else None
    return KubeApi(config=ApiConfig(url, ca_file=ca_file, **kwargs))


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_requests_reuse_one_keep_alive_connection(servers, ca, tls):
    server = Server(
        lambda h: send_json(h, 200, {"path": h.path}), serving_context(ca) if tls else None
    )
    servers.append(server)
    api = api_for(server.url, ca if tls else None)
    assert api.request("GET", "/a") == {"path": "/a"}
    assert api.request("POST", "/b", {"x": 1}) == {"path": "/b"}
    assert api.request("GET", "/c", timeout=2.0) == {"path": "/c"}
    assert len(set(server.ports())) == 1, server.requests


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_each_new_connection_is_logged_at_debug_level(servers, ca, tls, caplog):
    server = Server(lambda h: send_json(h, 200, {}), serving_context(ca) if tls else None)
    servers.append(server)
    api = api_for(server.url, ca if tls else None)
    with caplog.at_level(logging.DEBUG, logger="dradriver.apiserver"):
        api.request("GET", "/a")
        api.request("GET", "/b")  # over the same connection: not logged again
    connected = [r for r in caplog.records if r.getMessage() == "connected to the API server"]
    assert [(r.levelno, r.address, r.tls) for r in connected] == [
        (logging.DEBUG, f"127.0.0.1:{server.url.rsplit(':', 1)[1]}", tls)
    ]


def test_requests_side_by_side_each_get_a_connection_then_share_them(servers):
    gate = threading.Barrier(4)

    def handle(h: BaseHTTPRequestHandler) -> None:
        if h.path == "/together":
            gate.wait(5)  # answered only once four requests are in at once
        send_json(h, 200, {})

    server = Server(handle)
    servers.append(server)
    api = api_for(server.url)
    threads = [threading.Thread(target=api.request, args=("GET", "/together")) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not gate.broken
    for _ in range(8):
        api.request("GET", "/after")
    together = {port for port, _, path in server.requests if path == "/together"}
    after = {port for port, _, path in server.requests if path == "/after"}
    assert len(together) == 4 and after <= together, server.requests


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_connection_the_server_closed_while_idle_is_replaced(servers, method):
    closed = threading.Event()

    def script(server: RawServer, number: int, sock: socket.socket) -> None:
        if server.read_request(number, sock):
            sock.sendall(ok({"connection": number}))
        if number == 0:  # closed after answering, without saying so
            sock.close()
            closed.set()

    server = RawServer(script)
    servers.append(server)
    api = api_for(server.url)
    assert api.request("GET", "/x") == {"connection": 0}
    assert closed.wait(5)
    time.sleep(0.05)  # the server's FIN reaches the idle connection
    # found closed before use: even a POST, which is never sent twice, goes through
    assert api.request(method, "/x", {}) == {"connection": 1}
    assert [n for n, _ in server.requests] == [0, 1]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "POST"])
def test_a_request_met_by_a_closed_reused_connection_is_sent_again_if_idempotent(servers, method):
    def script(server: RawServer, number: int, sock: socket.socket) -> None:
        while server.read_request(number, sock):
            if number == 0 and len(server.requests) == 2:
                return  # the second request: closed with no answer, as an idle timeout does
            sock.sendall(ok({"connection": number}))

    server = RawServer(script)
    servers.append(server)
    api = api_for(server.url)
    assert api.request("GET", "/first") == {"connection": 0}
    if method in ("POST", "PATCH"):  # the server may have acted on it: not sent again
        with pytest.raises(ApiError, match="Connection aborted: RemoteDisconnected") as err:
            api.request(method, "/second", {})
        assert (err.value.status, err.value.reason) == (0, "unreachable")
        assert [n for n, _ in server.requests] == [0, 0]
    else:
        assert api.request(method, "/second", {}) == {"connection": 1}
        assert [n for n, _ in server.requests] == [0, 0, 1]
    assert api.request("GET", "/third") == {"connection": 1}


def test_a_connection_broken_after_part_of_an_answer_is_not_retried(servers):
    def script(server: RawServer, number: int, sock: socket.socket) -> None:
        while server.read_request(number, sock):
            if len(server.requests) == 2:
                sock.sendall(b"HTTP/1.1 2")  # part of an answer, then a reset
                time.sleep(0.2)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            sock.sendall(ok({"connection": number}))

    server = RawServer(script)
    servers.append(server)
    api = api_for(server.url)
    assert api.request("GET", "/first") == {"connection": 0}
    with pytest.raises(ApiError, match="Connection aborted: ConnectionResetError"):
        api.request("GET", "/second")
    assert server.connections == 1


def test_a_fresh_connection_closed_without_an_answer_is_an_error(servers):
    def script(server: RawServer, number: int, sock: socket.socket) -> None:
        server.read_request(number, sock)

    server = RawServer(script)
    servers.append(server)
    with pytest.raises(ApiError, match="Remote end closed connection without response") as err:
        api_for(server.url).request("GET", "/x")
    assert (err.value.status, err.value.reason) == (0, "unreachable")
    assert server.connections == 1


def test_a_refused_connection_names_the_server_and_the_cause():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        url = f"http://127.0.0.1:{taken.getsockname()[1]}"
    with pytest.raises(ApiError, match=f"API server {url}: .*Connection refused") as err:
        api_for(url).get_node("n")
    assert (err.value.status, err.value.reason) == (0, "unreachable")


def trickle(server: RawServer, number: int, sock: socket.socket) -> None:
    """An answer whose body comes a byte now and then: no single read waits long."""
    server.read_request(number, sock)
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n{")
    while not server.stop.wait(0.05):
        sock.sendall(b" ")


def silent(server: RawServer, number: int, sock: socket.socket) -> None:
    """No answer at all."""
    server.read_request(number, sock)
    server.stop.wait(10)


@pytest.mark.parametrize("behaviour", [trickle, silent])
def test_a_timeout_bounds_the_whole_request(servers, behaviour):
    server = RawServer(behaviour)
    servers.append(server)
    api = api_for(server.url)
    began = time.monotonic()
    with pytest.raises(ApiError, match="timed out") as err:
        api.get_claim("default", "c", timeout=0.5)
    took = time.monotonic() - began
    assert (err.value.status, err.value.reason) == (0, "unreachable")
    assert 0.45 <= took < 1.5, took


def test_each_read_waits_the_read_timeout(servers):
    server = RawServer(silent)
    servers.append(server)
    pool = ConnectionPool(server.url)
    began = time.monotonic()
    with pytest.raises(Exception, match=r"Read timed out. \(read timeout=0.3 s\)"):
        pool.request("GET", "/x", None, {}, Timeouts(connect=1.0, read=0.3))
    assert 0.25 <= time.monotonic() - began < 1.5


def watch_handler(stop: threading.Event, end: bool) -> Callable[[BaseHTTPRequestHandler], None]:
    """A watch answer: one event, then silence until `stop` (or, with `end`, its end)."""

    def handle(h: BaseHTTPRequestHandler) -> None:
        if "watch=true" not in h.path:
            send_json(h, 200, {"plain": True})
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        event = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()
        event += b"\n"
        h.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        h.wfile.flush()
        if end:
            h.wfile.write(b"0\r\n\r\n")
        else:
            stop.wait(30)

    return handle


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_watch_is_ended_from_another_thread_at_once(servers, ca, tls):
    stop = threading.Event()
    server = Server(watch_handler(stop, end=False), serving_context(ca) if tls else None)
    servers.append(server)
    api = api_for(server.url, ca if tls else None)
    watch = api.watch("/api/v1/pods", {"resourceVersion": "1"}, 300)
    heard: list[dict[str, Any]] = []
    ended: list[ApiError] = []
    first = threading.Event()

    def read() -> None:
        try:
            for ev in watch.events():
                heard.append(ev)
                first.set()
        except ApiError as exc:
            ended.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(5)
    began = time.monotonic()
    watch.close()
    reader.join(1.0)
    stop.set()
    assert not reader.is_alive(), "the watch went on reading after close"
    assert time.monotonic() - began < 1.0
    watch.release()
    assert [ev["type"] for ev in heard] == ["ADDED"]
    assert [(e.status, e.reason) for e in ended] == [(0, "unreachable")]
    assert "watch of /api/v1/pods ended" in str(ended[0])


def test_a_watch_connection_is_never_given_back_to_the_pool(servers):
    server = Server(watch_handler(threading.Event(), end=True))
    servers.append(server)
    api = api_for(server.url)
    watch = api.watch("/api/v1/pods", {"resourceVersion": "1"}, 300)
    assert [ev["type"] for ev in watch.events()] == ["ADDED"]  # ended by the server
    watch.release()
    assert api.request("GET", "/plain") == {"plain": True}
    watch_port, plain_port = server.ports()
    assert watch_port != plain_port


def test_a_refused_watch_is_the_servers_error(servers):
    def handle(h: BaseHTTPRequestHandler) -> None:
        send_json(h, 410, {"kind": "Status", "reason": "Expired", "message": "too old"})

    server = Server(handle)
    servers.append(server)
    with pytest.raises(ApiError, match="API 410 Expired: too old"):
        api_for(server.url).watch("/api/v1/pods", {"resourceVersion": "1"}, 300)


@dataclass
class RotatingCert(Credentials):
    """A client certificate that is replaced when the server refuses it."""

    pairs: list[tuple[str, str]] | None = None

    def client_cert(self) -> tuple[str, str] | None:
        assert self.pairs
        return self.pairs[0]

    def invalidate(self) -> None:
        assert self.pairs
        self.pairs.pop(0)


def test_a_401_is_retried_with_a_fresh_certificate_on_a_new_connection(servers, ca, tmp_path):
    def handle(h: BaseHTTPRequestHandler) -> None:
        peer = h.connection.getpeercert()
        user = dict(x[0] for x in peer["subject"])["commonName"] if peer else None
        if user != "rotated":
            send_json(h, 401, {"kind": "Status", "reason": "Unauthorized", "message": user})
        else:
            send_json(h, 200, {"user": user})

    server = Server(handle, serving_context(ca, client_certs=True))
    servers.append(server)
    pairs = []
    for name in ("expired", "rotated"):
        pair = ca.issue(f"client-{name}", name, client=True)
        pairs.append((str(pair.cert), str(pair.key)))
    credentials = RotatingCert(pairs=pairs)
    api = api_for(server.url, ca, credentials=credentials)
    assert api.request("GET", "/whoami") == {"user": "rotated"}
    first, second = server.ports()
    assert first != second  # the new certificate needed a new connection
    assert api.request("GET", "/whoami") == {"user": "rotated"}
    assert server.ports()[2] == second


def test_a_server_url_with_a_path_prefixes_every_request(servers):
    server = Server(lambda h: send_json(h, 200, {"path": h.path}))
    servers.append(server)
    assert api_for(server.url + "/proxy/k8s").get_node("n") == {"path": "/proxy/k8s/api/v1/nodes/n"}


def test_a_server_that_is_not_an_http_url_is_an_api_error():
    with pytest.raises(ApiError, match="is not an http:// or https:// URL"):
        api_for("ftp://example.com").get_node("n")


def test_tls_server_name_is_the_name_checked(servers, ca, tmp_path: Path):
    server = Server(lambda h: send_json(h, 200, {}), serving_context(ca))
    servers.append(server)
    assert api_for(server.url, ca, tls_server_name="localhost").get_node("n") == {}
    with pytest.raises(ApiError, match=r"not valid for 'other\.example'"):
        api_for(server.url, ca, tls_server_name="other.example").get_node("n")
    with pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"):
        api_for(server.url, CertificateAuthority(tmp_path / "other")).get_node("n")
    assert api_for(server.url, insecure=True).get_node("n") == {}


def test_connections_send_at_once_and_notice_a_vanished_peer():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sock = transport.connect("127.0.0.1", listener.getsockname()[1], 1.0)
        with sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            options = (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
            assert [sock.getsockopt(socket.IPPROTO_TCP, o) for o in options] == [30, 10, 3]
