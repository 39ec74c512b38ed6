"""The prepare state machine in-process, without root: Preparer, Planner and start-up
reconciliation against an in-memory kernel, the API stand-in's objects and real files in
a temporary directory (kubernetes-sigs/dra-example-driver's state_test.go is the model).

Every step of a prepare (each kernel request, each file write) is made to fail, and
separately to crash the process, and what is left is checked: after a failure nothing,
after a crash nothing that start-up reconciliation does not repair, and a prepare after
either answers exactly what an undisturbed one answers.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dradriver import atomicfile, cdi, gc, netlink, records
from dradriver.config import ConfigSchema
from dradriver.hookspecs import ClaimRef
from dradriver.inventory import Inventory
from dradriver.kubeapi import ApiError
from dradriver.netlink import Route
from dradriver.prepare import Outcome, Preparer
from dradriver.records import PREPARED, RecordStore
from dradriver.registry import HandlerRegistry
from tests.support.fakeapi import FakeApi, allocated_claim, opaque
from tests.support.fakekernel import Crash, FakeKernel, Steps, restore
from tests.support.fakesys import FakeSys
from tests.support.handlers import context

DRIVER = "dra.example.com"
REGISTRY = HandlerRegistry()
SCHEMA = ConfigSchema(REGISTRY, DRIVER)
NIC_MAC = "02:00:00:00:10:01"


class Claims:
    """The API's ResourceClaims, as Preparer asks for them (GET with the API's errors)."""

    server = "the API stand-in"

    def __init__(self) -> None:
        self.fake = FakeApi()

    def get_claim(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any]:
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        code, body = self.fake.handle("GET", path, {}, None)
        if code >= 400:
            raise ApiError(code, body["reason"], body["message"])
        return dict(body)


@dataclass
class Node:
    """One node: its kernel, its sysfs, its directories, its API objects."""

    root: Path
    kernel: FakeKernel
    steps: Steps
    api: Claims

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def preparer(self, **settings: Any) -> Preparer:
        """A Preparer as `dra-driver run` wires one (a new one is a restarted driver);
        `settings` override the node's context."""
        ctx = context(
            **{
                "sysfs_root": self.root / "sys",
                "parent_interfaces": ("ens1",),
                "virtual_parents": ("ens2",),
                "claim_address_ranges": ("198.51.100.0/24", "2001:db8::/32"),
                **settings,
            }
        )
        return Preparer(
            context=ctx,
            cdi_dir=self.cdi_dir,
            records=RecordStore(self.state_dir),
            registry=REGISTRY,
            schema=SCHEMA,
            inventory=Inventory(REGISTRY, ctx),
            api=self.api,
        )

    def start(self) -> Preparer:
        """A restart: records loaded and reconciled as `dra-driver run` does at start."""
        preparer = self.preparer()
        loaded, corrupt = preparer.records.load_all()
        assert corrupt == []
        gc.reconcile(loaded, self.cdi_dir, DRIVER, preparer.lifecycle)
        return preparer

    def files(self) -> list[str]:
        """Every file the driver keeps (paths relative to its directory)."""
        return sorted(
            str(p.relative_to(d))
            for d in (self.cdi_dir, self.state_dir)
            for p in d.rglob("*")
            if not p.is_dir()
        )

    def links(self) -> dict[str, tuple[Any, ...]]:
        """Every link with what a claim could have changed on it."""
        return {
            n: (ln.mtu, ln.address, ln.up, ln.alias, sorted(ln.addresses))
            for n, ln in self.kernel.table.items()
        }


@pytest.fixture
def node(tmp_path, monkeypatch) -> Iterator[Node]:
    steps = Steps((tmp_path / "cdi", tmp_path / "state"))
    kernel = FakeKernel(steps)
    nic = kernel.add("ens1", address=NIC_MAC, up=True)
    nic.addresses.add(("192.0.2.5", 24))
    kernel.static_routes.append(Route("0.0.0.0/0", "unicast", 254, ("192.0.2.254",), nic.index))
    kernel.add("ens2", up=True)  # the macvlan parent
    fs = FakeSys(tmp_path / "sys")
    fs.nic("ens1", "0000:3b:00.0", mac=NIC_MAC)
    (tmp_path / "cdi").mkdir()
    # File writes and removals are steps too: a crash can come between any two.
    for module in (records, cdi):
        monkeypatch.setattr(module, "write_atomic", _counted(steps, "write", module.write_atomic))
        monkeypatch.setattr(
            module, "remove_durably", _counted(steps, "remove", atomicfile.remove_durably)
        )
    previous = netlink.use(kernel)
    try:
        yield Node(tmp_path, kernel, steps, Claims())
    finally:
        netlink.use(previous)


