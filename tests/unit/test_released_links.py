"""Links of an unprepared claim deleted after the answer (dradriver.kernel.linkreaper), in-process
against the in-memory kernel: what is deferred, what is not, and what the reaper must
never delete."""

from __future__ import annotations

import threading
import time

from dradriver.kernel import linkreaper
from tests.support.statenode import UID, Node, add_claim, claim_ref, prepare_one


def _veth_ends(node: Node) -> tuple[str, str]:
    [inner] = [n for n in node.kernel.table if n.startswith("drc")]
    [outer] = [n for n in node.kernel.table if n.startswith("drh")]
    return inner, outer


def _pod_takes(node: Node, name: str) -> None:
    """The runtime moves the link into the pod's namespace: gone from the host's view."""
    node.kernel.table.pop(name)


def test_the_host_end_of_a_veth_the_pod_took_is_deleted_after_the_answer(node):
    add_claim(node, "veth")
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    inner, outer = _veth_ends(node)
    _pod_takes(node, inner)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    assert outer in node.kernel.table and node.files() == []  # answered; record gone
    assert preparer.reaper.pending() == 1
    assert preparer.reaper.drain(30) == 0
    assert outer not in node.kernel.table and set(node.kernel.table) == {"ens1", "ens2"}


def test_a_veth_the_pod_never_took_is_deleted_at_once(node):
    """Its container end may carry the claim's addresses: never left on the host."""
    add_claim(node, "veth")
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    assert preparer.unprepare([claim_ref()])[UID].error is None
    assert set(node.kernel.table) == {"ens1", "ens2"}
    assert preparer.reaper.pending() == 0


def test_a_link_the_pod_took_needs_no_deletion(node):
    add_claim(node, "macvlan")
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    [name] = [n for n in node.kernel.table if n.startswith("drc")]
    _pod_takes(node, name)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    assert preparer.reaper.pending() == 0


def test_a_claim_prepared_again_before_the_deletion_keeps_its_new_links(node):
    """Another pod of a shared claim, or a kubelet retry: same claim, same link names."""
    add_claim(node, "veth")
    preparer = node.preparer()
    first = prepare_one(preparer)
    inner, outer = _veth_ends(node)
    _pod_takes(node, inner)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    assert prepare_one(preparer) == first  # the old host end was in the way: replaced
    new = node.kernel.table[outer].index
    assert preparer.reaper.drain(30) == 0
    assert node.kernel.table[outer].index == new and inner in node.kernel.table


def test_a_link_that_is_no_longer_ours_is_left_alone(node):
    add_claim(node, "veth")
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    inner, outer = _veth_ends(node)
    _pod_takes(node, inner)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    node.kernel.table[outer].alias = "someone else's"
    assert preparer.reaper.drain(30) == 0
    assert outer in node.kernel.table


def test_the_reaper_waits_for_the_lock_and_gives_up_within_the_drain_bound(node):
    add_claim(node, "veth")
    preparer = node.preparer()
    assert prepare_one(preparer).error is None
    inner, outer = _veth_ends(node)
    _pod_takes(node, inner)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    assert preparer.gate.lock.acquire(timeout=1)  # a call of another instance, say
    try:
        assert preparer.reaper.drain(0.3) == 1
        assert outer in node.kernel.table
    finally:
        preparer.gate.lock.release()
    assert preparer.reaper.drain(30) == 0 and outer not in node.kernel.table


def test_the_background_thread_deletes_when_due(node):
    add_claim(node, "veth")
    preparer = node.preparer(link_deletion_delay=0)
    assert prepare_one(preparer).error is None
    inner, outer = _veth_ends(node)
    _pod_takes(node, inner)
    assert preparer.unprepare([claim_ref()])[UID].error is None
    deadline = time.monotonic() + 10
    while outer in node.kernel.table and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outer not in node.kernel.table
    assert any(t.name == "link-reaper" for t in threading.enumerate())


def test_outside_an_unprepare_nothing_is_deferred():
    assert linkreaper.defer(["x"], "tag") is False
    with linkreaper.collecting() as doomed:
        assert linkreaper.defer(["x"], "tag") is True
    assert doomed == [(("x",), "tag")]
