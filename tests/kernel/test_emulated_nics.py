"""sriov-vf, host-device and RoCE on real PCI NICs: qemu's igb (an SR-IOV capable Intel
82576 whose VFs run igbvf) and e1000e, which the kernel-VM tier adds to its VM
(`hack/vm/run.py --nics`). Discovery reads the real sysfs, VF settings go through the
real PF driver and are read back from the PF's VF table with `ip`, and each interface
moves into a pod's namespace the way runc does it (CDI) and the way the NRI mode does
it. Elsewhere these tests skip: no such NIC.

The tests run in the VM's own network namespace (the node): PCI functions belong there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dradriver.handlers.netdev import hostdevice, sriov
from dradriver.handlers.rdma import uverbs

from dradriver.base.errors import DriverError
from dradriver.contract import naming
from dradriver.contract.hookspecs import Capacity
from dradriver.nrimode import placing
from dradriver.state.moves import Move
from dradriver.state.records import PREPARED
from dradriver.state.recordstore import RecordStore
from tests.support import netns, pcinics
from tests.support.driverproc import DriverProcess
from tests.support.fakeapi import FakeApi, allocated_claim, opaque
from tests.support.handlers import context, net_device, prepare
from tests.support.runtime import move_like_runc, seen_in
from tests.support.waiting import wait_for

pytestmark = pytest.mark.root

STANDARD = "resource.kubernetes.io/"


@pytest.fixture
def igbs() -> Iterator[list[str]]:
    """The igb PFs, up (their VFs' rates need a link), without VFs before and after."""
    pfs = pcinics.netdevs(pcinics.IGB_PF)
    for pf in pfs:
        netns.ip_host("link", "set", pf, "up")
        pcinics.set_numvfs(pf, 0)
        pcinics.wait_link(pf)
    yield pfs
    for pf in pfs:
        pcinics.set_numvfs(pf, 0)


@pytest.fixture
def igb(igbs: list[str]) -> str:
    """The first igb PF."""
    return igbs[0]


@pytest.fixture
def e1000e() -> Iterator[str]:
    """The e1000e NIC, up with an address of its own, as a node's spare NIC would be."""
    [nic] = pcinics.netdevs(pcinics.E1000E)
    netns.ip_host("addr", "add", "192.0.2.40/24", "dev", nic)
    netns.ip_host("link", "set", nic, "up")
    pcinics.wait_link(nic)
    yield nic
    netns.ip_host("addr", "flush", "dev", nic)


def _host_view(name: str) -> tuple[int, str, bool, list[str]]:
    """(MTU, MAC, up, global addresses) of a host interface."""
    seen = seen_in_host(name)
    return (seen.mtu, seen.mac, seen.up, sorted(seen.addresses))


def seen_in_host(name: str) -> Any:
    """An interface of the node as `seen_in` reports a pod's."""
    return seen_in(_HOST, name)


_HOST = "dra-vm-node"  # a name for the VM's own namespace (pid 1's), made on first use


@pytest.fixture(autouse=True, scope="module")
def host_name() -> Iterator[None]:
    """Name the VM's own network namespace so the helpers that take a name reach it."""
    subprocess.run(["ip", "netns", "attach", _HOST, "1"], check=True, capture_output=True)
    yield
    subprocess.run(["ip", "netns", "delete", _HOST], check=True, capture_output=True)


def _give_back(how: str, moves: list[Move], pod: str, name: str) -> None:
    """What happens when the pod's sandbox goes: the NRI mode moves the interface back
    under its host name; in CDI mode the kernel returns it under its pod name."""
    if how == "nri":
        placing.move_out(moves, f"/run/netns/{pod}")
    else:
        netns.ip(pod, "link", "set", name, "netns", "1")


def _hand_over(how: str, prepared: Any, pod: str) -> list[Move]:
    """Move the prepared interface into the pod as runc (CDI) or the NRI mode does."""
    moves = [Move.of(p) for p in prepared.pod_interfaces]
    host, container = net_device(prepared)
    if how == "nri":
        placing.move_in(moves, f"/run/netns/{pod}")
    else:
        move_like_runc(host, container, pod)
    return moves


# -- discovery ---------------------------------------------------------------------------


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_the_vfs_of_a_real_pf_are_published_with_the_standard_attributes(igb):
    vfs = pcinics.set_numvfs(igb, 3)
    ctx = context(sriov_pfs=(igb,))
    devices = sriov.discover(ctx)
    assert [d.attributes["interfaceName"] for d in devices] == vfs
    for index, (device, vf) in enumerate(zip(devices, vfs, strict=True)):
        pci = pcinics.pci_of(vf)
        sys_pci = Path("/sys/bus/pci/devices") / pci
        a = dict(device.attributes)
        assert device.name == naming.published_device_name("vf", pci)
        assert (a["pfName"], a["vfIndex"], a["pciAddress"]) == (igb, index, pci)
        assert (a["pfPciAddress"], a["driver"]) == (pcinics.pci_of(igb), "igbvf")
        assert (a["pciVendorID"], a["pciDeviceID"]) == ("8086", "10ca")
        assert a["macAddress"] == Path(f"/sys/class/net/{vf}/address").read_text().strip()
        assert a[STANDARD + "pciBusID"] == pci
        root = sys_pci.resolve().relative_to("/sys/devices").parts[0]
        assert a[STANDARD + "pcieRoot"] == root and root.startswith("pci0000:")
        numa = int((sys_pci / "numa_node").read_text())
        assert a.get(STANDARD + "numaNode") == (numa if numa >= 0 else None)
        speed = int(Path(f"/sys/class/net/{igb}/speed").read_text())
        assert a["linkSpeedMbps"] == speed == 1000  # the VF shares its PF's port
        assert device.capacity == {"bandwidth": Capacity("1G")}  # and its bandwidth
    # The published set follows sriov_numvfs.
    pcinics.set_numvfs(igb, 0)
    assert sriov.discover(ctx) == []
    again = pcinics.set_numvfs(igb, 2)
    assert [d.attributes["interfaceName"] for d in sriov.discover(ctx)] == again


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_the_vfs_of_every_listed_pf_are_published(igbs):
    assert len(igbs) >= 2, "the tier boots two igb NICs"
    # As many VFs as the emulated PFs give (igb: 7 each).
    made = {pf: pcinics.set_numvfs(pf, pcinics.total_vfs(pf)) for pf in igbs}
    assert sum(len(vfs) for vfs in made.values()) >= 14
    listed = sriov.discover(context(sriov_pfs=tuple(made)))
    assert sorted(
        (d.attributes["pfName"], d.attributes["interfaceName"]) for d in listed
    ) == sorted((pf, vf) for pf, vfs in made.items() for vf in vfs)
    only_first = sriov.discover(context(sriov_pfs=(igbs[0],)))
    assert {d.attributes["pfName"] for d in only_first} == {igbs[0]}


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_dra_driver_discover_renders_the_vfs_for_the_api(igb):
    """The slice the node would publish: standard attributes under their own domain."""
    [vf] = pcinics.set_numvfs(igb, 1)
    command = [sys.executable, "-m", "dradriver", "discover", "--node-name", "node-a"]
    out = subprocess.run(
        [*command, "--sriov-pfs", igb, "-o", "json"], check=True, capture_output=True, text=True
    ).stdout
    [device] = [
        d
        for s in json.loads(out)["items"]
        for d in s["spec"]["devices"]
        if d["attributes"].get("kind") == {"string": "sriov-vf"}
    ]
    attrs = device["attributes"]
    pci = pcinics.pci_of(vf)
    assert attrs[STANDARD + "pciBusID"] == {"string": pci}
    assert attrs["vfIndex"] == {"int": 0} and attrs["interfaceName"] == {"string": vf}


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_a_vf_whose_driver_is_unbound_is_not_offered(igb):
    vfs = pcinics.set_numvfs(igb, 2)
    pci = pcinics.pci_of(vfs[1])
    Path("/sys/bus/pci/drivers/igbvf/unbind").write_text(pci)
    try:
        ctx = context(sriov_pfs=(igb,))
        assert [d.attributes["vfIndex"] for d in sriov.discover(ctx)] == [0]
    finally:
        Path("/sys/bus/pci/drivers/igbvf/bind").write_text(pci)


@pytest.mark.kind("host-device")
@pytest.mark.kernel("e1000e")
def test_a_real_pci_nic_is_published_with_its_pci_facts(e1000e):
    [device] = hostdevice.discover(context(parent_interfaces=(e1000e,)))
    a = dict(device.attributes)
    pci = pcinics.pci_of(e1000e)
    assert (a["interfaceName"], a["driver"], a["pciAddress"]) == (e1000e, "e1000e", pci)
    assert (a["pciVendorID"], a["pciDeviceID"], a[STANDARD + "pciBusID"]) == (
        "8086",
        "10d3",
        pci,
    )
    assert a[STANDARD + "pcieRoot"].startswith("pci0000:")
    assert a["linkSpeedMbps"] == 1000 and device.healthy
    assert device.capacity == {"bandwidth": Capacity("1G")}  # the whole link's


# -- sriov-vf ----------------------------------------------------------------------------

VF_CONFIG = {
    "kind": "sriov-vf",
    "interfaceName": "net1",
    "mtu": 1400,
    "macAddress": "02:11:22:33:44:55",
    "vlan": 100,
    "vlanQoS": 3,
    "spoofchk": False,
    "trust": True,
    "maxTxRate": 100,
    "ipAddresses": ["10.30.0.2/24"],
}


def _vf_view(pf: str, index: int) -> dict[str, Any]:
    """What the PF's VF table says of a VF, as `ip -j link show` gives it. Once a MAC the
    PF assigned is cleared (zeros) and the VF netdev's own MAC set back, igb lists that
    own MAC: the PF assigns none, as before; shown as zeros here."""
    entry = dict(pcinics.vf_entry(pf, index))
    entry.pop("link_type", None)
    netdev = pcinics.vf_netdev(pf, index)
    own = Path(f"/sys/class/net/{netdev}/address").read_text().strip() if netdev else None
    if entry.get("address") == own:
        entry["address"] = "00:00:00:00:00:00"
    return entry


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
@pytest.mark.parametrize("how", ["cdi", "nri"])
def test_vf_settings_go_through_the_pf_and_all_come_back(igb, pod, how):
    vfs = pcinics.set_numvfs(igb, 2)
    ctx = context(sriov_pfs=(igb,))
    vf1 = sriov.discover(ctx)[1]
    before = _vf_view(igb, 1)
    host_before = _host_view(vfs[1])
    handler, _, prepared = prepare({"type": "netdev", "netdev": VF_CONFIG}, device=vf1, ctx=ctx)
    table = pcinics.vf_entry(igb, 1)
    assert table["address"] == "02:11:22:33:44:55"
    assert pcinics.vlan_of(table) == (100, 3)
    assert (table["spoofchk"], table["trust"]) == (False, True)
    assert pcinics.max_rate_of(table) == 100
    assert net_device(prepared) == (vfs[1], "net1")

    moves = _hand_over(how, prepared, pod)
    seen = seen_in(pod, "net1")
    assert (seen.mtu, seen.mac, seen.up) == (1400, "02:11:22:33:44:55", True)
    assert "10.30.0.2/24" in seen.addresses
    _give_back(how, moves, pod, "net1")
    handler.unprepare(prepared.undo)

    assert pcinics.vf_netdev(igb, 1) == vfs[1]  # back under its own name
    assert _vf_view(igb, 1) == before  # every PF-side setting as it was
    assert _host_view(vfs[1]) == host_before


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # igb has no link-state control: refused after the MAC and the VLAN were set.
        (
            {"macAddress": "02:11:22:33:44:66", "vlan": 7, "linkState": "disable"},
            r"netdev\.linkState: PF \S+ refused linkState=disable for VF 0: "
            r"Operation not supported",
        ),
        ({"maxTxRate": 5000}, r"netdev\.maxTxRate: .*refused maxTxRate=5000.*Invalid argument"),
        ({"minTxRate": 10}, r"netdev\.minTxRate: .*refused minTxRate=10.*Invalid argument"),
        ({"vlan": 4095}, r"netdev\.vlan: 4095 is greater than the maximum of 4094"),
        ({"vlanQoS": 2}, r"netdev\.vlanQoS: vlanQoS needs vlan"),
    ],
)
def test_a_setting_the_pf_refuses_names_the_field_and_leaves_the_vf_as_it_was(
    igb, settings, message
):
    vfs = pcinics.set_numvfs(igb, 1)
    ctx = context(sriov_pfs=(igb,))
    [vf0] = sriov.discover(ctx)
    before, host_before = _vf_view(igb, 0), _host_view(vfs[0])
    with pytest.raises(DriverError, match=message):
        prepare({"type": "netdev", "netdev": {"kind": "sriov-vf", **settings}}, device=vf0, ctx=ctx)
    assert _vf_view(igb, 0) == before
    assert _host_view(vfs[0]) == host_before and pcinics.vf_netdev(igb, 0) == vfs[0]


