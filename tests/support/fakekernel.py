"""An in-memory kernel behind dradriver.kernel.netlink, for testing the state machine without root.

It keeps what the driver looks at (links with name, kind, alias, MTU and its limits,
MAC, state, addresses; veth peers; VF settings; routes, with the local routes the real
kernel derives from addresses) and answers with the errno the real kernel gives for the
same request (EEXIST, ENODEV, EINVAL, EADDRNOTAVAIL, ENETUNREACH).

Pod network namespaces are separate tables (`add_namespace`, keyed by path): a thread
enters one (`netlink.inside`), links move between them as the kernel moves them (down,
addresses flushed, MTU, MAC and alias kept), and `remove_namespace` does what the kernel
does when a namespace goes: virtual links die (a veth's peer with them), physical ones
come back to the host (under their name, or `dev<N>` on a clash), RDMA devices too.
Per-interface sysctls exist for the links of a namespace (KNOWN_CONF_KEYS). A `Steps` controller
counts every request (and every file write it is told about) so a test can make the
n-th one fail, or "crash" there: the kernel state and the files as they were just
before that step are kept as an `Image`, and a BaseException unwinds. The code's own
`except BaseException` cleanup still runs on the way out, which a SIGKILL would not
allow; the test throws that away by restoring the image.
"""

from __future__ import annotations

import copy
import errno
import ipaddress
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dradriver.contract.hookspecs import PodRoute
from dradriver.kernel.netlink import Link, NetlinkError, Route, VfSettings

_LOCAL_TABLE, _MAIN_TABLE = 255, 254
KNOWN_CONF_KEYS = {"rp_filter", "forwarding", "accept_ra", "disable_ipv6", "arp_ignore", "mtu"}
READ_ONLY_CONF_KEYS = {"mc_forwarding"}  # exist, but the kernel lets nobody write them


class Crash(BaseException):
    """The process died here (raised by Steps at the chosen step)."""


@dataclass
class FakeLink:
    index: int
    name: str
    kind: str | None
    mtu: int = 1500
    address: str = ""
    alias: str | None = None
    up: bool = False
    link_type: int = 1
    peer: str | None = None
    parent: int | None = None
    master: int | None = None
    addresses: set[tuple[str, int]] = field(default_factory=set)
    min_mtu: int = 68
    max_mtu: int = 65535
    permanent: str | None = None  # a NIC's own hardware address (None: virtual, or none)
    rate: int | None = None  # bits per second its root tbf qdisc sends at most
    redirect: int | None = None  # the index what it receives goes out of (ifb)

    @property
    def physical(self) -> bool:
        """A NIC of the node (added by the test, not created): it outlives namespaces."""
        return self.kind is None

    def view(self) -> Link:
        return Link(
            self.index,
            self.name,
            self.kind,
            self.alias,
            self.mtu,
            self.address,
            self.up,
            self.link_type,
            self.min_mtu,
            self.max_mtu,
            self.permanent,
        )


@dataclass
class FakeNetns:
    """A pod's network namespace: its links, the routes added to it, its sysctls."""

    table: dict[str, FakeLink] = field(default_factory=dict)
    added_routes: list[tuple[str, str | None, int | None, int]] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)


@dataclass
class Image:
    """What survives a crash: the kernel's links (the host's and each namespace's, RDMA
    devices) and the files of the watched directories."""

    table: dict[str, FakeLink]
    files: dict[Path, bytes]
    namespaces: dict[str, FakeNetns] = field(default_factory=dict)
    rdma: dict[str, str | None] = field(default_factory=dict)

    def restore(self, kernel: FakeKernel) -> None:
        """Put the kernel back as it was at the crash."""
        kernel.table = self.table
        kernel.namespaces = self.namespaces
        kernel.rdma = self.rdma


class Steps:
    """Counts side effects; fails or crashes at a chosen one."""

    def __init__(self, dirs: tuple[Path, ...] = ()) -> None:
        self.dirs = dirs
        self.count = 0
        self.log: list[str] = []
        self.fail_at: int | None = None
        self.fail_errno = errno.EPERM
        self.crash_at: int | None = None
        self.image: Image | None = None
        self.kernel: FakeKernel | None = None

    def tick(self, what: str) -> None:
        self.count += 1
        self.log.append(what)
        if self.count == self.crash_at:
            k = self.kernel
            self.image = Image(
                copy.deepcopy(k.table) if k else {},
                snapshot(self.dirs),
                copy.deepcopy(k.namespaces) if k else {},
                dict(k.rdma) if k else {},
            )
            raise Crash(f"crash before step {self.count}: {what}")
        if self.count == self.fail_at:
            raise NetlinkError(f"injected failure at step {self.count} ({what})", self.fail_errno)


