"""The metrics endpoint (dradriver/base/metricsserver.py): the registry's text on any path
with the 0.0.4 content type, and connections that cannot hold it: one that sends nothing,
one that trickles its request, more at once than it serves."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from dradriver.base.exposition import CONTENT_TYPE, Counter, Registry
from dradriver.base.metricsserver import MetricsServer, answer, start_server

BUDGET = 0.5  # seconds a connection has for its request in these tests
SLACK = 2.0  # seconds of delay a busy machine may add


@pytest.fixture
def registry() -> Registry:
    r = Registry()
    Counter("served", 'Counted "here"', ["path"], registry=r).labels("/x\n").inc()
    return r


def _serve(server: MetricsServer) -> Iterator[MetricsServer]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def server(registry: Registry) -> Iterator[MetricsServer]:
    yield from _serve(MetricsServer(registry, "127.0.0.1", 0, BUDGET, max_connections=2))


def _url(server: MetricsServer, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def _closed_within(conn: socket.socket, seconds: float) -> float:
    """Seconds until the server closed `conn` (reading what it sent meanwhile)."""
    start = time.monotonic()
    conn.settimeout(seconds)
    while conn.recv(4096):
        pass
    return time.monotonic() - start


@pytest.mark.parametrize("path", ["/metrics", "/", "/anything?name[]=x"])
def test_any_path_gets_the_registrys_text(
    server: MetricsServer, registry: Registry, path: str
) -> None:
    with urllib.request.urlopen(_url(server, path), timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"] == CONTENT_TYPE
        assert reply.read().decode() == registry.render()
    assert 'served_total{path="/x\\n"} 1.0' in registry.render()


def test_start_server_serves_from_a_thread_of_its_own(registry: Registry) -> None:
    server = start_server(registry, "127.0.0.1", 0)
    try:
        with urllib.request.urlopen(_url(server, "/metrics"), timeout=5) as reply:
            assert reply.read().decode() == registry.render()
    finally:
        server.shutdown()
        server.server_close()


def test_ipv6_addresses_are_served(registry: Registry) -> None:
    try:
        server = MetricsServer(registry, "::1", 0)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    for served in _serve(server):
        assert served.address_family == socket.AF_INET6
        url = f"http://[::1]:{served.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.read().decode() == registry.render()


def test_methods_and_paths_other_than_get_of_the_metrics(registry: Registry) -> None:
    def status_and_headers(head: bytes) -> list[str]:
        return answer(head, registry).split(b"\r\n\r\n")[0].decode().split("\r\n")

    post = status_and_headers(b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert post[0] == "HTTP/1.1 405 Method Not Allowed" and "Allow: OPTIONS,GET" in post
    options = status_and_headers(b"OPTIONS /metrics HTTP/1.1\r\n\r\n")
    assert options[0] == "HTTP/1.1 200 OK" and "Allow: OPTIONS,GET" in options
    assert answer(b"GET /favicon.ico HTTP/1.1\r\n\r\n", registry).endswith(b"\r\n\r\n")
    assert status_and_headers(b"nonsense\r\n\r\n")[0] == "HTTP/1.1 400 Bad Request"
    reply = answer(b"GET /metrics HTTP/1.0\n\n", registry)
    body = registry.render().encode()
    assert reply.endswith(b"\r\n\r\n" + body)
    assert f"Content-Length: {len(body)}\r\n".encode() in reply


def test_a_connection_that_sends_nothing_is_closed_at_its_deadline(
    server: MetricsServer,
) -> None:
    with socket.create_connection(server.server_address[:2], timeout=5) as conn:
        assert _closed_within(conn, 5) < BUDGET + SLACK


def test_a_request_trickled_byte_by_byte_is_cut_at_the_deadline(server: MetricsServer) -> None:
    request = b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 100
    with socket.create_connection(server.server_address[:2], timeout=5) as conn:
        start = time.monotonic()
        with pytest.raises(OSError):  # reset or broken pipe once the server closed it
            for byte in request:
                conn.sendall(bytes([byte]))
                time.sleep(BUDGET / 10)  # each byte well within any per-read timeout
        assert time.monotonic() - start < BUDGET + SLACK
        assert _unanswered(conn)


def test_connections_beyond_the_limit_are_closed_unanswered(registry: Registry) -> None:
    for server in _serve(MetricsServer(registry, "127.0.0.1", 0, 30.0, max_connections=2)):
        address = server.server_address[:2]
        held = [socket.create_connection(address, timeout=5) for _ in range(2)]
        try:
            time.sleep(0.2)  # both taken by the server, each waiting on its thread
            with socket.create_connection(address, timeout=5) as extra:
                assert _unanswered(extra)
        finally:
            for conn in held:
                conn.close()
        deadline = time.monotonic() + 10  # their threads see the close and free their places
        while True:
            with socket.create_connection(address, timeout=5) as conn:
                conn.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                if not _unanswered(conn) or time.monotonic() > deadline:
                    break
            time.sleep(0.05)
        assert time.monotonic() <= deadline


def _unanswered(conn: socket.socket) -> bool:
    """Whether the server closed `conn` without a word."""
    try:
        return conn.recv(4096) == b""
    except ConnectionResetError:
        return True
