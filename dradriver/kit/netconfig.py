"""What every netdev config shares: its fields, their schema fragments and their checks,
configuring a down link from it, and what the NRI mode applies in the pod.

A claim's addresses, routes and sysctls go on the host side of a link in CDI mode (routes
and sysctls are refused there) and only inside the pod in NRI mode. The links themselves
are made by `dradriver.kit.links`.
"""

from __future__ import annotations

import ipaddress
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dradriver.base.errors import ConfigError
from dradriver.contract import ifrules, ipam, macs
from dradriver.contract.hookspecs import (
    NEEDS_NRI,
    NRI,
    DeviceRequest,
    NetworkData,
    PodInterface,
    PodRoute,
    PodSysctl,
    Validated,
)
from dradriver.kernel import netlink
from dradriver.kit import hostaddr, links, podsettings

DEFAULT_INTERFACE_NAME = "eth1"
# Schema patterns are plain regular expressions that Python and RE2 (CEL in the admission
# policy) read alike: `$` is the end of the string, no lookaround (names a pattern cannot
# exclude without lookaround are excluded with `not: {enum: ...}`).
# An interface name as the kernel takes it (dev_valid_name): 1-15 bytes, no '/', ':' or
# white space, not '.' or '..'; printable ASCII only; no '%' (the kernel reads "%d" as a
# template and picks a number); not lo (the pod has one), all or default (sysctl names).
INTERFACE_NAME_PATTERN = r"^[!-$&-.0-9;-~]{1,15}$"
RESERVED_HOST_NAMES = ["all", "default", ".", ".."]
# In the pod: lo, and eth0, the name of every pod's own (CNI) interface.
RESERVED_INTERFACE_NAMES = ["lo", "eth0", *RESERVED_HOST_NAMES]
ETHERNET_MAC_PATTERN = macs.ETHERNET_MAC_PATTERN
LOCAL_MAC_PATTERN = macs.LOCAL_MAC_PATTERN
LOCAL_MAC: dict[str, Any] = {
    "type": "string",
    "pattern": LOCAL_MAC_PATTERN,  # extended with the operator's list (contract.macs)
    "maxLength": 17,
    "description": "a locally administered unicast address aa:bb:cc:dd:ee:ff (the second "
    "hex digit 2, 6, a or e), or one the operator allows (--macvlan-global-macs): the link "
    "shares the node's LAN, where any other address may be a neighbour's (the gateway's)",
}
ZERO_MAC = macs.ZERO_MAC
# Canonical CIDR spelling (lower-case hex, decimal prefix length); the `cidr` format
# (dradriver.contract.iprules) checks the rest: a real address, and not of a special range.
CIDR_PATTERN = r"^[0-9a-f.:]+/[0-9]{1,3}$"
MAX_IPS = 16  # status.devices.networkData.ips holds at most 16
MAX_ROUTES = 32
MAX_SYSCTLS = 32
# net.ipv4.conf.<interface>.<key> (or ipv6): a per-interface setting of the claim's own
# interface; the interface part is checked against interfaceName (interfaceRules).
SYSCTL_NAME_PATTERN = ifrules.SYSCTL_NAME_PATTERN
SYSCTL_VALUE_PATTERN = r"^[ -~]*$"
ROUTE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "destination": {
            "type": "string",
            "pattern": CIDR_PATTERN,
            "format": "route-destination",
            "maxLength": 43,
            "description": "a network in canonical CIDR form, host bits clear, e.g. "
            "10.20.0.0/16, fd00:20::/64 or 0.0.0.0/0",
        },
        "gateway": {
            "type": "string",
            "pattern": r"^[0-9a-f.:]+$",
            "format": "route-gateway",
            "maxLength": 39,
            "description": "a unicast address in canonical form, e.g. 10.20.0.1 or fe80::1",
        },
        "metric": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    },
    "required": ["destination"],
    "additionalProperties": False,
}
ROUTES: dict[str, Any] = {
    "type": "array",
    "items": ROUTE,
    "maxItems": MAX_ROUTES,
    "uniqueItems": True,
    "description": "routes installed in the pod's network namespace via this interface "
    "(NRI injection mode only)",
}
SYSCTLS: dict[str, Any] = {
    "type": "object",
    "propertyNames": {
        "pattern": SYSCTL_NAME_PATTERN,
        "maxLength": ifrules.SYSCTL_NAME_MAX,
        "description": "net.ipv4.conf.<interfaceName>.<key> or net.ipv6.conf.<interfaceName>"
        ".<key>, a setting of this interface only",
    },
    "additionalProperties": {
        "type": ["string", "integer"],
        "pattern": SYSCTL_VALUE_PATTERN,
        "maxLength": 256,
        "description": "a value of printable ASCII characters (no newline)",
    },
    "maxProperties": MAX_SYSCTLS,
    "description": "per-interface sysctls written in the pod's network namespace (NRI "
    "injection mode only)",
}

