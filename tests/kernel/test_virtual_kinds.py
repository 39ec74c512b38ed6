"""Virtual kinds against the real kernel: create, hand over like runc, check, tear down."""

import pytest

from dradriver.base.errors import DriverError
from dradriver.contract import naming
from dradriver.contract.hookspecs import Device, DeviceRequest
from tests.support import netns
from tests.support.handlers import context, net_device, prepare, request
from tests.support.runtime import links_in, move_like_runc, seen_in

pytestmark = pytest.mark.root

PARENT_CTX = context(virtual_parents=("p0", "br*", "nope*"))


def _kind(kind, extra=None, id=None):
    """One parametrised case, marked with its kind and the kernel feature it needs."""
    marks = [pytest.mark.kind(kind), pytest.mark.kernel(kind)]
    return pytest.param(kind, extra or {}, marks=marks, id=id or kind)


KINDS = [
    _kind("veth"),
    _kind("macvlan", {"parent": "p0", "mode": "bridge"}, "macvlan-bridge"),
    _kind("macvlan", {"parent": "p0", "mode": "private"}, "macvlan-private"),
    _kind("ipvlan", {"parent": "p0", "mode": "l2"}, "ipvlan-l2"),
    _kind("ipvlan", {"parent": "p0", "mode": "l3"}, "ipvlan-l3"),
    _kind("dummy"),
]


@pytest.fixture
def host(in_ns):
    """The test namespace plays the node, with a veth end p0 as parent interface."""
    netns.ip(in_ns, "link", "add", "p0", "type", "veth", "peer", "name", "q0")
    netns.ip(in_ns, "link", "set", "p0", "up")
    return in_ns


def _params(kind, extra, **fields):
    return {"type": "netdev", "netdev": {"kind": kind, **extra, **fields}}


@pytest.mark.parametrize("kind,extra", KINDS)
def test_prepare_hand_over_and_see_it_in_the_pod(host, pod, kind, extra):
    fields = {
        "interfaceName": "net1",
        "mtu": 1400,
        "ipAddresses": ["10.20.0.2/24", "fd00:20::2/64"],
    }
    if kind != "ipvlan":
        fields["macAddress"] = "02:11:22:33:44:55"
    handler, validated, prepared = prepare(_params(kind, extra, **fields), ctx=PARENT_CTX)
    assert validated.container_interfaces == ("net1",)
    host_name, container = net_device(prepared)
    assert naming.is_host_ifname(host_name) and container == "net1"
    # Prepare leaves it down, tagged, configured, on the host.
    on_host = {ln["name"]: ln["alias"] for ln in links_in(host)}
    assert naming.parse_ifalias(on_host[host_name]) is not None
    assert "state DOWN" in netns.ip(host, "link", "show", host_name)

    move_like_runc(host_name, container, pod)
    seen = seen_in(pod, "net1")
    assert seen.mtu == 1400 and seen.up
    assert sorted(seen.addresses) == ["10.20.0.2/24", "fd00:20::2/64"]
    if kind != "ipvlan":
        assert seen.mac == "02:11:22:33:44:55"
    assert prepared.network_data.interface_name == "net1"
    assert prepared.network_data.hardware_address == seen.mac

    netns.delete(pod)  # the pod's sandbox goes: virtual interfaces die with it
    handler.unprepare(prepared.undo)
    assert {ln["name"] for ln in links_in(host)} == {"p0", "q0"}


@pytest.mark.parametrize("kind,extra", KINDS)
def test_unprepare_when_the_pod_never_started(host, kind, extra):
    handler, _, prepared = prepare(_params(kind, extra), ctx=PARENT_CTX)
    assert len(links_in(host)) > 2
    handler.unprepare(prepared.undo)
    handler.unprepare(prepared.undo)  # idempotent
    assert {ln["name"] for ln in links_in(host)} == {"p0", "q0"}


@pytest.mark.kind("veth")
def test_veth_host_end_joins_an_allowed_bridge_and_survives_the_move(host, pod):
    netns.ip(host, "link", "add", "br0", "type", "bridge")
    handler, _, prepared = prepare(_params("veth", {"bridge": "br0"}), ctx=PARENT_CTX)
    [outer] = prepared.host_interfaces
    assert "master br0" in netns.ip(host, "link", "show", outer)
    move_like_runc(*net_device(prepared), pod)
    assert seen_in(pod, "eth1").up  # default container name
    handler.unprepare(prepared.undo)  # deleting the host end removes the pod end too
    assert links_in(pod) == []  # only lo is left in the pod
    assert {ln["name"] for ln in links_in(host)} == {"p0", "q0", "br0"}


@pytest.mark.kind("macvlan")
@pytest.mark.parametrize(
    "params,message",
    [
        ({"kind": "macvlan", "parent": "nope0"}, "interface nope0 does not exist"),
        ({"kind": "macvlan", "parent": "q0"}, "q0 is not on the operator's list"),
        ({"kind": "veth", "bridge": "p0"}, "p0 is not a bridge"),
    ],
)
def test_bad_parents_fail_validation_and_create_nothing(host, params, message):
    with pytest.raises(DriverError, match=message):
        prepare({"type": "netdev", "netdev": params}, ctx=PARENT_CTX)
    assert {ln["name"] for ln in links_in(host)} == {"p0", "q0"}


@pytest.mark.kind("veth")
def test_a_leftover_of_the_same_device_is_replaced_not_duplicated(host):
    uid, share = "0b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e", "fixed-share"
    dev = Device("netdev-virtual", {"type": "netdev", "kind": "virtual"})
    handler, first = _fixed(uid, share, dev)
    _, second = _fixed(uid, share, dev)  # a retry after a lost record: same names
    assert first.created_interfaces == second.created_interfaces
    assert len(links_in(host)) == 4
    handler.unprepare(second.undo)
    assert {ln["name"] for ln in links_in(host)} == {"p0", "q0"}


@pytest.mark.kind("veth")
def test_an_interface_of_another_owner_with_our_name_is_never_touched(host):
    uid, share = "0b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e", "fixed-share"
    name = naming.host_ifname(uid, naming.device_key("nic", "netdev-virtual", share))
    netns.ip(host, "link", "add", name, "type", "veth", "peer", "name", "other0")
    netns.ip(host, "link", "set", name, "alias", "owned by the operator")
    with pytest.raises(DriverError, match="belongs to someone else"):
        _fixed(uid, share, Device("netdev-virtual", {"type": "netdev", "kind": "virtual"}))
    assert name in {ln["name"] for ln in links_in(host)}


def _fixed(uid, share, device):
    handler, req = request(_params("veth", {}), device=device, ctx=PARENT_CTX, claim_uid=uid)
    req = DeviceRequest(
        **{**req.__dict__, "share_id": share, "key": naming.device_key("nic", device.name, share)}
    )
    handler.validate(req)
    return handler, handler.prepare(req)
