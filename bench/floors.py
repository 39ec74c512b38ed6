"""Physical floors: the bare kernel and disk work an operation needs, measured in the same run."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pyroute2 import IPRoute

from bench.stats import timed
from dradriver.state.atomicfile import remove_durably, write_atomic
from tests.support import netns


def link_floor(ns: str, kind: str, n: int) -> tuple[list[float], list[float]]:
    """Create n links of one type, then delete them, one netlink call each (seconds).

    Created and deleted in two passes, as the driver's figures are measured (prepare
    all, then unprepare all): a link deleted right after its creation is ~15% cheaper
    to delete than one that has existed for a while.
    """
    creates, deletes = [], []
    with netns.inside(ns), IPRoute() as ipr:
        if kind == "macvlan" and not ipr.link_lookup(ifname="fparent"):
            ipr.link("add", ifname="fparent", kind="veth", peer={"ifname": "fpeer"})
        parent = ipr.link_lookup(ifname="fparent")
        for i in range(n):
            attrs: dict[str, object] = {"kind": kind}
            if kind == "veth":
                attrs["peer"] = {"ifname": f"floorp{i}"}
            if kind == "macvlan":
                attrs |= {"link": parent[0], "macvlan_mode": "bridge"}
            t, _ = timed(lambda i=i, attrs=attrs: ipr.link("add", ifname=f"floor{i}", **attrs))
            creates.append(t)
        for i in range(n):
            t, _ = timed(lambda i=i: ipr.link("del", ifname=f"floor{i}"))
            deletes.append(t)
    return creates, deletes


def set_floor(ns: str, n: int) -> list[float]:
    """One `link set` (down + MTU) on an existing interface: what claiming a NIC needs."""
    out = []
    with netns.inside(ns), IPRoute() as ipr:
        ipr.link("add", ifname="fnic", kind="veth", peer={"ifname": "fnicp"})
        index = ipr.link_lookup(ifname="fnic")[0]
        for i in range(n):
            t, _ = timed(lambda i=i: ipr.link("set", index=index, state="down", mtu=1400 + i % 2))
            out.append(t)
        ipr.link("del", index=index)
    return out


def files_floor(n: int, where: Path) -> tuple[list[float], list[float]]:
    """The files a prepare writes and an unprepare removes, as the driver does it
    (docs/crash-safety.md, "What is fsynced"): two atomic writes without fsync (CDI spec, record);
    then the spec removed plainly and the record durably."""
    writes, removes = [], []
    with tempfile.TemporaryDirectory(dir=where) as d:  # the same disk as the driver
        a, b = Path(d) / "spec.json", Path(d) / "record.json"
        payload = b"x" * 900
        for _ in range(n):
            t, _ = timed(
                lambda: (
                    write_atomic(a, payload, durable=False),
                    write_atomic(b, payload, durable=False),
                )
            )
            writes.append(t)
            t, _ = timed(lambda: (a.unlink(), remove_durably(b)))
            removes.append(t)
    return writes, removes