# -- host-device -------------------------------------------------------------------------


@pytest.mark.kind("host-device")
@pytest.mark.kernel("e1000e")
@pytest.mark.parametrize("how", ["cdi", "nri"])
def test_a_real_pci_nic_is_handed_over_and_restored(e1000e, pod, how):
    ctx = context(parent_interfaces=(e1000e,))
    [device] = hostdevice.discover(ctx)
    before = _host_view(e1000e)
    params = {
        "type": "netdev",
        "netdev": {
            "kind": "host-device",
            "interfaceName": "net1",
            "mtu": 1400,
            "macAddress": "02:bb:00:00:00:40",
            "ipAddresses": ["10.30.0.40/24"],
        },
    }
    handler, _, prepared = prepare(params, device=device, ctx=ctx)
    moves = _hand_over(how, prepared, pod)
    seen = seen_in(pod, "net1")
    assert (seen.mtu, seen.mac, seen.up) == (1400, "02:bb:00:00:00:40", True)
    assert sorted(seen.addresses) == ["10.30.0.40/24", "192.0.2.40/24"]
    _give_back(how, moves, pod, "net1")
    handler.unprepare(prepared.undo)
    assert _host_view(e1000e) == before


@pytest.mark.kind("host-device")
@pytest.mark.kernel("igb-sriov")
def test_a_pf_with_vfs_is_not_handed_over_whole(igb):
    pcinics.set_numvfs(igb, 2)
    ctx = context(parent_interfaces=(igb,))
    [device] = hostdevice.discover(ctx)
    assert not device.healthy and f"{igb} is an SR-IOV PF with 2 VFs" in device.health_message
    with pytest.raises(DriverError, match=f"{igb} is an SR-IOV PF with 2 VFs: in a pod's"):
        prepare({"type": "netdev", "netdev": {"kind": "host-device"}}, device=device, ctx=ctx)
    pcinics.set_numvfs(igb, 0)
    [device] = hostdevice.discover(ctx)
    assert device.healthy


