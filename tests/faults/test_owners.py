"""A second driver instance on the same host (another driver name or another state
directory: a canary, a test instance) never touches the first's interfaces: its start-up
reconciliation, its unprepare of a claim it does not know, its handling of a lost record."""

from __future__ import annotations

import uuid

import pytest

from dradriver.contract import naming
from tests.faults.checks import answer_of, expected_answer
from tests.integration.helpers import nothing_left, veth_claim
from tests.support import netns
from tests.support.driverproc import DriverProcess
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


@pytest.fixture
def second(api, ns, droot, tmp_path):
    """Another instance in the same namespace, with its own kubelet and CDI directories."""
    fake, url = api
    root = droot / "second"
    root.mkdir()
    proc = DriverProcess(root, ns, fake.kubeconfig(url, root / "kubeconfig"))
    try:
        yield proc
    finally:
        if proc.proc is not None:
            proc.stop()


def test_another_instance_leaves_this_ones_interfaces_alone(api, start_driver, ns, second):
    fake, _ = api
    claim = veth_claim("c", interface="net1")
    fake.add_claim(claim)
    first = start_driver()
    assert answer_of(first.prepare([claim]), claim) == ("", expected_answer(claim))
    before = links_in(ns)
    assert len(before) == 2 and first.owner != second.owner
    second.start()  # its start-up reconciliation sees interfaces it has no record of
    assert links_in(ns) == before, second.log()
    # It is asked to unprepare a claim it never prepared: nothing of the first's goes.
    assert second.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    assert links_in(ns) == before
    # Its record of the claim is corrupt: it deletes only interfaces it tagged itself.
    second.stop()
    second.state.mkdir(parents=True, exist_ok=True)
    (second.state / f"{claim['metadata']['uid']}.alloc.json").write_text("{")
    second.start()
    assert second.unprepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    assert links_in(ns) == before
    first.unprepare([claim])
    for path in second.state.glob("*.corrupt"):
        path.unlink()
    nothing_left(ns, first)


def test_legacy_tags_are_ours_only_for_claims_we_have_a_record_of(api, start_driver, ns):
    """Interfaces tagged before owners existed carry no owner: they are collected only
    for a claim this instance has a record of, never on a guess."""
    unknown = str(uuid.uuid4())
    name = naming.host_ifname(unknown, "nic/netdev-virtual")

    netns.ip(ns, "link", "add", name, "type", "veth", "peer", "name", "keepme0")
    netns.ip(ns, "link", "set", name, "alias", f"dra-driver claim={unknown} nic/netdev-virtual")
    d = start_driver()
    assert {ln["name"] for ln in links_in(ns)} == {name, "keepme0"}
    d.stop()
    netns.ip(ns, "link", "del", name)
