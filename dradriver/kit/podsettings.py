"""A claim's routes and sysctls, against what the kernel takes inside the pod (NRI mode):
checked at prepare so that a refusal names the field, instead of failing every sandbox
creation of the pod. Each function returns the issues, as (JSON path, message).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from dradriver.contract import iprules
from dradriver.contract.hookspecs import PodRoute
from dradriver.kernel import netlink

Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
DEFAULT_ROUTES = ("0.0.0.0/0", "::/0")
# Per-interface settings whose value is not a number.
STRING_SYSCTLS = frozenset({"stable_secret"})


def route_issues(
    routes: Sequence[PodRoute], ips: Sequence[Interface], path: str, more: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """What the kernel would refuse of a claim's routes inside the pod, too late to name
    the field: a gateway not of its destination's family, not on a network of the
    interface's addresses (`more`: addresses it keeps of its own) nor IPv6 link-local,
    or the interface's own, network or broadcast address; routes the kernel would not
    hold beside each other or beside the pod's own default route."""
    held = [*ips, *(ipaddress.ip_interface(a) for a in more)]  # every address it will hold
    networks = [ip.network for ip in held]
    issues = _clashes(routes, path)
    for i, route in enumerate(routes):
        if route.gateway is None:
            continue
        dst, gw = iprules.parse_destination(route.destination), ipaddress.ip_address(route.gateway)
        where = f"{path}.routes[{i}].gateway"
        own = next((n for n in held if n.version == gw.version and n.ip == gw), None)
        edge = next(
            (
                n.network
                for n in held
                if n.version == gw.version == 4
                and n.network.prefixlen <= 30
                and gw in (n.network.network_address, n.network.broadcast_address)
            ),
            None,
        )
        if gw.version != dst.version:
            issues.append((where, f"{gw} is not of the family of the destination {dst}"))
        elif own is not None:
            issues.append((where, f"{gw} is this interface's own address, not a gateway"))
        elif edge is not None:
            what = "network" if gw == edge.network_address else "broadcast"
            issues.append((where, f"{gw} is the {what} address of {edge}, not a gateway"))
        elif not (
            (gw.version == 6 and gw.is_link_local)
            or any(n.version == gw.version and gw in n for n in networks)
        ):
            on = ", ".join(str(n) for n in networks) or "none"
            issues.append((where, f"{gw} is not on a network of the interface's addresses ({on})"))
    return issues


def _clashes(routes: Sequence[PodRoute], path: str) -> list[tuple[str, str]]:
    """The kernel holds one route per destination and metric: a claim's default route
    needs a metric of its own (the pod's network has a default route already: IPv4 at
    metric 0, IPv6 usually at 1024), and two of its routes may not share both."""
    issues = []
    seen: dict[tuple[str, int], int] = {}
    for i, route in enumerate(routes):
        metric = route.kernel_metric
        if route.destination in DEFAULT_ROUTES and metric in (0, 1024):
            issues.append(
                (
                    f"{path}.routes[{i}].metric",
                    "a default route needs a metric other than 0 and 1024: the pod's own "
                    "network holds the default route at metric 0 (IPv4) or 1024 (IPv6), and "
                    "the kernel keeps one route per destination and metric",
                )
            )
        elif (route.destination, metric) in seen:
            issues.append(
                (
                    f"{path}.routes[{i}]",
                    f"routes[{seen[route.destination, metric]}] already goes to "
                    f"{route.destination} at metric {metric}: the kernel keeps one route per "
                    "destination and metric; give one of them another metric",
                )
            )
        seen.setdefault((route.destination, metric), i)
    return issues


def sysctl_issues(
    sysctls: Sequence[tuple[str, str]], interface: str, ips: Sequence[Interface], path: str
) -> list[tuple[str, str]]:
    """Each sysctl must be of the claim's own `interface`, a setting this node has and
    may write, with a value the kernel takes (a number for all but stable_secret); IPv6
    may not be turned off on an interface given IPv6 addresses."""
    issues = []
    for name, value in sysctls:
        where = f'{path}.sysctls["{name}"]'
        family, rest = name.split(".")[1], name.split(".", 3)[3]
        ifname, key = rest.rsplit(".", 1)
        if ifname != interface:
            issues.append((where, f"names interface {ifname}, not this claim's {interface}"))
        elif not netlink.has_sysctl(f"net/{family}/conf/default/{key}"):
            issues.append(
                (where, f"this node has no such setting, or it is read-only ({family} conf {key})")
            )
        elif key not in STRING_SYSCTLS and not _is_int32(value):
            issues.append((where, f"{value!r} is not a number the kernel takes (32-bit integer)"))
        elif family == "ipv6" and key == "disable_ipv6" and int(value) != 0:
            v6 = [i for i, ip in enumerate(ips) if ip.version == 6]
            if v6:
                issues.append(
                    (where, f"turns IPv6 off, but {path}.ipAddresses[{v6[0]}] is an IPv6 address")
                )
    return issues


def _is_int32(value: str) -> bool:
    """Whether the kernel's proc_dointvec reads `value` as one integer."""
    digits = value[1:] if value.startswith("-") else value
    return digits.isdigit() and digits.isascii() and -(2**31) <= int(value) < 2**31
