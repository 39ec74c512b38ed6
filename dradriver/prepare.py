"""Prepare and unprepare of claims: the heart of the driver.

Order of a prepare, which makes it crash-safe: validate every device (no kernel work),
create the kernel objects (tagged with the claim UID), write the CDI specs, then write
the allocation record: the commit point. A failure before the record undoes what the
claim already created; a crash before it leaves tagged objects that start-up
reconciliation deletes. Unprepare works from the record alone.

Each call has a budget (calls.py). The claims a call needs from the API are fetched
first, side by side and outside the serialisation lock; the lock is held only for local
work (records, kernel, CDI specs), so a slow API server never delays an unprepare.
Once the gate drains (SIGTERM), calls refuse the claims they have not begun.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, Protocol

from dradriver import cdi, claims, gc, naming, netlink
from dradriver.calls import DEFAULT_CALL_BUDGET, CallGate, Deadline
from dradriver.config import ConfigSchema
from dradriver.errors import ClaimError, ConfigError, DeviceError, DriverError
from dradriver.fetch import ClaimFetcher, ClaimSource, Fetched
from dradriver.hookspecs import (
    ClaimRef,
    Handler,
    HandlerContext,
    Prepared,
)
from dradriver.inventory import Inventory
from dradriver.log import event
from dradriver.metrics import Metrics
from dradriver.plan import Plan, Planner, reserve_names
from dradriver.records import (
    PREPARED,
    PREPARING,
    ClaimRecord,
    CorruptRecord,
    DeviceAnswer,
    RecordStore,
)
from dradriver.registry import HandlerRegistry

log = logging.getLogger(__name__)

UNPREPARE_WORKERS = 8


class StatusSink(Protocol):
    """Receives prepared claims whose status.devices should be written."""

    def submit(self, record: ClaimRecord) -> None:
        """Queue a status write (never blocks, never fails the prepare)."""

    def resubmit(self, record: ClaimRecord) -> None:
        """Queue the status of an idempotent re-prepare, unless it was written already."""


class _NotFetched(BaseException):
    """The claim's object is needed but was not fetched: its prepared record went away
    between the fetch and the lock. Not an Exception, so `_guarded` lets it through."""


def _not_fetched() -> NoReturn:
    raise _NotFetched


def _raise(exc: Exception) -> NoReturn:
    raise exc


@dataclass(frozen=True)
class Outcome:
    """The answer for one claim: its devices, or an error."""

    devices: list[DeviceAnswer]
    error: str | None = None


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
    ) -> None:
        """Wire the collaborators; nothing is read or written yet. `gate` holds the
        serialisation lock (a thread lock alone when none is given)."""
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
        self.fetcher = ClaimFetcher(api)
        self._pool: ThreadPoolExecutor | None = None
        self._planner = Planner(context, inventory, schema, registry)

    # -- prepare -----------------------------------------------------------------------

    def prepare(self, refs: Sequence[ClaimRef], budget: float | None = None) -> dict[str, Outcome]:
        """Prepare every claim of one kubelet call within `budget` seconds; one bad claim
        never fails the others.

        Claims without a record are fetched first, side by side and outside the lock;
        then, under the lock, each claim is prepared from its record or its object.
        A claim whose record went away meanwhile is fetched in a second round.
        """
        gate = self.gate
        deadline = Deadline.after(DEFAULT_CALL_BUDGET if budget is None else budget)
        taken: dict[tuple[str, str], str] = {}  # (pod UID, container ifname) -> claim
        outcomes: dict[str, Outcome] = {}
        fetched: dict[str, Fetched] = {}
        wanted = [ref for ref in refs if self._needs_claim(ref)]
        with gate.call():
            for _ in range(2):
                todo = [ref for ref in wanted if ref.uid not in fetched]
                fetched |= self.fetcher.fetch(todo, deadline, gate.abandon)
                refusal = gate.acquire(deadline)
                if refusal is not None:
                    break
                try:
                    wanted = self._prepare_locked(refs, fetched, taken, outcomes, deadline)
                finally:
                    gate.release()
                if not wanted:
                    break
        # Not done: the lock was refused, or the record went away again in round two.
        refusal = refusal or "its allocation record changed while the call ran; the kubelet retries"
        for ref in refs:
            if ref.uid not in outcomes:
                outcomes[ref.uid] = self._refuse("prepare", ref, refusal)
        return {ref.uid: outcomes[ref.uid] for ref in refs}

    def _prepare_locked(
        self,
        refs: Sequence[ClaimRef],
        fetched: Mapping[str, Fetched],
        taken: dict[tuple[str, str], str],
        outcomes: dict[str, Outcome],
        deadline: Deadline,
    ) -> list[ClaimRef]:
        """Under the lock: prepare each claim not yet answered, from its record or its
        fetched object; return the claims that need an object this round did not fetch."""
        unfetched = []
        for ref in refs:
            if ref.uid in outcomes:
                continue
            failed = ref.uid in fetched and fetched[ref.uid].error is not None
            if not failed and (stop := self.gate.stop_reason(deadline)) is not None:
                outcomes[ref.uid] = self._refuse("prepare", ref, stop)
                continue  # a failed fetch is a better answer than "not started"
            claim = fetched[ref.uid].get if ref.uid in fetched else _not_fetched
            try:
                outcomes[ref.uid] = self._guarded(
                    "prepare", ref, partial(self._prepare, ref, taken, claim)
                )
            except _NotFetched:
                unfetched.append(ref)
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
    ) -> list[DeviceAnswer]:
        self._check_uid(ref)
        record = self._load(ref)
        if record is not None and record.phase == PREPARED:
            event(log, logging.INFO, "already prepared", claim=ref.uid)
            if self.status is not None and record.devices:
                self.status.resubmit(record)  # a status that failed to write gets written
            reserve_names(
                ref,
                record.pod_uids,
                [(d.request, d.container_interfaces) for d in record.devices],
                taken,
            )
            return record.answer()
        if record is not None:
            self.roll_back(record)
        resolved = claims.resolve(claim(), ref, self.context.driver_name)
        plans = [self._planner.plan(ref, device) for device in resolved.devices]
        if not plans:
            return []  # no device of ours in this claim: nothing to do, nothing to record
        reserve_names(
            ref,
            resolved.pod_uids,
            [(p.req.request, p.validated.container_interfaces) for p in plans],
            taken,
        )
        record = ClaimRecord(ref, PREPARING, pod_uids=list(resolved.pod_uids))
        done: list[tuple[Plan, Prepared]] = []
        try:
            for plan in plans:
                req = replace(plan.req, journal=self._journaller(record, plan))
                try:
                    prepared = plan.handler.prepare(req)
                except DriverError as exc:
                    raise DriverError(f"request {req.request}: {exc}") from exc
                done.append((plan, prepared))
                record.devices.append(plan.record(prepared.undo, prepared))
            record.cdi_specs = self._write_specs(ref, done)
            record.phase = PREPARED
            self.records.save(record)  # the commit point
        except BaseException:
            self._undo(ref, [(p.handler, pr.undo) for p, pr in done])
            raise
        # Committed: nothing below may turn this prepare into a failure.
        event(log, logging.INFO, "prepared", claim=ref.uid, ref=str(ref), devices=len(done))
        if self.status is not None and record.devices:
            self.status.submit(record)
        if self.metrics:
            self.metrics.prepared_claims.inc()
        return record.answer()

    def _journaller(self, record: ClaimRecord, plan: Plan) -> Callable[[Mapping[str, Any]], None]:
        """A journal callback persisting a device's undo data before it changes the host."""

        def journal(undo: Mapping[str, Any]) -> None:
            devices = [*record.devices, plan.record(undo)]
            self.records.save(replace(record, phase=PREPARING, devices=devices))

        return journal

    def _write_specs(self, ref: ClaimRef, done: list[tuple[Plan, Prepared]]) -> list[str]:
        """One CDI spec per device type of the claim, each device under its plan's CDI ID."""
        driver = self.context.driver_name
        by_type: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        for plan, prepared in done:
            name = cdi.device_name(plan.cdi_device_id)
            by_type.setdefault(plan.type, []).append((name, prepared.edits))
        files = []
        for type_, devices in sorted(by_type.items()):
            path = cdi.spec_path(self.cdi_dir, driver, type_, ref.uid)
            cdi.write_spec(path, cdi.build_spec(driver, type_, devices))
            files.append(path.name)
        return files

    def _undo(self, ref: ClaimRef, steps: Sequence[tuple[Handler, Mapping[str, Any]]]) -> None:
        """Undo a failed or interrupted prepare: handlers newest first, specs, record."""
        for handler, undo in reversed(steps):
            try:
                handler.unprepare(undo)
            except Exception as exc:  # keep going: start-up reconciliation retries leaks
                event(log, logging.ERROR, "rollback of a device failed", claim=ref.uid, error=exc)
        cdi.remove_claim_specs(self.cdi_dir, self.context.driver_name, ref.uid)
        self.records.delete(ref.uid)

    def roll_back(self, record: ClaimRecord) -> None:
        """Undo a prepare that was interrupted (its record never reached 'prepared')."""
        event(log, logging.WARNING, "rolling back interrupted prepare", claim=record.claim.uid)
        steps = []
        for device in record.devices:
            try:
                steps.append((self.registry.get(device.type, device.kind), device.undo))
            except ConfigError as exc:
                event(
                    log,
                    logging.ERROR,
                    "cannot roll back device: no handler",
                    claim=record.claim.uid,
                    device=device.device,
                    error=exc,
                )
        self._undo(record.claim, steps)

    # -- unprepare ---------------------------------------------------------------------

    def unprepare(
        self, refs: Sequence[ClaimRef], budget: float | None = None
    ) -> dict[str, Outcome]:
        """Unprepare every claim of one kubelet call from local state only, under the
        lock (waited for at most `budget` seconds).

        Claims are independent, and the kernel lets link deletions overlap (most of the
        ~15 ms of a deletion is a wait for RCU), so several claims run at once.
        """
        deadline = Deadline.after(DEFAULT_CALL_BUDGET if budget is None else budget)
        with self.gate.call():
            refusal = self.gate.acquire(deadline)
            if refusal is not None:
                return {ref.uid: self._refuse("unprepare", ref, refusal) for ref in refs}
            try:
                return self._unprepare_all(refs)
            finally:
                self.gate.release()

    def _unprepare_all(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        if len(refs) < 2:
            return {r.uid: self._guarded("unprepare", r, partial(self._unprepare, r)) for r in refs}
        if self._pool is None:  # persistent: each worker keeps its own netlink socket
            self._pool = ThreadPoolExecutor(UNPREPARE_WORKERS, thread_name_prefix="unprepare")
        done = self._pool.map(self._unprepare_on_worker, refs)
        return {ref.uid: outcome for ref, outcome in zip(refs, done, strict=True)}

    def _unprepare_on_worker(self, ref: ClaimRef) -> Outcome:
        """One claim on a pool worker, which then closes its netlink socket: an idle
        worker holding a pyroute2 socket (and its event loop) costs ~0.6 MB."""
        try:
            return self._guarded("unprepare", ref, lambda: self._unprepare(ref))
        finally:
            netlink.close()

    def _unprepare(self, ref: ClaimRef) -> list[DeviceAnswer]:
        self._check_uid(ref)
        driver = self.context.driver_name
        try:
            record = self.records.load(ref.uid)
        except CorruptRecord as exc:
            deleted = gc.delete_claim_interfaces(ref.uid)
            cdi.remove_claim_specs(self.cdi_dir, driver, ref.uid)
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
            cdi.remove_claim_specs(self.cdi_dir, driver, ref.uid)
            return []
        failures = []
        for device in reversed(record.devices):
            try:
                self.registry.get(device.type, device.kind).unprepare(device.undo)
            except DriverError as exc:
                failures.append(f"request {device.request} device {device.device}: {exc}")
        if failures:
            raise DeviceError("; ".join(failures) + " (will retry)")
        # The record's removal is the durable step; a spec whose removal a crash loses
        # has no record left, and start-up reconciliation deletes it.
        cdi.remove_claim_specs(self.cdi_dir, driver, ref.uid, durable=False)
        self.records.delete(ref.uid)
        event(log, logging.INFO, "unprepared", claim=ref.uid, devices=len(record.devices))
        if self.metrics and record.phase == PREPARED:
            self.metrics.prepared_claims.dec()
        return []

    # -- shared ------------------------------------------------------------------------

    def _refuse(self, operation: str, ref: ClaimRef, reason: str) -> Outcome:
        """The error outcome of a claim that was not worked on, logged and counted."""
        return self._guarded(operation, ref, partial(_raise, DriverError(reason)))

    def _guarded(
        self, operation: str, ref: ClaimRef, fn: Callable[[], list[DeviceAnswer]]
    ) -> Outcome:
        """Run one claim's operation; turn any failure into that claim's error string."""
        start = time.perf_counter()
        try:
            outcome = Outcome(fn())
        except DriverError as exc:
            event(log, logging.ERROR, f"{operation} failed", claim=ref.uid, ref=str(ref), error=exc)
            outcome = Outcome([], f"claim {ref} ({ref.uid}): {exc}")
        except Exception as exc:  # a bug: log the trace, answer without it
            log.exception(f"{operation} failed unexpectedly", extra={"claim": ref.uid})
            outcome = Outcome(
                [],
                f"claim {ref} ({ref.uid}): internal error "
                f"({type(exc).__name__}: {exc}); see the driver log",
            )
        if self.metrics:
            self.metrics.observe(operation, time.perf_counter() - start, outcome.error is None)
        return outcome

    @staticmethod
    def _check_uid(ref: ClaimRef) -> None:
        if not naming.is_claim_uid(ref.uid):
            raise ClaimError(f"invalid claim UID {ref.uid!r}")

    def _load(self, ref: ClaimRef) -> ClaimRecord | None:
        """The claim's record; None if there is none or it was corrupt (quarantined and
        logged: prepare again from the API). A record of a newer driver raises."""
        try:
            return self.records.load(ref.uid)
        except CorruptRecord:
            return None
