"""A veth whose container end the pod took: its host end is deleted after unprepare has
answered (dradriver.kernel.linkreaper), by the daemon's reaper, at shutdown, or at the next start
after a crash. Real daemon, real sockets, real kernel objects."""

from collections.abc import Iterator

import pytest

from tests.integration.helpers import answer, nothing_left, specs, veth_claim
from tests.support import netns
from tests.support.runtime import apply_cdi, links_in
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


@pytest.fixture
def pod() -> Iterator[str]:
    """The pod's network namespace (destroyed by the test, as the runtime does)."""
    name = netns.create("pod")
    try:
        yield name
    finally:
        netns.delete(name)


def _prepared_and_taken(fake, d, ns: str, pod: str) -> tuple[dict, str]:
    """Prepare a veth claim and move its container end into `pod` as runc does; return
    the claim and the host end's name."""
    claim = veth_claim()
    fake.add_claim(claim)
    assert answer(d.prepare([claim]), claim).error == ""
    [spec] = specs(d.cdi).values()
    [nd] = spec["devices"][0]["containerEdits"]["netDevices"]
    [spec_file] = d.cdi.glob("*.json")
    with netns.inside(ns):  # the node's namespace, where runc would run
        assert apply_cdi(spec_file, pod) == ["net1"]
    [host_end] = [ln["name"] for ln in links_in(ns)]
    assert host_end != nd["hostInterfaceName"]  # what stayed is the other end
    return claim, host_end


def test_the_host_end_goes_a_moment_after_the_answer(api, start_driver, ns, pod):
    fake, _ = api
    d = start_driver()  # the default delay
    claim, _ = _prepared_and_taken(fake, d, ns, pod)
    assert answer(d.unprepare([claim]), claim).error == ""
    assert list(d.state.glob("*.alloc.json")) == []  # released at once
    wait_for("the host end to be deleted", lambda: links_in(ns) == [], log=d.log)
    nothing_left(ns, d)
    assert "deleting an unprepared claim's interfaces failed" not in d.log()


def test_shutdown_deletes_what_is_still_waiting(api, start_driver, ns, pod):
    fake, _ = api
    d = start_driver("--link-deletion-delay", "60")
    claim, host_end = _prepared_and_taken(fake, d, ns, pod)
    assert answer(d.unprepare([claim]), claim).error == ""
    assert [ln["name"] for ln in links_in(ns)] == [host_end]  # waiting
    assert d.stop() == 0
    nothing_left(ns, d)


def test_after_a_crash_the_next_start_deletes_it(api, start_driver, ns, pod):
    fake, _ = api
    d = start_driver("--link-deletion-delay", "60")
    claim, host_end = _prepared_and_taken(fake, d, ns, pod)
    assert answer(d.unprepare([claim]), claim).error == ""
    d.kill()
    assert [ln["name"] for ln in links_in(ns)] == [host_end]  # the queue died with it
    d.start()
    nothing_left(ns, d)
    assert "deleted_interfaces=1" in d.log()
