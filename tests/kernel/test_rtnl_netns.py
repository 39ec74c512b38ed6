"""The rtnetlink backend's NRI-mode calls against the real kernel: entering a pod's
network namespace (a throw-away one), moving links in and back, routes, sysctls.

What the kernel does is compared with what iproute2 (`ip -j`) sees.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
from pathlib import Path

import pytest

from dradriver.base.errors import DeviceError
from dradriver.contract.hookspecs import PodRoute
from dradriver.kernel import netlink, rdmanl
from dradriver.nrimode import placing
from dradriver.state.moves import Move
from tests.kernel.conftest import index as _index
from tests.support import ipjson, netns

pytestmark = pytest.mark.root


def _path(name: str) -> str:
    return f"/run/netns/{name}"


def _netns_inode() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


def test_enter_and_leave_switch_this_threads_namespace(node, kernel, pod):
    home = _netns_inode()
    assert kernel.find("a0") is not None  # a socket of the node's namespace is open
    kernel.enter(_path(pod))
    try:
        assert _netns_inode() == os.stat(_path(pod)).st_ino
        assert kernel._local.conn is None  # closed before the switch, reopened lazily
        assert {ln.name for ln in kernel.links()} == {"lo"}
        assert kernel.find("a0") is None
        with pytest.raises(RuntimeError, match="already inside a network namespace"):
            kernel.enter(_path(node))
    finally:
        kernel.leave()
    assert _netns_inode() == home
    assert kernel.find("a0") is not None
    kernel.leave()  # not inside: nothing to do
    assert _netns_inode() == home


@pytest.mark.parametrize(
    "path,message",
    [
        ("/run/netns/dratest-gone", "No such file or directory (is the pod sandbox gone?)"),
        ("/proc/version", "is not a network namespace"),
        ("/proc/self/ns/uts", "is not a network namespace"),
        ("run/netns/x", "is not absolute"),
    ],
)
def test_enter_refuses_what_is_not_a_network_namespace(node, kernel, path, message):
    home = _netns_inode()
    assert not kernel.has_netns(path)
    with pytest.raises(OSError, match=re.escape(message)):
        kernel.enter(path)
    assert _netns_inode() == home
    assert kernel.find("a0") is not None
    previous = netlink.use(kernel)
    try:
        refused = pytest.raises(DeviceError, match="cannot enter the pod's network namespace")
        with refused, netlink.inside(path):
            raise AssertionError("entered what is not a network namespace")
        assert netlink.netns_exists(path) is False
    finally:
        netlink.use(previous)


def test_has_netns_sees_a_namespace_come_and_go(node, kernel):
    other = netns.create("rtnl-gone")
    try:
        assert kernel.has_netns(_path(other))
    finally:
        netns.delete(other)
    assert not kernel.has_netns(_path(other))


def test_inside_comes_back_even_when_the_block_fails(node, kernel, pod):
    home = _netns_inode()
    previous = netlink.use(kernel)
    try:
        with pytest.raises(DeviceError, match="a0 does not exist"), netlink.inside(_path(pod)):
            assert _netns_inode() == os.stat(_path(pod)).st_ino
            netlink.require("a0", "the node's")  # the pod has no a0
    finally:
        netlink.use(previous)
    assert _netns_inode() == home
    assert kernel.find("a0") is not None


def test_move_into_a_pod_and_back_renamed_in_one_request(node, kernel, pod):
    kernel.move(_index(node, "b0"), _path(pod), "eth1")
    assert kernel.find("b0") is None
    assert ipjson.link_info(pod, "eth1")["ifname"] == "eth1"
    with pytest.raises(netlink.NetlinkError) as raised:
        kernel.move(_index(node, "a0"), None, "a0")  # not inside: no home to go back to
    assert raised.value.errno == errno.EINVAL
    kernel.enter(_path(pod))
    try:
        index = kernel.find("eth1").index
        kernel.move(index, None, "b0")
        assert kernel.find("eth1") is None
    finally:
        kernel.leave()
    assert ipjson.link_info(node, "b0")["link"] == "a0"


def test_a_move_home_under_a_taken_name_moves_then_refuses_the_rename(node, kernel, pod):
    """The kernel (as `ip link set ... netns ... name ...` shows too) moves the link, then
    refuses the rename with EEXIST: the link is home under its pod name, not left in the
    pod. A name pattern lets the kernel pick a free name instead."""
    kernel.move(_index(node, "b0"), _path(pod), "eth1")
    netns.ip(node, "link", "add", "b0", "type", "veth", "peer", "name", "b1")
    kernel.enter(_path(pod))
    try:
        index = kernel.find("eth1").index
        with pytest.raises(netlink.NetlinkError) as raised:
            kernel.move(index, None, "b0")
        assert raised.value.errno == errno.EEXIST
        assert kernel.find("eth1") is None
    finally:
        kernel.leave()
    assert _index(node, "eth1") == index
    kernel.move(index, _path(pod), "eth1")
    kernel.enter(_path(pod))
    try:
        kernel.move(index, None, "dev%d")
    finally:
        kernel.leave()
    back = [ln for ln in ipjson.links(node) if ln.name.startswith("dev")]
    assert [ln.index for ln in back] == [index]


def _route_info(ns: str, family: str, dst: str) -> dict:
    [found] = json.loads(netns.ip(ns, "-j", family, "route", "show", "exact", dst))
    return found


def test_add_route_in_both_families_reads_back_as_ip_route_add_makes_it(node, kernel):
    a0 = _index(node, "a0")
    cases = [  # destination, gateway, metric, scope ip shows
        ("198.51.100.0/24", None, None, "link"),
        ("203.0.113.0/24", "10.9.0.2", 50, "global"),
        ("0.0.0.0/0", "10.9.0.254", None, "global"),
        ("192.0.2.9/32", None, 7, "link"),
        ("2001:db8:7::/64", None, 300, "global"),
        ("2001:db8:8::/64", "fd00:9::2", None, "global"),
        ("::/0", "fe80::1", 10, "global"),
    ]
    for dst, gateway, metric, _ in cases:
        kernel.add_route(a0, dst, gateway, metric)
    have = set(kernel.routes())
    for dst, gateway, metric, scope in cases:
        gateways = (gateway,) if gateway else ()
        assert netlink.Route(dst, "unicast", 254, gateways, a0) in have
        family = "-6" if ":" in dst else "-4"
        info = _route_info(node, family, dst)
        assert info["protocol"] == "static" and info.get("scope", "global") == scope
        assert info["dev"] == "a0" and info.get("gateway") == gateway
        assert info.get("metric", 0) == (metric if metric is not None else 1024 * (family == "-6"))
    assert set(ipjson.routes(node)) == have


def test_a_claim_route_is_kept_when_identical_and_refused_when_another_is_there(node, kernel):
    """The kernel's EEXIST says a route to the destination at that metric exists: the
    claim's own (a move done again) is kept, another one is named; IPv6 routes added
    without a metric are at 1024, IPv4 ones at 0, as the dump reports them."""
    previous = netlink.use(kernel)
    try:
        link = netlink.find("a0")
        for gateway, destination in (
            ("10.9.0.2", "198.51.100.0/24"),
            ("fd00:9::2", "2001:db8:7::/48"),
        ):
            placing.add_route(link, PodRoute(destination, gateway, None), 0)
            placing.add_route(link, PodRoute(destination, gateway, None), 0)  # again: kept
        with pytest.raises(DeviceError) as refused:
            placing.add_route(link, PodRoute("198.51.100.0/24", "10.9.0.3", None), 1)
        assert str(refused.value).startswith(
            "config routes[1] (198.51.100.0/24 via 10.9.0.3, metric 0): the pod already has "
            "a route to 198.51.100.0/24 at metric 0 (198.51.100.0/24 via 10.9.0.2 dev a0)"
        )
        with pytest.raises(DeviceError, match=r"routes\[0\] .*at metric 1024 .*via fd00:9::2"):
            placing.add_route(link, PodRoute("2001:db8:7::/48", "fd00:9::3", None), 0)
        placing.add_route(link, PodRoute("2001:db8:7::/48", "fd00:9::3", 5), 2)  # beside it
    finally:
        netlink.use(previous)
    ours = {
        (r.dst, r.gateways) for r in ipjson.routes(node) if r.dst.startswith(("198.51.", "2001:"))
    }
    assert ours == {
        ("198.51.100.0/24", ("10.9.0.2",)),
        ("2001:db8:7::/48", ("fd00:9::2",)),
        ("2001:db8:7::/48", ("fd00:9::3",)),
    }


def test_add_route_errors_name_the_route(node, kernel):
    a0 = _index(node, "a0")
    kernel.add_route(a0, "198.51.100.0/24", "10.9.0.2", None)
    with pytest.raises(netlink.NetlinkError) as raised:
        kernel.add_route(a0, "198.51.100.0/24", "10.9.0.2", None)
    assert raised.value.errno == errno.EEXIST
    with pytest.raises(netlink.NetlinkError) as raised:
        kernel.add_route(a0, "198.51.101.5/24", None, None)  # host bits: the kernel says so
    assert raised.value.errno == errno.EINVAL and raised.value.detail
    with pytest.raises(netlink.NetlinkError) as raised:
        kernel.add_route(a0, "198.51.102.0/24", "fd00:9::2", None)
    assert raised.value.errno == errno.EINVAL
    assert "route gateway fd00:9::2 is not of the family of 198.51.102.0/24" in str(raised.value)
    previous = netlink.use(kernel)
    try:
        link = netlink.find("a0")
        with pytest.raises(netlink.NetlinkError) as raised:
            netlink.add_route(link, "198.51.100.0/24", "10.9.0.2", None)
        assert str(raised.value) == (
            "add route 198.51.100.0/24 via 10.9.0.2 dev a0: File exists (errno 17)"
        )
    finally:
        netlink.use(previous)
    assert [r.dst for r in ipjson.routes(node) if r.dst.startswith("198.51.")] == [
        "198.51.100.0/24"
    ]


def _read_sysctl(ns: str, path: str) -> str:
    with netns.inside(ns):
        return Path("/proc/sys", path).read_text().strip()


def test_sysctls_are_those_of_the_threads_namespace(node, kernel, pod):
    netns.ip(pod, "link", "add", "eth1", "type", "veth", "peer", "name", "p1")
    key = "net/ipv4/conf/lo/accept_local"
    before = _read_sysctl(node, key)
    kernel.enter(_path(pod))
    try:
        assert kernel.has_sysctl("net/ipv4/conf/eth1/forwarding")
        assert not kernel.has_sysctl("net/ipv4/conf/a0/forwarding")  # the node's link
        assert not kernel.has_sysctl("net/ipv4/conf/eth1")  # a directory, not a setting
        kernel.write_sysctl(key, "1" if before == "0" else "0")
        with pytest.raises(FileNotFoundError):
            kernel.write_sysctl("net/ipv4/conf/a0/forwarding", "1")
    finally:
        kernel.leave()
    assert kernel.has_sysctl("net/ipv4/conf/a0/forwarding")
    assert _read_sysctl(pod, key) == ("1" if before == "0" else "0")
    assert _read_sysctl(node, key) == before
    previous = netlink.use(kernel)
    try:
        with pytest.raises(netlink.NetlinkError) as raised:
            netlink.set_sysctl("net/ipv4/conf/nope0/forwarding", "1")
        assert raised.value.errno == errno.ENOENT
        assert str(raised.value).startswith("write 1 to /proc/sys/net/ipv4/conf/nope0/forwarding")
    finally:
        netlink.use(previous)


def _has_rdma_netlink() -> bool:
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, rdmanl.NETLINK_RDMA).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_rdma_netlink(), reason="RDMA netlink here: tests/kernel/test_rdma.py")
def test_without_rdma_the_rdma_calls_say_so(node, kernel):
    previous = netlink.use(kernel)
    try:
        assert netlink.rdma_exclusive() is False
        with pytest.raises(netlink.NetlinkError) as raised:
            netlink.rdma_devices()
        assert raised.value.errno == errno.EPROTONOSUPPORT
        assert str(raised.value).startswith("list RDMA devices: Protocol not supported")
    finally:
        netlink.use(previous)


@pytest.mark.kernel("macvlan")
def test_a_macvlan_whose_mac_its_parent_has_in_use_fails_naming_the_macaddress(node, kernel, pod):
    """Another pod's macvlan on the same parent holds the MAC (invisible from the node):
    the kernel refuses the link only when it comes up in the pod; the error names the
    claim's macAddress instead of "Address already in use" alone."""
    other = netns.create("macowner")
    try:
        mac = "0a:00:00:00:00:01"
        netns.ip(node, "link", "add", "m1", "link", "a0", "address", mac, "type", "macvlan")
        netns.ip(node, "link", "set", "m1", "netns", other)
        netns.ip(other, "link", "set", "m1", "up")
        netns.ip(node, "link", "add", "m2", "link", "a0", "address", mac, "type", "macvlan")
        previous = netlink.use(kernel)
        try:
            with pytest.raises(DeviceError) as refused:
                placing.move_in([Move("m2", "data0")], _path(pod))
        finally:
            netlink.use(previous)
        assert f"config macAddress ({mac}): data0 cannot come up" in str(refused.value)
        assert ipjson.link_info(pod, "data0")["operstate"] == "DOWN"
    finally:
        netns.delete(other)
