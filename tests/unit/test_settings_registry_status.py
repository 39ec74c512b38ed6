import argparse
import importlib
from pathlib import Path

import pytest

from dradriver import settings
from dradriver.apiserver import status
from dradriver.base.errors import ConfigError, RegistryError
from dradriver.contract.hookspecs import ClaimRef, hookimpl
from dradriver.contract.registry import HandlerRegistry
from dradriver.kubelet.sockets import socket_paths
from dradriver.settings import Settings
from dradriver.state.records import PREPARED, ClaimRecord, DeviceRecord


def _parse(argv, env, monkeypatch, run=True):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    parser = argparse.ArgumentParser()
    settings.add_flags(parser, run=run)
    return settings.from_args(parser.parse_args(argv))


def test_every_flag_comes_from_the_environment_too(monkeypatch):
    s = _parse(
        [],
        {
            "NODE_NAME": "n1",
            "POD_UID": "u1",
            "POD_NAME": "dra-driver-x7k2p",
            "POD_NAMESPACE": "dra-system",
            "KUBECONFIG": "/k",
            "DRA_DRIVER_NAME": "net.example.org",
            "DRA_CDI_DIR": "/c",
            "DRA_VIRTUAL_SLOTS": "4",
            "DRA_PARENT_INTERFACES": "eth1, ens*",
        },
        monkeypatch,
    )
    assert (s.node_name, s.pod_uid, s.kubeconfig, s.driver_name) == (
        "n1",
        "u1",
        "/k",
        "net.example.org",
    )
    assert (s.pod_name, s.pod_namespace) == ("dra-driver-x7k2p", "dra-system")
    assert s.virtual_slots == 4 and s.parent_interfaces == ("eth1", "ens*")
    assert str(s.state_dir) == "/c/net.example.org-state"


def test_flags_beat_environment_and_bad_values_are_refused(monkeypatch):
    assert _parse(["--node-name", "n2"], {"NODE_NAME": "n1"}, monkeypatch).node_name == "n2"
    with pytest.raises(SystemExit, match="DNS subdomain"):
        _parse(["--node-name", "n", "--driver-name", "Bad_Name"], {}, monkeypatch)
    with pytest.raises(SystemExit, match="virtual-slots"):
        _parse(["--node-name", "n", "--virtual-slots", "-1"], {}, monkeypatch)
    # The pod's name and namespace reach the Events API's URL.
    with pytest.raises(SystemExit, match="--pod-namespace must be a namespace name"):
        _parse(["--node-name", "n", "--pod-namespace", "../kube-system"], {}, monkeypatch)
    with pytest.raises(SystemExit, match="--pod-name must be a Kubernetes object name"):
        _parse(["--node-name", "n", "--pod-name", "a/b"], {}, monkeypatch)


class _Handler:
    type = "netdev"
    kinds = ("veth",)

    def schema(self, kind):
        return {}


class _Plugin:
    @hookimpl
    def dradriver_handlers(self):
        return [_Handler()]


def test_two_plugins_serving_one_kind_is_a_startup_error_naming_both():
    with pytest.raises(RegistryError, match="'netdev' and 'thirdparty' both serve"):
        HandlerRegistry(
            {
                "netdev": importlib.import_module("dradriver.handlers.netdev"),
                "thirdparty": _Plugin(),
            },
            entry_points=False,
        )


def test_unknown_kind_lists_available():
    reg = HandlerRegistry({"x": _Plugin()}, entry_points=False)
    with pytest.raises(ConfigError, match="available: netdev/veth"):
        reg.get("netdev", "tap")