def _counted(steps: Steps, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(path: Path, *args: Any, **kwargs: Any) -> Any:
        steps.tick(f"{what} {path.name}")
        return fn(path, *args, **kwargs)

    return wrapped


# -- the claims ------------------------------------------------------------------------------


def _claim(uid: str, device: str, params: dict[str, Any], share: bool) -> dict[str, Any]:
    result = {"request": "nic", "pool": "node-a", "device": device}
    if share:
        result["shareID"] = str(uuid.UUID(int=uuid.UUID(uid).int ^ 1))
    return allocated_claim("c", [result], uid=uid, config=[opaque(params)], pods=[POD])


KINDS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "veth": (
        "netdev-virtual",
        {"kind": "veth", "interfaceName": "net1", "mtu": 1400,
         "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"]},
        True,
    ),
    "macvlan": (
        "netdev-virtual",
        {"kind": "macvlan", "parent": "ens2", "interfaceName": "data0",
         "macAddress": "02:00:00:00:20:01", "ipAddresses": ["198.51.100.8/24"]},
        True,
    ),
    "host-device": (
        "nic-ens1",
        {"kind": "host-device", "interfaceName": "net2", "mtu": 9000,
         "macAddress": "02:00:00:00:30:01", "ipAddresses": ["198.51.100.9/24"]},
        False,
    ),
}  # fmt: skip
UID = "5a0c6f5e-0000-4000-8000-000000000001"
POD = "5a0c6f5e-0000-4000-8000-0000000000aa"


def _ref() -> ClaimRef:
    return ClaimRef("default", "c", UID)


def _add_claim(node: Node, kind: str) -> None:
    device, netdev, share = KINDS[kind]
    node.api.fake.add_claim(_claim(UID, device, {"type": "netdev", "netdev": netdev}, share))


def _prepare(preparer: Preparer) -> Outcome:
    return preparer.prepare([_ref()])[UID]


@pytest.fixture
def reference(node: Node) -> Callable[[str], tuple[Outcome, int, dict[str, Any]]]:
    """Prepare `kind` once undisturbed on `node`, then undo it: (answer, steps, links)."""

    def run(kind: str) -> tuple[Outcome, int, dict[str, Any]]:
        before = node.links()
        _add_claim(node, kind)
        preparer = node.preparer()
        start = node.steps.count
        outcome = _prepare(preparer)
        assert outcome.error is None, outcome.error
        taken = node.steps.count - start
        prepared_links = node.links()
        assert preparer.unprepare([_ref()])[UID].error is None
        assert node.links() == before and node.files() == []
        return outcome, taken, prepared_links

    return run


