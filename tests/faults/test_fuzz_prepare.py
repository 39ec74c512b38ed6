"""Hostile configs through a real prepare, in-process: Preparer and the real handlers on the
in-memory kernel (as tests/unit/test_state_machine.py), many examples, no root.

Invariants: never an "internal error"; an error names the claim, the request and a JSON
path, and every field the oracle knows to be bad (tests/faults/fuzzing.py); an invalid
config leaves no kernel object, address or file behind; a config built only from
known-good values is prepared; whatever is prepared leaves the node's own routing as it
was (its gateways are reached as before) and holds only addresses of the operator's
ranges that the node does not use; unprepare then leaves nothing.
"""

from __future__ import annotations

import ipaddress
import re
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given

from dradriver.apiserver.inventory import Inventory
from dradriver.claims.prepare import Preparer
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import ClaimRef
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel import netlink
from dradriver.kernel.netlink import Route
from dradriver.state.recordstore import RecordStore
from tests.faults.fuzzing import (
    GATEWAYS,
    JSON_PATH,
    NIC_MAX_MTU,
    PARENT_MTU,
    RANGES,
    TAKEN,
    Case,
    fuzz,
    netdev_case,
    tally,
)
from tests.support.fakeapi import FakeApi, allocated_claim, opaque
from tests.support.fakekernel import FakeKernel
from tests.support.fakesys import FakeSys
from tests.support.handlers import context

DRIVER = "dra.example.com"
REGISTRY = HandlerRegistry()
SCHEMA = ConfigSchema(REGISTRY, DRIVER)
PATH = re.compile(rf"config ({JSON_PATH}): ")


@dataclass
class MemNode:
    """The fuzz node in memory: uplink up0, NIC ens1 handed out whole, macvlan parent ens2."""

    kernel: FakeKernel
    api: FakeApi
    preparer: Preparer
    root: Path

    def state(self) -> tuple[Any, ...]:
        """Every link with what a claim could change on it, and every file of ours."""
        links = {
            n: (ln.mtu, ln.address, ln.up, ln.alias, sorted(ln.addresses))
            for n, ln in self.kernel.table.items()
        }
        files = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*.json"))
        return links, files


@contextmanager
def mem_node() -> Iterator[MemNode]:
    shm = Path("/dev/shm")  # fsync is free there: the property is about content, not disks
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        root = Path(tmp)
        kernel = FakeKernel()
        uplink = kernel.add("up0", up=True)
        uplink.addresses |= {("192.0.2.5", 24), ("2001:db8::5", 64)}
        kernel.static_routes += [
            Route("0.0.0.0/0", "unicast", 254, (GATEWAYS[0],), uplink.index),
            Route("::/0", "unicast", 254, (GATEWAYS[1],), uplink.index),
        ]
        kernel.add("ens1", address="02:00:00:00:10:01", up=True, max_mtu=NIC_MAX_MTU)
        kernel.add("ens2", up=True, mtu=PARENT_MTU)
        FakeSys(root / "sys").nic("ens1", "0000:3b:00.0", mac="02:00:00:00:10:01")
        (root / "cdi").mkdir()
        ctx = context(
            sysfs_root=root / "sys",
            parent_interfaces=("ens1",),
            virtual_parents=("ens2",),
            claim_address_ranges=RANGES,
        )
        api = FakeApi()
        preparer = Preparer(
            context=ctx,
            cdi_dir=root / "cdi",
            records=RecordStore(root / "state"),
            registry=REGISTRY,
            schema=SCHEMA,
            inventory=Inventory(REGISTRY, ctx),
            api=api,
        )
        previous = netlink.use(kernel)
        try:
            yield MemNode(kernel, api, preparer, root)
        finally:
            netlink.use(previous)


def claim_of(case: Case) -> dict[str, Any]:
    """A claim allocating the device the case's kind needs (host-device: the NIC)."""
    params = case.parameters
    netdev = params.get("netdev") if isinstance(params, dict) else None
    kind = netdev.get("kind") if isinstance(netdev, dict) else None
    result = {"request": "nic", "pool": "node-a", "device": "netdev-virtual", "shareID": "s"}
    if kind == "host-device":
        result = {"request": "nic", "pool": "node-a", "device": "nic-ens1"}
    return allocated_claim("c", [result], uid=str(uuid.uuid4()), config=[opaque(params)])


def check_prepare(node: MemNode, claim: dict[str, Any], case: Case) -> None:
    """The invariants of the module docstring, for one claim on `node`."""
    before = node.state()
    routes = {gw: node.kernel.route_get(gw) for gw in GATEWAYS}
    node.api.add_claim(claim)
    meta = claim["metadata"]
    ref = ClaimRef(meta["namespace"], meta["name"], meta["uid"])
    outcome = node.preparer.prepare([ref])[ref.uid]
    error = outcome.error
    if error is not None:
        assert "internal error" not in error, error
        if case.deep and "nested too deeply to read" in error:  # the claim's JSON itself
            assert error.startswith(f"claim default/c ({ref.uid}): cannot read the ResourceClaim")
            assert node.state() == before
            return
        assert error.startswith(f"claim default/c ({ref.uid}): request nic: "), error
        paths = set(PATH.findall(error))
        assert paths or "config" not in error, error
        if case.form:
            assert case.form <= paths, f"{sorted(case.form - paths)} not named: {error}"
        elif case.node and case.exact:  # junk elsewhere may be refused first
            assert paths and paths <= case.node, f"expected some of {sorted(case.node)}: {error}"
        elif case.deep:
            assert any(p == "$" or p.startswith(case.deep) for p in paths), error
        else:
            assert not case.exact, f"a good config was refused: {case.parameters!r}\n{error}"
        assert node.state() == before, "an invalid config left something behind"
        tally("refused: " + ("form" if case.form else "node" if case.node else "other"))
        return
    assert not case.form and not case.node and not case.deep, (
        f"prepared although {sorted(case.form | case.node)} are bad: {case.parameters!r}"
    )
    assert {gw: node.kernel.route_get(gw) for gw in GATEWAYS} == routes
    ranges = [ipaddress.ip_network(r) for r in RANGES]
    held = {a for ln in node.kernel.table.values() for a, _ in ln.addresses}
    for address in held - {a for ln in before[0].values() for a, _ in ln[4]}:
        ip = ipaddress.ip_address(address)
        assert any(ip in r for r in ranges if r.version == ip.version), address
        assert address not in TAKEN, address
    assert node.preparer.unprepare([ref])[ref.uid].error is None
    assert node.state() == before
    tally("prepared" + (" with addresses" if held - {"192.0.2.5", "2001:db8::5"} else ""))


@fuzz(300)
@given(netdev_case(kinds=["veth", "macvlan", "host-device"], parent="ens2", bad_rate=1))
def test_prepare_refuses_what_it_must_and_leaves_the_node_as_it_was(case):
    with mem_node() as node:
        check_prepare(node, claim_of(case), case)


def test_the_checks_are_not_vacuous():
    """The same checks catch a prepare that would take the node's gateway."""
    case = Case({"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["192.0.2.254/32"]}})
    case.node.add("$.netdev.ipAddresses[0]")
    with mem_node() as node:
        check_prepare(node, claim_of(case), case)
    with mem_node() as node:
        good = Case({"type": "netdev", "netdev": {"kind": "veth", "ipAddresses": ["192.0.2.7/24"]}})
        check_prepare(node, claim_of(good), good)