def test_status_body_reports_ready_and_network_data():
    record = ClaimRecord(
        ClaimRef("ns", "c", "uid"),
        PREPARED,
        devices=[
            DeviceRecord(
                key="k",
                request="nic",
                pool="node-a",
                device="netdev-virtual",
                share_id="s1",
                type="netdev",
                kind="veth",
                undo={},
                network_data={
                    "interfaceName": "net1",
                    "ips": ["10.0.0.2/24"],
                    "hardwareAddress": "02:00:00:00:00:01",
                },
            )
        ],
    )
    body = status.status_body(record, "dra.example.com", "node-a", 0)
    [entry] = body["status"]["devices"]
    assert entry["shareID"] == "s1" and entry["pool"] == "node-a"
    assert entry["conditions"][0]["type"] == "Ready"
    assert entry["conditions"][0]["lastTransitionTime"] == "1970-01-01T00:00:00Z"
    assert entry["networkData"] == {
        "interfaceName": "net1",
        "ips": ["10.0.0.2/24"],
        "hardwareAddress": "02:00:00:00:00:01",
    }


def test_socket_names_per_pod_uid_and_shortened_when_too_long(tmp_path):
    plain = socket_paths(Settings(node_name="n"))
    assert str(plain.registration) == "/var/lib/kubelet/plugins_registry/dra.example.com-reg.sock"
    assert str(plain.service) == "/var/lib/kubelet/plugins/dra.example.com/dra.sock"
    assert str(plain.lock) == "/var/lib/kubelet/plugins/dra.example.com/serialize.lock"
    uid = "0b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e"
    rolled = socket_paths(Settings(node_name="n", pod_uid=uid))
    assert rolled.registration.name == f"dra.example.com-{uid}-reg.sock"
    assert rolled.service.name == f"dra-{uid}.sock"
    deep = Path("/" + "d" * 70)
    short = socket_paths(
        Settings(node_name="n", pod_uid=uid, kubelet_registry_dir=deep, kubelet_plugins_dir=deep)
    )
    assert len(str(short.registration)) <= 105 and short.registration.name.endswith("-reg.sock")
    assert len(str(short.service)) <= 105
    other = socket_paths(
        Settings(
            node_name="n", pod_uid=uid[::-1], kubelet_registry_dir=deep, kubelet_plugins_dir=deep
        )
    )
    assert other.registration != short.registration