COMMON_PROPERTIES: dict[str, Any] = {
    "kind": {"type": "string"},
    "interfaceName": {
        "type": "string",
        "pattern": INTERFACE_NAME_PATTERN,
        "maxLength": 15,
        "not": {"enum": RESERVED_INTERFACE_NAMES},
        "default": DEFAULT_INTERFACE_NAME,
        "description": "name inside the container: 1-15 printable ASCII characters, no "
        "'/', ':', '%' or space, not lo, eth0 (the pod's own interface), all, default, . or ..",
    },
    "mtu": {"type": "integer", "minimum": 68, "maximum": 65535},
    "macAddress": {
        "type": "string",
        "pattern": ETHERNET_MAC_PATTERN,
        "maxLength": 17,
        "not": {"enum": [ZERO_MAC]},
        "description": "a unicast Ethernet address aa:bb:cc:dd:ee:ff (the lowest bit of the "
        "first octet clear, not all zeros)",
    },
    "ipAddresses": {
        "type": "array",
        "items": {
            "type": "string",
            "pattern": CIDR_PATTERN,
            "format": "cidr",
            "description": "an address with a decimal prefix length in canonical form, "
            "e.g. 10.0.0.2/24 or fd00::2/64",
        },
        "maxItems": MAX_IPS,
        "uniqueItems": True,
        "description": "unicast addresses in CIDR form, kept by the runtime when it moves the "
        "link; the node allows only the operator's ranges (--claim-address-ranges)",
    },
    "ipam": {
        "type": "object",
        "properties": {
            "pool": {
                "type": "string",
                "pattern": ipam.NAME_PATTERN,
                "description": "the name of an address pool the operator defined",
            },
            "count": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1},
        },  # pool is required: checked at prepare (dradriver.claims.ipam)
        "additionalProperties": False,
        "description": "take ipAddresses (and the pool's routes) from an operator's pool, "
        "unique across the cluster (or the node, for a node pool); not with ipAddresses",
    },
    "routes": ROUTES,
    "sysctls": SYSCTLS,
}
IPV6_MIN_MTU = 1280  # below it the kernel turns IPv6 off on the link
# An IPv6 address on a link whose MTU is set below 1280: the kernel refuses to add it.
PARENT = {
    "type": "string",
    "pattern": INTERFACE_NAME_PATTERN,
    "maxLength": 15,
    "not": {"enum": RESERVED_HOST_NAMES},
    "description": "a host interface name (1-15 printable ASCII characters, no '/', ':', "
    "'%' or space, not all, default, . or ..)",
}


def schema(
    extra: Mapping[str, Any],
    required: Sequence[str] = (),
    drop: Sequence[str] = (),
    keeps_addresses: bool = False,
) -> dict[str, Any]:
    """A kind's schema: the common fields (minus `drop`) plus `extra`, nothing else, and
    the rules its values obey together (`keeps_addresses`: a host NIC's link keeps
    addresses of its own, which only the node knows)."""
    properties = {k: v for k, v in COMMON_PROPERTIES.items() if k not in drop}
    properties.update(extra)
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
        ifrules.KEYWORD: {"keepsAddresses": keeps_addresses},
    }
    return out


