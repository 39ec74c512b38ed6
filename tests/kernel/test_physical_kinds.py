"""host-device and sriov-vf against the real kernel, with veth interfaces standing in for NICs.

The kernel objects are real (a veth end plays the NIC or VF netdev); discovery reads a
fabricated sysfs tree, because this machine has no PCI NICs or SR-IOV. When a pod's
namespace is destroyed the kernel hands a physical NIC back under its container name;
a veth would die instead, so the tests move it back the way the kernel would.
"""

from dataclasses import replace

import pytest
from dradriver.handlers.netdev import hostdevice, sriov

from dradriver.base.errors import DriverError
from dradriver.contract.hookspecs import Capacity, Device
from tests.support import netns
from tests.support.fakesys import FakeSys
from tests.support.handlers import context, net_device, prepare
from tests.support.runtime import links_in, move_like_runc, return_to_host, seen_in

pytestmark = pytest.mark.root

NIC = Device("nic-eth7", {"type": "netdev", "kind": "host-device", "interfaceName": "eth7"})
CTX = context(parent_interfaces=("eth7",))


@pytest.fixture
def host(in_ns):
    netns.ip(in_ns, "link", "add", "eth7", "type", "veth", "peer", "name", "x7")
    netns.ip(in_ns, "link", "set", "eth7", "address", "02:aa:00:00:00:07", "mtu", "1500")
    netns.ip(in_ns, "addr", "add", "192.0.2.7/24", "dev", "eth7")
    netns.ip(in_ns, "link", "set", "eth7", "up")
    return in_ns


def _original(host):
    seen = seen_in(host, "eth7")
    assert (seen.mtu, seen.mac, seen.up, seen.addresses) == (
        1500,
        "02:aa:00:00:00:07",
        True,
        ["192.0.2.7/24"],
    )


PARAMS = {
    "type": "netdev",
    "netdev": {
        "kind": "host-device",
        "interfaceName": "net1",
        "mtu": 1400,
        "macAddress": "02:bb:00:00:00:01",
        "ipAddresses": ["10.30.0.2/24"],
    },
}


@pytest.mark.kind("host-device")
@pytest.mark.parametrize("returned_as", ["net1", "dev3"])
def test_host_device_round_trip_through_a_pod(host, pod, returned_as):
    journal = []
    handler, _, prepared = prepare(PARAMS, device=NIC, ctx=CTX, journal=journal.append)
    assert journal and journal[0]["hostName"] == "eth7"  # persisted before any change
    assert net_device(prepared) == ("eth7", "net1")
    assert "state DOWN" in netns.ip(host, "link", "show", "eth7")
    move_like_runc("eth7", "net1", pod)
    seen = seen_in(pod, "net1")
    assert (seen.mtu, seen.mac, seen.up) == (1400, "02:bb:00:00:00:01", True)
    assert sorted(seen.addresses) == ["10.30.0.2/24", "192.0.2.7/24"]
    assert sorted(prepared.network_data.ips) == sorted(seen.addresses)

    with pytest.raises(DriverError, match="not back on the host yet"):
        handler.unprepare(prepared.undo)  # the pod namespace still holds it: retry later
    if returned_as != "net1":  # a name clash on return: the kernel picks dev<N>
        netns.ip(pod, "link", "set", "net1", "down")  # kernels < 6.? refuse renaming up links
        netns.ip(pod, "link", "set", "net1", "name", returned_as)
    return_to_host(pod, host, returned_as)
    handler.unprepare(prepared.undo)
    _original(host)


@pytest.mark.kind("host-device")
def test_host_device_unprepare_when_the_pod_never_started(host):
    handler, _, prepared = prepare(PARAMS, device=NIC, ctx=CTX)
    handler.unprepare(prepared.undo)
    handler.unprepare(prepared.undo)
    _original(host)


