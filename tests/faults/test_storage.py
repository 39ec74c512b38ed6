"""Broken disks: a full filesystem, a read-only state directory, records that are not
records, symlinks, the CDI directory removed under the running driver. The driver keeps
serving every claim it can, says clearly what is wrong with the others (which file, what
to do), leaves nothing behind for a claim it could not prepare, and loses no record."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.checks import answer_of, check_invariants, expected_answer
from tests.integration.helpers import nothing_left, veth_claim
from tests.support import hosttools
from tests.support.runtime import links_in

pytestmark = [pytest.mark.root, pytest.mark.kind("veth")]


@pytest.fixture
def tmpfs(droot) -> Iterator[Path]:
    """The state directory on a small tmpfs of its own (unmounted at the end)."""
    state = droot / "cdi" / "dra.example.com-state"
    state.mkdir(parents=True)
    hosttools.require("umount")
    hosttools.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(state)], check=True)
    try:
        yield state
    finally:
        hosttools.run(["umount", "-l", str(state)], check=False)


def _ok(resp, claim) -> bool:
    return answer_of(resp, claim) == ("", expected_answer(claim))


def test_a_full_filesystem_fails_the_claim_clearly_and_leaves_nothing(api, start_driver, ns, tmpfs):
    fake, _ = api
    before, after = veth_claim("before", interface="net1"), veth_claim("after", interface="net2")
    fake.add_claim(before)
    fake.add_claim(after)
    d = start_driver()
    assert _ok(d.prepare([before]), before)
    filler = tmpfs / "filler"
    hosttools.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k", "count=1000"],
                   capture_output=True, check=False)  # fmt: skip
    error, _ = answer_of(d.prepare([after]), after)
    uid = after["metadata"]["uid"]
    assert "No space left on device" in error and "free space" in error, error
    assert str(tmpfs) in error and uid in error
    assert not any(uid in (ln["alias"] or "") for ln in links_in(ns))
    assert not list(d.cdi.glob(f"*{uid}*")) and not (tmpfs / f"{uid}.alloc.json").exists()
    assert _ok(d.prepare([before]), before)  # the prepared claim keeps its answer
    filler.unlink()
    assert _ok(d.prepare([after]), after)  # and the failed one succeeds once there is room
    d.unprepare([before, after])
    nothing_left(ns, d)


def test_a_read_only_state_directory_with_a_corrupt_record_does_not_stop_the_driver(
    api, start_driver, ns, tmpfs
):
    fake, _ = api
    kept, new = veth_claim("kept", interface="net1"), veth_claim("new", interface="net2")
    fake.add_claim(kept)
    fake.add_claim(new)
    d = start_driver()
    assert _ok(d.prepare([kept]), kept)
    d.stop()
    corrupt = tmpfs / "0b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e.alloc.json"
    corrupt.write_text('{"version": 1, "claim": ')
    hosttools.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    d = start_driver()
    log = d.log()
    assert "cannot be moved aside" in log and str(corrupt) in log
    assert _ok(d.prepare([kept]), kept)  # served from its record
    error, _ = answer_of(d.prepare([new]), new)
    assert "Read-only file system" in error and "mount it read-write" in error, error
    assert not any(new["metadata"]["uid"] in (ln["alias"] or "") for ln in links_in(ns))
    d.stop()  # (`ip netns exec` gave the daemon its own copy of the read-only mount)
    hosttools.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    d = start_driver()
    assert (tmpfs / f"{corrupt.name}.corrupt").exists()  # set aside once it can be
    (tmpfs / f"{corrupt.name}.corrupt").unlink()
    d.unprepare([kept])
    nothing_left(ns, d)


def test_entries_that_are_not_records_are_set_aside_and_every_claim_still_served(
    api, start_driver, ns, droot
):
    fake, _ = api
    claims = [veth_claim(f"c{i}", interface="net1") for i in range(5)]
    for claim in claims:
        fake.add_claim(claim)
    d = start_driver()
    assert all(_ok(d.prepare([c]), c) for c in claims)
    d.stop()
    state = d.state
    uids = [c["metadata"]["uid"] for c in claims]
    paths = [state / f"{uid}.alloc.json" for uid in uids]
    paths[0].write_bytes(b"")  # empty
    paths[1].write_bytes(paths[1].read_bytes()[:40])  # truncated
    foreign = json.loads(paths[2].read_text())
    foreign["claim"]["uid"] = uids[3]  # another claim's record under this name
    paths[2].write_text(json.dumps(foreign))
    elsewhere = droot / "elsewhere.json"
    elsewhere.write_bytes(paths[3].read_bytes())
    paths[3].unlink()
    paths[3].symlink_to(elsewhere)  # a symlink, even to a good record, is not followed
    fifo = state / "0b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e.alloc.json"
    os.mkfifo(fifo)  # must not block the start
    directory = state / "1b6f3e6c-4a4e-4b8e-9d3e-6f1a2b3c4d5e.alloc.json"
    directory.mkdir()
    d = start_driver()
    log = d.log()
    assert log.count("corrupt allocation record quarantined") == 6, log
    assert "symbolic link" in log and "not a regular file" in log
    assert elsewhere.read_bytes() != b""  # the symlink's target untouched
    # Every claim is served: the damaged ones are prepared again from the API.
    for claim in claims:
        assert _ok(d.prepare([claim]), claim), claim["metadata"]["name"]
    for path in state.glob("*.corrupt"):
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    check_invariants(ns, d)
    d.unprepare(claims)
    nothing_left(ns, d)


def test_the_cdi_directory_removed_while_running(api, start_driver, ns):
    fake, _ = api
    first, second = veth_claim("first", interface="net1"), veth_claim("second", interface="net2")
    fake.add_claim(first)
    fake.add_claim(second)
    d = start_driver()
    assert _ok(d.prepare([first]), first)
    spec = next(d.cdi.glob("*.json"))
    content = spec.read_bytes()
    shutil.rmtree(d.cdi)  # the records go with it: they live below it by default
    # ... which is what a reboot with /etc/cdi on tmpfs looks like, minus the kernel:
    # the prepared claim's answer cannot be proven any more, so it is prepared anew.
    assert _ok(d.prepare([second]), second)
    assert _ok(d.prepare([first]), first)
    assert spec.read_bytes() == content
    check_invariants(ns, d)
    d.unprepare([first, second])
    nothing_left(ns, d)


def test_a_spec_removed_while_running_is_written_again_from_the_record(api, start_driver, ns):
    fake, _ = api
    claim = veth_claim("c", interface="net1")
    fake.add_claim(claim)
    d = start_driver()
    assert _ok(d.prepare([claim]), claim)
    [spec] = d.cdi.glob("*.json")
    content = spec.read_bytes()
    spec.unlink()
    fake.claims.clear()  # no API needed: the record holds the spec
    assert _ok(d.prepare([claim]), claim)
    assert spec.read_bytes() == content
    spec.unlink()
    d.stop()
    d = start_driver()
    assert spec.read_bytes() == content  # and at start-up
    d.unprepare([claim])
    nothing_left(ns, d)


def test_the_cdi_directory_removed_with_records_elsewhere_loses_no_record(
    api, start_driver, ns, droot
):
    """With --state-dir outside the CDI directory the records outlive it: a prepared
    claim's spec comes back from its record alone, and unprepare works without the
    directory (nothing to remove there) and leaves nothing."""
    fake, _ = api
    first, second = veth_claim("first", interface="net1"), veth_claim("second", interface="net2")
    fake.add_claim(first)
    fake.add_claim(second)
    state = droot / "state"
    d = start_driver("--state-dir", str(state))
    d.state = state  # where the checks look for records
    assert _ok(d.prepare([first]), first) and _ok(d.prepare([second]), second)
    specs = {p.name: p.read_bytes() for p in d.cdi.glob("*.json")}
    records = sorted(p.name for p in state.glob("*.alloc.json"))
    assert len(specs) == 2 and len(records) == 2
    shutil.rmtree(d.cdi)
    fake.claims.clear()  # nothing may come from the API: the records are enough
    assert _ok(d.prepare([first]), first)
    assert sorted(p.name for p in state.glob("*.alloc.json")) == records
    uid = first["metadata"]["uid"]
    assert {p.name: p.read_bytes() for p in d.cdi.glob("*.json")} == {
        n: c for n, c in specs.items() if uid in n
    }
    shutil.rmtree(d.cdi)  # gone again, now under an unprepare
    resp = d.unprepare([first, second])
    assert [resp.claims[c["metadata"]["uid"]].error for c in (first, second)] == ["", ""]
    assert not d.cdi.exists() or list(d.cdi.glob("*.json")) == []
    nothing_left(ns, d)


def test_symlinks_in_the_cdi_directory_are_replaced_or_removed_never_followed(
    api, start_driver, ns, droot
):
    fake, _ = api
    claim = veth_claim("c", interface="net1")
    fake.add_claim(claim)
    d = start_driver()
    assert _ok(d.prepare([claim]), claim)
    [spec] = d.cdi.glob("*.json")
    content = spec.read_bytes()
    victim = droot / "victim"
    victim.write_text("someone else's file\n")
    spec.unlink()
    spec.symlink_to(victim)  # our spec replaced by a link to elsewhere
    assert _ok(d.prepare([claim]), claim)  # the idempotent path writes the spec again
    assert not spec.is_symlink() and spec.read_bytes() == content
    stray = d.cdi / spec.name.replace(claim["metadata"]["uid"], str(uuid.uuid4()))
    stray.symlink_to(victim)  # named like a spec of a claim without a record
    d.stop()
    d = start_driver()  # start-up removes it: the link, not what it points to
    assert not stray.is_symlink() and not stray.exists()
    assert "removed not a regular file" in d.log()
    assert victim.read_text() == "someone else's file\n"
    assert spec.read_bytes() == content
    check_invariants(ns, d)
    d.unprepare([claim])
    nothing_left(ns, d)
