"""The NRI plugin runtime against a real containerd (>= 2.0; the team pins v2.2.9).

Set DRA_CONTAINERD_BIN to a containerd binary (hack/node builds one). Each test starts
it as root with every path in a temporary directory and NRI on a socket of its own
there. The first needs no pods: NRI starts with containerd's CRI service. The second
creates real pod sandboxes through the CRI; it also needs containerd-shim-runc-v2, runc
(built with seccomp), ctr and a static `pause` beside the containerd binary, as
hack/node puts them, and Debian's CNI plugins in /usr/lib/cni. containerd runs in a
throw-away network namespace there, so the pods' bridge stays out of the host's.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dradriver.nri import NriPlugin, PodSandbox
from tests.support import containerd as containerd_support
from tests.support import cripods
from tests.support.waiting import wait_for

pytestmark = pytest.mark.root
BIN = containerd_support.BIN


def _skip_reason() -> str | None:
    if not BIN:
        return "DRA_CONTAINERD_BIN is not set: point it at a containerd >= 2.0 binary"
    if not os.access(BIN, os.X_OK):
        return f"DRA_CONTAINERD_BIN={BIN} is not an executable file"
    return None


if _skip_reason():
    pytestmark = [pytestmark, pytest.mark.skip(reason=_skip_reason() or "")]


@pytest.fixture
def containerd() -> Iterator[containerd_support.Containerd]:
    """containerd with NRI, serving no pods."""
    yield from containerd_support.running_containerd()


@pytest.fixture
def pod_runtime(ns: str) -> Iterator[containerd_support.Containerd]:
    """containerd able to run pod sandboxes, inside the throw-away namespace `ns`."""
    reason = containerd_support.pods_skip_reason()
    if reason:
        pytest.skip(reason)
    yield from containerd_support.running_containerd(ns)


class Pods:
    """A SandboxHandler that queues what it is called with."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[str, object]] = queue.Queue()

    def synchronize(self, pods):
        self.calls.put(("sync", list(pods)))

    def run_pod_sandbox(self, pod):
        self.calls.put(("run", pod))

    def stop_pod_sandbox(self, pod):
        self.calls.put(("stop", pod))

    def remove_pod_sandbox(self, pod):
        self.calls.put(("remove", pod))


def test_registers_is_configured_synchronizes_and_survives_restarts(containerd, caplog):
    caplog.set_level(logging.INFO, logger="dradriver.nri")
    containerd.start()
    pods = Pods()
    plugin = NriPlugin(containerd.nri_socket, pods, name="dra-driver", index="10", backoff_max=1.0)
    plugin.start()
    try:
        assert plugin.wait_registered(20), containerd.log()
        assert pods.calls.get(timeout=1) == ("sync", [])  # a runtime without pods
        wait_for(
            "containerd to list the plugin",
            lambda: (
                f'plugin "external:10-dra-driver[{os.getpid()}]" registered as "10-dra-driver"'
                in containerd.log()
                and 'plugin "10-dra-driver" connected and synchronized' in containerd.log()
            ),
            timeout=10,
            log=containerd.log,
        )
        configured = [r for r in caplog.records if r.getMessage() == "configured by the runtime"]
        assert configured[0].runtime == "containerd"
        assert configured[0].request_timeout == 2.0  # NRI's default plugin_request_timeout

        # containerd goes away (it says nothing to its plugins) and comes back.
        containerd.stop()
        wait_for("the plugin to notice", lambda: not plugin.connected)
        containerd.start()
        assert plugin.wait_registered(20), containerd.log()
        assert pods.calls.get(timeout=1) == ("sync", [])
        wait_for(
            "containerd to list the plugin again",
            lambda: (
                containerd.log().count('plugin "10-dra-driver" connected and synchronized') == 2
            ),
            timeout=10,
            log=containerd.log,
        )
    finally:
        plugin.stop()
    # A clean stop: the runtime sees the connection close and drops the plugin.
    wait_for(
        "containerd to drop the plugin",
        lambda: 'connection to plugin "10-dra-driver" closed' in containerd.log(),
        log=containerd.log,
    )
    assert not plugin.connected
    assert pods.calls.empty()
    # What nri's adaptation logs when it gives up on a plugin (pkg/adaptation).
    for failure in (
        "failed to create external plugin",
        "failed to start external plugin",
        "failed to synchronize plugin",
        "closing plugin",
    ):
        assert failure not in containerd.log()


