"""The prepare state machine in-process, without root: Preparer, Planner and start-up
reconciliation against an in-memory kernel, the API stand-in's objects and real files in
a temporary directory (kubernetes-sigs/dra-example-driver's state_test.go is the model).

Every step of a prepare (each kernel request, each file write) is made to fail, and
separately to crash the process, and what is left is checked: after a failure nothing,
after a crash nothing that start-up reconciliation does not repair, and a prepare after
either answers exactly what an undisturbed one answers.
"""

from __future__ import annotations

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

    def __init__(self) -> None:
        self.fake = FakeApi()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
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
        gc.reconcile(loaded, self.cdi_dir, DRIVER, preparer.roll_back)
        return preparer

    def files(self) -> list[str]:
        return sorted(p.name for d in (self.cdi_dir, self.state_dir) for p in d.glob("*"))

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
    return allocated_claim("c", [result], uid=uid, config=[opaque(params)], pods=["pod-1"])


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
    assert node.files() == sorted([f"{DRIVER}-netdev_{UID}.json", f"{UID}.alloc.json"])
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
