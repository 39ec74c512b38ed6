import filecmp
import importlib.util
from pathlib import Path

from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    health_v1alpha1_pb2,
    registration_pb2,
)

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_not_stale(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "hack" / "gen_proto.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = gen.generate(tmp_path)
    assert fresh, "protoc produced nothing"
    committed = ROOT / "dradriver" / "kubelet" / "proto"
    stale = [p.name for p in fresh if not filecmp.cmp(p, committed / p.name, shallow=False)]
    assert not stale, f"run `make proto`: stale generated files {stale}"
    assert sorted(p.name for p in fresh) == sorted(
        p.name for p in committed.iterdir() if "_pb2" in p.name
    )


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
