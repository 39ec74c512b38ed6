"""An in-process node for the prepare state machine tests: an in-memory kernel whose
every request (and every file write) is a countable step, the API stand-in's claims, real
files in a temporary directory, and Preparers wired as `dra-driver run` wires them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dradriver.apiserver.inventory import Inventory
from dradriver.apiserver.kubeapi import ApiError
from dradriver.claims import reconcile
from dradriver.claims.budget import CallGate
from dradriver.claims.ipam import AddressBook
from dradriver.claims.outcome import Outcome
from dradriver.claims.prepare import Preparer
from dradriver.contract import ipam
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import ClaimRef
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel import netlink
from dradriver.kernel.netlink import Route
from dradriver.kubelet.sockets import SerializeLock
from dradriver.state import atomicfile, cdi, ipamstore, metadata, recordstore
from dradriver.state.ipamstore import IpamStore
from dradriver.state.recordstore import RecordStore
from tests.support.fakeapi import FakeApi, allocated_claim, opaque
from tests.support.fakekernel import Crash, FakeKernel, Steps, restore
from tests.support.fakesys import FakeSys
from tests.support.handlers import context

DRIVER = "dra.example.com"
REGISTRY = HandlerRegistry()
SCHEMA = ConfigSchema(REGISTRY, DRIVER)
NIC_MAC = "02:00:00:00:10:01"
# The node's address pool (inside the claim address ranges the node's preparer allows).
POOLS = ipam.parse_pools(
    '[{"name": "pods", "scope": "node", "ranges": ["198.51.100.128/29"],'
    ' "gateway": "198.51.100.129", "exclude": ["198.51.100.130"]}]'
).values()


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

    def get_network_attachment(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any]:
        return self.fake.get_network_attachment(namespace, name, timeout)


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

    @property
    def plugin_dir(self) -> Path:
        """The driver's kubelet plugin directory: its device metadata files."""
        return self.root / "plugin"

    def preparer(self, link_deletion_delay: float = 3600, **settings: Any) -> Preparer:
        """A Preparer as `dra-driver run` wires one (a new one is a restarted driver);
        `settings` override the node's context. Released links are deleted only when
        the test drains the reaper (`_unprepare`), unless a delay is given."""
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
            addresses=AddressBook(POOLS, IpamStore(self.state_dir)),
            context=ctx,
            cdi_dir=self.cdi_dir,
            records=RecordStore(self.state_dir),
            registry=REGISTRY,
            schema=SCHEMA,
            inventory=Inventory(REGISTRY, ctx),
            api=self.api,
            link_deletion_delay=link_deletion_delay,
            metadata_root=self.plugin_dir,
            nads=self.api,
            # Each Preparer opens the lock file anew: two of them are two instances.
            gate=CallGate(SerializeLock(self.root / "serialize.lock")),
        )

    def start(self) -> Preparer:
        """A restart: records loaded and reconciled as `dra-driver run` does at start."""
        preparer = self.preparer()
        loaded, corrupt = preparer.records.load_all()
        assert corrupt == []
        reconcile.reconcile(loaded, self.cdi_dir, DRIVER, preparer.lifecycle)
        assert preparer.addresses is not None  # then the pools, as dradriver.daemon.start_up
        preparer.addresses.rebuild_from(preparer.records)
        return preparer

    def crash_at(self, step: int, action: Callable[[], object]) -> None:
        """Run `action`, the process dying at its `step`th side effect; then the kernel and
        the disk are put back as they were at that moment, whatever the test had allowed."""
        self.steps.crash_at = self.steps.count + step
        with pytest.raises(Crash):
            action()
        self.steps.crash_at = None
        image = self.steps.image
        assert image is not None
        image.restore(self.kernel)
        restore(self.steps.dirs, image.files)

    def files(self) -> list[str]:
        """Every file the driver keeps (paths relative to its directory)."""
        return sorted(
            str(p.relative_to(d))
            for d in (self.cdi_dir, self.state_dir, self.plugin_dir)
            for p in d.rglob("*")
            if not p.is_dir()
        )

    def links(self) -> dict[str, tuple[Any, ...]]:
        """Every link with what a claim could have changed on it (its rate limit, and
        the link its traffic in is redirected to, by name)."""
        names = {ln.index: n for n, ln in self.kernel.table.items()}
        return {
            n: (
                ln.mtu, ln.address, ln.up, ln.alias, sorted(ln.addresses), ln.rate,
                names.get(ln.redirect or 0),
            )
            for n, ln in self.kernel.table.items()
        }  # fmt: skip