@pytest.mark.kind("host-device")
@pytest.mark.parametrize(
    "device,ctx,params,message",
    [
        (NIC, CTX, {"hostDevice": "eth0"}, "hostDevice eth0 is not the allocated interface eth7"),
        (NIC, context(), {}, "not on the operator's allow-list"),
        (
            Device("netdev-virtual", {"type": "netdev", "kind": "virtual"}),
            CTX,
            {},
            "needs a host interface device",
        ),
        (
            Device(
                "nic-gone0", {"type": "netdev", "kind": "host-device", "interfaceName": "gone0"}
            ),
            context(parent_interfaces=("gone0",)),
            {},
            "host interface gone0 does not exist",
        ),
    ],
)
def test_host_device_refuses_what_was_not_allocated_or_allowed(host, device, ctx, params, message):
    with pytest.raises(DriverError, match=message):
        prepare(
            {"type": "netdev", "netdev": {"kind": "host-device", **params}}, device=device, ctx=ctx
        )
    _original(host)


@pytest.mark.kind("host-device")
def test_host_device_never_takes_the_primary_interface(host):
    netns.ip(host, "route", "add", "default", "via", "192.0.2.1", "dev", "eth7")
    with pytest.raises(DriverError, match="holds the node's default route"):
        prepare({"type": "netdev", "netdev": {"kind": "host-device"}}, device=NIC, ctx=CTX)


@pytest.mark.kind("host-device", fabricated=True)
def test_discovery_offers_only_allowed_non_primary_interfaces(tmp_path, in_ns):
    fs = FakeSys(tmp_path)
    fs.nic("eth0", "0000:00:03.0")
    fs.nic("eth1", "0000:00:04.0", mac="02:00:00:00:00:11", mtu=9000, numa=1)
    fs.nic("eth2", "0000:00:05.0", carrier=0)
    fs.nic("veth9", None)
    netns.ip(in_ns, "link", "add", "eth0", "type", "veth", "peer", "name", "x0")
    netns.ip(in_ns, "addr", "add", "192.0.2.9/24", "dev", "eth0")
    netns.ip(in_ns, "link", "set", "eth0", "up")
    netns.ip(in_ns, "route", "add", "default", "via", "192.0.2.1")
    ctx = context(sysfs_root=tmp_path, parent_interfaces=("eth*",))
    devices = {d.name: d for d in hostdevice.discover(ctx)}
    assert sorted(devices) == ["nic-eth1", "nic-eth2"]  # eth0 holds the default route
    assert dict(devices["nic-eth1"].attributes) == {
        "type": "netdev",
        "kind": "host-device",
        "interfaceName": "eth1",
        "macAddress": "02:00:00:00:00:11",
        "mtu": 9000,
        "pciAddress": "0000:00:04.0",
        "numaNode": 1,
        "driver": "mlx5_core",
        "linkSpeedMbps": 25000,
        "resource.kubernetes.io/pciBusID": "0000:00:04.0",
        "resource.kubernetes.io/pcieRoot": "pci0000:00",
        "resource.kubernetes.io/numaNode": 1,
        "pciVendorID": "15b3",
        "pciDeviceID": "101d",
        "k8s.cni.cncf.io/deviceID": "0000:00:04.0",
    }
    assert "linkSpeedMbps" not in devices["nic-eth2"].attributes  # no link: no speed
    # The whole link's bandwidth: its speed, or the operator's figure where none is known.
    assert devices["nic-eth1"].capacity == {"bandwidth": Capacity("25G")}
    assert devices["nic-eth2"].capacity == {}
    given = {d.name: d for d in hostdevice.discover(replace(ctx, link_bandwidth=10**10))}
    assert given["nic-eth2"].capacity == {"bandwidth": Capacity("10G")}
    assert given["nic-eth1"].capacity == {"bandwidth": Capacity("25G")}
    assert devices["nic-eth1"].healthy and not devices["nic-eth2"].healthy
    assert hostdevice.discover(context(sysfs_root=tmp_path)) == []  # nothing unless allowed


# -- SR-IOV --------------------------------------------------------------------------------


