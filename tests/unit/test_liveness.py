"""The liveness probe's answer (dradriver/kubelet/liveness.py): what the kubelet's HTTP
probe gets from the checker's last finding, and the checker against real gRPC servers on
unix sockets: a service that does not answer is dead unless it is busy with calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from dradriver.kubelet.liveness import CHECK_PERIOD, Finding, answer, check_sockets
from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from dradriver.kubelet.sockets import SocketPaths


def status_line(reply: bytes) -> str:
    return reply.split(b"\r\n", 1)[0].decode()


def body(reply: bytes) -> str:
    return reply.split(b"\r\n\r\n", 1)[1].decode()


def test_the_probe_passes_while_the_last_recent_check_did() -> None:
    assert status_line(answer(None, 100.0)) == "HTTP/1.1 200 OK"  # starting
    ok = Finding(True, "ok", 100.0)
    assert status_line(answer(ok, 101.0)) == "HTTP/1.1 200 OK"
    dead = Finding(False, "the service socket did not answer: UNAVAILABLE", 100.0)
    reply = answer(dead, 101.0)
    assert status_line(reply) == "HTTP/1.1 503 Service Unavailable"
    assert body(reply) == "the service socket did not answer: UNAVAILABLE\n"
    # A checker that stopped checking (its thread wedged) is not vouched for.
    stale = answer(ok, 100.0 + 10 * CHECK_PERIOD)
    assert status_line(stale) == "HTTP/1.1 503 Service Unavailable"
    assert body(stale) == "the checks have stopped\n"
    assert f"Content-Length: {len(body(reply))}".encode() in reply


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(name="dra.example.com")


class _Service(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self) -> None:
        self.hang = threading.Event()
        self.go = threading.Event()

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        if self.hang.is_set():
            self.go.wait(30)
        return dra_v1_pb2.NodePrepareResourcesResponse()


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[tuple[SocketPaths, _Service]]:
    paths = SocketPaths(tmp_path / "reg.sock", tmp_path / "dra.sock", tmp_path / "lock")
    service = _Service()
    servers = []
    for add, servicer, path in (
        (
            registration_pb2_grpc.add_RegistrationServicer_to_server,
            _Registration(),
            paths.registration,
        ),
        (dra_v1_pb2_grpc.add_DRAPluginServicer_to_server, service, paths.service),
    ):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        add(servicer, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        servers.append(server)
    yield paths, service
    service.go.set()
    for server in servers:
        server.stop(0)


def test_both_sockets_answering_is_alive(sockets: tuple[SocketPaths, _Service]) -> None:
    paths, _ = sockets
    finding = check_sockets(paths, busy=lambda: False, timeout=5)
    assert finding.alive and finding.reason == "ok"


def test_a_service_that_does_not_answer_is_alive_only_while_busy(
    sockets: tuple[SocketPaths, _Service],
) -> None:
    paths, service = sockets
    service.hang.set()
    busy = check_sockets(paths, busy=lambda: True, timeout=0.5)
    assert busy.alive and busy.reason.startswith("busy")
    idle = check_sockets(paths, busy=lambda: False, timeout=0.5)
    assert not idle.alive
    assert idle.reason == "the service socket did not answer: DEADLINE_EXCEEDED"


def test_a_missing_registration_socket_is_dead(sockets: tuple[SocketPaths, _Service]) -> None:
    paths, _ = sockets
    paths.registration.unlink()
    finding = check_sockets(paths, busy=lambda: True, timeout=2)
    assert not finding.alive
    assert finding.reason.startswith("the registration socket did not answer")
