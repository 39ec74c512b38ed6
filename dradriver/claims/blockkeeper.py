"""The blocks of cluster pools a node holds: taken as Leases by a thread of their own, off
the kubelet's calls, and given up at once when the node loses one.

A block's Lease (dradriver.apiserver.ipamblocks) is the truth: the node's pool file only
says which blocks it hands out from. The thread takes a block when the node is short of
room; a watch of the pools' Leases (one per node, label-selected) drops from the file a
block whose Lease was deleted (its Node object was) or that another node holds (it took
the block while this node's Node was gone), and reports the claims still holding its
addresses: their pods keep them, but the other node may hand them out too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dradriver.apiserver.ipamblocks import Blocks
from dradriver.apiserver.watchcopy import WatchedCopy
from dradriver.base.log import event
from dradriver.contract import ipam
from dradriver.state.ipamstore import Holder, IpamStore

log = logging.getLogger(__name__)

RETRY = 5.0  # seconds before a failed block request is tried again, doubling...
MAX_RETRY = 300.0  # ...up to this
DELETED = "DELETED"

Report = Callable[..., None]  # (level, reason, message, **fields): a log line and an Event


class Book(Protocol):
    """What the keeper needs of the node's pools (claims.ipam.AddressBook)."""

    @property
    def pools(self) -> Mapping[str, ipam.Pool]:
        """The pools this node may use, by name."""

    @property
    def store(self) -> IpamStore:
        """The node's pool files."""

    def set_blocks(self, pool: str, blocks: set[int]) -> None:
        """Record the blocks the node holds."""

    def add_block(self, pool: str, index: int) -> None:
        """Record a block the node now holds."""

    def drop_block(self, pool: str, index: int) -> list[tuple[str, Holder]] | None:
        """Stop handing out from a block; the addresses claims still hold in it."""

    def needs_block(self, pool: ipam.Pool) -> bool:
        """Whether the node is short of room in a cluster pool."""


class BlockKeeper:
    """One thread that takes blocks of cluster pools when asked (`want`), and a watch of
    the pools' Leases that stops the node handing out from a block it lost."""

    def __init__(
        self,
        book: Book,
        blocks: Blocks,
        lock: Callable[[], Any] | None,
        report: Report | None = None,
    ) -> None:
        """`lock()`: the prepare lock's context; `report` tells the operator."""
        self._book = book
        self._blocks = blocks
        self._lock = lock
        self._report = report
        self._leases = WatchedCopy(
            "IPAM block Leases",
            blocks.list_leases,
            blocks.watch_leases,
            lambda: None,
            on_event=self._lease_event,
        )
        self._wanted: set[str] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._delay: dict[str, float] = {}  # pool -> seconds before the next retry
        self._retrying: set[str] = set()  # pools with a retry pending

    def want(self, pool: str) -> None:
        """Ask for a block of `pool` if the node is short of room (never blocks)."""
        with self._cond:
            self._wanted.add(pool)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ipam-blocks", daemon=True)
                self._thread.start()
                self._leases.start()
            self._cond.notify()

    def stop(self) -> None:
        """Stop watching the Leases (the block thread ends with the process)."""
        self._leases.stop()

    def _lease_event(self, kind: str, lease: dict[str, Any]) -> None:
        """A Lease of a block was listed, added, changed or deleted: a block of the node's
        file whose Lease went, or that another node holds, is given up at once."""
        block = self._blocks.block_of(lease)
        if block is None:
            return
        name, index, holder = block
        pool = self._book.pools.get(name)
        if pool is None or pool.scope != ipam.CLUSTER:
            return
        mine = holder == self._blocks.node
        if mine and kind != DELETED:
            return
        with self._locked():
            still = self._book.drop_block(name, index)
        if still is None:
            return  # not a block this node hands out from
        lost = f"ipam block {index} of pool {name} " + (
            f"is held by node {holder}" if not mine else "lost its Lease (its Node was deleted?)"
        )
        claims = ", ".join(f"{h.namespace}/{h.name} ({a})" for a, h in still) or "none"
        message = (
            f"{lost}: this node hands out no more addresses of it; claims still holding "
            "its addresses here (another node may hand them out too: recreate their pods)"
        )
        if self._report is not None:
            self._report(logging.ERROR, "IpamBlockLost", message, claims=claims)
        else:
            event(log, logging.ERROR, message, claims=claims)
        self.want(name)  # room again, from a block the node holds

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._wanted:
                    self._cond.wait()
                name = self._wanted.pop()
            try:
                self._serve(self._book.pools[name])
            except Exception as exc:  # an API or file error: tried again, less and less often
                delay = min(2 * self._delay.get(name, RETRY / 2), MAX_RETRY)
                self._delay[name] = delay
                event(
                    log, logging.WARNING, "ipam block not taken", pool=name, error=str(exc),
                    retry=f"{delay:.0f}s",
                )  # fmt: skip
                with self._cond:
                    if name not in self._retrying:
                        self._retrying.add(name)
                        threading.Timer(delay, self._retry, (name,)).start()
            else:
                self._delay.pop(name, None)

    def _retry(self, name: str) -> None:
        with self._cond:
            self._retrying.discard(name)
        self.want(name)

    def _serve(self, pool: ipam.Pool) -> None:
        """Take blocks of `pool` until the node has room (or the pool has none)."""
        held = set(self._blocks.held(pool.name))  # also those a lost file forgot
        for lost in sorted(set(self._book.store.load(pool.name).blocks) - held):
            # A block the file has and the API does not: its Lease went with a Node
            # object deleted under this node. Taken again, unless another node has it.
            if self._blocks.take(pool.name, [lost]) == lost:
                held.add(lost)
            else:
                event(
                    log,
                    logging.ERROR,
                    "ipam block lost to another node: its addresses here may be held twice",
                    pool=pool.name,
                    block=lost,
                )
        with self._locked():
            self._book.set_blocks(pool.name, held)
            short = self._book.needs_block(pool)
        while short:
            held = set(self._book.store.load(pool.name).blocks)
            index = self._blocks.take(pool.name, (i for i, _ in pool.blocks() if i not in held))
            if index is None:
                event(
                    log, logging.WARNING, "ipam pool exhausted: every block is held", pool=pool.name
                )
                return
            with self._locked():
                self._book.add_block(pool.name, index)
                short = self._book.needs_block(pool)
            event(log, logging.INFO, "ipam block taken", pool=pool.name, block=index)

    def _locked(self) -> Any:
        if self._lock is None:
            return threading.Lock()
        return self._lock()
