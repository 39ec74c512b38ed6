"""One claim's answer to a kubelet call: its devices, or an error string that names the
claim and says what went wrong (never a stack trace), logged and counted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dradriver.base.errors import ClaimError, DriverError, storage_error
from dradriver.base.log import event
from dradriver.base.metrics import Metrics
from dradriver.contract import naming
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.records import DeviceAnswer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """The answer for one claim: its devices, or an error."""

    devices: list[DeviceAnswer]
    error: str | None = None


def guarded(
    operation: str,
    ref: ClaimRef,
    fn: Callable[[], list[DeviceAnswer]],
    metrics: Metrics | None,
) -> Outcome:
    """Run one claim's operation; turn any failure into that claim's error string."""
    start = time.perf_counter()
    try:
        outcome = Outcome(fn())
    except DriverError as exc:
        event(log, logging.ERROR, f"{operation} failed", claim=ref.uid, ref=str(ref), error=exc)
        outcome = Outcome([], f"claim {ref} ({ref.uid}): {exc}")
    except OSError as exc:  # a file of ours: say which, and what the operator can do
        err = storage_error(exc)
        event(log, logging.ERROR, f"{operation} failed", claim=ref.uid, ref=str(ref), error=err)
        outcome = Outcome([], f"claim {ref} ({ref.uid}): {err}")
    except Exception as exc:  # a bug: log the trace, answer without it
        log.exception(f"{operation} failed unexpectedly", extra={"claim": ref.uid})
        outcome = Outcome(
            [],
            f"claim {ref} ({ref.uid}): internal error "
            f"({type(exc).__name__}: {exc}); see the driver log",
        )
    if metrics:
        metrics.observe(operation, time.perf_counter() - start, outcome.error is None)
    return outcome


def refused(operation: str, ref: ClaimRef, reason: str, metrics: Metrics | None) -> Outcome:
    """The error outcome of a claim that was not worked on, logged and counted."""

    def refuse() -> list[DeviceAnswer]:
        raise DriverError(reason)

    return guarded(operation, ref, refuse, metrics)


def check_uid(ref: ClaimRef) -> None:
    """Refuse a claim UID that could not be one (it names files and kernel objects)."""
    if not naming.is_claim_uid(ref.uid):
        raise ClaimError(f"invalid claim UID {ref.uid!r}")


def count_prepared(metrics: Metrics | None, delta: int) -> None:
    """Move the gauge of prepared claims by `delta`."""
    if metrics:
        metrics.prepared_claims.inc(delta)
