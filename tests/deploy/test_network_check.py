"""deploy/network-check.py against a fake kubectl: what it expects, what it reports, and
that it exits non-zero on every kind of mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.deploy.support import DEPLOY, network_check

SCRIPT = DEPLOY / "network-check.py"

# A fake kubectl: answers from a JSON "cluster" file named by $FAKE_CLUSTER.
FAKE_KUBECTL = textwrap.dedent(
    """\
    import json, os, sys
    cluster = json.load(open(os.environ["FAKE_CLUSTER"]))
    args = sys.argv[1:]
    if args[:2] == ["--context", "kind-test"]:
        args = args[2:]
    with open(os.environ["FAKE_CLUSTER"] + ".log", "a") as log:
        log.write(" ".join(args) + "\\n")
    def out(obj):
        print(json.dumps(obj)); sys.exit(0)
    if args[:2] == ["get", "resourceslices"]:
        out({"items": cluster["slices"]})
    if args[:2] == ["get", "pods"]:
        label = args[args.index("-l") + 1]
        out({"items": [p for p in cluster["pods"] if p["label"] == label]})
    if args[:2] == ["rollout", "status"]:
        name = args[2].split("/")[1]
        sys.exit(0 if name in cluster.get("available", []) else 1)
    if args[0] == "exec":
        pod, container = args[3], args[5]
        cmd = " ".join(args[args.index("--") + 1:])
        answer = cluster["exec"].get(pod, {}).get(cmd)
        if answer is None:
            print(f"{cmd}: No such file or directory", file=sys.stderr); sys.exit(1)
        print(answer); sys.exit(0)
    print("unexpected: " + " ".join(args), file=sys.stderr); sys.exit(2)
    """
)

VIRTUAL_SLICE = {
    "spec": {
        "driver": "dra.example.com",
        "devices": [
            {
                "name": "netdev-virtual",
                "attributes": {"type": {"string": "netdev"}, "kind": {"string": "virtual"}},
            },
        ],
    }
}
RDMA_SLICE = {
    "spec": {
        "driver": "dra.example.com",
        "devices": [
            {
                "name": "rdma-mlx5-0",
                "attributes": {
                    "type": {"string": "rdma"},
                    "kind": {"string": "uverbs"},
                    "roce": {"bool": True},
                },
            },
        ],
    }
}


def _pod(app: str) -> dict:
    return {
        "label": f"app={app}",
        "metadata": {"name": f"{app}-abc"},
        "status": {"phase": "Running"},
    }


def _iface(name: str, mtu: int, addr: str | None) -> dict[str, str]:
    line = f"2: {name}    inet {addr} scope global {name}" if addr else ""
    return {
        f"cat /sys/class/net/{name}/mtu": str(mtu),
        f"ip -o addr show dev {name}": line,
    }


def healthy_cluster() -> dict:
    """What a working kind cluster without RDMA looks like from kubectl."""
    return {
        "slices": [VIRTUAL_SLICE],
        "pods": [_pod(a) for a in ("dummy-net1", "macvlan-data0", "multi-nic")],
        "available": ["dummy-net1", "macvlan-data0", "multi-nic"],
        "exec": {
            "dummy-net1-abc": _iface("net1", 9000, "192.0.2.10/24"),
            "macvlan-data0-abc": _iface("data0", 1400, "198.51.100.10/24"),
            "multi-nic-abc": {
                **_iface("data0", 1400, "198.51.100.20/24"),
                **_iface("ctrl0", 1500, "203.0.113.20/24"),
            },
        },
    }


def run_check(tmp_path: Path, cluster: dict, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = tmp_path / "kubectl.py"
    kubectl.write_text(FAKE_KUBECTL)
    state = tmp_path / "cluster.json"
    state.write_text(json.dumps(cluster))
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--kubectl",
            f"{sys.executable} {kubectl}",
            "--context",
            "kind-test",
            *args,
        ],
        capture_output=True,
        text=True,
        env={"FAKE_CLUSTER": str(state), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )


def test_expectations_come_from_the_example_files():
    nc = network_check()
    exps = nc.expectations(
        nc.load_docs(nc.DEFAULT_FILES), nc.class_configs(nc.load_docs([nc.CLASS_FILE]))
    )
    got = {(e.deployment, e.container, e.interface, e.mtu, e.addresses, e.rdma) for e in exps}
    assert got == {
        ("dummy-net1", "app", "net1", 9000, ("192.0.2.10/24",), False),
        ("macvlan-data0", "app", "data0", 1400, ("198.51.100.10/24",), False),
        ("rdma-uverbs", "app", None, None, (), True),
        ("roce", "app", "roce0", None, ("203.0.113.50/24",), True),
        ("multi-nic", "app", "data0", 1400, ("198.51.100.20/24",), False),
        ("multi-nic", "app", "ctrl0", 1500, ("203.0.113.20/24",), False),
    }


def test_request_without_config_gets_the_class_default():
    nc = network_check()
    assert nc.request_parameters("r", "virtual-network", [], {}) == {
        "type": "netdev",
        "netdev": {"kind": "veth"},
    }
    assert (
        nc.what_container_gets(nc.request_parameters("r", "virtual-network", [], {}))["interface"]
        == "eth1"
    )


def test_check_passes_on_a_healthy_cluster_and_prints_what_it_found(tmp_path):
    res = run_check(tmp_path, healthy_cluster(), "check")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "net1 mtu 9000 addresses 192.0.2.10/24" in out
    assert "data0 mtu 1400 addresses 198.51.100.20/24" in out
    assert "ctrl0 mtu 1500 addresses 203.0.113.20/24" in out
    assert "skip  default/rdma-uverbs: no rdma-devices device" in out
    assert "skip  default/roce: no roce-devices device" in out
    assert "check: 0 failed, 2 skipped" in out


@pytest.mark.parametrize(
    "break_it,message",
    [
        (
            lambda c: c["exec"]["dummy-net1-abc"].update(_iface("net1", 1500, "192.0.2.10/24")),
            "mtu 1500, want 9000",
        ),
        (
            lambda c: c["exec"]["multi-nic-abc"].update(_iface("ctrl0", 1500, None)),
            "missing address 203.0.113.20/24",
        ),
        (lambda c: c["exec"]["macvlan-data0-abc"].clear(), "interface data0 missing"),
        (lambda c: c["pods"].pop(0), "default/dummy-net1: no running pod"),
        (
            lambda c: c["pods"][1]["status"].update(phase="Pending"),
            "default/macvlan-data0: no running pod",
        ),
    ],
    ids=["mtu", "address", "interface", "no-pod", "pending"],
)
def test_check_fails_on_every_mismatch(tmp_path, break_it, message):
    cluster = healthy_cluster()
    break_it(cluster)
    res = run_check(tmp_path, cluster, "check")
    assert res.returncode == 1, res.stdout
    assert message in res.stdout


def test_check_expects_rdma_examples_where_rdma_devices_are_published(tmp_path):
    cluster = healthy_cluster()
    cluster["slices"].append(RDMA_SLICE)
    res = run_check(tmp_path, cluster, "check")
    assert res.returncode == 1
    assert "default/rdma-uverbs: no running pod" in res.stdout
    cluster["pods"] += [_pod("rdma-uverbs"), _pod("roce")]
    cluster["exec"]["rdma-uverbs-abc"] = {"ls /dev/infiniband": "rdma_cm\nuverbs0"}
    cluster["exec"]["roce-abc"] = {
        "ls /dev/infiniband": "rdma_cm\nuverbs1",
        **_iface("roce0", 1500, "203.0.113.50/24"),
    }
    res = run_check(tmp_path, cluster, "check")
    assert res.returncode == 0, res.stdout
    assert "/dev/infiniband/uverbs1" in res.stdout
    cluster["exec"]["roce-abc"]["ls /dev/infiniband"] = "rdma_cm"
    res = run_check(tmp_path, cluster, "check")
    assert res.returncode == 1
    assert "no uverbs device" in res.stdout


def test_require_all_turns_missing_hardware_into_failures(tmp_path):
    res = run_check(tmp_path, healthy_cluster(), "--require-all", "check")
    assert res.returncode == 1
    assert "FAIL  default/roce: no roce-devices device" in res.stdout


def test_wait_rolls_out_what_the_cluster_can_run(tmp_path):
    cluster = healthy_cluster()
    res = run_check(tmp_path, cluster, "--timeout", "5", "wait")
    assert res.returncode == 0, res.stdout + res.stderr
    log = (tmp_path / "cluster.json.log").read_text()
    assert "rollout status deployment/multi-nic -n default" in log
    assert "deployment/rdma-uverbs" not in log
    cluster["available"].remove("multi-nic")
    res = run_check(tmp_path, cluster, "--timeout", "5", "wait")
    assert res.returncode == 1
    assert "default/multi-nic not available" in res.stdout


def test_ip_without_oneline_output_is_understood(tmp_path):
    cluster = healthy_cluster()
    iface = cluster["exec"]["dummy-net1-abc"]
    del iface["ip -o addr show dev net1"]
    iface["ip addr show dev net1"] = (
        "5: net1: <BROADCAST,NOARP,UP,LOWER_UP> mtu 9000\n"
        "    link/ether 2a:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff\n"
        "    inet 192.0.2.10/24 scope global net1\n"
    )
    res = run_check(tmp_path, cluster, "check")
    assert res.returncode == 0, res.stdout
