"""Prometheus metrics of the running daemon, and the CLI subcommands."""

import json
import subprocess
import sys
import urllib.request

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.integration.helpers import answer, veth_claim
from tests.support import netns
from tests.support.fakesys import FakeSys

CLI = [sys.executable, "-m", "dradriver"]


def _run(*args, stdin=None):
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, check=False)


@pytest.mark.root
@pytest.mark.kind("veth")
def test_metrics_count_prepares_and_prepared_claims(api, start_driver):
    fake, _ = api
    d = start_driver("--metrics-addr", "127.0.0.1:9464")
    claim = veth_claim()
    fake.add_claim(claim)
    assert answer(d.prepare([claim]), claim).error == ""
    with netns.inside(d.ns):
        text = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read().decode()
    assert 'dra_driver_operations_total{operation="prepare",result="success"} 1.0' in text
    assert "dra_driver_prepared_claims 1.0" in text
    assert 'dra_driver_operation_seconds_count{operation="prepare"} 1.0' in text
    assert 'dra_driver_kubelet_call_seconds_count{method="NodePrepareResources"} 1.0' in text
    # auto, and no NRI runtime in this namespace: CDI netDevices, and the metric says so
    assert 'dra_driver_injection_mode{mode="cdi"} 1.0' in text
    assert 'dra_driver_injection_mode{mode="nri"} 0.0' in text
    phases = {
        line.split('phase="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('dra_driver_kubelet_call_phase_seconds_total{method="NodePrepare')
    }
    # A new claim is fetched, planned, made in the kernel, and its spec and record written.
    assert {"fetch", "plan", "kernel", "specs", "commit"} <= set(phases)
    assert all(seconds > 0 for seconds in phases.values())
    d.unprepare([claim])


def test_schema_command_prints_a_valid_schema():
    out = _run("schema")
    assert out.returncode == 0
    Draft202012Validator.check_schema(json.loads(out.stdout))


def test_handlers_command_lists_every_kind_and_plugin():
    out = _run("handlers").stdout.split()
    for pair in (
        "netdev/veth",
        "netdev/macvlan",
        "netdev/ipvlan",
        "netdev/dummy",
        "netdev/host-device",
        "netdev/sriov-vf",
        "netdev/ipoib",
        "rdma/uverbs",
        "combo/roce",
    ):
        assert pair in out


def test_discover_publishes_the_operators_multus_resource_name_on_pci_netdevs(tmp_path):
    fs = FakeSys(tmp_path)
    fs.nic("ens1f1", "0000:3b:00.1")
    fs.sriov("ens2f0", "0000:5e:00.0", {0: ("0000:5e:00.2", "ens2f0v0")})
    flags = ["--sysfs-root", str(tmp_path), "--parent-interfaces", "ens1f*", "-o", "json"]
    flags += ["--sriov-pfs", "ens2f0", "--multus-resource-name", "example.com/sriov"]
    out = _run("discover", "--node-name", "node-a", *flags)
    assert out.returncode == 0, out.stderr
    [s] = json.loads(out.stdout)["items"]
    named = {
        d["attributes"]["kind"]["string"]: d["attributes"]["k8s.cni.cncf.io/resourceName"]
        for d in s["spec"]["devices"]
        if "k8s.cni.cncf.io/resourceName" in d["attributes"]
    }
    assert named == {
        "host-device": {"string": "example.com/sriov"},
        "sriov-vf": {"string": "example.com/sriov"},
    }
    for bad in ("sriov", "Example.com/x", "example.com/" + "x" * 60, "example.com/-x"):
        refused = _run("discover", "--node-name", "n", "--multus-resource-name", bad)
        assert refused.returncode != 0
        assert "--multus-resource-name must be <domain>/<name>" in refused.stderr


def test_validate_config_exit_codes_and_every_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("type: netdev\nnetdev: {kind: dummy, interfaceName: net1}\n")
    assert _run("validate-config", str(good)).returncode == 0
    bad = _run(
        "validate-config",
        "-",
        stdin='{"type": "netdev", "netdev": {"kind": "macvlan", "mtu": 1, "x": 1}}',
    )
    assert bad.returncode == 1
    assert "-: $.netdev: 'parent' is a required property" in bad.stderr
    assert "-: $.netdev.mtu:" in bad.stderr and "-: $.netdev.x: unknown field" in bad.stderr
    assert _run("validate-config", "-", stdin="{not yaml").returncode == 1


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_discover_prints_what_a_node_with_this_hardware_publishes(tmp_path, fmt):
    fs = FakeSys(tmp_path)
    fs.nic("ens1f0", "0000:3b:00.0")
    fs.nic("ens1f1", "0000:3b:00.1")
    fs.sriov("ens2f0", "0000:5e:00.0", {0: ("0000:5e:00.2", "ens2f0v0")})
    fs.rdma("mlx5_0", pci="0000:3b:00.0", uverbs=0, netdev="ens1f0")
    flags = ["--sysfs-root", str(tmp_path), "--parent-interfaces", "ens1f*"]
    flags += ["--sriov-pfs", "ens2f0", "-o", fmt]
    out = _run("discover", "--node-name", "node-a", *flags)
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout) if fmt == "yaml" else json.loads(out.stdout)
    [s] = doc["items"]
    kinds = {d["name"]: d["attributes"]["kind"]["string"] for d in s["spec"]["devices"]}
    assert sorted(kinds.values()) == ["host-device", "sriov-vf", "uverbs", "virtual"]
    assert "nic-ens1f1" in kinds and "nic-ens1f0" not in kinds  # ens1f0 is mlx5_0's netdev
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    # What Multus reads: the PCI address on PCI netdevs; no resource name unless set.
    attrs = {d["name"]: d["attributes"] for d in s["spec"]["devices"]}
    assert attrs["nic-ens1f1"]["k8s.cni.cncf.io/deviceID"] == {"string": "0000:3b:00.1"}
    [vf] = [a for a in attrs.values() if a["kind"]["string"] == "sriov-vf"]
    assert vf["k8s.cni.cncf.io/deviceID"] == {"string": "0000:5e:00.2"}
    assert not any("k8s.cni.cncf.io/resourceName" in a for a in attrs.values())
