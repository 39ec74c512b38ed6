"""Pool addresses for claims (config `ipam: {pool, count}`): handed out at plan time under
the prepare lock, kept in the claim's record (its config then holds the `ipAddresses`),
taken back at unprepare, and rebuilt from the prepared records at start.

A device that already holds addresses of the pool (a claim prepared again) gets the same
ones. Cluster pools hand out addresses only from blocks the node holds: a background
thread takes a block when the node holds none with room left (dradriver.apiserver.
ipamblocks), off the lock and off the kubelet's call; a prepare that finds no free address
fails with a message saying so, and the kubelet's retry finds the new block.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dradriver.apiserver.ipamblocks import Blocks
from dradriver.base.errors import ConfigError, DriverError
from dradriver.base.log import event
from dradriver.claims.blockkeeper import BlockKeeper, Report
from dradriver.contract import ipam
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.ipamstore import Holder, IpamStore, PoolState
from dradriver.state.records import PREPARED
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

FIELD = "ipam"


class AddressBook:
    """The pools' addresses this node hands out."""

    def __init__(
        self,
        pools: Iterable[ipam.Pool],
        store: IpamStore,
        blocks: Blocks | None = None,
        lock: Callable[[], Any] | None = None,
        refused: Mapping[str, str] | None = None,
        report: Report | None = None,
    ) -> None:
        """`blocks` takes blocks of cluster pools (None: cluster pools cannot be used);
        `lock()` is the prepare lock's context, which the block thread takes to record
        a new block; `refused`: pools this node may not use, and why; `report(level,
        reason, message, **fields)` tells the operator (a log line and an Event)."""
        self.refused = dict(refused or {})
        self.every_pool = tuple(pools)  # refused ones too: their ranges are still theirs
        self.pools = {p.name: p for p in self.every_pool if p.name not in self.refused}
        self.store = store
        self._keeper = BlockKeeper(self, blocks, lock, report) if blocks is not None else None
        # The prepare lock keeps instances apart; this one the threads of one instance
        # (an unprepare call's workers release side by side).
        self._mutex = threading.RLock()

    def assign(
        self, ref: ClaimRef, key: str, config: Mapping[str, Any], path: str, nri: bool = True
    ) -> Mapping[str, Any]:
        """`config` with `ipAddresses` (and the pool's routes) from its `ipam` pool, or
        as it is without `ipam`; ConfigError naming the field under `path` ($.netdev).
        `nri`: the claim is prepared in the NRI mode (routes need it)."""
        spec = config.get(FIELD)
        if not isinstance(spec, Mapping):
            self.outside_pools(config, path)
            return config
        if config.get("ipAddresses"):
            raise ConfigError(
                "ipam and ipAddresses exclude each other: take addresses from a pool or "
                "name them, not both",
                f"{path}.{FIELD}",
            )
        if "pool" not in spec:
            raise ConfigError("required: the name of a pool", f"{path}.{FIELD}.pool")
        pool = self.pools.get(str(spec.get("pool")))
        if str(spec.get("pool")) in self.refused:
            raise ConfigError(self.refused[str(spec.get("pool"))], f"{path}.{FIELD}.pool")
        if pool is None:
            known = ", ".join(sorted(self.pools)) or "none"
            raise ConfigError(
                f"no pool {spec.get('pool')!r} on this node (pools: {known})",
                f"{path}.{FIELD}.pool",
            )
        if pool.routes and not nri:
            raise ConfigError(
                f"pool {pool.name} hands the pod routes, which only the NRI injection mode "
                "installs (this node prepares claims in CDI mode)",
                f"{path}.{FIELD}.pool",
            )
        count = int(spec.get("count", 1))
        with self._mutex:
            state = self.store.load(pool.name)
            mine = [a for a, h in state.addresses.items() if h.claim == ref.uid and h.key == key]
            if len(mine) < count:
                mine += self._take(pool, state, ref, key, count - len(mine), path)
        addresses = sorted(mine[:count], key=ipaddress.ip_address)
        routes = [dict(r) for r in config.get("routes") or []]
        routes += [{"destination": r.destination, "gateway": r.gateway} for r in pool.pod_routes()]
        out = {
            **config,
            "ipAddresses": [pool.interface(ipaddress.ip_address(a)) for a in addresses],
        }
        if routes:
            out["routes"] = routes
        return out

    def outside_pools(self, config: Mapping[str, Any], path: str) -> None:
        """Refuse a static address inside a pool's ranges (ConfigError naming the field
        under `path`): the pool may hand it to another claim, on this node or another."""
        for i, text in enumerate(config.get("ipAddresses") or ()):
            try:
                address = ipaddress.ip_interface(str(text)).ip
            except ValueError:
                continue  # the handler names a malformed address
            pool = ipam.pool_holding(self.every_pool, address)
            if pool is not None:
                ranges = ", ".join(str(n) for n in pool.ranges)
                raise ConfigError(
                    f"{text} is inside address pool {pool.name} ({ranges}), which hands its "
                    f"addresses to the claims that ask it: take one with ipam: {{pool: "
                    f"{pool.name}}}, or name an address outside every pool's ranges",
                    f"{path}.ipAddresses[{i}]",
                )

    def _take(
        self, pool: ipam.Pool, state: PoolState, ref: ClaimRef, key: str, count: int, path: str
    ) -> list[str]:
        within = pool.ranges if pool.scope == ipam.NODE else self._blocks(pool, state, path)
        room = (
            pool.block_size // 2 if self._keeper is not None and pool.scope == ipam.CLUSTER else 0
        )
        found = ipam.free(pool, within, set(state.addresses), count + room)  # one search
        chosen = found[:count]
        if len(chosen) < count:
            if self._keeper is not None and pool.scope == ipam.CLUSTER:
                self._keeper.want(pool.name)
                raise DriverError(
                    f"{path}.{FIELD}.pool: pool {pool.name} has no free address in the blocks "
                    "this node holds; the node is taking another block, and the kubelet's "
                    "retry will find it (if every block is taken, the pool is exhausted)"
                )
            raise DriverError(
                f"{path}.{FIELD}.pool: pool {pool.name} has no free address left on this node"
            )
        holder = Holder(ref.uid, key, ref.namespace, ref.name)
        taken = [c.split("/")[0] for c in chosen]
        for address in taken:
            state.addresses[address] = holder
        self.store.save(state)
        if self._keeper is not None and len(found) - count < room:
            self._keeper.want(pool.name)  # room for the next claims, taken off the call
        return taken

    def _blocks(self, pool: ipam.Pool, state: PoolState, path: str) -> list[ipam.Network]:
        if self._keeper is None:
            raise DriverError(
                f"{path}.{FIELD}.pool: pool {pool.name} is cluster-wide, and this driver runs "
                "without the API access it needs to take blocks (--pod-namespace unset)"
            )
        return [b for b in (pool.block(i) for i in state.blocks) if b is not None]

    def release(self, claim: str, configs: Mapping[str, Any] | None = None) -> None:
        """Take back every address a claim holds (once its links are released): in the
        pools its recorded `configs` (by device key) name, or in all without them."""
        names = self.pools if configs is None else pools_named(configs.values())
        self._drop(claim, names, lambda pool, holder, address: False)

    def retain(self, claim: str, configs: Mapping[str, Any]) -> None:
        """Take back what a claim prepared again holds beyond its new `configs` (by
        device key): an earlier preparation's addresses of a device or pool it no longer
        has. A pool file that cannot be read is logged and left to the next start."""
        kept = {
            (name, key, str(cidr).split("/")[0])
            for key, config in configs.items()
            for name in pools_named([config])
            for cidr in config.get("ipAddresses") or ()
        }
        for name in self.pools:
            try:
                self._drop(claim, [name], lambda pool, h, address: (pool, h.key, address) in kept)
            except (DriverError, OSError) as exc:  # the claim is prepared: never fails it
                event(log, logging.WARNING, "ipam pool not tidied", pool=name, error=exc)

    def _drop(
        self, claim: str, names: Iterable[str], keep: Callable[[str, Holder, str], bool]
    ) -> None:
        """Remove from pools `names` the addresses `claim` holds that `keep(pool, holder,
        address)` does not keep; a file is written only if it changed."""
        with self._mutex:
            for name in names:
                if name not in self.pools:
                    continue
                state = self.store.load(name)
                left = {
                    a: h for a, h in state.addresses.items()
                    if h.claim != claim or keep(name, h, a)
                }  # fmt: skip
                if len(left) != len(state.addresses):
                    state.addresses = left
                    self.store.save(state)

    def rebuild(
        self,
        prepared: Iterable[tuple[ClaimRef, Mapping[str, Mapping[str, Any]]]],
        keep: frozenset[str] = frozenset(),
    ) -> None:
        """At start, under the lock: each pool's addresses are those of the prepared
        claims' configs (`(claim, configs by device key)`), plus the file's of the claims
        in `keep` (a record that could not be read: its pod may hold them); the blocks
        stay (a file that cannot be read starts empty: the API has the blocks)."""
        self.store.tidy()
        by_pool: dict[str, dict[str, Holder]] = {name: {} for name in self.pools}
        for ref, configs in prepared:
            for key, config in configs.items():
                names = [n for n in pools_named([config]) if n in by_pool]
                if not names:
                    continue
                name = names[0]
                for cidr in config.get("ipAddresses") or ():
                    address = str(cidr).split("/")[0]
                    by_pool[name][address] = Holder(ref.uid, key, ref.namespace, ref.name)
        for name, addresses in by_pool.items():
            with self._mutex:
                broken = False
                try:
                    state = self.store.load(name)
                except DriverError as exc:
                    event(log, logging.WARNING, "ipam pool file rebuilt", pool=name, error=exc)
                    state, broken = PoolState(name), True
                addresses |= {a: h for a, h in state.addresses.items() if h.claim in keep}
                if broken or state.addresses != addresses or not self.store.path(name).exists():
                    state.addresses = addresses
                    self.store.save(state)
        if self._keeper is not None:
            for pool in self.pools.values():
                if pool.scope == ipam.CLUSTER:
                    self._keeper.want(pool.name)

    def rebuild_from(self, records: RecordStore) -> None:
        """`rebuild` from the records as they are (after reconciliation): the prepared
        ones' configs, and the file's entries of claims whose record cannot be read."""
        kept, _ = records.load_all()
        unread = frozenset(records.claim_uids()) - {r.claim.uid for r in kept}
        self.rebuild(((r.claim, r.configs) for r in kept if r.phase == PREPARED), keep=unread)

    def set_blocks(self, pool: str, blocks: set[int]) -> None:
        """Record the blocks the node holds, as the API has them (under the lock)."""
        with self._mutex:
            state = self.store.load(pool)
            if set(state.blocks) != blocks:
                state.blocks = sorted(blocks)
                self.store.save(state)

    def add_block(self, pool: str, index: int) -> None:
        """Record a block the node now holds (under the lock)."""
        with self._mutex:
            state = self.store.load(pool)
            if index not in state.blocks:
                state.blocks.append(index)
                self.store.save(state)

    def drop_block(self, pool: str, index: int) -> list[tuple[str, Holder]] | None:
        """Stop handing out from a block the node no longer holds (under the lock): None
        if the node's file did not have it, else the addresses claims still hold in it."""
        network = self.pools[pool].block(index)
        with self._mutex:
            state = self.store.load(pool)
            if index not in state.blocks:
                return None
            state.blocks.remove(index)
            self.store.save(state)
        if network is None:
            return []
        return sorted(
            (a, h) for a, h in state.addresses.items() if ipaddress.ip_address(a) in network
        )

    def needs_block(self, pool: ipam.Pool) -> bool:
        """Whether the node's blocks of a cluster pool have less than half a block free."""
        with self._mutex:
            state = self.store.load(pool.name)
        within = [b for b in (pool.block(i) for i in state.blocks) if b is not None]
        free = ipam.free(pool, within, set(state.addresses), pool.block_size // 2)
        return len(free) < pool.block_size // 2


def pools_named(configs: Iterable[object]) -> list[str]:
    """The pools device configs (as prepared: their `ipam` kept) took addresses of, each
    once."""
    names: list[str] = []
    for config in configs:
        spec = config.get(FIELD) if isinstance(config, Mapping) else None
        pool = spec.get("pool") if isinstance(spec, Mapping) else None
        if isinstance(pool, str) and pool not in names:
            names.append(pool)
    return names
