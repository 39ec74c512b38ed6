"""A claim's routes and sysctls, against what the kernel takes inside the pod (NRI mode):
checked at prepare so that a refusal names the field, instead of failing every sandbox
creation of the pod. The rules the config alone decides are dradriver.contract.ifrules'
(the schema refuses those first); here they run again with what only the node knows: the
addresses a host NIC keeps, the sysctls the node has. Each function returns the issues,
as (JSON path, message).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from dradriver.contract import ifrules
from dradriver.contract.hookspecs import PodRoute
from dradriver.kernel import netlink

Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


def route_issues(
    routes: Sequence[PodRoute], ips: Sequence[Interface], path: str, more: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """What the kernel would refuse of a claim's routes inside the pod (`more`: addresses
    the interface keeps of its own, which may put a gateway on its network)."""
    kept = [ipaddress.ip_interface(a) for a in more]
    return [(ifrules.render(path, p), m) for p, m in ifrules.route_issues(routes, ips, kept)]


def sysctl_issues(
    sysctls: Sequence[tuple[str, str]], interface: str, path: str, ips: Sequence[Interface] = ()
) -> list[tuple[str, str]]:
    """The rules of dradriver.contract.ifrules, then: each sysctl must be a setting this
    node has and may write."""
    issues = [
        (ifrules.render(path, p), m)
        for p, m in ifrules.sysctl_issues(dict(sysctls), interface, ips)
    ]
    refused = {p for p, _ in issues}
    for name, _ in sysctls:
        where = ifrules.render(path, ("sysctls", name))
        parts = ifrules.sysctl_parts(name)
        if parts is None or where in refused:
            continue
        family, _, key = parts
        if not netlink.has_sysctl(f"net/{family}/conf/default/{key}"):
            issues.append(
                (where, f"this node has no such setting, or it is read-only ({family} conf {key})")
            )
    return issues
