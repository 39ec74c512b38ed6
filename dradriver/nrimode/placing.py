"""Moving a device's interfaces into a pod sandbox's network namespace, and back (NRI mode).

In: each interface moves from the host into the namespace under its name in the pod, in
one request (as runc does), then, inside the namespace: its sysctls (before anything
that they may govern), the addresses (a move flushes them), link up (a move sets it
down), the routes. RDMA devices in exclusive netns mode move the same way. Moving in is
idempotent: what is already in the pod is only configured again (addresses and the
claim's own routes that exist are kept; another route to a destination at the metric a
claim's route asks for is an error naming it), so a move that a crash interrupted is
finished by doing it again.

Out (the sandbox stops): physical interfaces and RDMA devices move back to the host
under their host names (or `dev<N>` when that name is taken meanwhile; the kit finds
them by MAC); virtual ones stay, and die with the namespace.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Sequence

from dradriver.base.errors import DeviceError
from dradriver.contract.hookspecs import PodRoute
from dradriver.kernel import netlink
from dradriver.state.moves import Move

KERNEL_PICKS = "dev%d"  # a name pattern: the kernel picks a free number
MAIN_TABLE = 254


def move_in(moves: Sequence[Move], netns: str) -> None:
    """Move one device's interfaces (and RDMA devices) into the namespace at `netns`
    and apply there what the pod should see."""
    here: set[str] | None = None
    for mv in moves:
        if mv.rdma:
            here = set(netlink.rdma_devices()) if here is None else here
            if mv.rdma in here:
                netlink.rdma_move(mv.rdma, netns, f"move RDMA device {mv.rdma} into the pod")
            continue
        link = netlink.find(mv.host)
        if link is not None:
            netlink.move(
                link, netns, mv.container, f"move {mv.host} into the pod as {mv.container}"
            )
    with netlink.inside(netns):
        for mv in moves:
            if mv.rdma:
                if mv.rdma not in netlink.rdma_devices():
                    raise DeviceError(
                        f"RDMA device {mv.rdma} is neither on the host nor in the pod"
                    )
                continue
            link = netlink.find(mv.container)
            if link is None:
                raise DeviceError(
                    f"interface {mv.host} is neither on the host nor in the pod as {mv.container}"
                )
            configure(link, mv)


def configure(link: netlink.Link, mv: Move) -> None:
    """Inside the pod: sysctls, addresses, up, routes (existing ones are kept)."""
    for s in mv.sysctls:
        netlink.set_sysctl(f"net/{s.family}/conf/{mv.container}/{s.key}", s.value)
    for cidr in mv.addresses:
        ip = ipaddress.ip_interface(cidr)
        netlink.add_address(link.index, str(ip.ip), ip.network.prefixlen, mv.container, True)
    if not link.up:
        try:
            netlink.set_link(link, f"set {mv.container} up in the pod", state="up")
        except netlink.NetlinkError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise DeviceError(
                f"config macAddress ({link.address}): {mv.container} cannot come up, its "
                "MAC address is in use on its parent (the parent's, or another pod's "
                "macvlan's): give the claim another macAddress"
            ) from None
    for i, route in enumerate(mv.routes):
        add_route(link, route, i)


def add_route(link: netlink.Link, route: PodRoute, index: int) -> None:
    """Add a claim's route inside the pod; the same route already there (a move done
    again) is kept, another one to the destination at that metric is an error."""
    try:
        netlink.add_route(link, route.destination, route.gateway, route.metric)
        return
    except netlink.NetlinkError as exc:
        if exc.errno != errno.EEXIST:
            raise
    metric = route.kernel_metric
    clash = [
        r
        for r in netlink.routes()
        if r.dst == route.destination and r.table == MAIN_TABLE and (r.metric or 0) == metric
    ]
    names = {ln.index: ln.name for ln in netlink.links()}
    for r in clash:
        if r.oif == link.index and r.gateways == ((route.gateway,) if route.gateway else ()):
            return  # ours, from an earlier attempt of this move
    via = f" via {route.gateway}" if route.gateway else ""
    there = (
        "; ".join(
            f"{r.dst}"
            + "".join(f" via {g}" for g in r.gateways)
            + f" dev {names.get(r.oif or 0, r.oif)}"
            for r in clash
        )
        or "another route"
    )
    raise DeviceError(
        f"config routes[{index}] ({route.destination}{via}, metric {metric}): the pod already "
        f"has a route to {route.destination} at metric {metric} ({there}); the kernel holds "
        "one route per destination and metric: give this route another metric"
    )


def move_out(moves: Sequence[Move], netns: str) -> None:
    """Move one device's physical interfaces and RDMA devices from the namespace at
    `netns` back to the host (those already gone from it are skipped)."""
    stranded: list[tuple[str, str | None]] = []  # (its name in the pod, MAC) now on the host
    with netlink.inside(netns):
        for mv in moves:
            if mv.rdma:
                if mv.rdma in netlink.rdma_devices():
                    netlink.rdma_move(mv.rdma, None, f"move RDMA device {mv.rdma} back to the host")
                continue
            if not mv.returns:
                continue
            link = netlink.find(mv.container)
            if link is None:
                continue
            try:
                netlink.move(
                    link, None, mv.host, f"move {mv.container} back to the host as {mv.host}"
                )
            except netlink.NetlinkError as exc:
                if exc.errno != errno.EEXIST:
                    raise
                # The host name is taken meanwhile. Linux moves a link whose name is
                # free on the host first and then fails the rename: it is on the host
                # under its pod name. Otherwise it is still here: the kernel names it.
                if netlink.find(mv.container) is None:
                    stranded.append((mv.container, link.address))
                    continue
                what = f"move {mv.container} back to the host (its name {mv.host} is taken)"
                netlink.move(link, None, KERNEL_PICKS, what)
    for name, mac in stranded:  # on the host now: give it a name of the kernel's choosing
        link = netlink.find(name)
        if link is not None and link.address == mac:
            netlink.set_link(link, f"rename {name} (back from a pod)", ifname=KERNEL_PICKS)
