import filecmp
import importlib.util
from pathlib import Path

from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1alpha1_pb2,
    registration_pb2,
)
from dradriver.nri.proto import api_pb2, ttrpc_pb2

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_not_stale(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "hack" / "gen_proto.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = gen.generate(tmp_path)
    assert fresh, "protoc produced nothing"
    assert set(gen.PROTO_DIRS) == {Path("dradriver/kubelet/proto"), Path("dradriver/nri/proto")}
    for proto_dir in gen.PROTO_DIRS:
        generated = [p.relative_to(tmp_path) for p in fresh if p.parent == tmp_path / proto_dir]
        assert generated, f"protoc produced nothing for {proto_dir}"
        stale = [
            str(p) for p in generated if not filecmp.cmp(tmp_path / p, ROOT / p, shallow=False)
        ]
        assert not stale, f"run `make proto`: stale generated files {stale}"
        committed = sorted(p.name for p in (ROOT / proto_dir).iterdir() if "_pb2" in p.name)
        assert sorted(p.name for p in generated) == committed, f"run `make proto` ({proto_dir})"


def test_services_have_the_method_paths_the_kubelet_calls():
    def methods(mod, service):
        svc = mod.DESCRIPTOR.services_by_name[service]
        return {f"/{svc.full_name}/{m.name}" for m in svc.methods}

    assert methods(registration_pb2, "Registration") == {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }
    assert methods(dra_v1_pb2, "DRAPlugin") == {
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    }
    assert methods(dra_v1beta1_pb2, "DRAPlugin") == {
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    }
    assert methods(health_v1alpha1_pb2, "DRAResourceHealth") == {
        "/v1alpha1.DRAResourceHealth/NodeWatchResources"
    }


def test_field_numbers_match_the_wire_facts():
    d = dra_v1_pb2.Device.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in d.items()} == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    h = health_v1alpha1_pb2.DeviceHealth.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in h.items()} == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }


def test_nri_services_have_the_names_containerd_calls():
    """NRI v0.11.0 (containerd v2.2.x), pkg/api/api_ttrpc.pb.go: service and method strings."""

    def methods(service):
        svc = api_pb2.DESCRIPTOR.services_by_name[service]
        return svc.full_name, {m.name for m in svc.methods}

    assert methods("Runtime") == ("nri.pkg.api.v1alpha1.Runtime", {"RegisterPlugin"})
    assert methods("Plugin") == (
        "nri.pkg.api.v1alpha1.Plugin",
        {"Configure", "Synchronize", "Shutdown", "StateChange", "CreateContainer"},
    )


def test_nri_field_numbers_and_event_values_match_upstream():
    """Field numbers and enum values of nri v0.11.0 pkg/api/api.proto and ttrpc v1.2.7."""

    def numbers(message):
        return {n: f.number for n, f in message.DESCRIPTOR.fields_by_name.items()}

    assert numbers(api_pb2.RegisterPluginRequest) == {"plugin_name": 1, "plugin_idx": 2}
    assert numbers(api_pb2.ConfigureRequest) == {
        "config": 1,
        "runtime_name": 2,
        "runtime_version": 3,
        "registration_timeout": 4,
        "request_timeout": 5,
    }
    assert numbers(api_pb2.ConfigureResponse) == {"events": 2}
    assert numbers(api_pb2.SynchronizeRequest) == {"pods": 1, "more": 3}
    assert numbers(api_pb2.SynchronizeResponse) == {"more": 2}
    assert numbers(api_pb2.StateChangeEvent) == {"event": 1, "pod": 2}
    assert numbers(api_pb2.PodSandbox) == {"id": 1, "name": 2, "uid": 3, "namespace": 4, "linux": 8}
    assert numbers(api_pb2.LinuxPodSandbox) == {"namespaces": 5}
    assert numbers(api_pb2.LinuxNamespace) == {"type": 1, "path": 2}
    assert numbers(api_pb2.CreateContainerRequest) == {"pod": 1, "container": 2}
    assert numbers(api_pb2.CreateContainerResponse) == {}
    assert numbers(api_pb2.Container) == {"id": 1, "pod_sandbox_id": 2, "name": 3, "env": 8}
    assert {v.name: v.number for v in api_pb2.Event.DESCRIPTOR.values} == {
        "UNKNOWN": 0,
        "RUN_POD_SANDBOX": 1,
        "STOP_POD_SANDBOX": 2,
        "REMOVE_POD_SANDBOX": 3,
        "CREATE_CONTAINER": 4,
        "POST_CREATE_CONTAINER": 5,
        "START_CONTAINER": 6,
        "POST_START_CONTAINER": 7,
        "UPDATE_CONTAINER": 8,
        "POST_UPDATE_CONTAINER": 9,
        "STOP_CONTAINER": 10,
        "REMOVE_CONTAINER": 11,
        "UPDATE_POD_SANDBOX": 12,
        "POST_UPDATE_POD_SANDBOX": 13,
        "VALIDATE_CONTAINER_ADJUSTMENT": 14,
        "LAST": 15,
    }
    assert numbers(ttrpc_pb2.Request) == {
        "service": 1,
        "method": 2,
        "payload": 3,
        "timeout_nano": 4,
        "metadata": 5,
    }
    assert numbers(ttrpc_pb2.Response) == {"status": 1, "payload": 2}
    assert numbers(ttrpc_pb2.Status) == {"code": 1, "message": 2}