@dataclass(frozen=True)
class NetConfig:
    """The fields every netdev kind understands, parsed."""

    interface_name: str
    mtu: int | None
    mac: str | None
    ips: tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, ...]
    routes: tuple[PodRoute, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()  # (name as configured, value)

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> NetConfig:
        """Parse a schema-valid config (addresses were checked by the schema's format)."""
        return cls(
            interface_name=str(config.get("interfaceName", DEFAULT_INTERFACE_NAME)),
            mtu=config.get("mtu"),
            mac=config["macAddress"].lower() if config.get("macAddress") else None,
            ips=tuple(ipaddress.ip_interface(c) for c in config.get("ipAddresses", ())),
            routes=tuple(
                PodRoute(str(r["destination"]), r.get("gateway"), r.get("metric"))
                for r in config.get("routes", ())
            ),
            sysctls=tuple((str(k), str(v)) for k, v in (config.get("sysctls") or {}).items()),
        )

    def pod_sysctls(self) -> tuple[PodSysctl, ...]:
        """The sysctls as the pod's namespace gets them (names were checked)."""
        out = []
        for name, value in self.sysctls:
            family, key = name.split(".")[1], name.rsplit(".", 1)[1]
            out.append(PodSysctl(family, key, value))
        return tuple(out)

    def validated(self) -> Validated:
        """What the container gets: one interface."""
        return Validated(container_interfaces=(self.interface_name,))

    def network_data(self, mac: str | None) -> NetworkData:
        """networkData for the claim status."""
        return NetworkData(self.interface_name, tuple(str(i) for i in self.ips), mac)


NETDEV_PATH = "$.netdev"  # where a netdev config's fields are (combo/roce: $.combo.netdev)


def checked(
    req: DeviceRequest,
    config: Mapping[str, Any] | None = None,
    path: str = NETDEV_PATH,
    own: Sequence[int] = (),
    kept: Sequence[str] = (),
    shares: bool | None = None,
) -> NetConfig:
    """`config` (default: the request's) parsed and checked against the node: addresses
    in the operator's ranges, none twice, none the host uses where the host sees them or
    the link shares a node's link (`own`: indexes of the links the pod gets, whose current
    addresses are not the node's; `kept`: the addresses such a link takes along); routes
    and sysctls only in NRI mode, fitting the interface.
    Errors name `path`."""
    raw = req.config if config is None else config
    cfg = NetConfig.parse(raw)
    if cfg.mtu is not None:  # (an MTU the link inherits is checked where it is known)
        check_ipv6_mtu(cfg, path, cfg.mtu)
    nri = req.injection == NRI
    # A link on a node's link (macvlan, ipvlan, ipoib on a parent; a veth on a bridge;
    # an SR-IOV VF, on its PF's port) shares the node's network even in NRI mode: the
    # node's addresses, gateways and the API server's address stay refused there, as in
    # CDI mode. `shares` says so; unset, a `parent` or `bridge` in the config does.
    if shares is None:
        shares = bool(raw.get("parent") or raw.get("bridge"))
    hostaddr.check(req.context, cfg.ips, f"{path}.ipAddresses", own, on_host=not nri or shares)
    if not nri:
        refused = [(f"{path}.{f}", NEEDS_NRI) for f in ("routes", "sysctls") if raw.get(f)]
        if refused:
            raise ConfigError.many(refused)
    issues = podsettings.route_issues(cfg.routes, cfg.ips, path, kept)
    issues += podsettings.sysctl_issues(cfg.sysctls, cfg.interface_name, path, cfg.ips)
    if issues:
        raise ConfigError.many(issues)
    return cfg


def check_mtu(cfg: NetConfig, path: str, link: netlink.Link, parent: bool = False) -> None:
    """Refuse an MTU the kernel would refuse: beyond the limits `link` reports, or above
    its current MTU when it is the `parent` of a macvlan/ipvlan child."""
    if cfg.mtu is None:
        return
    if parent and cfg.mtu > link.mtu:
        raise ConfigError(
            f"{cfg.mtu} is above the MTU {link.mtu} of the parent {link.name} (a child "
            "cannot exceed its parent's)",
            f"{path}.mtu",
        )
    low, high = link.min_mtu, link.max_mtu
    if not parent and (cfg.mtu < low or (high and cfg.mtu > high)):
        raise ConfigError(
            f"{cfg.mtu} is outside what {link.name} supports ({low}-{high or 'unlimited'})",
            f"{path}.mtu",
        )


def check_ipv6_mtu(cfg: NetConfig, path: str, mtu: int) -> None:
    """Refuse IPv6 addresses when the link will have MTU `mtu` below 1280 (the config
    leaves it to a parent or NIC whose MTU is that low): the kernel would refuse them."""
    if mtu >= IPV6_MIN_MTU:
        return
    issues = [
        (
            f"{path}.ipAddresses[{i}]",
            f"IPv6 needs an MTU of at least {IPV6_MIN_MTU}; the link's is {mtu}",
        )
        for i, ip in enumerate(cfg.ips)
        if ip.version == 6
    ]
    if issues:
        raise ConfigError.many(issues)


def configure(
    link: netlink.Link, cfg: NetConfig, alias: str | None, addresses: bool = True
) -> str | None:
    """Tag, set MTU/MAC and (unless not `addresses`: NRI mode) add addresses on a down
    host-side link; return its MAC."""
    attrs: dict[str, Any] = {}
    if alias is not None:
        attrs["ifalias"] = alias
    if cfg.mtu is not None:
        attrs["mtu"] = cfg.mtu
    if cfg.mac is not None:
        attrs["address"] = cfg.mac
    if attrs:
        netlink.set_link(link, f"configure {link.name} ({', '.join(sorted(attrs))})", **attrs)
    for ip in cfg.ips if addresses else ():
        netlink.add_address(link.index, str(ip.ip), ip.network.prefixlen, link.name)
    return cfg.mac or link.address


def pod_interface(
    host: str, cfg: NetConfig, addresses: Sequence[str] | None = None, returns: bool = False
) -> PodInterface:
    """What the NRI mode moves and applies in the pod for one interface (`addresses`:
    all it should hold there, default the config's; `returns`: a physical interface)."""
    ips = tuple(addresses) if addresses is not None else tuple(str(ip) for ip in cfg.ips)
    return PodInterface(
        host, cfg.interface_name, ips, cfg.routes, cfg.pod_sysctls(), returns=returns
    )


# 0.1 kept the link helpers here; they moved to dradriver.kit.links (removed in 0.3).
_MOVED_TO_LINKS = frozenset(
    {
        "CreatedLinks", "host_name", "tag", "clear_leftover", "on_host", "create",
        "net_devices_edit", "delete_own",
    }
)  # fmt: skip


def __getattr__(name: str) -> Any:
    """A link helper of 0.1 at its new place, with a DeprecationWarning."""
    if name not in _MOVED_TO_LINKS:
        raise AttributeError(f"module {__name__} has no attribute {name}")
    warnings.warn(
        f"dradriver.kit.netconfig.{name} moved to dradriver.kit.links.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(links, name)
