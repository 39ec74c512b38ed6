"""Unprepare of claims, as the kubelet asks for it: from the local record alone (the
claim may be gone from the API), under the serialisation lock, several claims at once.
A corrupt record still has its tagged interfaces and CDI specs removed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.base.timing import phase
from dradriver.claims.ahead import AheadBook
from dradriver.claims.budget import DEFAULT_CALL_BUDGET, CallGate, Deadline
from dradriver.claims.ipam import AddressBook
from dradriver.claims.lifecycle import ClaimLifecycle
from dradriver.claims.outcome import Outcome, check_uid, count_prepared, guarded, refused
from dradriver.contract.hookspecs import ClaimRef
from dradriver.kernel import netlink
from dradriver.state import cdi
from dradriver.state.records import PREPARED, CorruptRecord, DeviceAnswer
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

UNPREPARE_WORKERS = 8


class Unpreparer:
    """Unprepares claims from their records; holds no claim state in memory."""

    def __init__(
        self,
        *,
        gate: CallGate,
        lifecycle: ClaimLifecycle,
        ahead: AheadBook,
        addresses: AddressBook | None,
        metrics: Metrics | None,
    ) -> None:
        """Wire the collaborators the Preparer shares with it; the records and the CDI
        directory are the lifecycle's."""
        self.gate = gate
        self.lifecycle = lifecycle
        self.records: RecordStore = lifecycle.records
        self.ahead = ahead
        self.addresses = addresses
        self.metrics = metrics
        self._pool: ThreadPoolExecutor | None = None
        self._claims = threading.Condition()  # guards _busy: the claims being unprepared
        self._busy: set[str] = set()

    def unprepare(
        self,
        refs: Sequence[ClaimRef],
        budget: float | None = None,
        only: Callable[[ClaimRef], bool] | None = None,
    ) -> dict[str, Outcome]:
        """Unprepare every claim of one kubelet call from local state only, under the
        lock (waited for at most `budget` seconds). `only`, asked under the lock, picks
        the claims to unprepare; the others are answered untouched (ahead.py).

        Claims are independent, and the kernel lets link deletions overlap (most of the
        ~15 ms of a deletion is a wait for RCU), so several claims run at once: those of
        a call on the workers, and the calls themselves, which share the lock (budget.py)
        and wait only for a claim another call is unpreparing. A call with `only` holds
        the lock alone: what it asks must not change while it decides.
        """
        deadline = Deadline.after(DEFAULT_CALL_BUDGET if budget is None else budget)
        shared = only is None
        with self.gate.call():
            with phase("lock"):
                if shared:
                    refusal = self.gate.acquire_shared(deadline)
                else:
                    refusal = self.gate.acquire(deadline)
            if refusal is not None:
                return {ref.uid: refused("unprepare", ref, refusal, self.metrics) for ref in refs}
            try:
                if only is not None:
                    kept = [ref for ref in refs if not only(ref)]
                    refs = [ref for ref in refs if only(ref)]
                    return {ref.uid: Outcome([]) for ref in kept} | self._all(refs, deadline)
                return self._all(refs, deadline)
            finally:
                if shared:
                    self.gate.release_shared()
                else:
                    self.gate.release()

    def _all(self, refs: Sequence[ClaimRef], deadline: Deadline) -> dict[str, Outcome]:
        if len(refs) < 2:
            return {r.uid: self._guarded(r, deadline) for r in refs}
        if self._pool is None:  # persistent: each worker keeps its own netlink socket
            self._pool = ThreadPoolExecutor(UNPREPARE_WORKERS, thread_name_prefix="unprepare")
        with phase("workers"):  # the workers' own phases are not told apart
            done = list(self._pool.map(partial(self._on_worker, deadline=deadline), refs))
        return {ref.uid: outcome for ref, outcome in zip(refs, done, strict=True)}

    def _on_worker(self, ref: ClaimRef, deadline: Deadline) -> Outcome:
        """One claim on a pool worker, which then closes its netlink socket (reopening
        one costs ~30 us; eight idle ones would hold their receive buffers)."""
        try:
            return self._guarded(ref, deadline)
        finally:
            netlink.close()

    def _remove_specs(self, uid: str) -> None:
        """The claim's CDI specs go (those of a record that is gone or unreadable)."""
        life = self.lifecycle
        cdi.remove_claim_specs(life.cdi_dir, life.context.driver_name, uid)

    def _guarded(self, ref: ClaimRef, deadline: Deadline) -> Outcome:
        """One claim's unprepare, once no other call is unpreparing the same claim."""
        if not self._begin(ref.uid, deadline):
            reason = (
                f"another call was still unpreparing the claim when {deadline.describe()} "
                "ran out; the kubelet retries"
            )
            return refused("unprepare", ref, reason, self.metrics)
        try:
            return guarded("unprepare", ref, partial(self._one, ref), self.metrics)
        finally:
            with self._claims:
                self._busy.discard(ref.uid)
                self._claims.notify_all()

    def _begin(self, uid: str, deadline: Deadline) -> bool:
        """Mark the claim as this call's, waiting within the budget while another call
        has it; whether it was marked."""
        with self._claims:
            if not self._claims.wait_for(lambda: uid not in self._busy, deadline.remaining()):
                return False
            self._busy.add(uid)
            return True

    def _one(self, ref: ClaimRef) -> list[DeviceAnswer]:
        check_uid(ref)
        try:
            with phase("records"):
                record = self.records.load(ref.uid)
        except CorruptRecord as exc:
            deleted = self.lifecycle.delete_tagged(ref.uid)
            self._remove_specs(ref.uid)
            self.ahead.released(ref.uid, self.records)
            event(
                log,
                logging.ERROR,
                "unprepared from a corrupt record: deleted tagged interfaces only",
                claim=ref.uid,
                deleted=",".join(deleted),
                error=exc,
            )
            return []
        if record is None:
            self._remove_specs(ref.uid)
            self.ahead.released(ref.uid, self.records)
            if self.addresses is not None:  # one a crash left taken before the journal
                self.addresses.release(ref.uid)
            return []
        self.lifecycle.release(record)
        self.ahead.released(ref.uid, self.records)
        if self.addresses is not None:  # after the links: the address left with them
            # A prepare cut short recorded no configs yet: its addresses may be anywhere.
            prepared = record.configs if record.phase == PREPARED else None
            self.addresses.release(ref.uid, prepared)
        event(log, logging.INFO, "unprepared", claim=ref.uid, devices=len(record.devices))
        if record.phase == PREPARED:
            count_prepared(self.metrics, -1)
        return []
