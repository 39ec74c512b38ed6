"""The liveness probe of the real daemon (--healthcheck-port), as the kubelet's HTTP probe
meets it in the node's network namespace: on the loopback only, and answered while
thousands of idle connections are opened to it."""

from __future__ import annotations

import resource
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support import netns

PORT = 51599
FLOOD = 2000


def probe(timeout: float = 5) -> str:
    """The status line the kubelet's probe gets (its timeoutSeconds: 5 in the chart)."""
    with socket.create_connection(("127.0.0.1", PORT), timeout=timeout) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


@pytest.fixture
def many_files() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, FLOOD + 1024)), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_probe_is_on_the_loopback_only(start_driver, ns):
    netns.ip(ns, "link", "add", "lv0", "type", "veth", "peer", "name", "lv1")
    netns.ip(ns, "addr", "add", "192.0.2.1/24", "dev", "lv0")
    netns.ip(ns, "link", "set", "lv0", "up")
    netns.ip(ns, "link", "set", "lv1", "up")
    d = start_driver("--healthcheck-port", str(PORT))
    with netns.inside(ns):
        assert probe() == "HTTP/1.1 200 OK", d.log()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("192.0.2.1", PORT), timeout=5).close()
        with socket.create_connection(("127.0.0.1", PORT), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 404 Not Found")


def test_a_flood_of_idle_connections_does_not_starve_the_probe(start_driver, ns, many_files):
    d = start_driver("--healthcheck-port", str(PORT))
    held: list[socket.socket] = []
    errors: list[str] = []

    def flood() -> None:
        with netns.inside(ns):
            for _ in range(FLOOD):
                try:
                    held.append(socket.create_connection(("127.0.0.1", PORT), timeout=10))
                except OSError as exc:
                    errors.append(str(exc))

    flooder = threading.Thread(target=flood)
    try:
        with netns.inside(ns):
            assert probe() == "HTTP/1.1 200 OK", d.log()
            flooder.start()
            during = []
            while flooder.is_alive() or len(during) < 5:
                during.append(probe())
            flooder.join()
            after = [probe() for _ in range(5)]
        assert set(during) == set(after) == {"HTTP/1.1 200 OK"}, d.log()
        assert len(held) + len(errors) == FLOOD
        assert d.proc is not None and d.proc.poll() is None
    finally:
        flooder.join(60)
        for s in held:
            s.close()
