"""Registration, sockets, signals and the health services of the real daemon."""

import signal
import socket

import grpc
import pytest

from dradriver.kubelet.proto import dra_v1_pb2, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc
from dradriver.kubelet.proto import health_v1_pb2 as health_pb2
from dradriver.kubelet.proto import health_v1_pb2_grpc as health_pb2_grpc
from dradriver.kubelet.readiness import container_mark
from tests.support.waiting import wait_for

pytestmark = pytest.mark.root


def _stale_socket(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the file stays behind, like after a crash


def test_get_info_answers_what_the_kubelet_validates(start_driver):
    d = start_driver()
    info = d.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == "dra.example.com"
    assert info.endpoint == str(d.service_socket) and info.endpoint.startswith("/")
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1alpha1.DRAResourceHealth",
    ]


def test_registration_socket_appears_only_when_service_is_serving(start_driver):
    d = start_driver(wait=False)
    wait_for("the registration socket", d.reg_socket.exists, 30, interval=0.002, log=d.log)
    # The kubelet calls the service right after GetInfo: it must answer at once.
    with grpc.insecure_channel(f"unix://{d.service_socket}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"),
            timeout=5,
        )
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stale_sockets_replaced_and_ours_removed_on_signal(start_driver, droot, sig):
    reg = droot / "registry" / "dra.example.com-reg.sock"
    svc = droot / "plugins" / "dra.example.com" / "dra.sock"
    _stale_socket(reg)
    _stale_socket(svc)
    d = start_driver()
    assert d.get_info().name == "dra.example.com"
    assert "removed stale socket" in d.log()
    assert d.stop(sig) == 0
    assert not reg.exists() and not svc.exists()


def test_refused_registration_is_logged_as_error_with_kubelet_message(start_driver):
    d = start_driver()
    d.notify(False, "plugin version v9 not supported")
    wait_for("the refusal in the log", lambda: "kubelet refused the registration" in d.log())
    line = next(ln for ln in d.log().splitlines() if "kubelet refused" in ln)
    assert "level=error" in line and 'error="plugin version v9 not supported"' in line


def test_health_stream_reports_published_devices(start_driver):
    d = start_driver()
    with grpc.insecure_channel(f"unix://{d.service_socket}") as ch:
        stream = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
            health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=10
        )
        first = next(stream)
        stream.cancel()
    devices = {(h.device.pool_name, h.device.device_name): h.health for h in first.devices}
    assert devices == {("node-a", "netdev-virtual"): health_v1alpha1_pb2.HEALTHY}


def test_empty_prepare_answers_empty(start_driver):
    d = start_driver()
    assert d.prepare([]) == dra_v1_pb2.NodePrepareResourcesResponse()


def test_the_ready_file_exists_only_while_registered_with_the_kubelet(start_driver, droot):
    ready = droot / "ready"
    ready.write_text("left by a previous container of the pod")
    d = start_driver("--ready-file", str(ready))
    assert not ready.exists()  # removed at start, not created before the kubelet says so
    d.notify(True)
    wait_for("the ready file", ready.exists, log=d.log)
    # With this container's mark, which the chart's probe compares (the driver and the
    # test share a PID namespace, so its first process).
    wait_for("the mark in the ready file", lambda: ready.read_text() == container_mark())
    assert ready.read_text().isdigit()
    assert d.stop(signal.SIGTERM) == 0
    assert not ready.exists()