# -- tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_prepare_is_idempotent_and_unprepare_leaves_nothing(node, kind):
    before = node.links()
    _add_claim(node, kind)
    preparer = node.preparer()
    first = _prepare(preparer)
    assert first.error is None and len(first.devices) == 1
    index = f"by-pod/{POD}/{UID}"
    assert node.files() == sorted([f"{DRIVER}-netdev_{UID}.json", f"{UID}.alloc.json", index])
    steps = node.steps.count
    assert _prepare(node.start()) == first  # after a restart too, from the record alone
    assert node.steps.count == steps, "an idempotent prepare touched the kernel or the disk"
    assert node.preparer().unprepare([_ref()])[UID].error is None
    assert node.links() == before and node.files() == []


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_failure_at_any_step_leaves_the_node_as_it_was(node, kind, reference):
    expected, steps, _ = reference(kind)
    before = node.links()
    for step in range(1, steps + 1):
        node.steps.fail_at = node.steps.count + step
        outcome = _prepare(node.preparer())
        node.steps.fail_at = None
        assert outcome.error is not None and "Operation not permitted" in outcome.error, step
        assert node.links() == before, (step, node.steps.log[-steps:])
        assert node.files() == [], step
    assert _prepare(node.preparer()) == expected


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crash_at_any_step_is_repaired_at_start(node, kind, reference):
    expected, steps, prepared_links = reference(kind)
    before = node.links()
    for step in range(1, steps + 1):
        node.steps.crash_at = node.steps.count + step
        with pytest.raises(Crash):
            _prepare(node.preparer())
        node.steps.crash_at = None
        image = node.steps.image
        assert image is not None
        node.kernel.table = image.table  # what the kernel and the disk held at the crash
        restore(node.steps.dirs, image.files)
        preparer = node.start()
        committed = preparer.records.load(UID)
        if committed is None:
            assert node.links() == before, (step, node.steps.log[-steps:])
            assert node.files() == [], step
        else:  # the crash came after the commit point: the claim is prepared as it is
            assert committed.phase == PREPARED and node.links() == prepared_links, step
        assert _prepare(preparer) == expected, step
        assert preparer.unprepare([_ref()])[UID].error is None
        assert node.links() == before and node.files() == [], step


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_crash_at_any_step_of_unprepare_is_finished_by_the_next_one(node, kind, reference):
    expected, _, _ = reference(kind)
    before = node.links()
    # How many steps an unprepare takes.
    assert _prepare(node.preparer()) == expected
    start = node.steps.count
    assert node.preparer().unprepare([_ref()])[UID].error is None
    steps = node.steps.count - start
    for step in range(1, steps + 1):
        assert _prepare(node.preparer()) == expected
        node.steps.crash_at = node.steps.count + step
        with pytest.raises(Crash):
            node.preparer().unprepare([_ref()])
        node.steps.crash_at = None
        image = node.steps.image
        assert image is not None
        node.kernel.table = image.table
        restore(node.steps.dirs, image.files)
        assert node.start().unprepare([_ref()])[UID].error is None, step
        assert node.links() == before and node.files() == [], step


def test_a_claim_the_api_no_longer_has_is_an_error_naming_it(node):
    outcome = _prepare(node.preparer())
    assert outcome.error is not None
    assert f"claim default/c ({UID})" in outcome.error and "not found" in outcome.error
    assert node.files() == []


def test_a_claim_replaced_under_the_same_name_is_refused(node):
    _add_claim(node, "veth")
    other = ClaimRef("default", "c", "5a0c6f5e-0000-4000-8000-0000000000ff")
    outcome = node.preparer().prepare([other])[other.uid]
    assert outcome.error is not None and "replaced" in outcome.error
    assert node.files() == []


# -- records that are no longer true ------------------------------------------------------


