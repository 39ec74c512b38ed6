"""The rules of one interface's config that read several of its values together: its
addresses, its routes against them, its sysctls against its name and addresses (pure).

What the config alone decides is a schema keyword, `interfaceRules`, so that the
schema, `dra-driver validate-config` and the admission policies refuse it alike
(dradriver/admission/ifrules.py says it in CEL); prepare runs the same rules again with
what only the node knows (the addresses a host NIC keeps). Each function returns
issues as (path, message), the path a tuple of keys and indexes below the interface's
object, e.g. ("routes", 1, "gateway"); a value the schema refuses in form is left out
(None), so an issue never doubles a form error on another field.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dradriver.contract import iprules, patterns
from dradriver.contract.hookspecs import PodRoute

KEYWORD = "interfaceRules"  # its value: {"keepsAddresses": bool}
Path = tuple[str | int, ...]
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
Issue = tuple[Path, str]
DEFAULT_ROUTES = ("0.0.0.0/0", "::/0")
# The metric the pod's own network gives its default route: IPv4 0, IPv6 1024.
POD_DEFAULT_METRICS = (0, 1024)
# net.ipv4.conf.<interface>.<key> (or ipv6): a per-interface setting.
SYSCTL_NAME_PATTERN = r"^net\.ipv[46]\.conf\.[!-$&-.0-9;-~]{1,15}\.[a-z0-9_]{1,64}$"
SYSCTL_NAME_MAX = 100
# Per-interface settings whose value is not a number.
STRING_SYSCTLS = frozenset({"stable_secret"})
INT32 = (-(2**31), 2**31 - 1)
# Interface names no claim's interfaceName can be (the pod's lo and eth0; all and
# default, which name every interface's settings).
NO_CLAIM_INTERFACE = ("lo", "eth0", "all", "default", ".", "..")


def address_issues(ips: Sequence[iprules.Interface | None]) -> list[Issue]:
    """One address twice, with another prefix length: the kernel keeps the first only."""
    issues: list[Issue] = []
    first: dict[iprules.Address, int] = {}
    for i, ip in enumerate(ips):
        if ip is None:
            continue
        if ip.ip in first and ips[first[ip.ip]] != ip:
            j = first[ip.ip]
            issues.append(
                (
                    ("ipAddresses", i),
                    f"{ip.ip} is ipAddresses[{j}] already, with another prefix length",
                )
            )
        first.setdefault(ip.ip, i)
    return issues


def route_issues(
    routes: Sequence[PodRoute | None],
    ips: Sequence[iprules.Interface | None],
    kept: Sequence[iprules.Interface] = (),
    reach: bool = True,
) -> list[Issue]:
    """What the kernel would refuse of a claim's routes inside the pod, too late to name
    the field: a gateway not of its destination's family, the interface's own, network
    or broadcast address, or (`reach`) on no network of its addresses (`kept`: those a
    host NIC keeps of its own) and not IPv6 link-local; routes the kernel would not hold
    beside each other or beside the pod's own default route."""
    held = [*(ip for ip in ips if ip is not None), *kept]
    issues = _clashes(routes)
    for i, route in enumerate(routes):
        if route is None or route.gateway is None:
            continue
        where: Path = ("routes", i, "gateway")
        problem = _gateway_problem(route, held, reach)
        if problem is not None:
            issues.append((where, problem))
    return issues


def _gateway_problem(route: PodRoute, held: Sequence[iprules.Interface], reach: bool) -> str | None:
    dst = ipaddress.ip_interface(route.destination).network
    gw = ipaddress.ip_address(str(route.gateway))
    if gw.version != dst.version:
        return f"{gw} is not of the family of the destination {route.destination}"
    if any(n.version == gw.version and n.ip == gw for n in held):
        return f"{gw} is this interface's own address, not a gateway"
    for n in held:
        net = n.network
        edges = (net.network_address, net.broadcast_address)
        if n.version == gw.version == 4 and net.prefixlen <= 30 and gw in edges:
            what = "network" if gw == net.network_address else "broadcast"
            return f"{gw} is the {what} address of {net}, not a gateway"
    if not reach or (gw.version == 6 and gw.is_link_local):
        return None
    if any(n.version == gw.version and gw in n.network for n in held):
        return None
    on = ", ".join(str(n.network) for n in held) or "none"
    return f"{gw} is not on a network of the interface's addresses ({on})"


def _clashes(routes: Sequence[PodRoute | None]) -> list[Issue]:
    """The kernel holds one route per destination and metric: a claim's default route
    needs a metric of its own (the pod's network has a default route already: IPv4 at
    metric 0, IPv6 usually at 1024), and two of its routes may not share both."""
    issues: list[Issue] = []
    seen: dict[tuple[str, int], int] = {}
    for i, route in enumerate(routes):
        if route is None:
            continue
        metric = route.kernel_metric
        if route.destination in DEFAULT_ROUTES and metric in POD_DEFAULT_METRICS:
            issues.append(
                (
                    ("routes", i, "metric"),
                    "a default route needs a metric other than 0 and 1024: the pod's own "
                    "network holds the default route at metric 0 (IPv4) or 1024 (IPv6), and "
                    "the kernel keeps one route per destination and metric",
                )
            )
        elif (route.destination, metric) in seen:
            issues.append(
                (
                    ("routes", i),
                    f"routes[{seen[route.destination, metric]}] already goes to "
                    f"{route.destination} at metric {metric}: the kernel keeps one route per "
                    "destination and metric; give one of them another metric",
                )
            )
        seen.setdefault((route.destination, metric), i)
    return issues