# -- RoCE on a VF ------------------------------------------------------------------------


@pytest.fixture
def rxe_on_vf(igb) -> Iterator[tuple[str, str]]:
    """A soft-RoCE device on VF 0 of the igb PF (up, addressed): (rxe, VF netdev)."""
    [vf] = pcinics.set_numvfs(igb, 1)
    netns.ip_host("addr", "add", "10.50.0.1/24", "dev", vf)
    netns.ip_host("link", "set", vf, "up")
    subprocess.run(["modprobe", "rdma_rxe"], check=True, capture_output=True)
    name = f"rxe{os.getpid() % 10000}"
    subprocess.run(
        ["rdma", "link", "add", name, "type", "rxe", "netdev", vf], check=True, capture_output=True
    )
    try:
        yield name, vf
    finally:
        subprocess.run(["rdma", "link", "delete", name], capture_output=True, check=False)


@pytest.mark.kind("roce")
@pytest.mark.kernel("igb-sriov")
@pytest.mark.kernel("rdma")
def test_roce_on_a_vf_moves_the_vf_with_its_rdma_device_nodes(rxe_on_vf, pod):
    rxe, vf = rxe_on_vf
    ctx = context(parent_interfaces=(vf,))
    device = next(d for d in uverbs.discover(ctx) if d.attributes["rdmaDevice"] == rxe)
    assert (device.attributes["netdev"], device.attributes["roce"]) == (vf, True)
    before = _host_view(vf)
    handler, _, prepared = prepare(
        {
            "type": "combo",
            "combo": {
                "kind": "roce",
                "netdev": {"interfaceName": "roce0", "ipAddresses": ["10.60.0.2/24"]},
            },
        },
        device=device,
        ctx=ctx,
    )
    assert net_device(prepared) == (vf, "roce0")
    [node] = [n["path"] for n in prepared.edits["deviceNodes"] if "uverbs" in n["path"]]
    assert stat.S_ISCHR(os.stat(node).st_mode)
    move_like_runc(vf, "roce0", pod)
    assert sorted(seen_in(pod, "roce0").addresses) == ["10.50.0.1/24", "10.60.0.2/24"]
    # Soft-RoCE unregisters when its netdev leaves (docs/known-limits.md); the VF returns.
    netns.ip(pod, "link", "set", "roce0", "netns", "1")
    handler.unprepare(prepared.undo)
    assert _host_view(vf) == before


