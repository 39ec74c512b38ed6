"""Prepare of claims, as the kubelet asks for it: the heart of the driver.

Per claim: answer from its record when it is prepared and still true (idempotency, a
repeated call after a restart); otherwise plan and validate every device of the claim's
object before any kernel work, and commit (lifecycle.py: journal, kernel objects, CDI
specs, then the record). Unprepare (unprepare.py) works from the record alone. One
claim's failure is its own error string, never the call's (outcome.py).

Each call has a budget (budget.py). The claims a call needs from the API are fetched
first, side by side and outside the serialisation lock; the lock is held only for local
work (records, kernel, CDI specs), so a slow API server never delays an unprepare.
Once the gate drains (SIGTERM), calls refuse the claims they have not begun.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, Protocol

from dradriver.apiserver.inventory import Inventory
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.base.timing import phase
from dradriver.claims import attachments, resolution
from dradriver.claims.ahead import AheadBook
from dradriver.claims.budget import (
    DEFAULT_CALL_BUDGET,
    SHUTTING_DOWN,
    CallGate,
    Chosen,
    Deadline,
)
from dradriver.claims.fetch import ClaimFetcher, ClaimSource, Early, Fetched
from dradriver.claims.ipam import AddressBook
from dradriver.claims.lifecycle import ClaimLifecycle, current_boot_id
from dradriver.claims.outcome import Outcome, check_uid, count_prepared, guarded, refused
from dradriver.claims.plan import Planner, refuse_oversized, refuse_sharing, reserve_names
from dradriver.claims.unprepare import Unpreparer
from dradriver.contract import naming
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import CDI, ClaimRef, HandlerContext
from dradriver.contract.registry import HandlerRegistry
from dradriver.kernel import linkreaper
from dradriver.state.records import (
    PREPARED,
    ClaimRecord,
    CorruptRecord,
    DeviceAnswer,
)
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)

# Longest a prepare waits for the injection mode to be chosen: the daemon's choice takes
# at most two NRI waits of 5 s (connect, then the runtime's answer).
INJECTION_CHOICE_WAIT = 15.0
_STARTING = (
    "the driver is still starting (waiting for the container runtime to answer its NRI "
    "plugin); the kubelet retries"
)


class StatusSink(Protocol):
    """Receives prepared claims whose status.devices should be written."""

    def submit(self, record: ClaimRecord) -> None:
        """Queue a status write (never blocks, never fails the prepare)."""

    def resubmit(self, record: ClaimRecord) -> None:
        """Queue the status of an idempotent re-prepare, unless it was written already."""


_NO_CLAIM = Fetched()  # a claim prepared from its record: no object


class _NotFetched(BaseException):
    """The claim's object is needed but was not fetched: its prepared record went away
    between the fetch and the lock. Not an Exception, so `guarded` lets it through."""


def _not_fetched() -> NoReturn:
    raise _NotFetched


# Told of a claim whose prepare failed: its ref, the error answered, its object if fetched.
FailureSink = Callable[[ClaimRef, str, Mapping[str, Any] | None], None]


class Preparer:
    """Prepares and unprepares claims; holds no claim state in memory."""

    def __init__(
        self,
        *,
        context: HandlerContext,
        cdi_dir: Path,
        records: RecordStore,
        registry: HandlerRegistry,
        schema: ConfigSchema,
        inventory: Inventory,
        api: ClaimSource,
        status: StatusSink | None = None,
        metrics: Metrics | None = None,
        gate: CallGate | None = None,
        boot_id: str | None = None,
        link_deletion_delay: float = linkreaper.DEFAULT_DELAY,
        injection: str = CDI,
        failures: FailureSink | None = None,
        metadata_root: Path | None = None,
        early: Early | None = None,
        addresses: AddressBook | None = None,
        nads: attachments.AttachmentSource | None = None,
        nad_namespaces: Sequence[str] = (),
    ) -> None:
        """Wire the collaborators; nothing is read or written yet. `gate` holds the
        serialisation lock (a thread lock alone when none is given); `boot_id` is this
        boot's (read from the kernel when not given); links of unprepared claims are
        deleted `link_deletion_delay` seconds after the answer; `injection` the mode new
        claims are prepared in (a prepared claim keeps its own); `failures` hears of each
        claim whose prepare failed, with its object when it was fetched; `metadata_root`
        holds the claims' device metadata files (None: none are written); `early` has
        claims read before the call (prefetch.py); `addresses` the pools of `ipam`
        configs (ipam.py); `nads` the NetworkAttachmentDefinitions configs name, from
        the claim's namespace or `nad_namespaces` (attachments.py)."""
        self.context = context
        self.cdi_dir = cdi_dir
        self.records = records
        self.registry = registry
        self.schema = schema
        self.inventory = inventory
        self.api = api
        self.status = status
        self.metrics = metrics
        self.gate = gate or CallGate()
        self._injection = Chosen(injection)
        self.failures = failures
        self.fetcher = ClaimFetcher(api, early=early, metrics=metrics)
        self.reaper = linkreaper.LinkReaper(
            self.gate.lock,
            lambda uid: not os.path.lexists(records.path(uid)),
            link_deletion_delay,
        )
        self.addresses = addresses
        self.nads = nads
        self.nad_namespaces = tuple(nad_namespaces)
        self._planner = Planner(context, inventory, schema, registry, addresses)
        self.lifecycle = ClaimLifecycle(
            context,
            cdi_dir,
            records,
            registry,
            self._planner,
            boot_id or current_boot_id(),
            self.reaper,
            metadata_root,
        )
        self.ahead = AheadBook(metrics)  # claims prepared before the kubelet asked (ahead.py)
        # Unprepare of a kubelet call's claims, from their records alone (unprepare.py).
        self.unprepare = Unpreparer(
            gate=self.gate,
            lifecycle=self.lifecycle,
            ahead=self.ahead,
            addresses=addresses,
            metrics=metrics,
        ).unprepare

    # -- prepare -----------------------------------------------------------------------

    @property
    def injection(self) -> str:
        """The mode new claims are prepared in."""
        return self._injection.value

    @injection.setter
    def injection(self, mode: str) -> None:
        self._injection.choose(mode)

    def choosing_injection(self) -> None:
        """Make new prepares wait until `injection` is set (the driver serves the kubelet
        before the runtime has answered its NRI plugin). They wait outside the lock: the
        NRI plugin's registration may need it."""
        self._injection.pending()

    def prepare(
        self,
        refs: Sequence[ClaimRef],
        budget: float | None = None,
        ahead: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, Outcome]:
        """Prepare every claim of one kubelet call within `budget` seconds; one bad claim
        never fails the others.

        Claims without a record are fetched first, side by side and outside the lock;
        then, under the lock, each claim is prepared from its record or its object.
        A claim whose record went away meanwhile is fetched in a second round.
        `ahead`: (pod UID, object) of the one claim prepared before the kubelet asks
        (ahead.py); it is left alone when it has a record, and its failure is not told.
        """
        gate = self.gate
        deadline = Deadline.after(DEFAULT_CALL_BUDGET if budget is None else budget)
        taken: dict[tuple[str, str], str] = {}  # (pod UID, container ifname) -> claim
        outcomes: dict[str, Outcome] = {}
        fetched: dict[str, Fetched] = {}
        found: dict[str, attachments.Read] = {}  # the NADs each claim names, by claim UID
        wanted = [ref for ref in refs if self._needs_claim(ref)]
        if ahead is not None:
            fetched, wanted = {ref.uid: Fetched(ahead[1]) for ref in refs}, []
        with gate.call():
            refusal = None
            if not self._injection.wait(deadline, gate.abandon, INJECTION_CHOICE_WAIT):
                refusal = SHUTTING_DOWN if gate.abandon.done() else _STARTING
            for _ in range(2 if refusal is None else 0):
                todo = [ref for ref in wanted if ref.uid not in fetched]
                with phase("fetch"):
                    fetched |= self.fetcher.fetch(todo, deadline, gate.abandon)
                    claims = {u: f.claim for u, f in fetched.items() if u not in found and f.claim}
                    found |= attachments.for_claims(
                        self.nads,
                        claims,
                        deadline.remaining,
                        self.nad_namespaces,
                        self.context.driver_name,
                    )
                with phase("lock"):
                    refusal = gate.acquire(deadline)
                if refusal is not None:
                    break
                try:
                    wanted = self._prepare_locked(
                        refs, fetched, found, taken, outcomes, deadline, ahead and ahead[0]
                    )
                finally:
                    gate.release()
                if not wanted:
                    break
        # Not done: the lock was refused, or the record went away again in round two.
        refusal = refusal or "its allocation record changed while the call ran; the kubelet retries"
        for ref in refs:
            if ref.uid not in outcomes:
                outcomes[ref.uid] = refused(_operation(ahead), ref, refusal, self.metrics)
        return {ref.uid: outcomes[ref.uid] for ref in refs}

    def _prepare_locked(
        self,
        refs: Sequence[ClaimRef],
        fetched: Mapping[str, Fetched],
        found: Mapping[str, attachments.Read],
        taken: dict[tuple[str, str], str],
        outcomes: dict[str, Outcome],
        deadline: Deadline,
        ahead_for: str | None,
    ) -> list[ClaimRef]:
        """Under the lock: prepare each claim not yet answered, from its record or its
        fetched object; return the claims that need an object this round did not fetch."""
        unfetched = []
        for ref in refs:
            if ref.uid in outcomes:
                continue
            failed = ref.uid in fetched and fetched[ref.uid].error is not None
            if not failed and (stop := self.gate.stop_reason(deadline)) is not None:
                outcomes[ref.uid] = refused(_operation(ahead_for), ref, stop, self.metrics)
                continue  # a failed fetch is a better answer than "not started"
            claim = fetched[ref.uid].get if ref.uid in fetched else _not_fetched
            try:
                outcome = guarded(
                    _operation(ahead_for),
                    ref,
                    partial(self._prepare, ref, taken, claim, ahead_for, found.get(ref.uid)),
                    self.metrics,
                )
            except _NotFetched:
                unfetched.append(ref)
                continue
            outcomes[ref.uid] = outcome
            if outcome.error is not None and self.failures is not None and not ahead_for:
                self.failures(ref, outcome.error, fetched.get(ref.uid, _NO_CLAIM).claim)
        return unfetched

    def _needs_claim(self, ref: ClaimRef) -> bool:
        """Whether to fetch the claim before taking the lock: it has no record (a look at
        the file only; it is read under the lock). An invalid UID fails under the lock."""
        return naming.is_claim_uid(ref.uid) and not os.path.lexists(self.records.path(ref.uid))

    def _prepare(
        self,
        ref: ClaimRef,
        taken: dict[tuple[str, str], str],
        claim: Callable[[], dict[str, Any]],
        ahead_for: str | None = None,
        nads: attachments.Read | None = None,
    ) -> list[DeviceAnswer]:
        check_uid(ref)
        with phase("records"):
            record = self._load(ref)
        if ahead_for is not None and record is not None:
            return []  # the kubelet was first (or an earlier prepare): left to its call
        if record is not None and record.phase == PREPARED:
            with phase("records"):
                _, lost = self.lifecycle.restore_specs(record)
                self.lifecycle.restore_metadata(record)
                if lost:  # only a record of an older driver cannot hold its specs
                    event(log, logging.ERROR, "CDI spec gone", claim=ref.uid, files=",".join(lost))
                stale = self.lifecycle.is_intact(record) or self.ahead.refusal(
                    ref.uid, self.records
                )
            if stale is None:
                event(log, logging.INFO, "already prepared", claim=ref.uid)
                if self.status is not None and record.devices:
                    self.status.resubmit(record)  # a status that failed to write gets written
                self._reserve(ref, record.pod_uids, record_names(record), taken)
                self.ahead.hand_over(ref.uid, self.records)
                return record.answer()
            # The answer in the record is no longer true: finish that prepare's undoing
            # and prepare again, from the API.
            event(log, logging.WARNING, "stale claim: preparing again", claim=ref.uid, why=stale)
            self.lifecycle.release(record)
            self.ahead.released(ref.uid, self.records)
            count_prepared(self.metrics, -1)
        elif record is not None:
            self.lifecycle.roll_back(record)
            if ahead_for is None:  # an interrupted prepare ahead: its mark goes with it
                self.ahead.released(ref.uid, self.records)
        again = record is not None  # a preparation before this one may hold addresses
        try:  # pool addresses handed out while planning go back if the prepare fails
            with phase("plan"):
                resolved = resolution.resolve(claim(), ref, self.context.driver_name)
                plans = [
                    self._planner.plan(ref, device, self._injection.value, nads)
                    for device in resolved.devices
                ]
                if not plans:
                    return []  # no device of ours in this claim: nothing to do or record
                refuse_sharing(resolved, plans)
                refuse_oversized(resolved, plans)
                uses = [(p.req.request, p.validated.container_interfaces) for p in plans]
                self._reserve(ref, resolved.pod_uids, uses, taken)
            if ahead_for is not None:
                self.ahead.preparing(ref.uid, ahead_for, self.records)
            record = self.lifecycle.commit(
                ref, plans, resolved.pod_uids, pod_claim=resolved.pod_claim
            )
        except BaseException:
            self._forget(ref, ahead_for)
            raise
        if ahead_for is None:  # the mark of a prepare ahead cut short before its journal
            self.ahead.hand_over(ref.uid, self.records, count=False)
        # Committed: nothing below may turn this prepare into a failure.
        if again and self.addresses is not None:
            self.addresses.retain(ref.uid, record.configs)
        event(log, logging.INFO, "prepared", claim=ref.uid, ref=str(ref), devices=len(plans))
        if self.status is not None and record.devices:
            self.status.submit(record)
        count_prepared(self.metrics, +1)
        return record.answer()

    def _forget(self, ref: ClaimRef, ahead_for: str | None) -> None:
        """After a prepare failed before its commit: its mark of a prepare ahead, and
        the pool addresses it was handed, go."""
        if ahead_for is not None:
            self.ahead.released(ref.uid, self.records)
        if self.addresses is not None:
            self.addresses.release(ref.uid)

    def _reserve(
        self,
        ref: ClaimRef,
        pod_uids: Sequence[str],
        uses: Sequence[tuple[str, Sequence[str]]],
        taken: dict[tuple[str, str], str],
    ) -> None:
        """Refuse a container interface name another claim of the same pod uses, whether
        in this call or prepared in an earlier one (a kubelet retry)."""
        for pod in pod_uids:
            for other in self.records.claims_of_pod(pod):
                if other == ref.uid or any(taken.get(k) == other for k in taken if k[0] == pod):
                    continue
                try:
                    prepared = self.records.load(other)
                except DriverError:
                    continue  # reported where it is loaded for its own claim
                if prepared is not None and prepared.phase == PREPARED:
                    for _, names in record_names(prepared):
                        for name in names:
                            taken.setdefault((pod, name), other)
        reserve_names(ref, pod_uids, uses, taken)

    def roll_back(self, record: ClaimRecord) -> None:
        """Undo a prepare that was interrupted (start-up reconciliation calls it)."""
        self.lifecycle.roll_back(record)

    # -- shared ------------------------------------------------------------------------

    def _load(self, ref: ClaimRef) -> ClaimRecord | None:
        """The claim's record; None if there is none or it was corrupt (quarantined and
        logged: prepare again from the API). A record of a newer driver raises."""
        try:
            return self.records.load(ref.uid)
        except CorruptRecord:
            return None


def _operation(ahead: object) -> str:
    """How a prepare is named in logs and metrics: the kubelet's, or one made ahead."""
    return "prepare ahead" if ahead else "prepare"


def record_names(record: ClaimRecord) -> list[tuple[str, list[str]]]:
    """(request, container interface names) of each device of a record."""
    return [(d.request, d.container_interfaces) for d in record.devices]
