"""A claim's addresses against the node: the operator's ranges and what the host uses.

The form of an address is the config schema's business (`dradriver.contract.iprules`, rule 1).
Here, on the node: rule 2, the operator's ranges (`--claim-address-ranges`), and rule 3,
the host's own addresses, local routes, gateways and the API server's address. Rule 3
applies where the host sees a claim's addresses: with CDI netDevices the driver adds them
on the host side and the runtime carries them over when it moves the link, so until then
the kernel treats them as the node's own (an IPv4 address gets a local route even on a
down link). A mode that adds addresses only inside the pod's namespace passes
`on_host=False`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Sequence

from dradriver.base.errors import ConfigError
from dradriver.contract import iprules, naming
from dradriver.contract.hookspecs import HandlerContext
from dradriver.kernel import netlink

# CDI netDevices: the addresses are on the host side of the link until the move.
ON_HOST = True
_TABLES = {253: "default", 254: "main", 255: "local"}


def check(
    context: HandlerContext,
    ips: Sequence[iprules.Interface],
    path: str,
    own: Collection[int] = (),
    on_host: bool = ON_HOST,
) -> None:
    """Refuse addresses outside the operator's ranges, the same address twice, and (where
    the host sees them) any the node uses itself; `own`: indexes of the links the pod
    gets, whose addresses are not the node's. Every issue names `path[i]`."""
    if not ips:
        return
    ranges = iprules.parse_ranges(context.claim_address_ranges)
    allowed = ",".join(context.claim_address_ranges)
    issues: list[tuple[str, str]] = []
    first: dict[iprules.Address, int] = {}
    candidates = []
    for i, ip in enumerate(ips):
        if ip.ip in first:
            issues.append((f"{path}[{i}]", f"{ip.ip} is already {path}[{first[ip.ip]}]"))
            continue
        first[ip.ip] = i
        if iprules.in_ranges(ip.ip, ranges):
            candidates.append((i, ip))
            continue
        issues.append(
            (
                f"{path}[{i}]",
                f"{ip.ip} is outside the address ranges this node allows claims "
                f"(--claim-address-ranges: {allowed or 'empty, so no claim may set one'})",
            )
        )
    if on_host and candidates:
        view = host_view(context, own)
        for i, ip in candidates:
            reason = view.conflict(ip.ip)
            if reason is not None:
                issues.append((f"{path}[{i}]", f"{reason}; a claim may not take it"))
    if issues:
        raise ConfigError.many(issues)


def check_span(
    context: HandlerContext, first: str, last: str, path: str, on_host: bool = ON_HOST
) -> None:
    """Refuse a range an IPAM hands addresses out of (`first` to `last`) unless it lies
    inside one of the operator's ranges, with neither end an address the node uses
    (where the host sees them). Issues name `path`."""
    try:
        low, high = ipaddress.ip_address(first), ipaddress.ip_address(last)
    except ValueError:
        raise ConfigError(f"{first}-{last} is not a range of addresses", path) from None
    ranges = iprules.parse_ranges(context.claim_address_ranges)
    if not any(low.version == r.version and low in r and high in r for r in ranges):
        allowed = ",".join(context.claim_address_ranges) or "empty"
        raise ConfigError(
            f"{first}-{last} is not inside one of the address ranges this node allows claims "
            f"(--claim-address-ranges: {allowed})",
            path,
        )
    prefix = 32 if low.version == 4 else 128
    ends = [ipaddress.ip_interface(f"{ip}/{prefix}") for ip in {low, high}]
    check(context, ends, path, on_host=on_host)


def host_view(context: HandlerContext, own: Collection[int] = ()) -> iprules.HostView:
    """What the node uses now: addresses of its links (except `own` and the driver's),
    local, broadcast and anycast routes, every route's gateways, and the protected
    addresses of `context` (the API server's)."""
    names = {link.index: link.name for link in netlink.links()}
    skip = set(own) | {i for i, name in names.items() if naming.is_host_ifname(name)}
    taken: list[tuple[iprules.Network, str]] = []
    for index, address, _ in netlink.all_addresses():
        if index not in skip:
            where = names.get(index, f"interface {index}")
            taken.append((iprules.host_network(address), f"an address of this node (on {where})"))
    for route in netlink.routes():
        text = describe(route, names)
        taken += [
            (iprules.host_network(gw), f"the gateway of this node's route {text}")
            for gw in route.gateways
        ]
        if route.type in ("local", "broadcast", "anycast") and route.oif not in skip:
            taken.append((ipaddress.ip_network(route.dst), f"{route.type} on this node ({text})"))
    taken += [(iprules.host_network(a), what) for a, what in context.protected_addresses]
    return iprules.HostView(tuple(taken))


def describe(route: netlink.Route, names: dict[int, str]) -> str:
    """A route as `ip route` would show it, e.g. `default via 192.0.2.254 dev eth0`."""
    dst = "default" if route.dst in ("0.0.0.0/0", "::/0") else route.dst
    parts = [dst if route.type == "unicast" else f"{route.type} {dst}"]
    parts += [f"via {gw}" for gw in route.gateways]
    if route.oif is not None:
        parts.append(f"dev {names.get(route.oif, route.oif)}")
    parts.append(f"table {_TABLES.get(route.table, route.table)}")
    return " ".join(parts)
