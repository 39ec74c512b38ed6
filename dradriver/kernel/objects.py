"""The kernel objects the driver reads and writes: links, routes, VF settings, the
attributes a link is created or changed with, and the error a refused request raises.

Data only: the netlink facade (`dradriver.kernel.netlink`) and its rtnetlink backend
(`dradriver.kernel.rtnl`) both import these, so neither imports the other's types.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from dradriver.base.errors import DeviceError

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32


class NetlinkError(DeviceError):
    """The kernel refused a netlink request; `errno` says why."""

    def __init__(self, what: str, code: int, detail: str | None = None) -> None:
        text = f"{what}: {os.strerror(code)} (errno {code})"
        super().__init__(f"{text}: {detail}" if detail else text)
        self.errno = code
        self.detail = detail  # the kernel's own explanation (extended ack), if it gave one

    def about(self, what: str) -> NetlinkError:
        """The same refusal, told as a failure of `what`."""
        return NetlinkError(what, self.errno, self.detail)


@dataclass(frozen=True)
class Link:
    """The facts about one interface that the driver looks at."""

    index: int
    name: str
    kind: str | None
    alias: str | None
    mtu: int
    address: str | None
    up: bool
    link_type: int  # ARPHRD_*: 1 Ethernet, 32 InfiniBand
    min_mtu: int = 0  # the device's MTU limits as the kernel reports them (0: none)
    max_mtu: int = 0
    # The hardware's own address (IFLA_PERM_ADDRESS: physical NICs and VFs; None for
    # virtual links): what no configuration changes, so it identifies a NIC.
    permanent_address: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Route:
    """One route of any table, reduced to what the address checks look at."""

    dst: str  # network in CIDR form, e.g. 0.0.0.0/0 or 192.0.2.5/32
    type: str  # unicast, local, broadcast, anycast, multicast, blackhole, ...
    table: int
    gateways: tuple[str, ...] = ()  # every next hop's gateway (multipath, via)
    oif: int | None = None
    # The route's priority; not part of its identity in comparisons (the checks of
    # addresses look at destinations and gateways only).
    metric: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class VfSettings:
    """The settings of one SR-IOV VF that the PF holds (None: not reported)."""

    mac: str | None = None
    vlan: int | None = None
    trust: bool | None = None
    spoofchk: bool | None = None
    qos: int | None = None  # the VLAN's priority (802.1p), sent together with `vlan`
    link_state: Literal["auto", "enable", "disable"] | None = None
    min_tx_rate: int | None = None  # Mb/s, 0: no minimum; sent together with max_tx_rate
    max_tx_rate: int | None = None  # Mb/s, 0: no limit


class CreateAttrs(TypedDict, total=False):
    """What a new link takes besides its name and kind; each kind uses its own."""

    link: int  # the parent's index (macvlan, ipvlan, ipoib)
    peer: str  # the other end's name (veth)
    mode: str  # macvlan: private, vepa, bridge, passthru, source; ipvlan: l2, l3, l3s;
    # ipoib: datagram, connected (the backend turns names into the kernel's numbers)
    pkey: int  # the partition key (ipoib)


class LinkAttrs(TypedDict, total=False):
    """What `set_link` changes on an existing interface."""

    ifname: str
    mtu: int
    address: str  # aa:bb:cc:dd:ee:ff
    ifalias: str  # "" clears it
    state: Literal["up", "down"]
    master: int  # the index of the bridge to join (0: leave it)
    net_ns_fd: int  # an open file descriptor of the network namespace to move it to