# -- a driver killed between the PF-side settings and the move ----------------------------


@pytest.fixture
def node_driver(tmp_path: Path) -> Iterator[tuple[FakeApi, Callable[..., DriverProcess]]]:
    """The API stand-in and `dra-driver run` processes, all in the VM's own namespace
    (where the NICs are)."""
    fake = FakeApi()
    fake.add_node("node-a")
    root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # short: socket paths
    started: list[DriverProcess] = []
    with fake.serving(_HOST) as url:
        kubeconfig = fake.kubeconfig(url, root / "kubeconfig")

        def start(*args: str) -> DriverProcess:
            proc = DriverProcess(root, _HOST, kubeconfig, args=args, enter=())
            started.append(proc)
            return proc.start()

        try:
            yield fake, start
        finally:
            for proc in started:
                if proc.proc is not None and proc.proc.poll() is None:
                    os.kill(proc.proc.pid, signal.SIGCONT)
                    proc.stop()
            shutil.rmtree(root, ignore_errors=True)


def _unprepare(d: DriverProcess, claim: dict[str, Any]) -> None:
    """The kubelet's unprepare call, which must succeed."""
    errors = [r.error for r in d.unprepare([claim]).claims.values() if r.error]
    assert not errors, f"{errors}\n{d.log()[-3000:]}"