def _reboot(node: Node) -> None:
    """What a reboot does: every link the driver made is gone, host NICs are back as they
    were at boot, files stay; the kernel has a new boot ID."""
    node.kernel.table = {n: ln for n, ln in node.kernel.table.items() if n in ("ens1", "ens2")}
    nic = node.kernel.table["ens1"]
    nic.mtu, nic.address, nic.up, nic.alias = 1500, NIC_MAC, True, None
    nic.addresses = {("192.0.2.5", 24)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_reboot_is_repaired_at_start_from_the_record_alone(node, kind, reference):
    expected, _, prepared_links = reference(kind)
    preparer = node.preparer()
    preparer.lifecycle.boot_id = "boot-1"
    assert _prepare(preparer) == expected
    _reboot(node)
    node.api.fake.claims.clear()  # the API server is not up yet: the record must do
    restarted = node.preparer()
    restarted.lifecycle.boot_id = "boot-2"
    loaded, _ = restarted.records.load_all()
    report = gc.reconcile(loaded, node.cdi_dir, DRIVER, restarted.lifecycle)
    assert report.reprepared_claims == [UID] and report.problems == []
    # The same names, configured the same way (a new veth or macvlan gets a new MAC from
    # the kernel unless the config sets one, as after any reboot).
    assert _without_macs(node.links()) == _without_macs(prepared_links)
    record = restarted.records.load(UID)
    assert record is not None and record.boot_id == "boot-2"
    assert _prepare(restarted) == expected  # without the API: from the record
    assert restarted.unprepare([_ref()])[UID].error is None
    assert node.files() == []


def test_a_prepared_claim_whose_interface_is_gone_is_prepared_again(node, reference):
    """SIGKILL in the middle of an unprepare can delete the interface and keep the
    record; a later prepare must not answer from that record as if all were well."""
    expected, _, prepared_links = reference("veth")
    preparer = node.preparer()
    assert _prepare(preparer) == expected
    for name in list(node.kernel.table):
        if name not in ("ens1", "ens2") and name in node.kernel.table:
            node.kernel.delete(name)  # (a veth's peer goes with it)
    assert _prepare(preparer) == expected
    assert _without_macs(node.links()) == _without_macs(prepared_links)
    assert preparer.unprepare([_ref()])[UID].error is None


def _without_macs(links: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    return {n: (mtu, up, alias, addrs) for n, (mtu, _, up, alias, addrs) in links.items()}


def test_a_missing_spec_file_is_written_again_from_the_record(node):
    _add_claim(node, "veth")
    preparer = node.preparer()
    first = _prepare(preparer)
    [spec] = node.cdi_dir.glob("*.json")
    content = spec.read_bytes()
    shutil.rmtree(node.cdi_dir)  # the whole directory, while the driver runs
    assert _prepare(preparer) == first
    assert spec.read_bytes() == content
    spec.unlink()
    node.start()  # and at start-up
    assert spec.read_bytes() == content


def test_one_pod_never_gets_one_interface_name_twice_across_calls(node):
    """A kubelet retry prepares a pod's claims in two calls: the check that two claims of
    a pod do not use one container name must see the claim prepared in the first."""
    netdev = {"kind": "veth", "interfaceName": "net1"}
    uids = ["5a0c6f5e-0000-4000-8000-00000000000a", "5a0c6f5e-0000-4000-8000-00000000000b"]
    for i, uid in enumerate(uids):
        claim = _claim(uid, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
        claim["metadata"]["name"] = f"c{i}"
        node.api.fake.add_claim(claim)
    preparer = node.preparer()
    first, second = (ClaimRef("default", f"c{i}", uid) for i, uid in enumerate(uids))
    assert preparer.prepare([first])[first.uid].error is None
    refused = preparer.prepare([second])[second.uid].error
    assert refused is not None and "net1" in refused and uids[0] in refused
    assert "$.interfaceName" in refused
    # Idempotent again for the first; the second is free once the first is unprepared.
    assert preparer.prepare([first])[first.uid].error is None
    assert preparer.unprepare([first])[first.uid].error is None
    assert preparer.prepare([second])[second.uid].error is None


def test_a_repeated_prepare_after_the_runtime_moved_the_interface_touches_nothing(node, reference):
    """The container end is in the pod (the runtime moved it): that is how it should be,
    and the host end still witnesses the pair. The answer stands; nothing is recreated."""
    expected, _, _ = reference("veth")
    preparer = node.preparer()
    assert _prepare(preparer) == expected
    [inner] = [n for n in node.kernel.table if n.startswith("drc")]
    moved = node.kernel.table.pop(inner)  # into the pod's namespace
    steps = node.steps.count
    assert _prepare(preparer) == expected
    assert node.steps.count == steps and inner not in node.kernel.table
    node.kernel.table[inner] = moved
    assert preparer.unprepare([_ref()])[UID].error is None


def test_a_claim_cannot_take_the_nodes_gateway(node):
    """Issue 13: a claim's addresses are added on the host before the move, and the
    kernel makes an IPv4 one local at once; the node's gateway must stay as it was,
    even when the operator's ranges include it."""
    before, route = node.links(), node.kernel.route_get("192.0.2.254")
    netdev = {"kind": "veth", "ipAddresses": ["198.51.100.7/24", "192.0.2.254/32"]}
    node.api.fake.add_claim(
        _claim(UID, "netdev-virtual", {"type": "netdev", "netdev": netdev}, True)
    )
    ranges = ("192.0.2.0/24", "198.51.100.0/24")
    outcome = _prepare(node.preparer(claim_address_ranges=ranges))
    assert outcome.error is not None
    assert outcome.error.startswith(f"claim default/c ({UID}): request nic: config ")
    assert (
        "$.netdev.ipAddresses[1]: 192.0.2.254 is the gateway of this node's route" in outcome.error
    )
    assert node.kernel.route_get("192.0.2.254") == route == "oif 2"
    assert node.links() == before and node.files() == []