def test_api_errors_from_non_json_bodies_are_api_errors():
    import http.server
    import threading

    from dradriver.apiserver.kubeapi import ApiError, KubeApi
    from dradriver.apiserver.kubeconfig import ApiConfig

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html>bad gateway</html>" if "bad" in self.path else b"not json"
            if "deep" in self.path:  # valid JSON, deeper than Python's decoder goes
                body = b'{"spec": ' + b"[" * 5000 + b"]" * 5000 + b"}"
            self.send_response(502 if "bad" in self.path else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    api = KubeApi(config=ApiConfig(f"http://127.0.0.1:{server.server_address[1]}"))
    try:
        with pytest.raises(ApiError, match="502 Bad Gateway: <html>bad gateway</html>"):
            api.get_node("bad")
        with pytest.raises(ApiError, match="not JSON"):
            api.get_node("good")
        with pytest.raises(ApiError, match="nested too deeply"):
            api.get_node("deep")
    finally:
        server.shutdown()
        server.server_close()


def test_claim_address_ranges_from_flag_or_environment_and_checked(monkeypatch):
    env = {"DRA_CLAIM_ADDRESS_RANGES": "192.0.2.0/24, 2001:db8::/32"}
    s = _parse(["--node-name", "n"], env, monkeypatch)
    assert s.claim_address_ranges == ("192.0.2.0/24", "2001:db8::/32")
    assert _parse(["--node-name", "n"], {}, monkeypatch).claim_address_ranges == (
        "192.0.2.0/24",
        "2001:db8::/32",
    )
    monkeypatch.delenv("DRA_CLAIM_ADDRESS_RANGES")
    assert _parse(["--node-name", "n"], {}, monkeypatch).claim_address_ranges == ()
    with pytest.raises(SystemExit, match=r"did you mean 192\.0\.2\.0/24"):
        _parse(["--node-name", "n", "--claim-address-ranges", "192.0.2.1/24"], {}, monkeypatch)
    with pytest.raises(SystemExit, match="--claim-address-ranges: 'eth0'"):
        _parse(["--node-name", "n", "--claim-address-ranges", "eth0"], {}, monkeypatch)
    with pytest.raises(SystemExit, match="--node-name must be a Kubernetes node name"):
        _parse(["--node-name", "../n"], {}, monkeypatch)


def test_macvlan_global_macs_from_flag_or_environment_and_checked(monkeypatch):
    env = {"DRA_MACVLAN_GLOBAL_MACS": "00:1B:21:AA:BB:CC, 00:50:56:00:00:01"}
    s = _parse(["--node-name", "n"], env, monkeypatch)
    assert s.macvlan_global_macs == ("00:1b:21:aa:bb:cc", "00:50:56:00:00:01")
    monkeypatch.delenv("DRA_MACVLAN_GLOBAL_MACS")
    assert _parse(["--node-name", "n"], {}, monkeypatch).macvlan_global_macs == ()
    with pytest.raises(SystemExit, match="--macvlan-global-macs: '01:00:5e:00:00:01' is not a"):
        _parse(["--node-name", "n", "--macvlan-global-macs", "01:00:5e:00:00:01"], {}, monkeypatch)


def test_claim_names_are_checked_and_escaped_before_any_request():
    from dradriver.apiserver.kubeapi import ApiError, KubeApi, segment
    from dradriver.apiserver.kubeconfig import ApiConfig
    from dradriver.daemon import context_of

    api = KubeApi(config=ApiConfig("http://127.0.0.1:9"))  # nothing listens: no request made
    for namespace, name in (("..", "c"), ("default", ".."), ("default", "a/b"), ("a/b", "c")):
        with pytest.raises(ApiError, match="is not a Kubernetes") as err:
            api.get_claim(namespace, name)
        assert err.value.reason == "Invalid"
    assert segment("a/b?c#d%") == "a%2Fb%3Fc%23d%25"
    # The API server's address, when the URL holds one, is protected from claims.
    ctx = context_of(Settings(node_name="n"), "https://[fd00::1]:6443")
    assert [a for a, _ in ctx.protected_addresses] == ["fd00::1"]
    assert context_of(Settings(node_name="n"), "https://api.example.com").protected_addresses == ()


def test_device_taint_effect_is_one_of_the_apis_or_none(monkeypatch):
    assert _parse(["--node-name", "n"], {}, monkeypatch).device_taint_effect == "NoSchedule"
    s = _parse(["--node-name", "n"], {"DRA_DEVICE_TAINT_EFFECT": "NoExecute"}, monkeypatch)
    assert s.device_taint_effect == "NoExecute"
    monkeypatch.delenv("DRA_DEVICE_TAINT_EFFECT")
    assert _parse(["--node-name", "n", "--device-taint-effect", "Off"], {}, monkeypatch)
    assert (
        _parse(
            ["--node-name", "n", "--device-taint-effect", "Off"], {}, monkeypatch
        ).device_taint_effect
        is None
    )
    with pytest.raises(SystemExit, match="--device-taint-effect must be NoSchedule"):
        _parse(["--node-name", "n", "--device-taint-effect", "noschedule"], {}, monkeypatch)


def test_claim_prefetch_is_off_read_or_prepare(monkeypatch):
    assert _parse(["--node-name", "n"], {}, monkeypatch).claim_prefetch == "prepare"
    for value in ("off", "read"):
        s = _parse(["--node-name", "n"], {"DRA_CLAIM_PREFETCH": value}, monkeypatch)
        assert s.claim_prefetch == value
    on = _parse(["--node-name", "n"], {"DRA_CLAIM_PREFETCH": "on"}, monkeypatch)
    assert on.claim_prefetch == "read"  # what earlier manifests set
    with pytest.raises(SystemExit, match="--claim-prefetch must be off, read or prepare, got 'no'"):
        _parse(["--node-name", "n", "--claim-prefetch", "no"], {}, monkeypatch)