def sysctl_parts(name: str) -> tuple[str, str, str] | None:
    """(family, interface, key) of a per-interface sysctl name, None if it is none."""
    if len(name) > SYSCTL_NAME_MAX or not patterns.search(SYSCTL_NAME_PATTERN, name):
        return None
    family, rest = name.split(".")[1], name.split(".", 3)[3]
    interface, key = rest.rsplit(".", 1)
    return family, interface, key


def sysctl_issues(
    sysctls: Mapping[str, object], interface: str, ips: Sequence[iprules.Interface | None]
) -> list[Issue]:
    """Each sysctl must be of the claim's own `interface`, with a value the kernel takes
    (a 32-bit integer for all but stable_secret); IPv6 may not be turned off on an
    interface given IPv6 addresses."""
    issues: list[Issue] = []
    for name, value in sysctls.items():
        parts = sysctl_parts(name)
        if parts is None:
            continue
        family, ifname, key = parts
        where: Path = ("sysctls", name)
        if ifname in NO_CLAIM_INTERFACE:
            issues.append((where, f"names interface {ifname}, which is no claim's interface"))
        elif ifname != interface:
            issues.append((where, f"names interface {ifname}, not this claim's {interface}"))
        elif key not in STRING_SYSCTLS and int32(value) is None:
            if isinstance(value, str | int) and not isinstance(value, bool):
                shown = json.dumps(str(value))
                issues.append((where, f"{shown} is not a number the kernel takes (32-bit integer)"))
        elif family == "ipv6" and key == "disable_ipv6" and int32(value):
            v6 = [i for i, ip in enumerate(ips) if ip is not None and ip.version == 6]
            if v6:
                issues.append(
                    (where, f"turns IPv6 off, but ipAddresses[{v6[0]}] is an IPv6 address")
                )
    return issues


def int32(value: object) -> int | None:
    """`value` (a JSON integer or a string) as the kernel's proc_dointvec reads one
    integer, None if it does not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if INT32[0] <= value <= INT32[1] else None
    if not isinstance(value, str):
        return None
    digits = value[1:] if value.startswith("-") else value
    if not (digits.isascii() and digits.isdigit()):
        return None
    number = int(value)
    return number if INT32[0] <= number <= INT32[1] else None


def config_issues(config: Mapping[str, Any], default_name: str | None, keeps: bool) -> list[Issue]:
    """Every issue of an interface's config (as the schema gives it: values may be
    anything), read alone; `keeps`: the link keeps addresses of its own (a host NIC), so
    whether a gateway is reachable is left to the node."""
    ips = [usable_interface(a) for a in _list(config.get("ipAddresses"))]
    routes = [usable_route(r) for r in _list(config.get("routes"))]
    name = config.get("interfaceName", default_name)
    sysctls = config.get("sysctls")
    issues = address_issues(ips) + route_issues(routes, ips, reach=not keeps)
    if isinstance(name, str) and isinstance(sysctls, Mapping):
        issues += sysctl_issues(sysctls, name, ips)
    return issues


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def usable_interface(value: object) -> iprules.Interface | None:
    """An address with a prefix length written canonically, parsed; None otherwise.
    (Whether it may be a claim's is the `cidr` format's business: the rules read
    every address as the kernel would hold it.)"""
    if not isinstance(value, str) or "%" in value:
        return None
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        return None
    if str(iface) != value or (iface.version == 6 and iface.ip in _MAPPED):
        return None
    return iface


def usable_address(value: object) -> iprules.Address | None:
    """An address written canonically, parsed; None otherwise."""
    if not isinstance(value, str) or "%" in value:
        return None
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return None
    if str(ip) != value or (ip.version == 6 and ip in _MAPPED):
        return None
    return ip


def usable_route(value: object) -> PodRoute | None:
    """A route whose destination, gateway and metric are written as the rules can read
    them, parsed; None otherwise."""
    if not isinstance(value, Mapping):
        return None
    gateway, metric = value.get("gateway"), value.get("metric", 0)
    if usable_interface(value.get("destination")) is None:
        return None
    if gateway is not None and usable_address(gateway) is None:
        return None
    if isinstance(metric, bool) or not isinstance(metric, int) or not 0 <= metric < 2**32:
        return None
    return PodRoute(str(value["destination"]), gateway, value.get("metric"))


def render(base: str, path: Path) -> str:
    """`path` below `base` as a JSON path, e.g. `$.netdev.routes[1].gateway`."""
    out = base
    for elem in path:
        if isinstance(elem, int):
            out += f"[{elem}]"
        elif elem.isidentifier() and elem.isascii():
            out += f".{elem}"
        else:
            out += f"[{json.dumps(elem)}]"
    return out
