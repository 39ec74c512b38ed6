"""The Synchronize pass's first step: placements in sandboxes the runtime no longer has
are spent (the sandbox went while the driver was down, or its events were lost)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.claims import attach
from dradriver.claims.budget import CallGate, Deadline
from dradriver.contract.hookspecs import NRI
from dradriver.contract.registry import HandlerRegistry
from dradriver.state.moves import SPENT, placed_after
from dradriver.state.records import PREPARED
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)


def spend_gone(
    records: RecordStore,
    gate: CallGate,
    known: Callable[[], set[str]],
    wait: float,
    taken_at: float,
    registry: HandlerRegistry,
) -> None:
    """Mark SPENT each NRI placement whose sandbox is not in `known()` (the runtime's
    sandboxes as listed at wall-clock time `taken_at`, read again under the
    cross-instance lock, waited for up to `wait` s), unless it was made after `taken_at`;
    a device made in the sandbox is detached (a failure is logged and tried again at the
    next Synchronize)."""
    for uid in records.claim_uids():
        if gate.draining:
            return
        try:
            record = records.load(uid)
        except DriverError:
            continue  # reported where its claim is used
        if record is None or record.injection != NRI:
            continue
        seen = known()
        gone = [
            k
            for k, where in record.placement.items()
            if where.get("state") != SPENT
            and where.get("sandbox") not in seen
            and not placed_after(where, taken_at)
        ]
        if not gone:
            continue
        with gate.call():
            if gate.acquire(Deadline.after(wait)) is not None:
                continue
            try:
                seen = known()  # again: a sandbox may have been run meanwhile
                fresh = records.load(record.claim.uid)
                if fresh is None or fresh.phase != PREPARED:
                    continue
                lost = [
                    key
                    for key in gone
                    if (where := fresh.placement.get(key))
                    and where.get("sandbox") not in seen
                    and where.get("state") != SPENT
                    and not placed_after(where, taken_at)
                ]
                for key in lost:
                    if key not in fresh.attached:
                        fresh.placement[key] = {**fresh.placement[key], "state": SPENT}
                failures = attach.detach_all(registry, fresh, only=lost)
                records.save(fresh)
                for failure in failures or ():
                    event(log, logging.ERROR, "cannot detach", claim=fresh.claim.uid, error=failure)
            except (DriverError, OSError) as exc:
                event(
                    log, logging.ERROR, "cannot update a record", claim=record.claim.uid, error=exc
                )
            finally:
                gate.release()
