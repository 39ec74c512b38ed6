"""The driver's gRPC server (dradriver/kubelet/grpcserver.py) on a real unix socket, called
by grpcio's C-core client (the reference implementation) and by the driver's own client
(grpcclient.py): answers, statuses, deadlines, flow control, streams and stopping."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dradriver.kubelet import grpcclient
from dradriver.kubelet.grpcserver import Call, Method, Server
from dradriver.kubelet.grpcwire import RpcError, Status
from dradriver.kubelet.proto.registration_pb2 import PluginInfo

ECHO = "/test.Echo/Echo"


class Handlers:
    """Handlers whose behaviour each test picks through the request's fields."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)
        self.ended = threading.Event()
        self.remaining: list[float | None] = []
        self.active_after: list[bool] = []

    def echo(self, request: Any, call: Call) -> Any:
        self.remaining.append(call.time_remaining())
        if request.name == "abort":
            call.abort(Status.FAILED_PRECONDITION, "the claim is not ready: 100% ünready")
        if request.name == "raise":
            raise ValueError("a secret stack detail")
        if request.name == "big":
            return PluginInfo(name="x" * 1_000_000)
        if request.name == "hang":
            call.add_callback(self.ended.set)
            self.entered.release()
            self.release.wait(30)
            self.active_after.append(call.is_active())
        return PluginInfo(
            name=f"hello {request.name}", supported_versions=request.supported_versions
        )

    def stream(self, request: Any, call: Call) -> Iterator[Any]:
        call.add_callback(self.ended.set)
        n = 0
        while call.is_active():
            yield PluginInfo(name=str(n))
            n += 1
            if n == 3:
                self.entered.release()
            self.ended.wait(0.05)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Handlers, Server]]:
    handlers = Handlers()
    server = Server(
        {
            ECHO: Method(PluginInfo, handlers.echo),
            "/test.Echo/Stream": Method(PluginInfo, handlers.stream, streaming=True),
        },
        workers=4,
        name="test",
    )
    path = tmp_path / "s.sock"
    server.start(path)
    yield path, handlers, server
    handlers.release.set()
    server.stop(0)


def channel(path: Path) -> grpc.Channel:
    return grpc.insecure_channel(f"unix://{path}")


def echo(ch: grpc.Channel, timeout: float = 10, method: str = ECHO) -> Any:
    return ch.unary_unary(
        method,
        request_serializer=PluginInfo.SerializeToString,
        response_deserializer=PluginInfo.FromString,
    )


def test_a_call_is_answered_and_its_deadline_reaches_the_handler(served: Any) -> None:
    path, handlers, _ = served
    with channel(path) as ch:
        reply = echo(ch)(PluginInfo(name="kubelet", supported_versions=["v1"]), timeout=7)
        assert reply.name == "hello kubelet" and list(reply.supported_versions) == ["v1"]
        echo(ch)(PluginInfo(name="again"))  # no deadline
    first, second = handlers.remaining
    assert first is not None and 5 < first <= 7
    assert second is None
    ours = grpcclient.call(path, ECHO, PluginInfo(name="driver"), PluginInfo, 5)
    assert ours.name == "hello driver"


def test_statuses_reach_the_client_without_internals(served: Any) -> None:
    path, _, _ = served
    with channel(path) as ch:
        with pytest.raises(grpc.RpcError) as aborted:
            echo(ch)(PluginInfo(name="abort"), timeout=5)
        assert aborted.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert aborted.value.details() == "the claim is not ready: 100% ünready"
        with pytest.raises(grpc.RpcError) as failed:
            echo(ch)(PluginInfo(name="raise"), timeout=5)
        assert failed.value.code() == grpc.StatusCode.UNKNOWN
        assert failed.value.details() == f"{ECHO} failed: ValueError"
        with pytest.raises(grpc.RpcError) as unknown:
            echo(ch, method="/test.Echo/Nope")(PluginInfo(), timeout=5)
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "/test.Echo/Nope" in (unknown.value.details() or "")
        garbage = ch.unary_unary(ECHO, request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError) as undecodable:
            garbage(b"\xff\xff\xff", timeout=5)
        assert undecodable.value.code() == grpc.StatusCode.INTERNAL
    with pytest.raises(RpcError) as ours:
        grpcclient.call(path, ECHO, PluginInfo(name="abort"), PluginInfo, 5)
    assert ours.value.code == Status.FAILED_PRECONDITION
    assert ours.value.details == "the claim is not ready: 100% ünready"


