"""The local node's configuration and helpers that need no node (no root, no binaries)."""

from __future__ import annotations

import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from localcluster.driver import IPV6_TEST_RANGE, claim_address_ranges
from localcluster.examples import EXAMPLE_FILES, adapt, write_cni_examples
from localcluster.images import write_archive
from localcluster.layout import GATEWAY_IP, NODE_IP, POD_SUBNET, NodeLayout
from localcluster.namespaces import mount_script
from localcluster.nodeconfig import (
    KUBELET_SYSCTLS,
    SANDBOX_IMAGE,
    cni_network,
    containerd_config,
    kubelet_config,
)
from localcluster.podnet import parse_exec

LAY = NodeLayout("dratest-node-abc123", Path("/tmp/dratest-node-abc123"))


def test_containerd_config_is_toml_with_everything_under_the_workdir():
    config = tomllib.loads(containerd_config(LAY, Path("/opt/bin/runc")))
    assert config["version"] == 3
    assert config["imports"] == []
    for key in ("root", "state", "temp"):
        assert config[key].startswith(str(LAY.workdir)), key
    plugins = config["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == [str(LAY.cdi_dir)]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    options = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert options["BinaryName"] == "/opt/bin/runc"
    assert options["Root"].startswith(str(LAY.workdir))
    assert runtime["cni"]["conf_dir"] == str(LAY.cni_conf_dir)
    nri = plugins["io.containerd.nri.v1.nri"]
    # otherwise containerd's defaults
    assert nri == {"disable": False, "socket_path": str(LAY.nri_socket)}
    off = tomllib.loads(containerd_config(LAY, Path("/opt/bin/runc"), nri=False))
    assert off["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == SANDBOX_IMAGE
    assert plugins["io.containerd.internal.v1.opt"]["path"].startswith(str(LAY.workdir))


def test_cni_network_keeps_its_state_in_the_workdir():
    net = cni_network(LAY)
    [bridge] = net["plugins"]
    assert net["name"] == LAY.name
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["dataDir"].startswith(str(LAY.workdir))


def test_kubelet_config_isolates_the_node():
    ca, cert, key = Path("/ca"), Path("/c"), Path("/k")
    config = kubelet_config(
        LAY, client_ca=ca, serving_cert=cert, serving_key=key, feature_gates={"X": True}
    )
    assert config["cgroupRoot"] == f"/{LAY.name}"
    assert config["protectKernelDefaults"] is True
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/ca"
    assert config["authorization"]["mode"] == "Webhook"
    for key in ("podLogsDir", "volumePluginDir"):
        assert config[key].startswith(str(LAY.workdir)), key
    assert config["containerRuntimeEndpoint"] == f"unix://{LAY.containerd_socket}"


def test_the_mount_namespace_shadows_every_kernel_setting_the_kubelet_checks():
    script = mount_script(LAY)
    for key in KUBELET_SYSCTLS:
        assert f"/proc/sys/{key}\n" in script + "\n"
    for host_dir in ("/run", "/var/log", "/var/lib"):
        assert f" {host_dir}\n" in script + "\n"


def test_a_long_workdir_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="unix socket"):
        NodeLayout("n", Path("/tmp") / ("x" * 60))


def test_examples_swap_only_missing_kinds_for_veth():
    docs = [d for path in EXAMPLE_FILES for d in yaml.safe_load_all(path.read_text())]
    adapted, notes = adapt(docs, lambda kind: "no dummy here" if kind == "dummy" else None)
    kinds = {
        d["metadata"]["name"]: d["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        for d in adapted
        if d["kind"] == "ResourceClaimTemplate"
    }
    assert kinds["dummy-net1"]["netdev"]["kind"] == "veth"
    assert kinds["control-net"]["netdev"]["kind"] == "veth"
    assert kinds["macvlan-data0"]["netdev"]["kind"] == "macvlan"
    assert kinds["rdma-uverbs"]["type"] == "rdma"  # untouched
    assert len(notes) == 2 and all("no dummy here" in n for n in notes)
    # Everything but the kind is as in deploy/.
    assert kinds["dummy-net1"]["netdev"]["mtu"] == 9000


def test_a_stand_in_veth_drops_what_only_the_original_kind_has():
    docs = [d for d in yaml.safe_load_all(EXAMPLE_FILES[0].read_text()) if d]
    adapted, _ = adapt(docs, lambda kind: "no macvlan" if kind == "macvlan" else None)
    [mv] = [
        d
        for d in adapted
        if d["kind"] == "ResourceClaimTemplate" and d["metadata"]["name"] == "macvlan-data0"
    ]
    netdev = mv["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["netdev"]
    assert netdev == {
        "kind": "veth",
        "interfaceName": "data0",
        "mtu": 1400,
        "ipAddresses": ["198.51.100.10/24"],
    }


def test_cni_examples_leave_out_only_the_networks_the_kernel_cannot_make(tmp_path):
    lacks = {"ipvlan": "no ipvlan here", "vlan": "no vlan here"}
    examples = write_cni_examples(tmp_path, lacks.get)
    names = {(d["kind"], d["metadata"]["name"]) for d in examples.docs}
    for kept in ("macvlan-conf", "bridge-static", "tuned-limited"):
        assert {("NetworkAttachmentDefinition", kept), ("Pod", f"cni-{kept}")} <= names
    assert not [n for _, n in names if n.removeprefix("cni-") in ("ipvlan-conf", "vlan-conf")]
    assert examples.notes == [
        "ipvlan-conf: no ipvlan here, so its pod cni-ipvlan-conf is left out",
        "vlan-conf: no vlan here, so its pod cni-vlan-conf is left out",
    ]
    assert [d for d in yaml.safe_load_all(examples.files[0].read_text()) if d] == examples.docs


def test_exec_output_is_parsed_into_interfaces():
    text = (
        "link eth0 1500 02:00:00:00:00:01 up\n"
        "link lo 65536 00:00:00:00:00:00 unknown\n"
        "link net1 1400 02:00:00:00:00:02 up dra-driver claim=abc nic/dev\n"
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
        "3: net1    inet 198.51.100.10/24 brd 198.51.100.255 scope global net1\\  valid\n"
        "3: net1    inet6 fe80::1/64 scope link \\       valid_lft forever\n"
    )
    got = parse_exec(text)
    assert got["net1"].addresses == ("198.51.100.10/24",)
    assert got["net1"].alias == "dra-driver claim=abc nic/dev"
    assert got["net1"].mtu == 1400 and got["eth0"].addresses == ()


def test_image_archives_are_reproducible_oci_layouts(tmp_path):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        tar.addfile(info)
    a = write_archive(tmp_path / "a.tar", "example.test/x:1", layer.getvalue(), {"Cmd": ["x"]})
    b = write_archive(tmp_path / "b.tar", "example.test/x:1", layer.getvalue(), {"Cmd": ["x"]})
    assert a.manifest_digest == b.manifest_digest
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tar:
        index = json.loads(tar.extractfile("index.json").read())
        [entry] = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == "example.test/x:1"
        assert entry["digest"] == a.manifest_digest
        names = tar.getnames()
    assert "oci-layout" in names
    assert f"blobs/sha256/{a.manifest_digest.split(':')[1]}" in names


def test_the_kubelets_dra_histogram_is_read_as_a_difference_of_two_scrapes():
    from bench.node import histogram_delta, parse_histograms

    def scrape(fast: int, slow: int, total: float) -> str:
        method = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
        labels = f'driver_name="dra.example.com",grpc_status_code="OK",method_name="{method}"'
        other = 'driver_name="other.example.com",grpc_status_code="OK",method_name="x/Y"'
        return "\n".join(
            [
                "# TYPE dra_grpc_operations_duration_seconds histogram",
                f'dra_grpc_operations_duration_seconds_bucket{{{labels},le="0.1"}} {fast}',
                f'dra_grpc_operations_duration_seconds_bucket{{{labels},le="0.2"}} {fast + slow}',
                f'dra_grpc_operations_duration_seconds_bucket{{{labels},le="+Inf"}} {fast + slow}',
                f"dra_grpc_operations_duration_seconds_sum{{{labels}}} {total}",
                f"dra_grpc_operations_duration_seconds_count{{{labels}}} {fast + slow}",
                f"dra_grpc_operations_duration_seconds_count{{{other}}} 99",
            ]
        )

    before = parse_histograms(scrape(3, 0, 0.03))
    after = parse_histograms(scrape(12, 1, 0.25))
    assert set(after) == {"NodePrepareResources"}  # other drivers are not ours
    got = histogram_delta(before["NodePrepareResources"], after["NodePrepareResources"])
    assert got["n"] == 10
    assert round(got["mean_ms"], 6) == 22.0  # (0.25 - 0.03) / 10
    assert got["p50_at_most_ms"] == 100.0
    assert got["p99_at_most_ms"] == 200.0  # the slow one is in the second bucket
    assert got["smallest_bucket_ms"] == 100.0


def test_the_drivers_claim_address_ranges_hold_the_examples_and_not_the_node():
    """The driver gets the DaemonSet's ranges (deploy/driver.yaml) and the tests' IPv6
    range: every example address is inside, the node's own networks are not."""
    ranges = [ipaddress.ip_network(r) for r in claim_address_ranges().split(",")]
    assert ipaddress.ip_network(IPV6_TEST_RANGE) in ranges

    def inside(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(ip.version == r.version and ip in r for r in ranges)

    addresses = []
    for path in EXAMPLE_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ResourceClaimTemplate":
                for config in doc["spec"]["spec"]["devices"].get("config") or []:
                    params = config["opaque"]["parameters"]
                    for part in (params.get("netdev"), (params.get("combo") or {}).get("netdev")):
                        addresses += (part or {}).get("ipAddresses") or []
    assert addresses, "the examples set addresses"
    assert all(inside(ipaddress.ip_interface(a).ip) for a in addresses), addresses
    pods = ipaddress.ip_network(POD_SUBNET)
    for ip in (ipaddress.ip_address(NODE_IP), ipaddress.ip_address(GATEWAY_IP), *pods):
        assert not inside(ip), ip