def _prepare_into(
    d: DriverProcess, claim: dict[str, Any], answers: list[Any], done: threading.Event
) -> None:
    """The kubelet's prepare call, its answer appended to `answers` (none if the driver
    was killed under it), then `done` set."""
    with contextlib.suppress(Exception):
        answers.append(d.prepare([claim]))
    done.set()


def _freeze_at_the_first_vf_change(
    pid: int, pf: str, before: dict[str, Any], done: threading.Event
) -> bool:
    """Stop process `pid` (SIGSTOP) once the PF's VF table differs from `before`: the
    driver is then between its first PF-side setting and the end of prepare. The driver
    runs in slices of a few milliseconds and the table is read while it is stopped, so
    however slow a read is (`ip` under software emulation), the driver cannot run past
    the window unseen. False if the call ended (`done`) without a change."""
    while not done.is_set():
        os.kill(pid, signal.SIGSTOP)
        _stopped(pid)
        if _vf_view(pf, 0) != before:
            return True
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
    return _vf_view(pf, 0) != before and not os.kill(pid, signal.SIGSTOP)


def _stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped (a SIGSTOP takes effect asynchronously)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        if all(state in ("T", "t", "Z", "X") for state in states):
            return
        time.sleep(0.001)


def _one_vf(pf: str) -> tuple[str, str, dict[str, Any], tuple[int, str, bool, list[str]]]:
    """Give `pf` one VF: its netdev, its published device name, and how the PF and the
    node see it before a test."""
    [vf] = pcinics.set_numvfs(pf, 1)
    device = naming.published_device_name("vf", pcinics.pci_of(vf))
    return vf, device, _vf_view(pf, 0), _host_view(vf)


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_a_driver_killed_after_the_pf_side_settings_restores_them_at_restart(igb, node_driver):
    fake, start = node_driver
    vf, device, before, host_before = _one_vf(igb)
    flags = ("--sriov-pfs", igb, "--claim-address-ranges", "10.30.0.0/24")
    d = start(*flags)
    for attempt in range(5):
        claim = allocated_claim(
            f"vf-{attempt}",
            [{"request": "nic", "pool": "node-a", "device": device}],
            config=[opaque({"type": "netdev", "netdev": VF_CONFIG})],
        )
        fake.add_claim(claim)
        answers: list[Any] = []
        done = threading.Event()

        threading.Thread(target=_prepare_into, args=(d, claim, answers, done), daemon=True).start()
        frozen = _freeze_at_the_first_vf_change(d.proc.pid, igb, before, done)
        assert frozen, f"prepare never changed the VF: {answers}\n{d.log()[-3000:]}"
        record = RecordStore(d.state).load(claim["metadata"]["uid"])
        if record is None or record.phase != PREPARED:
            break  # frozen inside prepare: kill it here
        os.kill(d.proc.pid, signal.SIGCONT)  # prepare had finished: try again
        done.wait(30)
        _unprepare(d, claim)
    else:
        pytest.fail("the driver finished prepare before it could be frozen, 5 times")
    assert _vf_view(igb, 0) != before  # the PF-side settings are on
    d.kill()
    done.wait(30)
    d = start(*flags)  # reconciles at start
    seen = netns.ip_host("-d", "link", "show", "dev", vf)
    assert _vf_view(igb, 0) == before, (
        f"{pcinics.vf_entry(igb, 0)}\n{seen}\n{host_before}\n{d.log()[-4000:]}"
    )
    assert pcinics.vf_netdev(igb, 0) == vf and _host_view(vf) == host_before
    assert not list(d.state.glob("*.alloc.json"))
    # The kubelet's retry prepares it from scratch, and unprepare gives everything back.
    answer = d.prepare([claim]).claims[claim["metadata"]["uid"]]
    assert not answer.error, answer.error
    assert pcinics.vlan_of(pcinics.vf_entry(igb, 0)) == (100, 3)
    _unprepare(d, claim)
    assert _vf_view(igb, 0) == before and _host_view(vf) == host_before


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_the_driver_republishes_its_slice_when_sriov_numvfs_changes(igb, node_driver):
    fake, start = node_driver
    start("--sriov-pfs", igb)

    def published_vfs() -> list[str]:
        return sorted(
            d["attributes"]["interfaceName"]["string"]
            for s in list(fake.slices.values())
            for d in s["spec"]["devices"]
            if d["attributes"].get("kind") == {"string": "sriov-vf"}
        )

    wait_for("the first slice", lambda: fake.slices, 30)
    assert published_vfs() == []
    vfs = pcinics.set_numvfs(igb, 3)
    wait_for("the VFs in the slice", lambda: published_vfs() == sorted(vfs), 30)
    pcinics.set_numvfs(igb, 0)
    wait_for("no VF in the slice", lambda: published_vfs() == [], 30)