def test_messages_beyond_the_window_and_the_limit(served: Any) -> None:
    path, _, _ = served
    with channel(path) as ch:
        assert echo(ch)(PluginInfo(name="big"), timeout=10).name == "x" * 1_000_000
        with pytest.raises(grpc.RpcError) as large:
            echo(ch)(PluginInfo(name="y" * 5_000_000), timeout=10)
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert echo(ch)(PluginInfo(name="after"), timeout=5).name == "hello after"
    big = grpcclient.call(path, ECHO, PluginInfo(name="big"), PluginInfo, 10)
    assert len(big.name) == 1_000_000


def test_calls_on_one_connection_run_at_once(served: Any) -> None:
    path, handlers, _ = served
    with channel(path) as ch:
        futures = [echo(ch).future(PluginInfo(name="hang"), timeout=20) for _ in range(3)]
        for _ in range(3):
            assert handlers.entered.acquire(timeout=10)
        quick = echo(ch)(PluginInfo(name="quick"), timeout=5)  # a worker is still free
        assert quick.name == "hello quick"
        handlers.release.set()
        assert [f.result(10).name for f in futures] == ["hello hang"] * 3
    assert handlers.active_after == [True] * 3


def test_a_stream_ends_when_its_client_cancels(served: Any) -> None:
    path, handlers, _ = served
    with channel(path) as ch:
        stream: Any = ch.unary_stream(
            "/test.Echo/Stream",
            request_serializer=PluginInfo.SerializeToString,
            response_deserializer=PluginInfo.FromString,
        )(PluginInfo(), timeout=20)
        assert [next(stream).name for _ in range(3)] == ["0", "1", "2"]
        stream.cancel()
        assert handlers.ended.wait(10)


def test_the_client_deadline_and_an_absent_socket(served: Any, tmp_path: Path) -> None:
    path, handlers, _ = served
    start = time.monotonic()
    with pytest.raises(RpcError) as late:
        grpcclient.call(path, ECHO, PluginInfo(name="hang"), PluginInfo, 0.5)
    assert late.value.code == Status.DEADLINE_EXCEEDED
    assert time.monotonic() - start < 5
    assert handlers.ended.wait(10)  # the server saw the connection go
    with pytest.raises(RpcError) as absent:
        grpcclient.call(tmp_path / "none.sock", ECHO, PluginInfo(), PluginInfo, 1)
    assert absent.value.code == Status.UNAVAILABLE


def test_stop_lets_running_calls_finish_within_the_grace(served: Any) -> None:
    path, handlers, server = served
    with channel(path) as ch:
        running = echo(ch).future(PluginInfo(name="hang"), timeout=20)
        assert handlers.entered.acquire(timeout=10)
        threading.Timer(0.3, handlers.release.set).start()
        server.stop(10)
        assert running.result(10).name == "hello hang"
    assert not path.exists() or not _connects(path)


def test_stop_ends_calls_still_running_after_the_grace(served: Any) -> None:
    path, handlers, server = served
    with channel(path) as ch:
        running = echo(ch).future(PluginInfo(name="hang"), timeout=20)
        assert handlers.entered.acquire(timeout=10)
        server.stop(0.2)
        assert handlers.ended.is_set()
        with pytest.raises(grpc.RpcError) as ended:
            running.result(10)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    handlers.release.set()


def _connects(path: Path) -> bool:
    try:
        grpcclient.call(path, ECHO, PluginInfo(), PluginInfo, 1)
    except RpcError as exc:
        return exc.code != Status.UNAVAILABLE
    return True