class Recorder(Pods):
    """Pods, also noting whether the pod's netns existed when the call came."""

    def __init__(self, fail_uid: str = "", hang_uid: str = "", hang: float = 0.0) -> None:
        super().__init__()
        self.fail_uid, self.hang_uid, self.hang = fail_uid, hang_uid, hang

    def run_pod_sandbox(self, pod):
        self.calls.put(("run", pod, bool(pod.netns) and Path(pod.netns).exists()))
        if pod.uid == self.fail_uid:
            raise RuntimeError("no interface for this pod")
        if pod.uid == self.hang_uid:
            threading.Event().wait(self.hang)

    def stop_pod_sandbox(self, pod):
        self.calls.put(("stop", pod, bool(pod.netns) and Path(pod.netns).exists()))


def test_real_pod_sandboxes_reach_the_handler(pod_runtime, ns):
    """RunPodSandbox, StopPodSandbox, RemovePodSandbox through containerd's CRI."""
    rt = pod_runtime
    rt.start()
    rt.import_pause_image()
    pods = Recorder(fail_uid="uid-fails", hang_uid="uid-hangs", hang=1.5)
    plugin = NriPlugin(rt.nri_socket, pods, event_timeout=0.5, backoff_max=1.0)
    plugin.start()
    cri = cripods.Cri(rt.socket)
    created: list[str] = []
    cgroup = rt.root.name  # the pods' cgroup parent: this test's own, removed at the end
    try:
        assert plugin.wait_registered(20), rt.log()
        assert pods.calls.get(timeout=1) == ("sync", [])

        def config(name: str, uid: str, host: bool = False) -> bytes:
            logs = rt.root / "logs" / uid
            return cripods.sandbox_config(name, uid, "default", logs, cgroup, host)

        # A pod with its own network namespace: the handler sees its path, existing,
        # at run and stop (CNI set up, not yet torn down); at remove there is none.
        sid = cri.run(config("web", "uid-web"))
        created.append(sid)
        what, pod, existed = pods.calls.get(timeout=5)
        assert (what, pod.id, pod.uid, pod.name, pod.namespace) == (
            "run",
            sid,
            "uid-web",
            "web",
            "default",
        )
        assert existed
        assert re.fullmatch(rf"{rt.root}/state/.*/netns/cni-[0-9a-f-]+", pod.netns)
        cri.stop(sid)
        assert pods.calls.get(timeout=5) == ("stop", pod, True)
        cri.remove(sid)
        created.remove(sid)
        assert pods.calls.get(timeout=5) == (
            "remove",
            PodSandbox(sid, "uid-web", "web", "default", ""),
        )

        # A host-network pod has no netns of its own.
        sid = cri.run(config("host", "uid-host", host=True))
        created.append(sid)
        assert pods.calls.get(timeout=5)[1:] == (
            PodSandbox(sid, "uid-host", "host", "default", ""),
            False,
        )
        cri.stop(sid)
        cri.remove(sid)
        created.remove(sid)
        assert [pods.calls.get(timeout=5)[0] for _ in range(2)] == ["stop", "remove"]

        # A handler that raises fails the sandbox, with our message; containerd then
        # stops and removes it, and keeps the plugin.
        with pytest.raises(grpc.RpcError) as err:
            cri.run(config("broken", "uid-fails"))
        assert "NRI RunPodSandbox failed" in err.value.details()
        assert (
            "dra-driver: RunPodSandbox of pod default/broken (uid uid-fails): "
            "no interface for this pod" in err.value.details()
        )
        assert [pods.calls.get(timeout=5)[0] for _ in range(3)] == ["run", "stop", "remove"]
        assert plugin.connected

        # A handler that hangs: the sandbox fails with our time-out, not containerd's
        # (which would drop the plugin); the pod's teardown runs once the handler returns.
        with pytest.raises(grpc.RpcError) as err:
            cri.run(config("slow", "uid-hangs"))
        assert "not handled within 0.50s" in err.value.details()
        assert [pods.calls.get(timeout=5)[0] for _ in range(3)] == ["run", "stop", "remove"]
        assert plugin.connected
        assert "closing plugin" not in rt.log()
    finally:
        for sid in created:
            try:
                cri.stop(sid)
                cri.remove(sid)
            except grpc.RpcError:
                pass
        cri.close()
        plugin.stop()
        rt.stop()
        cripods.remove_cgroup(cgroup)
