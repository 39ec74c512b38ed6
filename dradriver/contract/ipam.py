"""Address pools (IPAM): the operator's pools, their blocks, and choosing free addresses.
Pure: what is taken comes in, what to take goes out (dradriver.claims.ipam does the rest).

A pool is a set of ranges (CIDR) minus excluded addresses and its gateway. An address is
handed out with its range's prefix length (10.50.0.7/24 from 10.50.0.0/24). A range's
network and broadcast addresses (IPv4, prefix below 31) are never handed out.

A pool of scope `cluster` is cut into blocks of `blockSize` addresses; a node hands out
addresses only from blocks it holds, and a block is held by one node at a time (a Lease
per block, dradriver.apiserver.ipamblocks), so no address is handed out twice in the
cluster. A pool of scope `node` is the node's own: each node hands out all of it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dradriver.contract.hookspecs import PodRoute

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
CLUSTER, NODE = "cluster", "node"
MAX_POOLS = 32
MAX_RANGES = 16
MAX_BLOCKS = 65536  # per pool: what a node looks through to find a free block
MAX_COUNT = 8  # addresses one claim may take from a pool
DEFAULT_BLOCK = 16
# A pool's name: the driver's check, the config schema's and the chart's values schema's.
NAME_PATTERN = "^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
_NAME = re.compile(NAME_PATTERN)


class PoolError(ValueError):
    """A pool the operator defined cannot be used (the message names the pool and field)."""


@dataclass(frozen=True)
class Pool:
    """One named pool, checked."""

    name: str
    ranges: tuple[Network, ...]
    exclude: tuple[Network, ...] = ()
    gateway: Address | None = None
    routes: tuple[str, ...] = ()  # destinations routed via the gateway in the pod
    scope: str = CLUSTER
    block_size: int = DEFAULT_BLOCK

    def usable(self, address: Address) -> bool:
        """Whether the pool may hand out `address` (in a range, not excluded, not the
        gateway, not a range's network or broadcast address)."""
        if address == self.gateway or any(address in n for n in self.exclude):
            return False
        for network in self.ranges:
            if address in network:
                return not _edge(network, address)
        return False

    def interface(self, address: Address) -> str:
        """`address` with its range's prefix length, as a claim's ipAddresses holds it."""
        network = next(n for n in self.ranges if address in n)
        return f"{address}/{network.prefixlen}"

    def pod_routes(self) -> tuple[PodRoute, ...]:
        """The routes a pod gets with an address of the pool."""
        gateway = str(self.gateway) if self.gateway else None
        return tuple(PodRoute(d, gateway) for d in self.routes)

    def blocks(self) -> Iterator[tuple[int, Network]]:
        """(index, network) of every block of the pool, in order (cluster scope); a pool
        of more than MAX_BLOCKS blocks offers its first MAX_BLOCKS."""
        for index in range(MAX_BLOCKS):
            block = self.block(index)
            if block is None:
                return
            yield index, block

    def block(self, index: int) -> Network | None:
        """Block number `index` (None past the end): the ranges in order, each cut into
        blocks of `block_size` addresses (a range smaller than that is one block)."""
        if not 0 <= index < MAX_BLOCKS:
            return None
        for network in self.ranges:
            prefix = max(
                network.prefixlen, network.max_prefixlen - (self.block_size.bit_length() - 1)
            )
            count = 1 << (prefix - network.prefixlen)
            if index < count:
                start = int(network.network_address) + index * (
                    1 << (network.max_prefixlen - prefix)
                )
                return ipaddress.ip_network((start, prefix))
            index -= count
        return None


def _edge(network: Network, address: Address) -> bool:
    """A range's network (IPv4 and IPv6: the subnet-router anycast address) or IPv4
    broadcast address, which no claim may hold (dradriver.contract.iprules, rule 1)."""
    if network.version == 4 and network.prefixlen < 31:
        return address in (network.network_address, network.broadcast_address)
    if network.version == 6 and network.prefixlen < 127:
        return address == network.network_address
    return False


MAX_SCAN = 1 << 16  # addresses one search looks at, at most (it runs under the lock)


def free(pool: Pool, within: Sequence[Network], taken: set[str], count: int) -> list[str]:
    """Up to `count` addresses of `pool` in `within` (the pool's ranges, or the blocks
    the node holds) that are not in `taken` (addresses as strings), lowest first. Excluded
    networks are stepped over whole; at most MAX_SCAN addresses are looked at."""
    out: list[str] = []
    looked = 0
    for network in within:
        at, end = int(network.network_address), int(network.broadcast_address)
        while at <= end and len(out) < count and looked < MAX_SCAN:
            address = (
                ipaddress.ip_address(at) if network.version == 4 else ipaddress.IPv6Address(at)
            )
            skip = next((n for n in pool.exclude if address in n), None)
            if skip is not None:
                at = int(skip.broadcast_address) + 1
                continue
            looked += 1
            if str(address) not in taken and pool.usable(address):
                out.append(pool.interface(address))
            at += 1
    return out


def parse_pools(text: str) -> dict[str, Pool]:
    """The pools of `--ipam-pools` (a JSON list); PoolError names the pool and field."""
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PoolError(f"not JSON: {exc}") from None
    if not isinstance(doc, list) or len(doc) > MAX_POOLS:
        raise PoolError(f"must be a list of at most {MAX_POOLS} pools")
    pools: dict[str, Pool] = {}
    for i, entry in enumerate(doc):
        pool = _pool(entry, i)
        if pool.name in pools:
            raise PoolError(f"pool {pool.name}: defined twice")
        pools[pool.name] = pool
    _disjoint(list(pools.values()))
    return pools


def _pool(entry: Any, i: int) -> Pool:
    if not isinstance(entry, Mapping):
        raise PoolError(f"pool [{i}]: must be an object")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PoolError(f"pool [{i}].name: {name!r} is not a name (a-z, 0-9, '-', 1-32)")
    known = {"name", "ranges", "exclude", "gateway", "routes", "scope", "blockSize"}
    if unknown := sorted(set(entry) - known):
        raise PoolError(f"pool {name}: unknown field {unknown[0]}")
    ranges = _networks(name, "ranges", entry.get("ranges"), strict=True)
    if not ranges:
        raise PoolError(f"pool {name}.ranges: at least one range (CIDR) is needed")
    exclude = _networks(name, "exclude", entry.get("exclude") or [], strict=False)
    gateway = None
    if entry.get("gateway") is not None:
        try:
            gateway = ipaddress.ip_address(str(entry["gateway"]))
        except ValueError:
            raise PoolError(
                f"pool {name}.gateway: {entry['gateway']!r} is not an address"
            ) from None
    routes = _networks(name, "routes", entry.get("routes") or [], strict=True)
    if routes and gateway is None:
        raise PoolError(f"pool {name}.routes: routes need the pool's gateway")
    if gateway is not None and any(r.version != gateway.version for r in routes):
        raise PoolError(f"pool {name}.routes: a route of the other family than the gateway")
    scope = entry.get("scope", CLUSTER)
    if scope not in (CLUSTER, NODE):
        raise PoolError(f"pool {name}.scope: {scope!r} is not cluster or node")
    block = entry.get("blockSize", DEFAULT_BLOCK)
    if not isinstance(block, int) or block < 4 or block > 4096 or block & (block - 1):
        raise PoolError(f"pool {name}.blockSize: {block!r} is not a power of 2 from 4 to 4096")
    return Pool(name, ranges, exclude, gateway, tuple(str(r) for r in routes), scope, block)


def _networks(pool: str, field: str, value: Any, strict: bool) -> tuple[Network, ...]:
    if not isinstance(value, list) or len(value) > MAX_RANGES:
        raise PoolError(f"pool {pool}.{field}: must be a list of at most {MAX_RANGES} CIDRs")
    out = []
    for i, item in enumerate(value):
        try:
            out.append(ipaddress.ip_network(str(item), strict=strict))
        except ValueError as exc:
            raise PoolError(f"pool {pool}.{field}[{i}]: {exc}") from None
    return tuple(out)


def _disjoint(pools: list[Pool]) -> None:
    """Two pools (or two ranges of one) may not share an address: one address, one claim."""
    seen: list[tuple[str, Network]] = []
    for pool in pools:
        for network in pool.ranges:
            for other, theirs in seen:
                if network.version == theirs.version and network.overlaps(theirs):
                    raise PoolError(
                        f"pool {pool.name}.ranges: {network} overlaps {theirs} of pool {other}"
                    )
            seen.append((pool.name, network))


def pool_holding(pools: Iterable[Pool], address: Address) -> Pool | None:
    """The pool whose ranges hold `address` (whether it may hand it out or not), if any."""
    return next((p for p in pools if any(address in n for n in p.ranges)), None)


def overlaps(
    pools: Mapping[str, Pool], cluster: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """(pool, message) for each pool range that overlaps one of the cluster's own ranges
    (`cluster`: (CIDR, what it is), e.g. the Service range); unparsable CIDRs are skipped."""
    out = []
    for pool in pools.values():
        for text, what in cluster:
            try:
                network = ipaddress.ip_network(text, strict=False)
            except ValueError:
                continue
            for own in pool.ranges:
                if own.version == network.version and own.overlaps(network):
                    out.append((
                        pool.name,
                        f"pool {pool.name}'s range {own} overlaps {what} {network}: a pod would "
                        "get an address the cluster routes elsewhere; choose another range",
                    ))  # fmt: skip
    return out


def collisions(pools: Mapping[str, Pool], node: Sequence[tuple[str, str]]) -> list[str]:
    """What of `node` ((address, what it is): the node's own addresses, gateways and
    protected addresses) a pool could hand out: each a message naming pool and address."""
    out = []
    for pool in pools.values():
        for text, what in node:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            if pool.usable(address):
                out.append(
                    f"pool {pool.name} could hand out {address}, {what}: exclude it "
                    "(exclude: [...]) or choose another range"
                )
    return out
