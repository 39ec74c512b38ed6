"""A claim's share of the `bandwidth` capacity, enforced on the host side of its link.

The scheduler writes what each claim takes of a shareable device's capacity in the
allocation (`consumedCapacity`); the driver limits the claim's interface to its
`bandwidth` there, in both directions, on the host end of a veth, where the pod has
no rights to change it:
- what the pod receives: a token bucket (tbf) as the host end's root qdisc;
- what the pod sends: the host end's ingress is redirected to an ifb link of the claim's
  (named and tagged like its other links), whose own token bucket limits it.
Both go with the links at unprepare; after a reboot the record's allocation brings
them back with the links. A request that takes no bandwidth is not limited.

Whole devices offer `bandwidth` too: a host NIC and each VF its (PF's) link speed, or
the operator's figure where the kernel reports none. A request's `bandwidth` selects
a device that fast; a VF is then limited to it (its `max_tx_rate`, set through the
PF), a host NIC is the claim's whole link.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dradriver.base.errors import ClaimError
from dradriver.base.log import event
from dradriver.contract import quantity
from dradriver.contract.hookspecs import Capacity, DeviceRequest, HandlerContext
from dradriver.kernel import netlink
from dradriver.kernel.rtnl import tc
from dradriver.kit import hostif, links, sysfs

BANDWIDTH = "bandwidth"  # the capacity's name, in bits per second
FIELD = f"capacity.requests.{BANDWIDTH}"
MEGABIT = 1_000_000

log = logging.getLogger(__name__)
_UNREPORTED: set[str] = set()  # links already logged as offering no bandwidth


def capacity(context: HandlerContext) -> Capacity:
    """The `bandwidth` capacity the operator gives the virtual device: requests that do
    not ask take none (and are not limited); the others take multiples of the step."""
    return Capacity(
        quantity.render(context.virtual_bandwidth),
        default="0",
        minimum="0",
        step=quantity.render(context.bandwidth_step),
    )


def uplink_bandwidth(sysfs_root: Path, step: int) -> int:
    """The link speed of the node's uplink (the slowest interface holding a default
    route) in bits per second, down to a whole `step`; 0 where none reports a speed."""
    fs = sysfs.Sysfs(sysfs_root)
    speeds = [s for s in map(fs.link_speed, sorted(hostif.primary_interfaces())) if s]
    bits = min(speeds) * MEGABIT if speeds else 0
    return bits - bits % step


def link_capacity(
    context: HandlerContext, link: str, speed_mbps: int | None
) -> dict[str, Capacity]:
    """The `bandwidth` of a whole device on `link` (a host NIC, or a VF's PF): the
    link's speed, else the operator's --link-bandwidth, else none (logged once)."""
    bits = speed_mbps * MEGABIT if speed_mbps else context.link_bandwidth
    if bits:
        return {BANDWIDTH: Capacity(quantity.render(bits))}
    if link not in _UNREPORTED:
        _UNREPORTED.add(link)
        event(
            log,
            logging.WARNING,
            "link speed not reported: its devices offer no bandwidth until the operator "
            "sets --link-bandwidth (chart: settings.linkBandwidth)",
            link=link,
        )
    return {}


def allocated(req: DeviceRequest) -> int:
    """The bits per second the scheduler gave this device (0: no limit)."""
    text = req.consumed.get(BANDWIDTH)
    if text is None:
        return 0
    try:
        return quantity.parse(str(text))
    except ValueError as exc:
        raise ClaimError(f"{FIELD}: {exc}") from None


def megabits(req: DeviceRequest) -> int:
    """The device's bandwidth in whole megabits per second, rounded up (0: no limit)."""
    return -(-allocated(req) // MEGABIT)


def refuse(req: DeviceRequest, why: str) -> None:
    """Refuse a device that was given bandwidth its kind cannot enforce (`why`)."""
    if allocated(req):
        raise ClaimError(
            f"{FIELD}: kind {req.kind} cannot be limited to its bandwidth ({why}); "
            "request bandwidth with kind veth, or leave it out"
        )


def cni_runtime_config(rate: int) -> dict[str, int]:
    """The `bandwidth` runtime config of CNI's bandwidth plugin limiting both directions
    to `rate` bits per second, with the bucket the driver's own limit has (in bits)."""
    bucket = 8 * tc.burst(rate)
    return {"ingressRate": rate, "ingressBurst": bucket, "egressRate": rate, "egressBurst": bucket}


def ifb_name(req: DeviceRequest) -> str:
    """The host name of the ifb link that carries what the device's pod sends."""
    return links.host_name(req, "b")


def create_ifb(req: DeviceRequest) -> netlink.Link:
    """Create the device's ifb link, down and untagged (the caller has journalled its
    name, and deletes it if a later step fails)."""
    return links.create(req, ifb_name(req), "ifb")


def limit(req: DeviceRequest, host_end: netlink.Link, ifb: netlink.Link, rate: int) -> None:
    """Limit both directions through `host_end` to `rate` bits per second: what it
    receives (the pod's sending) goes through the device's `ifb`, tagged and started."""
    netlink.set_link(ifb, f"tag and start {ifb.name}", ifalias=links.tag(req), state="up")
    netlink.limit_rate(ifb, rate)
    netlink.limit_rate(host_end, rate)
    netlink.redirect_ingress(host_end, ifb)
