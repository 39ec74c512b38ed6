"""The kubelet's services start before the driver (dradriver/kubelet/server.py): GetInfo
and the registration are answered at once; a prepare that comes before the driver is
attached waits within its budget and is told the driver is still starting; once it is
attached calls reach it, and a registration that came first is handed on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from dradriver.claims.outcome import Outcome
from dradriver.contract.hookspecs import ClaimRef
from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from dradriver.kubelet.server import STARTING, KubeletServer
from dradriver.kubelet.sockets import SocketPaths

DRIVER = "dra.example.com"
UID = "5a0c6f5e-0000-4000-8000-000000000001"


class _Gate:
    def busy(self) -> bool:
        return False


class _Preparer:
    """Answers every claim with no devices, recording the calls."""

    metrics = None
    gate = _Gate()

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def prepare(self, refs: Sequence[ClaimRef], budget: float) -> dict[str, Outcome]:
        self.calls.append(("prepare", [r.uid for r in refs]))
        return {r.uid: Outcome([]) for r in refs}

    def unprepare(self, refs: Sequence[ClaimRef], budget: float) -> dict[str, Outcome]:
        self.calls.append(("unprepare", [r.uid for r in refs]))
        return {r.uid: Outcome([]) for r in refs}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KubeletServer]:
    paths = SocketPaths(tmp_path / "reg.sock", tmp_path / "dra.sock", tmp_path / "lock")
    started = KubeletServer(paths, DRIVER, "node-a", budget_cap=0.3)
    started.start()
    yield started
    started.stop(grace=0)


def _prepare(server: KubeletServer) -> dra_v1_pb2.NodePrepareResourcesResponse:
    claim = dra_v1_pb2.Claim(namespace="default", name="c", uid=UID)
    with grpc.insecure_channel(f"unix://{server.paths.service}") as ch:
        return dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=10
        )


def test_registration_is_answered_before_the_driver_is_attached(server):
    with grpc.insecure_channel(f"unix://{server.paths.registration}") as ch:
        stub = registration_pb2_grpc.RegistrationStub(ch)
        info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=5)
        stub.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert (info.name, info.endpoint) == (DRIVER, str(server.paths.service))
    registered = threading.Event()
    server.attach(_Preparer(), list, registered.set)
    assert registered.is_set()  # the registration that came first is handed on


def test_a_call_before_the_driver_is_attached_waits_within_its_budget(server):
    start = time.monotonic()
    resp = _prepare(server)
    assert resp.claims[UID].error == STARTING
    assert 0.25 <= time.monotonic() - start < 5  # the budget (0.3 s), not the deadline
    preparer = _Preparer()
    late = threading.Timer(0.1, server.attach, (preparer, list))
    late.start()
    resp = _prepare(server)  # waits for the attach, then reaches the preparer
    late.join()
    assert resp.claims[UID].error == ""
    assert preparer.calls == [("prepare", [UID])]
