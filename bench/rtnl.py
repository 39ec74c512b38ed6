"""The rtnetlink backend's own cost, beside pyroute2 0.9's for the same requests.

Per request, in process, in a throw-away namespace: a lookup by name, a dump of the
namespace's 21 links, a veth pair's creation, its deletion (both backends make the same
kernel calls, so the difference is Python). And the resident memory of a process that
imported everything the daemon imports and made one netlink request, without and with
pyroute2 also loaded (as the driver did before dradriver/rtnl).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_GETLINK

from bench.stats import summary, timed
from dradriver.kernel.rtnl.client import RtnlKernel
from tests.support import netns

ROOT = Path(__file__).resolve().parent.parent
LINK_PAIRS = 10
_RSS = """
import sys
import dradriver.cli, dradriver.daemon
import dradriver.handlers.netdev, dradriver.handlers.rdma, dradriver.handlers.combo
from dradriver.kernel import netlink
netlink.links()
if sys.argv[1] == "pyroute2":
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        ipr.get_links()
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS:")))
"""


def _ours(n: int) -> dict[str, list[float]]:
    kernel = RtnlKernel()
    out: dict[str, list[float]] = {"find": [], "links": [], "create": [], "delete": []}
    try:
        for _ in range(n):
            out["find"].append(timed(lambda: kernel.find("p0"))[0])
            out["links"].append(timed(kernel.links)[0])
        for i in range(n):
            out["create"].append(
                timed(lambda i=i: kernel.create(f"o{i}", "veth", {"peer": f"op{i}"}))[0]
            )
        for i in range(n):
            out["delete"].append(timed(lambda i=i: kernel.delete(f"o{i}"))[0])
    finally:
        kernel.close()
    return out


def _pyroute2(n: int) -> dict[str, list[float]]:
    """The calls the pyroute2 backend made (without its conversion to netlink.Link)."""
    out: dict[str, list[float]] = {"find": [], "links": [], "create": [], "delete": []}
    with IPRoute() as ipr:
        find = lambda: ipr.link((RTM_GETLINK, NLM_F_REQUEST), ifname="p0")  # noqa: E731
        for _ in range(n):
            out["find"].append(timed(find)[0])
            out["links"].append(timed(ipr.get_links)[0])
        for i in range(n):
            add = lambda i=i: ipr.link(  # noqa: E731
                "add", ifname=f"r{i}", kind="veth", peer={"ifname": f"rp{i}"}
            )
            out["create"].append(timed(add)[0])
        for i in range(n):
            out["delete"].append(timed(lambda i=i: ipr.link("del", ifname=f"r{i}"))[0])
    return out


def _rss_kb(mode: str) -> int:
    res = subprocess.run(
        [sys.executable, "-c", _RSS, mode], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return int(res.stdout.strip())


def figures(n: int, runs: int = 5) -> dict[str, Any]:
    """Per-request cost of both backends, and the import RSS with and without pyroute2."""
    ns = netns.create("bench-rtnl")
    try:
        for i in range(LINK_PAIRS):  # links() dumps 2 * LINK_PAIRS + 1 links
            netns.ip(ns, "link", "add", f"p{i}", "type", "veth", "peer", "name", f"q{i}")
        with netns.inside(ns):
            _ours(5)  # warm both up (imports, first sockets)
            _pyroute2(5)
            ours, theirs = _ours(n), _pyroute2(n)
    finally:
        netns.delete(ns)
    rss = {mode: sorted(_rss_kb(mode) for _ in range(runs)) for mode in ("ours", "pyroute2")}
    return {
        "requests": n,
        "links_dumped": 2 * LINK_PAIRS + 1,
        "ours": {k: summary(v) for k, v in ours.items()},
        "pyroute2": {k: summary(v) for k, v in theirs.items()},
        "rss_ours_mb": rss["ours"][runs // 2] / 1024,
        "rss_with_pyroute2_mb": rss["pyroute2"][runs // 2] / 1024,
    }
