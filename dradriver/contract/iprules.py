"""Which interface addresses a claim may ask for: the rules, without any I/O.

A claim's `ipAddresses` are checked in three steps (docs/configuration.md, "Claim addresses"):

1. Form, everywhere (the config schema's `cidr` format, also `dra-driver validate-config`):
   an address and a decimal prefix length, written canonically, no zone, and a unicast
   host address: never unspecified, loopback, link-local, multicast, reserved,
   IPv4-mapped, nor the network, broadcast or subnet-router address of its own prefix.
2. The operator's ranges (`--claim-address-ranges`), on the node: the address must lie in
   one of them. Empty (the default) means claims may not set addresses at all.
3. The host, where the host sees the address: not an address, local route or gateway
   of the node, nor the API server's address (`HostView`).

The prefix length is the pod's own business: it makes routes only inside the pod (and
none on the host while the link is down there).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_net = ipaddress.ip_network
# Never a claim's address, whatever the operator's ranges say; the first match names why.
NEVER: tuple[tuple[Network, str], ...] = (
    (_net("0.0.0.0/8"), "in 0.0.0.0/8 ('this network', with the unspecified address)"),
    (_net("127.0.0.0/8"), "a loopback address (127.0.0.0/8)"),
    (_net("169.254.0.0/16"), "IPv4 link-local (169.254.0.0/16, where cloud metadata lives)"),
    (_net("224.0.0.0/4"), "multicast (224.0.0.0/4)"),
    (_net("240.0.0.0/4"), "reserved (240.0.0.0/4, with the broadcast address 255.255.255.255)"),
    (_net("::/128"), "the unspecified address (::)"),
    (_net("::1/128"), "the loopback address (::1)"),
    (_net("::ffff:0:0/96"), "IPv4-mapped (::ffff:0:0/96); write the IPv4 address itself"),
    (_net("::/8"), "reserved (::/8)"),
    (
        _net("fe80::/10"),
        "IPv6 link-local (fe80::/10): the runtime does not carry link-local addresses "
        "into the pod, and the kernel gives every interface one",
    ),
    (_net("ff00::/8"), "multicast (ff00::/8)"),
)


def parse_interface(text: object) -> Interface:
    """A claim's interface address checked for form (rule 1); ValueError says what is wrong."""
    if not isinstance(text, str):
        raise ValueError("must be a string such as 10.0.0.2/24")
    address, slash, prefix = text.partition("/")
    if not slash:
        raise ValueError("needs a prefix length, e.g. 10.0.0.2/24 or fd00::2/64")
    if "%" in address:
        raise ValueError("an address zone (%...) is not allowed")
    if not (prefix.isascii() and prefix.isdigit()):
        raise ValueError("the prefix length must be a decimal number (not a netmask)")
    family = ipaddress.IPv6Interface if ":" in address else ipaddress.IPv4Interface
    iface = family(text)  # its ValueError says what is wrong (leading zeros, a bad prefix)
    problem = form_problem(iface)
    if problem is not None:
        raise ValueError(problem)
    if str(iface) != text:
        raise ValueError(f"write it in canonical form: {iface}")
    return iface


def form_problem(iface: Interface) -> str | None:
    """Why `iface` can never be a claim's address (rule 1), or None."""
    ip, network = iface.ip, iface.network
    for special, why in NEVER:
        if special.version == ip.version and ip in special:
            return f"{ip} is {why}"
    if network.prefixlen == 0:
        return "a prefix length of 0 would make every address on-link"
    if ip.version == 4 and network.prefixlen <= 30:
        if ip == network.network_address:
            return f"{ip} is the network address of {network}"
        if ip == network.broadcast_address:
            return f"{ip} is the broadcast address of {network}"
    if ip.version == 6 and network.prefixlen <= 126 and ip == network.network_address:
        return f"{ip} is the subnet-router anycast address of {network}"
    return None


def parse_ranges(entries: Iterable[str]) -> tuple[Network, ...]:
    """The operator's ranges (rule 2) from CIDR strings; ValueError names a bad one."""
    ranges = []
    for entry in entries:
        try:
            ranges.append(ipaddress.ip_network(entry, strict=True))
        except ValueError as exc:
            loose = _loose_network(entry)
            hint = f"; did you mean {loose}?" if loose is not None else ""
            raise ValueError(f"{entry!r} is not a network in CIDR form ({exc}){hint}") from None
    return tuple(ranges)


def _loose_network(entry: str) -> Network | None:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


def in_ranges(ip: Address, ranges: Iterable[Network]) -> bool:
    """Whether `ip` lies in one of the operator's ranges (rule 2)."""
    return any(r.version == ip.version and ip in r for r in ranges)


@dataclass(frozen=True)
class HostView:
    """What the node itself uses (rule 3): (network, what it is) a claim's address must
    stay out of, e.g. (192.0.2.254/32, "the gateway of this node's route default ...")."""

    taken: tuple[tuple[Network, str], ...] = ()

    def conflict(self, ip: Address) -> str | None:
        """Why the host needs `ip` for itself, or None."""
        for network, what in self.taken:
            if network.version == ip.version and ip in network:
                return f"{ip} is {what}"
        return None


def host_network(address: str, prefixlen: int | None = None) -> Network:
    """A network from an address and prefix length (a single address without one)."""
    ip = ipaddress.ip_address(address)
    return ipaddress.ip_network((ip, ip.max_prefixlen if prefixlen is None else prefixlen), False)


_MAPPED = _net("::ffff:0:0/96")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


def parse_destination(text: object) -> Network:
    """A route's destination (the `route-destination` format): a network in canonical
    CIDR form, host bits clear (0.0.0.0/0 and ::/0 included); ValueError says why not."""
    if not isinstance(text, str):
        raise ValueError("must be a string such as 10.20.0.0/16 or 0.0.0.0/0")
    address, slash, prefix = text.partition("/")
    if not slash:
        raise ValueError("needs a prefix length, e.g. 10.20.0.0/16 (0.0.0.0/0: the default)")
    if "%" in address:
        raise ValueError("an address zone (%...) is not allowed")
    if not (prefix.isascii() and prefix.isdigit()):
        raise ValueError("the prefix length must be a decimal number (not a netmask)")
    family = ipaddress.IPv6Network if ":" in address else ipaddress.IPv4Network
    try:
        network = family(text)
    except ValueError as exc:
        if "host bits" in str(exc):
            loose = family(text, strict=False)
            raise ValueError(f"has host bits set: the network is {loose}") from None
        raise
    if network.version == 6 and network.network_address in _MAPPED:
        raise ValueError("IPv4-mapped (::ffff:0:0/96); write the IPv4 network itself")
    if str(network) != text:
        raise ValueError(f"write it in canonical form: {network}")
    return network


def parse_gateway(text: object) -> Address:
    """A route's gateway (the `route-gateway` format): a unicast address in canonical
    form (link-local allowed: IPv6 routers are usually fe80::...); ValueError says why not."""
    if not isinstance(text, str):
        raise ValueError("must be a string such as 10.20.0.1 or fe80::1")
    if "/" in text or "%" in text:
        raise ValueError("an address alone: no prefix length, no zone")
    ip = ipaddress.ip_address(text)  # its ValueError says what is wrong
    if ip.version == 6 and ip in _MAPPED:
        raise ValueError("IPv4-mapped (::ffff:0:0/96); write the IPv4 address itself")
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip == _BROADCAST:
        raise ValueError(f"{ip} is not a unicast address (unspecified, loopback, multicast)")
    if str(ip) != text:
        raise ValueError(f"write it in canonical form: {ip}")
    return ip