@pytest.fixture
def sriov_host(in_ns, tmp_path):
    fs = FakeSys(tmp_path)
    fs.sriov(
        "pf0",
        "0000:3b:00.0",
        {0: ("0000:3b:00.2", "pf0v0"), 1: ("0000:3b:00.3", "pf0v1"), 2: ("0000:3b:00.4", None)},
        numa=1,
    )
    for name in ("pf0", "pf0v0", "pf0v1"):
        netns.ip(in_ns, "link", "add", name, "type", "veth", "peer", "name", f"{name}p")
    return in_ns, context(sysfs_root=tmp_path, sriov_pfs=("pf*",))


@pytest.mark.kind("sriov-vf", fabricated=True)
def test_vf_discovery_publishes_each_netdev_vf_of_allowed_pfs(sriov_host):
    _, ctx = sriov_host
    devices = sriov.discover(ctx)
    assert [(d.attributes["vfIndex"], d.attributes["interfaceName"]) for d in devices] == [
        (0, "pf0v0"),
        (1, "pf0v1"),
    ]  # VF 2 is bound to vfio-pci: no netdev
    attrs = devices[1].attributes
    assert (attrs["pfName"], attrs["pciAddress"], attrs["numaNode"], attrs["kind"]) == (
        "pf0",
        "0000:3b:00.3",
        1,
        "sriov-vf",
    )
    assert sriov.discover(context(sysfs_root=ctx.sysfs_root)) == []


@pytest.mark.kind("sriov-vf", fabricated=True)
def test_vf_without_vf_index_is_the_allocated_one_not_vf0(sriov_host, pod):
    host, ctx = sriov_host
    vf1 = sriov.discover(ctx)[1]
    handler, _, prepared = prepare(
        {
            "type": "netdev",
            "netdev": {"kind": "sriov-vf", "parent": "pf0", "mtu": 1400, "interfaceName": "net1"},
        },
        device=vf1,
        ctx=ctx,
    )
    assert net_device(prepared) == ("pf0v1", "net1")
    move_like_runc("pf0v1", "net1", pod)
    assert seen_in(pod, "net1").mtu == 1400
    return_to_host(pod, host, "net1")
    handler.unprepare(prepared.undo)
    assert "pf0v1" in {ln["name"] for ln in links_in(host)}


@pytest.mark.kind("sriov-vf", fabricated=True)
def test_a_vf_bandwidth_the_pf_refuses_names_the_request_and_changes_nothing(sriov_host):
    host, ctx = sriov_host
    vf1 = sriov.discover(ctx)[1]
    before = netns.ip(host, "-o", "link")
    with pytest.raises(
        DriverError,
        match=r"capacity\.requests\.bandwidth: PF pf0 refused maxTxRate=101 "
        r"\(from capacity\.requests\.bandwidth\) for VF 1",
    ):  # 100.5 Mbit/s: whole Mb/s, rounded up
        prepare(
            {"type": "netdev", "netdev": {"kind": "sriov-vf"}},
            device=vf1,
            ctx=ctx,
            consumed={"bandwidth": "100500k"},
        )
    assert netns.ip(host, "-o", "link") == before


@pytest.mark.kind("sriov-vf", fabricated=True)
@pytest.mark.parametrize(
    "params,message",
    [
        ({"vfIndex": 0}, "vfIndex 0 is not the allocated VF 1"),
        ({"parent": "pf9"}, "parent pf9 is not the PF pf0"),
        ({"vlan": 100}, r"netdev\.vlan: PF pf0 refused vlan=100 for VF 1: Operation not supported"),
    ],
)
def test_vf_refuses_other_vfs_and_reports_kernel_refusals(sriov_host, params, message):
    host, ctx = sriov_host
    vf1 = sriov.discover(ctx)[1]
    before = netns.ip(host, "-o", "link")
    with pytest.raises(DriverError, match=message):
        prepare({"type": "netdev", "netdev": {"kind": "sriov-vf", **params}}, device=vf1, ctx=ctx)
    assert netns.ip(host, "-o", "link") == before
