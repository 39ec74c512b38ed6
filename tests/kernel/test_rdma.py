"""RDMA uverbs and RoCE combo: fabricated sysfs everywhere, a real soft-RoCE device where
the kernel has rdma_rxe (the kernel-VM tier)."""

import json
import os
import stat
import subprocess
import sys

import pytest
from dradriver.handlers.netdev import hostdevice
from dradriver.handlers.rdma import uverbs as devices

from dradriver.base.errors import DriverError
from dradriver.contract import naming
from tests.support import netns
from tests.support.fakesys import FakeSys
from tests.support.handlers import context, net_device, prepare
from tests.support.runtime import move_like_runc, return_to_host, seen_in

pytestmark = pytest.mark.root


def _chardev(path, minor):
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(231, minor))


@pytest.fixture
def fabricated(tmp_path):
    """An mlx5-like RoCE device on eth5, an rxe-like one on veth3, an IB HCA; real nodes."""
    fs = FakeSys(tmp_path / "sys")
    fs.nic("eth5", "0000:5e:00.0", numa=1)
    fs.rdma("mlx5_0", pci="0000:5e:00.0", uverbs=0, netdev="eth5", umad=0)
    fs.rdma("rxe0", pci=None, uverbs=1, netdev="veth3", node_guid="5054:00ff:fe12:3456")
    fs.rdma(
        "mlx5_1",
        pci="0000:5f:00.0",
        uverbs=2,
        netdev=None,
        link_layer="InfiniBand",
        state="1: DOWN",
    )
    dev = tmp_path / "dev"
    for minor, name in (
        (192, "uverbs0"),
        (193, "uverbs1"),
        (194, "uverbs2"),
        (0, "umad0"),
        (255, "rdma_cm"),
    ):
        _chardev(dev / "infiniband" / name, minor)
    return context(sysfs_root=tmp_path / "sys", dev_root=dev, parent_interfaces=("eth5", "veth3"))


def _published(ctx):
    return {d.name: d for d in devices.discover(ctx)}


@pytest.mark.kind("uverbs", fabricated=True)
def test_discovery_of_mlx5_like_rxe_like_and_infiniband_devices(fabricated):
    found = _published(fabricated)
    assert sorted(d.attributes["rdmaDevice"] for d in found.values()) == [
        "mlx5_0",
        "mlx5_1",
        "rxe0",
    ]
    assert all(naming.is_dns_label(name) for name in found)
    mlx = next(d for d in found.values() if d.attributes["rdmaDevice"] == "mlx5_0")
    assert dict(mlx.attributes) == {
        "type": "rdma",
        "kind": "uverbs",
        "rdmaDevice": "mlx5_0",
        "uverbs": "uverbs0",
        "roce": True,
        "nodeGUID": "0c42:a103:0065:3e2a",
        "linkLayer": "Ethernet",
        "portState": "ACTIVE",
        "netdev": "eth5",
        "pciAddress": "0000:5e:00.0",
        "numaNode": 1,
    }
    rxe = next(d for d in found.values() if d.attributes["rdmaDevice"] == "rxe0")
    assert rxe.attributes["netdev"] == "veth3" and rxe.attributes["roce"] is True
    assert "pciAddress" not in rxe.attributes
    ib = next(d for d in found.values() if d.attributes["rdmaDevice"] == "mlx5_1")
    assert ib.attributes["roce"] is False and ib.attributes["linkLayer"] == "InfiniBand"
    assert not ib.healthy and ib.health_message == "port 1 is DOWN"
    # RoCE is only offered where the operator allows the netdev to be handed out.
    strict = context(sysfs_root=fabricated.sysfs_root, dev_root=fabricated.dev_root)
    assert not any(d.attributes["roce"] for d in devices.discover(strict))


def _device(ctx, ibdev):
    return next(d for d in devices.discover(ctx) if d.attributes["rdmaDevice"] == ibdev)


@pytest.mark.kind("uverbs", fabricated=True)
def test_uverbs_gives_device_nodes_and_names_the_device(fabricated):
    handler, validated, prepared = prepare(
        {"type": "rdma"}, device=_device(fabricated, "mlx5_0"), ctx=fabricated
    )
    assert validated.container_interfaces == ()
    ib = fabricated.dev_root / "infiniband"
    assert prepared.edits["deviceNodes"] == [
        {"path": "/dev/infiniband/uverbs0", "hostPath": str(ib / "uverbs0")},
        {"path": "/dev/infiniband/rdma_cm", "hostPath": str(ib / "rdma_cm")},
        {"path": "/dev/infiniband/umad0", "hostPath": str(ib / "umad0")},
    ]
    assert prepared.edits["env"] == ["DRA_RDMA_DEVICE=mlx5_0", "DRA_RDMA_DEVICE_NIC=mlx5_0"]
    handler.unprepare(prepared.undo)