@pytest.mark.kind("sriov-vf")
@pytest.mark.kernel("igb-sriov")
def test_a_vf_claim_is_limited_to_the_bandwidth_it_requested(igb, node_driver):
    fake, start = node_driver
    vf, device, before, host_before = _one_vf(igb)
    d = start("--sriov-pfs", igb)

    def published() -> list[dict[str, Any]]:
        devices = [x for s in list(fake.slices.values()) for x in s["spec"]["devices"]]
        return [x for x in devices if x["name"] == device]

    wait_for("the VF in the slice", published, 30)
    assert published()[0]["capacity"] == {"bandwidth": {"value": "1G"}}

    def claim(name: str, bandwidth: str, netdev: dict[str, Any]) -> dict[str, Any]:
        made = allocated_claim(
            name,
            [{"request": "nic", "pool": "node-a", "device": device}],
            config=[opaque({"type": "netdev", "netdev": {"kind": "sriov-vf", **netdev}})],
        )
        [request] = made["spec"]["devices"]["requests"]
        request["exactly"] |= {
            "deviceClassName": "network-devices",
            "capacity": {"requests": {"bandwidth": bandwidth}},
        }
        fake.add_claim(made)
        return made

    # 250.5 Mbit/s: a VF's limit is set in whole Mb/s, rounded up.
    limited = claim("vf-limited", "250500k", {"interfaceName": "net1"})
    answer = d.prepare([limited]).claims[limited["metadata"]["uid"]]
    assert not answer.error, f"{answer.error}\n{d.log()[-3000:]}"
    assert pcinics.max_rate_of(pcinics.vf_entry(igb, 0)) == 251
    record = RecordStore(d.state).load(limited["metadata"]["uid"])
    assert record is not None and list(record.consumed.values()) == [{"bandwidth": "250500k"}]
    _unprepare(d, limited)
    assert _vf_view(igb, 0) == before and _host_view(vf) == host_before

    # A config that limits the VF too is refused, naming the field; nothing changes.
    both = claim("vf-both", "100M", {"interfaceName": "net1", "maxTxRate": 50})
    answer = d.prepare([both]).claims[both["metadata"]["uid"]]
    assert "netdev.maxTxRate" in answer.error and "leave maxTxRate out" in answer.error
    assert _vf_view(igb, 0) == before and _host_view(vf) == host_before
    assert not list(d.state.glob("*.alloc.json"))
