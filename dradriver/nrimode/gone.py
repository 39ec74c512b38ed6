"""The Synchronize pass's first step: placements in sandboxes the runtime no longer has
are spent (the sandbox went while the driver was down, or its events were lost)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.claims.budget import CallGate, Deadline
from dradriver.contract.hookspecs import NRI
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
) -> None:
    """Mark SPENT each NRI placement whose sandbox is not in `known()` (the runtime's
    sandboxes as listed at wall-clock time `taken_at`, read again under the
    cross-instance lock, waited for up to `wait` s), unless it was made after `taken_at`."""
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
                for key in gone:
                    where = fresh.placement.get(key)
                    if (
                        where
                        and where.get("sandbox") not in seen
                        and where.get("state") != SPENT
                        and not placed_after(where, taken_at)
                    ):
                        fresh.placement[key] = {**where, "state": SPENT}
                records.save(fresh)
            except (DriverError, OSError) as exc:
                event(
                    log, logging.ERROR, "cannot update a record", claim=record.claim.uid, error=exc
                )
            finally:
                gate.release()