def snapshot(dirs: tuple[Path, ...]) -> dict[Path, bytes]:
    """Every regular file under `dirs` with its content."""
    return {
        p: p.read_bytes() for d in dirs if d.exists() for p in sorted(d.rglob("*")) if p.is_file()
    }


def restore(dirs: tuple[Path, ...], files: Mapping[Path, bytes]) -> None:
    """Make `dirs` hold exactly `files` (what was on disk at the crash)."""
    for d in dirs:
        if d.exists():
            for p in sorted(d.rglob("*"), reverse=True):
                if p.is_file():
                    p.unlink()
    for p, data in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


class FakeKernel:
    """dradriver.kernel.netlink's Kernel protocol, in memory."""

    def __init__(self, steps: Steps | None = None) -> None:
        self.table: dict[str, FakeLink] = {}
        self.vfs: dict[tuple[int, int], VfSettings] = {}
        self.static_routes: list[Route] = []  # what `ip route add` would have made
        self.namespaces: dict[str, FakeNetns] = {}
        self.rdma: dict[str, str | None] = {}  # RDMA device -> namespace path (None: host)
        self.rdma_exclusive_mode = False
        self.host_sysctls: dict[str, str] = {}
        self._index = itertools.count(2)
        self._mac = itertools.count(1)
        self._thread = threading.local()
        self.steps = steps or Steps()
        self.steps.kernel = self

    # -- building the node ------------------------------------------------------------

    def add(self, name: str, kind: str | None = None, **attrs: Any) -> FakeLink:
        attrs.setdefault("address", self._new_mac())
        if kind is None:  # a NIC of the node: its hardware has an address of its own
            attrs.setdefault("permanent", attrs["address"])
        link = FakeLink(next(self._index), name, kind, **attrs)
        self.table[name] = link
        return link

    def _new_mac(self) -> str:
        n = next(self._mac)
        return f"02:fa:ce:00:{n // 256:02x}:{n % 256:02x}"

    def names(self) -> set[str]:
        return set(self.table)

    def add_namespace(self, path: str) -> FakeNetns:
        """A pod's network namespace at `path` (as the runtime makes one), with lo."""
        ns = self.namespaces[path] = FakeNetns()
        ns.table["lo"] = FakeLink(next(self._index), "lo", "loopback", 65536, "", up=True)
        return ns

    def remove_namespace(self, path: str) -> None:
        """What the kernel does when a namespace goes (see the module docstring)."""
        ns = self.namespaces.pop(path)
        for link in ns.table.values():
            if link.physical:
                name = link.name
                if name in self.table:
                    name = next(f"dev{i}" for i in itertools.count() if f"dev{i}" not in self.table)
                link.name, link.up, link.addresses = name, False, set()
                self.table[name] = link
            elif link.kind == "veth" and link.peer in self.table:
                del self.table[link.peer]
        for name, where in self.rdma.items():
            if where == path:
                self.rdma[name] = None

    def inside(self) -> str | None:
        """The namespace path this thread is in (None: the host's)."""
        return getattr(self._thread, "path", None)

    def _ns(self, path: str | None) -> FakeNetns | None:
        if path is None:
            return None
        if path not in self.namespaces:
            raise OSError(errno.ENOENT, f"network namespace {path}: no such file")
        return self.namespaces[path]

    def _tables(self) -> dict[str, FakeLink]:
        ns = self._ns(self.inside())
        return self.table if ns is None else ns.table

    def route_get(self, address: str) -> str:
        """What `ip route get` answers, reduced: "local" or "via <gw> oif <i>" or
        "oif <i>" (the local table first, then the longest match of the main table)."""
        ip = ipaddress.ip_address(address)
        for table in (_LOCAL_TABLE, _MAIN_TABLE):
            matches = [
                (ipaddress.ip_network(r.dst).prefixlen, r)
                for r in self.routes()
                if r.table == table
                and r.type in ("local", "unicast")
                and ipaddress.ip_network(r.dst).version == ip.version
                and ip in ipaddress.ip_network(r.dst)
            ]
            if matches:
                route = max(matches, key=lambda m: m[0])[1]
                if route.type == "local":
                    return "local"
                via = f"via {route.gateways[0]} " if route.gateways else ""
                return f"{via}oif {route.oif}"
        return "unreachable"

    # -- the Kernel protocol ----------------------------------------------------------

    def _by_index(self, index: int) -> FakeLink:
        for link in self._tables().values():
            if link.index == index:
                return link
        raise NetlinkError("no such device", errno.ENODEV)

    def _by_name(self, name: str) -> FakeLink:
        if name not in self._tables():
            raise NetlinkError("no such device", errno.ENODEV)
        return self._tables()[name]

    def links(self) -> list[Link]:
        return [link.view() for link in self._tables().values()]

    def find(self, name: str) -> Link | None:
        link = self._tables().get(name)
        return link.view() if link else None

    def create(self, name: str, kind: str, attrs: Mapping[str, Any]) -> None:
        self.steps.tick(f"create {kind} {name}")
        assert self.inside() is None, "the driver creates links on the host only"
        peer = attrs.get("peer")
        if name in self.table or (peer and peer in self.table):
            raise NetlinkError("exists", errno.EEXIST)
        _check_name(name)
        parent = attrs.get("link")
        if parent is not None:
            self._by_index(parent)
        self.add(name, kind, peer=peer, parent=parent)
        if peer:
            self.add(peer, kind, peer=name)

    def set(self, index: int, attrs: Mapping[str, Any]) -> None:
        self.steps.tick(f"set {index} {sorted(attrs)}")
        link = self._by_index(index)
        if "mtu" in attrs:
            limit = link.max_mtu
            if link.parent is not None and link.kind in ("macvlan", "ipvlan"):
                limit = min(limit, self._by_index(link.parent).mtu)  # as the kernel checks
            if not link.min_mtu <= attrs["mtu"] <= limit:
                raise NetlinkError("mtu", errno.EINVAL)
        if "address" in attrs and not _unicast_mac(attrs["address"]):
            raise NetlinkError("mac", errno.EADDRNOTAVAIL)
        if "ifname" in attrs:
            _check_name(attrs["ifname"].replace("%d", "0"))
            table = self._tables()
            ifname = self._free(attrs["ifname"], table)
            if ifname in table:
                raise NetlinkError("exists", errno.EEXIST)
            del table[link.name]
            link.name = ifname
            table[link.name] = link
        for key, name in (("mtu", "mtu"), ("address", "address"), ("ifalias", "alias")):
            if key in attrs:
                setattr(link, name, attrs[key])
        if "state" in attrs:
            link.up = attrs["state"] == "up"
        if "master" in attrs:
            link.master = attrs["master"]

    def delete(self, name: str) -> None:
        self.steps.tick(f"delete {name}")
        link = self._by_name(name)
        del self._tables()[name]
        if link.peer and link.kind == "veth":  # the peer may be in another namespace
            for table in [self.table, *(ns.table for ns in self.namespaces.values())]:
                peer = table.get(link.peer)
                if peer is not None and peer.peer == name:
                    del table[link.peer]

    def delete_index(self, index: int) -> None:
        self.delete(self._by_index(index).name)

    def addresses(self, index: int) -> list[tuple[str, int]]:
        return sorted(self._by_index(index).addresses)

    def all_addresses(self) -> list[tuple[int, str, int]]:
        return sorted((ln.index, a, p) for ln in self._tables().values() for a, p in ln.addresses)

    def routes(self) -> list[Route]:
        """The static routes whose interface exists, and the routes the kernel derives from
        addresses: a local route per address (for IPv4 even on a down link, for IPv6
        only once the link is up: until then the address is tentative) and, on an up
        link, one for the address's prefix and (IPv4) one for its broadcast address."""
        table = self._tables()
        indexes = {ln.index for ln in table.values()}
        ns = self._ns(self.inside())
        if ns is None:
            out = [r for r in self.static_routes if r.oif is None or r.oif in indexes]
        else:
            out = [
                Route(dst, "unicast", _MAIN_TABLE, (gw,) if gw else (), oif, _metric(dst, m))
                for dst, gw, m, oif in ns.added_routes
                if oif in indexes
            ]
        for link in table.values():
            for address, prefixlen in sorted(link.addresses):
                if ":" in address and not link.up:
                    continue
                host = 128 if ":" in address else 32
                out.append(Route(f"{address}/{host}", "local", _LOCAL_TABLE, (), link.index))
                if link.up:
                    prefix = ipaddress.ip_interface(f"{address}/{prefixlen}").network
                    out.append(Route(str(prefix), "unicast", _MAIN_TABLE, (), link.index))
                    if prefix.version == 4 and prefix.prefixlen <= 30:
                        broadcast = f"{prefix.broadcast_address}/32"
                        out.append(Route(broadcast, "broadcast", _LOCAL_TABLE, (), link.index))
        return out

    def add_address(self, index: int, address: str, prefixlen: int) -> None:
        self.steps.tick(f"add address {address}/{prefixlen} to {index}")
        link = self._by_index(index)
        if ":" in address and link.mtu < 1280:  # the kernel turns IPv6 off below 1280
            raise NetlinkError("ipv6 off", errno.EINVAL)
        if (address, prefixlen) in link.addresses:
            raise NetlinkError("exists", errno.EEXIST)
        link.addresses.add((address, prefixlen))

    def delete_address(self, index: int, address: str, prefixlen: int) -> None:
        self.steps.tick(f"delete address {address}/{prefixlen} from {index}")
        link = self._by_index(index)
        if (address, prefixlen) not in link.addresses:
            raise NetlinkError("not there", errno.EADDRNOTAVAIL)
        link.addresses.discard((address, prefixlen))

    def vf_settings(self, pf_index: int, vf: int) -> VfSettings | None:
        return self.vfs.get((pf_index, vf))

    def set_vf(self, pf_index: int, vf: int, settings: VfSettings) -> None:
        self.steps.tick(f"set vf {vf} of {pf_index}")
        current = self.vfs.get((pf_index, vf), VfSettings())
        changes = {k: v for k, v in vars(settings).items() if v is not None}
        if settings.vlan is not None:  # one struct carries both, as the kernel's
            changes.setdefault("qos", 0)
        if settings.min_tx_rate is not None or settings.max_tx_rate is not None:
            changes.setdefault("min_tx_rate", 0)
            changes.setdefault("max_tx_rate", 0)
        self.vfs[(pf_index, vf)] = replace(current, **changes)

    def limit_rate(self, index: int, rate: int) -> None:
        self.steps.tick(f"limit {index}")
        link = self._by_index(index)
        if link.rate is not None:
            raise NetlinkError("add qdisc", errno.EEXIST)
        link.rate = rate

    def redirect_ingress(self, index: int, target: int) -> None:
        self.steps.tick(f"redirect {index}")
        self._by_index(target)  # it must exist
        link = self._by_index(index)
        if link.redirect is not None:
            raise NetlinkError("add qdisc", errno.EEXIST)
        link.redirect = target

    def close(self) -> None:
        pass

    # -- namespaces ---------------------------------------------------------------------

    def enter(self, netns: str) -> None:
        assert self.inside() is None, "netlink.inside is not nested"
        self._ns(netns)
        self._thread.path = netns

    def leave(self) -> None:
        self._thread.path = None

    def has_netns(self, netns: str) -> bool:
        return netns in self.namespaces

    def move(self, index: int, netns: str | None, ifname: str) -> None:
        self.steps.tick(f"move {index} to {netns or 'the host'} as {ifname}")
        if netns is None and self.inside() is None:
            raise NetlinkError("no namespace to return to", errno.EINVAL)
        link = self._by_index(index)
        target_ns = self._ns(netns)
        target = self.table if target_ns is None else target_ns.table
        _check_name(ifname.replace("%d", "0"))
        # As Linux (6.18) does it: a link whose current name is free in the target moves
        # under that name, and only then is renamed, which may fail (EEXIST) with the
        # link already moved; a link whose name is taken there takes `ifname` (a name or
        # a pattern) on the way, or stays where it is (EEXIST).
        if link.name in target:
            ifname = self._free(ifname, target)
            if ifname in target:
                raise NetlinkError("exists", errno.EEXIST)
            del self._tables()[link.name]
            link.name, link.up, link.addresses = ifname, False, set()
            target[ifname] = link
            return
        del self._tables()[link.name]
        link.up, link.addresses = False, set()
        target[link.name] = link
        if ifname == link.name:
            return
        ifname = self._free(ifname, target)
        if ifname in target:
            raise NetlinkError("exists", errno.EEXIST)
        del target[link.name]
        link.name = ifname
        target[ifname] = link

    @staticmethod
    def _free(ifname: str, table: dict[str, FakeLink]) -> str:
        """`ifname`, or for a pattern (`dev%d`) the first free name it gives."""
        if "%d" not in ifname:
            return ifname
        return next(
            ifname.replace("%d", str(i))
            for i in itertools.count()
            if ifname.replace("%d", str(i)) not in table
        )

    def add_route(
        self, index: int, destination: str, gateway: str | None, metric: int | None
    ) -> None:
        self.steps.tick(f"add route {destination} via {gateway} dev {index}")
        ns = self._ns(self.inside())
        assert ns is not None, "the driver adds routes only inside pods"
        link = self._by_index(index)
        if any(
            d == destination and _metric(d, m) == _metric(destination, metric)
            for d, _, m, _ in ns.added_routes
        ):
            raise NetlinkError("exists", errno.EEXIST)
        if gateway is not None:
            gw = ipaddress.ip_address(gateway)
            onlink = gw.version == 6 and gw.is_link_local
            for other in ns.table.values():
                for address, prefixlen in other.addresses:
                    net = ipaddress.ip_interface(f"{address}/{prefixlen}").network
                    onlink |= other.up and net.version == gw.version and gw in net
            if not onlink:
                raise NetlinkError("unreachable", errno.ENETUNREACH)
        if not link.up:
            raise NetlinkError("down", errno.ENETDOWN)
        ns.added_routes.append((destination, gateway, metric, index))

    def _sysctl(self, path: str) -> tuple[dict[str, str], bool]:
        """(where the values of this thread's namespace are, whether `path` exists)."""
        ns = self._ns(self.inside())
        parts = path.split("/")
        known = (
            len(parts) == 5
            and parts[:3] in (["net", "ipv4", "conf"], ["net", "ipv6", "conf"])
            and parts[4] in KNOWN_CONF_KEYS
            and (parts[3] in ("all", "default") or parts[3] in self._tables())
        )
        return (ns.sysctls if ns is not None else self.host_sysctls), known

    def write_sysctl(self, path: str, value: str) -> None:
        self.steps.tick(f"write sysctl {path}")
        values, known = self._sysctl(path)
        if not known:
            raise OSError(errno.ENOENT, f"/proc/sys/{path}: no such file")
        if "\n" in value.rstrip("\n"):
            raise OSError(errno.EINVAL, "invalid argument")
        values[path] = value

    def has_sysctl(self, path: str) -> bool:
        return self._sysctl(path)[1] and path.rsplit("/", 1)[-1] not in READ_ONLY_CONF_KEYS

    def sysctl(self, netns: str, path: str) -> str | None:
        """What a namespace's sysctl was set to (None: never written)."""
        return self.namespaces[netns].sysctls.get(path)

    def rdma_devices(self) -> list[str]:
        here = self.inside()
        return sorted(n for n, where in self.rdma.items() if where == here)

    def rdma_move(self, name: str, netns: str | None) -> None:
        self.steps.tick(f"move RDMA device {name} to {netns or 'the host'}")
        if self.rdma.get(name, "?") != self.inside():
            raise OSError(errno.ENODEV, f"no RDMA device {name} in this namespace")
        if netns is None and self.inside() is None:
            raise OSError(errno.EINVAL, "no namespace to return to")
        self._ns(netns)
        self.rdma[name] = netns

    def rdma_exclusive(self) -> bool:
        return self.rdma_exclusive_mode


def _check_name(name: str) -> None:
    """The kernel's dev_valid_name (plus its refusal of all and default, and of a '%'
    template, which it would expand to a number)."""
    if (
        not 0 < len(name.encode()) <= 15
        or name in (".", "..", "all", "default")
        or any(c in name for c in "/:%")
        or any(c.isspace() for c in name)
    ):
        raise NetlinkError("bad name", errno.EINVAL)


def _unicast_mac(mac: str) -> bool:
    """The kernel's is_valid_ether_addr: not a group address, not all zeros."""
    octets = bytes.fromhex(mac.replace(":", ""))
    return not octets[0] & 1 and any(octets)


def counting(steps: Steps, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a file operation so it is one step (it can fail or crash there too)."""

    def wrapped(path: Path, *args: Any, **kwargs: Any) -> Any:
        steps.tick(f"{what} {Path(path).name}")
        return fn(path, *args, **kwargs)

    return wrapped


def _metric(destination: str, metric: int | None) -> int:
    """A route's metric as the kernel keeps it (added without one: IPv6 1024, IPv4 0)."""
    return PodRoute(destination, None, metric).kernel_metric
