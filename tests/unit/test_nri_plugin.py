"""The plugin runtime against the NRI stand-in (tests/support/nriruntime.py), over real sockets."""

from __future__ import annotations

import logging
import queue
import random
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dradriver.base.errors import DeviceError
from dradriver.nri import Container, NriPlugin, PodSandbox
from dradriver.nri.plugin import Backoff
from dradriver.nri.proto import api_pb2
from tests.support.nriruntime import CallFailed, FakeRuntime, fake_runtime, pod
from tests.support.waiting import wait_for

RUN, STOP, REMOVE = api_pb2.RUN_POD_SANDBOX, api_pb2.STOP_POD_SANDBOX, api_pb2.REMOVE_POD_SANDBOX


class Recorder:
    """A SandboxHandler that records calls; can be told to raise or to hang per pod UID."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[str, object]] = queue.Queue()
        self.fail: dict[str, Exception] = {}
        self.hang: dict[str, threading.Event] = {}
        self.active: set[str] = set()
        self.overlaps: list[str] = []  # pods that had two calls running at once

    def _do(self, what: str, pod: PodSandbox) -> None:
        if pod.uid in self.active:
            self.overlaps.append(pod.uid)
        self.active.add(pod.uid)
        try:
            if pod.uid in self.hang:
                self.hang[pod.uid].wait(10)
            self.calls.put((what, pod))
            if pod.uid in self.fail:
                raise self.fail[pod.uid]
        finally:
            self.active.discard(pod.uid)

    def create_container(self, pod, container):
        self._do("create", pod)
        self.calls.put(("container", container))

    def synchronize(self, pods):
        self.calls.put(("sync", list(pods)))

    def run_pod_sandbox(self, pod):
        self._do("run", pod)

    def stop_pod_sandbox(self, pod):
        self._do("stop", pod)

    def remove_pod_sandbox(self, pod):
        self._do("remove", pod)

    def next(self, timeout: float = 5.0):
        return self.calls.get(timeout=timeout)


@pytest.fixture
def runtime():
    with fake_runtime() as rt:
        yield rt


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def plugin_factory(runtime, recorder) -> Iterator:
    started: list[NriPlugin] = []

    def make(**kwargs) -> NriPlugin:
        kwargs.setdefault("backoff_first", 0.05)
        kwargs.setdefault("backoff_max", 0.2)
        plugin = NriPlugin(kwargs.pop("socket", runtime.path), recorder, **kwargs)
        started.append(plugin)
        plugin.start()
        return plugin

    yield make
    for plugin in started:
        plugin.stop()
    assert not [t for t in threading.enumerate() if t.name == "nri"], "plugin thread left"


def connect(runtime, recorder, pods=()):
    """Accept the plugin, configure and synchronize it as the runtime does; return the conn."""
    conn = runtime.accept()
    assert conn.configure() == 0b1111
    conn.synchronize(list(pods))
    assert recorder.next()[0] == "sync"
    return conn


def test_registers_configures_and_synchronizes(runtime, recorder, plugin_factory):
    plugin = plugin_factory(name="dra-driver", index="10")
    conn = runtime.accept()
    assert (conn.registration.plugin_name, conn.registration.plugin_idx) == ("dra-driver", "10")
    assert not plugin.connected  # registered, but not configured and synchronized yet
    assert conn.configure() == 0b1111  # Run-, Stop-, RemovePodSandbox, CreateContainer
    pods = [pod("uid-a"), pod("uid-b", netns=""), pod("uid-c", netns="/run/netns/c")]
    conn.synchronize(pods, per_message=2)  # split in two, as the runtime does for big states
    what, got = recorder.next()
    assert what == "sync"
    assert got == [
        PodSandbox("sandbox-uid-a", "uid-a", "app", "default", "/var/run/netns/cni-1"),
        PodSandbox("sandbox-uid-b", "uid-b", "app", "default", ""),
        PodSandbox("sandbox-uid-c", "uid-c", "app", "default", "/run/netns/c"),
    ]
    assert plugin.wait_registered(30) and plugin.connected
    assert recorder.calls.empty()
    assert conn.violations == []


def test_each_pod_event_reaches_the_handler_in_order(runtime, recorder, plugin_factory):
    plugin_factory()
    conn = connect(runtime, recorder)
    for event in (RUN, STOP, REMOVE):
        assert conn.state_change(event, pod("uid-1"))
    assert [recorder.next()[0] for _ in range(3)] == ["run", "stop", "remove"]
    # Other container events are not subscribed; if one came anyway it is answered, not
    # handled.
    assert not conn.state_change(api_pb2.START_CONTAINER, pod("uid-1"))
    conn.call("StateChange", api_pb2.StateChangeEvent(event=api_pb2.START_CONTAINER))
    conn.call("Shutdown", api_pb2.Empty())
    assert recorder.calls.empty()
    assert conn.violations == []


def test_a_handler_error_fails_the_event_with_the_pod_named(
    runtime, recorder, plugin_factory, caplog
):
    plugin_factory()
    conn = connect(runtime, recorder)
    recorder.fail["uid-bad"] = DeviceError("interface eth9 not found on the host")
    with caplog.at_level(logging.ERROR, logger="dradriver.nri"), pytest.raises(CallFailed) as err:
        conn.state_change(RUN, pod("uid-bad", name="web"))
    assert err.value.code == 2  # UNKNOWN, what a Go plugin's plain error becomes
    assert err.value.message == (
        "dra-driver: RunPodSandbox of pod default/web (uid uid-bad): "
        "interface eth9 not found on the host"
    )
    failed = [r for r in caplog.records if r.getMessage() == "NRI event failed"]
    assert failed and failed[0].pod_uid == "uid-bad" and failed[0].event == "RunPodSandbox"
    # The connection is fine afterwards.
    assert conn.state_change(RUN, pod("uid-good"))
    assert [recorder.next()[1].uid for _ in range(2)] == ["uid-bad", "uid-good"]


def test_a_container_being_created_reaches_the_handler_with_its_environment(
    runtime, recorder, plugin_factory
):
    plugin_factory()
    conn = connect(runtime, recorder)
    env = ["PATH=/bin", "DRA_NETDEV=net1"]
    assert conn.create_container(pod("uid-1"), "app", env)
    assert recorder.next() == ("create", PodSandbox.from_proto(pod("uid-1")))
    assert recorder.next() == ("container", Container("ctr-app", "app", tuple(env)))
    # Refused: the runtime fails the container with the handler's message, naming both.
    recorder.fail["uid-2"] = DeviceError("claim default/c serves pod uid-1")
    with pytest.raises(CallFailed) as err:
        conn.create_container(pod("uid-2", name="web"), "side", [])
    assert err.value.message == (
        "dra-driver: CreateContainer of side of pod default/web (uid uid-2): "
        "claim default/c serves pod uid-1"
    )
    assert conn.violations == []


def test_a_hanging_handler_is_answered_in_time_and_blocks_only_its_pod(
    runtime, recorder, plugin_factory, caplog
):
    plugin_factory(event_timeout=0.3)
    conn = connect(runtime, recorder)
    release = recorder.hang["uid-slow"] = threading.Event()
    try:
        # The stand-in would drop the plugin after 2 s without an answer.
        with (
            caplog.at_level(logging.ERROR, logger="dradriver.nri"),
            pytest.raises(CallFailed) as err,
        ):
            conn.state_change(RUN, pod("uid-slow"), timeout=2.0)
        assert err.value.code == 4  # DEADLINE_EXCEEDED
        assert "RunPodSandbox of pod default/app (uid uid-slow) not handled within 0.30s" in (
            err.value.message
        )
        timed_out = [r for r in caplog.records if r.getMessage() == "NRI event timed out"]
        assert timed_out and timed_out[0].pod_uid == "uid-slow"
        # Another pod is served meanwhile, on the second handler thread.
        assert conn.state_change(RUN, pod("uid-other"))
        assert recorder.next() == ("run", PodSandbox.from_proto(pod("uid-other")))
        # The slow pod's teardown is answered at once (the runtime waits for no stuck
        # pod) but kept: it runs after the hanging call returns, never beside it.
        with pytest.raises(CallFailed) as err:
            conn.state_change(STOP, pod("uid-slow"), timeout=2.0)
        assert err.value.code == 14  # UNAVAILABLE
        assert err.value.message.endswith(
            "an earlier call for this pod is still running; it runs when that returns"
        )
        # A new RunPodSandbox of the busy pod is refused at once and never runs.
        with pytest.raises(CallFailed) as err:
            conn.state_change(RUN, pod("uid-slow"), timeout=2.0)
        assert err.value.message.endswith("an earlier call for this pod is still running")
        handler_threads = [t for t in threading.enumerate() if t.name.startswith("nri-handler")]
        assert len(handler_threads) == 2
    finally:
        release.set()
    assert [recorder.next()[0] for _ in range(2)] == ["run", "stop"]
    assert recorder.overlaps == []
    assert plugin_is_still_connected(conn, recorder)


def plugin_is_still_connected(conn, recorder) -> bool:
    conn.state_change(REMOVE, pod("uid-probe"))
    return recorder.next() == ("remove", PodSandbox.from_proto(pod("uid-probe")))


def test_the_runtimes_shorter_request_timeout_wins(runtime, recorder, plugin_factory):
    plugin_factory(event_timeout=30)
    conn = runtime.accept()
    conn.configure(request_timeout_ms=800)  # the plugin keeps 3/4 of it: 0.6 s
    conn.synchronize([])
    recorder.next()
    release = recorder.hang["uid-slow"] = threading.Event()
    try:
        # The request says the runtime waits 5 s; Configure said 0.8 s: the shorter wins.
        with pytest.raises(CallFailed) as err:
            conn.state_change(RUN, pod("uid-slow"), timeout=5.0)
        assert err.value.code == 4
        assert err.value.message.endswith("not handled within 0.60s")
    finally:
        release.set()


def test_a_failing_synchronize_is_an_error_and_the_plugin_retries(
    runtime, recorder, plugin_factory
):
    plugin = plugin_factory()
    conn = runtime.accept()
    conn.configure()
    original = recorder.synchronize
    recorder.synchronize = lambda pods: (_ for _ in ()).throw(RuntimeError("state unreadable"))
    with pytest.raises(CallFailed, match="synchronize: state unreadable"):
        conn.synchronize([pod("uid-a")])
    assert not plugin.connected
    conn.close()  # what the runtime does after a failed synchronize
    recorder.synchronize = original
    connect(runtime, recorder, [pod("uid-a")])
    assert plugin.wait_registered(30)


def test_reconnects_when_the_runtime_closes_the_connection(runtime, recorder, plugin_factory):
    plugin = plugin_factory()
    conn = connect(runtime, recorder)
    assert plugin.wait_registered(30)
    conn.close()
    wait_for("the plugin to notice", lambda: not plugin.connected)
    conn2 = connect(runtime, recorder, [pod("uid-a")])
    assert plugin.wait_registered(30)
    assert conn2.state_change(RUN, pod("uid-a"))
    assert recorder.next()[0] == "run"


def test_waits_for_a_runtime_that_is_not_there_yet(recorder, plugin_factory):
    path = Path("/tmp") / f"nri-absent-{random.randrange(1 << 30)}.sock"
    plugin = plugin_factory(socket=path)
    assert not plugin.wait_registered(0.3)
    late = FakeRuntime(path)
    try:
        connect(late, recorder)
        assert plugin.wait_registered(30)
    finally:
        late.close()


def test_a_refused_registration_is_retried(runtime, recorder, plugin_factory, caplog):
    runtime.refuse_registration = "plugin 10-dra-driver already registered"
    with caplog.at_level(logging.WARNING, logger="dradriver.nri"):
        plugin_factory()
        first = runtime.accept()
        wait_for("the refused plugin to disconnect", first.closed.is_set)
        runtime.refuse_registration = ""
        connect(runtime, recorder)
    refused = [r for r in caplog.records if r.getMessage() == "NRI registration failed"]
    assert refused and "already registered" in str(refused[0].error)
    ended = [r for r in caplog.records if r.getMessage() == "NRI connection ended, will reconnect"]
    assert ended[0].reason == (
        "registration failed: UNKNOWN: plugin 10-dra-driver already registered"
    )


def frame(conn_id: int, payload: bytes) -> bytes:
    return struct.pack(">II", conn_id, len(payload)) + payload


def test_malformed_input_gets_errors_not_hangs(runtime, recorder, plugin_factory):
    plugin = plugin_factory()
    conn = connect(runtime, recorder)
    # A request whose envelope is not a ttrpc Request, and one whose payload is garbage.
    resp = conn.request_raw(b"\xff\xff\xff")
    assert resp.status.code == 3 and "unmarshal request error" in resp.status.message

    class Garbage:
        def SerializeToString(self):
            return b"\x12\x7f"  # field 2 (pod) announcing 127 bytes that never come

    with pytest.raises(CallFailed) as err:
        conn.call("StateChange", Garbage())
    assert err.value.code == 3 and "StateChange: cannot parse request" in err.value.message
    # Frames for a connection nobody opened are dropped; the plugin carries on.
    conn.send_raw(frame(7, b"junk"))
    assert plugin_is_still_connected(conn, recorder)
    # A frame longer than NRI allows: the plugin drops the connection and reconnects.
    conn.send_raw(struct.pack(">II", 1, (4 << 20) + 11))
    wait_for("the plugin to drop the connection", conn.closed.is_set)
    conn2 = connect(runtime, recorder)
    assert plugin.wait_registered(30)
    # A frame cut short by the runtime going away: the plugin reconnects again.
    conn2.send_raw(struct.pack(">II", 1, 100) + b"only ten b")
    conn2.close()
    connect(runtime, recorder)
    assert plugin.wait_registered(30)


def test_an_internal_error_drops_the_connection_not_the_plugin(
    runtime, recorder, plugin_factory, monkeypatch
):
    from dradriver.nri import connection

    original = connection.Connection._route
    calls = {"n": 0}

    def route_once_broken(self, data):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        return original(self, data)

    monkeypatch.setattr(connection.Connection, "_route", route_once_broken)
    plugin = plugin_factory()
    first = runtime.accept()  # the plugin fails on the first bytes it reads back
    wait_for("the plugin to drop the connection", first.closed.is_set)
    connect(runtime, recorder)
    assert plugin.wait_registered(30)


def test_stop_disconnects_and_ends_the_thread(runtime, recorder):
    plugin = NriPlugin(runtime.path, recorder, backoff_first=0.05, backoff_max=0.2)
    plugin.start()
    conn = connect(runtime, recorder)
    assert plugin.wait_registered(30)
    plugin.stop()
    assert not plugin.connected
    wait_for("the runtime to see the plugin go", conn.closed.is_set)
    assert not [t for t in threading.enumerate() if t.name == "nri"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"index": "1"}, "index '1' must be two digits"),
        ({"index": "ab"}, "must be two digits"),
        ({"name": ""}, "name '' must be non-empty"),
        ({"event_timeout": 0}, "timeouts must be positive"),
        ({"socket": Path("/tmp/" + "x" * 120)}, "longer than 107 bytes"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(recorder, kwargs, message):
    socket = kwargs.pop("socket", Path("/tmp/nri.sock"))
    with pytest.raises(ValueError, match=message):
        NriPlugin(socket, recorder, **kwargs)


def test_backoff_grows_is_capped_jittered_and_resets():
    b = Backoff(0.5, 4.0, random.Random(1))
    delays = [b.next() for _ in range(8)]
    ceilings = [0.5, 1, 2, 4, 4, 4, 4, 4]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays[3:])) == 5  # jittered, not a fixed 4 s
    b.reset()
    assert b.next() <= 0.5
    with pytest.raises(ValueError):
        Backoff(0, 1)