def make_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    """A node with a NIC ens1 (address, default route) and a macvlan parent ens2; the
    kernel is the netlink backend until the generator is closed (a pytest fixture)."""
    steps = Steps((tmp_path / "cdi", tmp_path / "state", tmp_path / "plugin"))
    kernel = FakeKernel(steps)
    nic = kernel.add("ens1", address=NIC_MAC, up=True)
    nic.addresses.add(("192.0.2.5", 24))
    kernel.static_routes.append(Route("0.0.0.0/0", "unicast", 254, ("192.0.2.254",), nic.index))
    kernel.add("ens2", up=True)  # the macvlan parent
    fs = FakeSys(tmp_path / "sys")
    fs.nic("ens1", "0000:3b:00.0", mac=NIC_MAC)
    (tmp_path / "cdi").mkdir()
    # File writes and removals are steps too: a crash can come between any two.
    for module in (recordstore, cdi):
        monkeypatch.setattr(module, "write_atomic", _counted(steps, "write", module.write_atomic))
        monkeypatch.setattr(
            module, "remove_durably", _counted(steps, "remove", atomicfile.remove_durably)
        )
    monkeypatch.setattr(metadata, "write_atomic", _counted(steps, "write", metadata.write_atomic))
    monkeypatch.setattr(ipamstore, "write_atomic", _counted(steps, "write", ipamstore.write_atomic))
    previous = netlink.use(kernel)
    try:
        yield Node(tmp_path, kernel, steps, Claims())
    finally:
        netlink.use(previous)


def _counted(steps: Steps, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(path: str | Path, *args: Any, **kwargs: Any) -> Any:
        steps.tick(f"{what} {Path(path).name}")
        return fn(path, *args, **kwargs)

    return wrapped


def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the files and directories os.fsync flushes from now on, in order."""
    paths: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return paths


# -- the claims ------------------------------------------------------------------------------


def claim_object(
    uid: str,
    device: str,
    params: dict[str, Any],
    share: bool,
    consumed: dict[str, str] | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "nic", "pool": "node-a", "device": device}
    if share:
        result["shareID"] = str(uuid.UUID(int=uuid.UUID(uid).int ^ 1))
    if consumed:
        result["consumedCapacity"] = consumed
    return allocated_claim("c", [result], uid=uid, config=[opaque(params)], pods=[POD])


KINDS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "veth": (
        "netdev-virtual",
        {"kind": "veth", "interfaceName": "net1", "mtu": 1400,
         "ipAddresses": ["198.51.100.7/24", "2001:db8::7/64"]},
        True,
    ),
    "veth-limited": (  # given 100 Mbit/s of the virtual device's bandwidth (CONSUMED)
        "netdev-virtual",
        {"kind": "veth", "interfaceName": "net1", "ipAddresses": ["198.51.100.6/24"]},
        True,
    ),
    "veth-ipam": (  # takes its address from the node's pool
        "netdev-virtual",
        {"kind": "veth", "interfaceName": "net1", "ipam": {"pool": "pods"}},
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
# What the scheduler gave a kind's request of the virtual device's capacities.
CONSUMED = {"veth-limited": {"slots": "1", "bandwidth": "100M"}}
UID = "5a0c6f5e-0000-4000-8000-000000000001"
POD = "5a0c6f5e-0000-4000-8000-0000000000aa"


def claim_ref() -> ClaimRef:
    """The reference the kubelet sends for the claim `add_claim` made."""
    return ClaimRef("default", "c", UID)


def add_claim(node: Node, kind: str) -> None:
    """Put the claim of one of KINDS into the API."""
    device, netdev, share = KINDS[kind]
    params = {"type": "netdev", "netdev": netdev}
    node.api.fake.add_claim(claim_object(UID, device, params, share, CONSUMED.get(kind)))


def prepare_one(preparer: Preparer) -> Outcome:
    """Prepare the claim of `add_claim`."""
    return preparer.prepare([claim_ref()])[UID]


def unprepare_one(preparer: Preparer, which: ClaimRef | None = None) -> Outcome:
    """Unprepare, then delete the released links in this thread (the reaper's work after
    the answer; a crash during it is one more step)."""
    which = which or claim_ref()
    outcome = preparer.unprepare([which])[which.uid]
    assert preparer.reaper.drain(5) == 0
    return outcome
