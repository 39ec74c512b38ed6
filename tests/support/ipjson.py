"""What iproute2 (`ip -j`) sees in a namespace, in dradriver.kernel.netlink's terms.

The independent view the rtnetlink backend's answers are checked against: iproute2
parses the kernel's messages with its own code, so agreement means our parser reads
them as the kernel meant them.
"""

from __future__ import annotations

import json
from typing import Any

from dradriver.kernel.netlink import Link, Route
from tests.support import netns

# ip's names (ll_type_n2a, rtnl_rtscope_n2a, rtnl_rttable_n2a) -> the kernel's numbers.
LINK_TYPES = {"ether": 1, "infiniband": 32, "loopback": 772, "none": 65534}
SCOPES = {"global": 0, "site": 200, "link": 253, "host": 254, "nowhere": 255}
TABLES = {"main": 254, "local": 255, "default": 253}


def _json(ns: str, *args: str) -> list[dict[str, Any]]:
    return json.loads(netns.ip(ns, "-j", *args) or "[]")  # type: ignore[no-any-return]


def links(ns: str) -> list[Link]:
    """Every link of `ns`, as `ip -d link show` reports it."""
    out = []
    for ln in _json(ns, "-d", "link", "show"):
        if ln["link_type"] not in LINK_TYPES:
            raise AssertionError(f"add link type {ln['link_type']} to ipjson.LINK_TYPES")
        out.append(
            Link(
                index=ln["ifindex"],
                name=ln["ifname"],
                kind=(ln.get("linkinfo") or {}).get("info_kind"),
                alias=ln.get("ifalias"),
                mtu=ln["mtu"],
                address=ln.get("address"),
                up="UP" in ln["flags"],
                link_type=LINK_TYPES[ln["link_type"]],
                min_mtu=ln.get("min_mtu", 0),
                max_mtu=ln.get("max_mtu", 0),
            )
        )
    return out


def link_info(ns: str, name: str) -> dict[str, Any]:
    """`ip -d link show <name>`'s object (linkinfo, master, ...)."""
    [found] = _json(ns, "-d", "link", "show", "dev", name)
    return found


def addresses(ns: str) -> list[tuple[int, str, int, int]]:
    """(index, local address, prefix length, scope) of every address of `ns`."""
    out = []
    for ln in _json(ns, "addr", "show"):
        for a in ln.get("addr_info", []):
            out.append((ln["ifindex"], a["local"], a["prefixlen"], SCOPES[a["scope"]]))
    return out


def routes(ns: str) -> list[Route]:
    """Every IPv4 and IPv6 route of every table of `ns`."""
    index = {ln.name: ln.index for ln in links(ns)}
    out = []
    for family, host in (("-4", 32), ("-6", 128)):
        for r in _json(ns, family, "route", "show", "table", "all"):
            dst = r["dst"]
            if dst == "default":
                dst = "0.0.0.0/0" if family == "-4" else "::/0"
            elif "/" not in dst:
                dst = f"{dst}/{host}"
            hops = [r, *r.get("nexthops", [])]
            gateways = [g for h in hops for g in (h.get("gateway"), h.get("via", {}).get("host"))]
            table = r.get("table", "main")
            out.append(
                Route(
                    dst=dst,
                    type=r.get("type", "unicast"),
                    table=TABLES.get(table) or int(table),
                    gateways=tuple(g for g in gateways if g),
                    oif=index[r["dev"]] if "dev" in r else None,
                )
            )
    return out