@pytest.mark.kind("uverbs", fabricated=True)
@pytest.mark.parametrize(
    "params,device,message",
    [
        (
            {"type": "rdma", "rdma": {"netnsMode": "exclusive"}},
            "mlx5_0",
            "exclusive needs the NRI injection mode",
        ),
        ({"type": "rdma", "rdma": {"kind": "uverbs", "pkey": 1}}, "mlx5_0", "unknown field"),
        ({"type": "rdma"}, "rxe0-missing-node", "character device .*uverbs1 .* is missing"),
    ],
)
def test_uverbs_bad_input(fabricated, params, device, message):
    if device == "rxe0-missing-node":
        (fabricated.dev_root / "infiniband" / "uverbs1").unlink()
        device = "rxe0"
    with pytest.raises(DriverError, match=message):
        prepare(params, device=_device(fabricated, device), ctx=fabricated)


@pytest.mark.kind("roce", fabricated=True)
def test_roce_moves_the_rdma_devices_own_netdev_with_its_nodes(fabricated, in_ns):
    netns.ip(in_ns, "link", "add", "veth3", "type", "veth", "peer", "name", "x3")
    pod = netns.create("pod")
    try:
        handler, validated, prepared = prepare(
            {
                "type": "combo",
                "combo": {
                    "kind": "roce",
                    "netdev": {"interfaceName": "roce0", "ipAddresses": ["10.40.0.2/24"]},
                },
            },
            device=_device(fabricated, "rxe0"),
            ctx=fabricated,
        )
        assert validated.container_interfaces == ("roce0",)
        assert net_device(prepared) == ("veth3", "roce0")
        assert prepared.edits["deviceNodes"][0]["path"] == "/dev/infiniband/uverbs1"
        assert "DRA_RDMA_DEVICE=rxe0" in prepared.edits["env"]
        move_like_runc("veth3", "roce0", pod)
        assert seen_in(pod, "roce0").addresses == ["10.40.0.2/24"]
        return_to_host(pod, in_ns, "roce0")
    finally:
        netns.delete(pod)
    handler.unprepare(prepared.undo)
    assert seen_in(in_ns, "veth3").addresses == []


@pytest.mark.kind("roce", fabricated=True)
@pytest.mark.parametrize(
    "ibdev,message",
    [
        ("mlx5_1", "not RoCE"),
    ],
)
def test_roce_refuses_devices_it_cannot_serve(fabricated, ibdev, message):
    with pytest.raises(DriverError, match=message):
        prepare({"type": "combo"}, device=_device(fabricated, ibdev), ctx=fabricated)


@pytest.mark.kind("roce", fabricated=True)
def test_roce_refuses_a_netdev_the_operator_did_not_allow(fabricated):
    strict = context(sysfs_root=fabricated.sysfs_root, dev_root=fabricated.dev_root)
    with pytest.raises(DriverError, match="netdev eth5 of RDMA device mlx5_0 cannot be handed"):
        prepare({"type": "combo"}, device=_device(fabricated, "mlx5_0"), ctx=strict)


@pytest.mark.kind("roce", fabricated=True)
def test_roce_rolls_back_when_the_netdev_half_fails(fabricated, in_ns):
    # veth3 does not exist in this namespace: the netdev half fails after the RDMA half.
    with pytest.raises(DriverError, match="host interface veth3 does not exist"):
        prepare({"type": "combo"}, device=_device(fabricated, "rxe0"), ctx=fabricated)


# -- a real soft-RoCE device (rdma_rxe), where the kernel has it ------------------------------


