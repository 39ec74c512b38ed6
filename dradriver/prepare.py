"""Prepare and unprepare of claims, as the kubelet asks for them: the heart of the driver.

Per claim: answer from its record when it is prepared and still true (idempotency, a
repeated call after a restart); otherwise GET the claim, plan and validate every device
before any kernel work, and commit (lifecycle.py: journal, kernel objects, CDI specs,
then the record). Unprepare works from the record alone. One claim's failure is its own
error string, never the call's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from dradriver import cdi, claims, gc, naming, netlink
from dradriver.config import ConfigSchema
from dradriver.errors import ClaimError, DriverError, storage_error
from dradriver.hookspecs import ClaimRef, HandlerContext
from dradriver.inventory import Inventory
from dradriver.kubeapi import ApiError
from dradriver.lifecycle import ClaimLifecycle, current_boot_id
from dradriver.log import event
from dradriver.metrics import Metrics
from dradriver.plan import Planner, reserve_names
from dradriver.records import (
    PREPARED,
    ClaimRecord,
    CorruptRecord,
    DeviceAnswer,
    RecordStore,
)
from dradriver.registry import HandlerRegistry

log = logging.getLogger(__name__)

UNPREPARE_WORKERS = 8


class ClaimSource(Protocol):
    """Where ResourceClaims come from (the API server)."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim object as JSON."""


class StatusSink(Protocol):
    """Receives prepared claims whose status.devices should be written."""

    def submit(self, record: ClaimRecord) -> None:
        """Queue a status write (never blocks, never fails the prepare)."""


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
        boot_id: str | None = None,
    ) -> None:
        """Wire the collaborators; nothing is read or written yet (`boot_id`: this boot's,
        read from the kernel when not given)."""
        self.context = context
        self.cdi_dir = cdi_dir
        self.records = records
        self.registry = registry
        self.api = api
        self.status = status
        self.metrics = metrics
        self.lifecycle = ClaimLifecycle(
            context, cdi_dir, records, registry, inventory, boot_id or current_boot_id()
        )
        self._pool: ThreadPoolExecutor | None = None
        self._planner = Planner(context, inventory, schema, registry)

    # -- prepare -----------------------------------------------------------------------

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        """Prepare every claim of one kubelet call; one bad claim never fails the others."""
        taken: dict[tuple[str, str], str] = {}  # (pod UID, container ifname) -> claim
        outcomes = {}
        for ref in refs:
            outcomes[ref.uid] = self._guarded("prepare", ref, partial(self._prepare, ref, taken))
        return outcomes

    def _prepare(self, ref: ClaimRef, taken: dict[tuple[str, str], str]) -> list[DeviceAnswer]:
        self._check_uid(ref)
        record = self._load(ref)
        if record is not None and record.phase == PREPARED:
            lost = self.lifecycle.restore_specs(record)
            if lost:  # only a record of an older driver cannot hold its specs
                event(
                    log,
                    logging.ERROR,
                    "CDI spec gone, not in the record",
                    claim=ref.uid,
                    files=",".join(lost),
                )
            stale = self.lifecycle.is_intact(record)
            if stale is None:
                event(log, logging.INFO, "already prepared", claim=ref.uid)
                self._reserve(ref, record.pod_uids, record_names(record), taken)
                return record.answer()
            # The answer in the record is no longer true: finish that prepare's undoing
            # and prepare again, from the API.
            event(
                log,
                logging.WARNING,
                "prepared claim is stale: preparing it again",
                claim=ref.uid,
                reason=stale,
            )
            self.lifecycle.release(record)
            self._count(-1)
        elif record is not None:
            self.lifecycle.roll_back(record)
        resolved = claims.resolve(self._get_claim(ref), ref, self.context.driver_name)
        plans = [self._planner.plan(ref, device) for device in resolved.devices]
        if not plans:
            return []  # no device of ours in this claim: nothing to do, nothing to record
        uses = [(p.req.request, p.validated.container_interfaces) for p in plans]
        self._reserve(ref, resolved.pod_uids, uses, taken)
        record = self.lifecycle.commit(ref, plans, resolved.pod_uids)
        # Committed: nothing below may turn this prepare into a failure.
        event(log, logging.INFO, "prepared", claim=ref.uid, ref=str(ref), devices=len(plans))
        if self.status is not None and record.devices:
            self.status.submit(record)
        self._count(+1)
        return record.answer()

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

    def _count(self, delta: int) -> None:
        if self.metrics:
            self.metrics.prepared_claims.inc(delta)

    def _get_claim(self, ref: ClaimRef) -> dict[str, Any]:
        try:
            return self.api.get_claim(ref.namespace, ref.name)
        except ApiError as exc:
            if exc.status == 404:
                raise ClaimError("not found in the API server (deleted?)") from None
            raise ClaimError(f"cannot read the ResourceClaim: {exc}") from None

    def roll_back(self, record: ClaimRecord) -> None:
        """Undo a prepare that was interrupted (start-up reconciliation calls it)."""
        self.lifecycle.roll_back(record)

    # -- unprepare ---------------------------------------------------------------------

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        """Unprepare every claim of one kubelet call from local state only.

        Claims are independent, and the kernel lets link deletions overlap (most of the
        ~15 ms of a deletion is a wait for RCU), so several claims run at once.
        """
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
            deleted = gc.delete_claim_interfaces(ref.uid, self.context.owner)
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
        self.lifecycle.release(record)
        event(log, logging.INFO, "unprepared", claim=ref.uid, devices=len(record.devices))
        if record.phase == PREPARED:
            self._count(-1)
        return []

    # -- shared ------------------------------------------------------------------------

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
        except OSError as exc:  # a file of ours: say which, and what the operator can do
            error = storage_error(exc)
            event(
                log, logging.ERROR, f"{operation} failed", claim=ref.uid, ref=str(ref), error=error
            )
            outcome = Outcome([], f"claim {ref} ({ref.uid}): {error}")
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


def record_names(record: ClaimRecord) -> list[tuple[str, list[str]]]:
    """(request, container interface names) of each device of a record."""
    return [(d.request, d.container_interfaces) for d in record.devices]