@pytest.fixture
def rxe(in_ns):
    """A real rxe device on veth end r0 (up, with an address), in the test namespace."""
    netns.ip(in_ns, "link", "add", "r0", "type", "veth", "peer", "name", "r1")
    netns.ip(in_ns, "addr", "add", "10.50.0.1/24", "dev", "r0")
    for end in ("r0", "r1"):
        netns.ip(in_ns, "link", "set", end, "up")
    name = f"rxe{os.getpid() % 10000}"
    subprocess.run(
        ["ip", "netns", "exec", in_ns, "rdma", "link", "add", name, "type", "rxe", "netdev", "r0"],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        subprocess.run(
            ["ip", "netns", "exec", in_ns, "rdma", "link", "delete", name],
            capture_output=True,
            check=False,
        )


def _real_ctx():
    return context(parent_interfaces=("r0",))


@pytest.mark.kind("uverbs")
@pytest.mark.kernel("rdma")
def test_real_rxe_is_discovered_with_its_uverbs_and_netdev(rxe):
    dev = _device(_real_ctx(), rxe)
    assert dev.attributes["uverbs"].startswith("uverbs")
    assert (dev.attributes["netdev"], dev.attributes["linkLayer"]) == ("r0", "Ethernet")
    assert dev.attributes["roce"] is True and dev.healthy


@pytest.mark.kind("uverbs")
@pytest.mark.kernel("rdma")
def test_real_rxe_is_published_by_dra_driver_discover(rxe, in_ns):
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            in_ns,
            sys.executable,
            "-m",
            "dradriver",
            "discover",
            "--node-name",
            "node-a",
            "--parent-interfaces",
            "r0",
            "-o",
            "json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = [
        d
        for s in json.loads(out)["items"]
        for d in s["spec"]["devices"]
        if d["attributes"].get("rdmaDevice", {}).get("string") == rxe
    ]
    assert len(found) == 1, out
    attrs = found[0]["attributes"]
    assert attrs["netdev"] == {"string": "r0"} and attrs["roce"] == {"bool": True}
    assert attrs["uverbs"]["string"].startswith("uverbs")


@pytest.mark.kind("uverbs")
@pytest.mark.kernel("rdma")
def test_real_rxe_uverbs_nodes_exist_and_are_handed_over(rxe):
    handler, _, prepared = prepare(
        {"type": "rdma"}, device=_device(_real_ctx(), rxe), ctx=_real_ctx()
    )
    nodes = prepared.edits["deviceNodes"]
    assert nodes[0]["path"].startswith("/dev/infiniband/uverbs") and "hostPath" not in nodes[0]
    for node in nodes:
        assert stat.S_ISCHR(os.stat(node["path"]).st_mode)
    assert f"DRA_RDMA_DEVICE={rxe}" in prepared.edits["env"]
    handler.unprepare(prepared.undo)


@pytest.mark.kind("roce")
@pytest.mark.kernel("rdma")
def test_real_roce_moves_the_rxe_netdev_and_gives_it_back(rxe, in_ns):
    pod = netns.create("pod")
    try:
        handler, _, prepared = prepare(
            {
                "type": "combo",
                "combo": {
                    "kind": "roce",
                    "netdev": {
                        "interfaceName": "roce0",
                        "ipAddresses": ["10.60.0.2/24"],
                        "mtu": 1400,
                    },
                },
            },
            device=_device(_real_ctx(), rxe),
            ctx=_real_ctx(),
        )
        assert net_device(prepared) == ("r0", "roce0")
        [uverbs] = [n["path"] for n in prepared.edits["deviceNodes"] if "uverbs" in n["path"]]
        assert stat.S_ISCHR(os.stat(uverbs).st_mode)
        move_like_runc("r0", "roce0", pod)
        seen = seen_in(pod, "roce0")
        assert seen.mtu == 1400 and sorted(seen.addresses) == ["10.50.0.1/24", "10.60.0.2/24"]
        # Soft-RoCE only: rxe unregisters when its netdev leaves the namespace (a real
        # RoCE NIC keeps its RDMA device, whose GIDs follow the netdev). See docs/known-limits.md.
        return_to_host(pod, in_ns, "roce0")
    finally:
        netns.delete(pod)
    handler.unprepare(prepared.undo)
    seen = seen_in(in_ns, "r0")
    assert (seen.mtu, seen.addresses) == (1500, ["10.50.0.1/24"])


@pytest.mark.kind("roce", fabricated=True)
def test_a_roce_nics_netdev_is_not_also_offered_as_a_plain_host_device(fabricated):
    nics = {d.attributes["interfaceName"] for d in hostdevice.discover(fabricated)}
    assert "eth5" not in nics  # offered through rdma mlx5_0 (roce) only
    roce = [d for d in devices.discover(fabricated) if d.attributes.get("netdev") == "eth5"]
    assert len(roce) == 1 and roce[0].attributes["roce"] is True
