"""Start-up reconciliation of kernel objects, CDI specs and allocation records.

Run before the driver registers, under the cross-instance lock. Every record the driver
keeps is made true again or finished; only what this instance owns is ever deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.claims.lifecycle import ClaimLifecycle
from dradriver.contract import naming
from dradriver.contract.hookspecs import NRI
from dradriver.kernel import netlink
from dradriver.state import cdi, metadata
from dradriver.state.atomicfile import remove_durably, remove_stale_temp_files
from dradriver.state.moves import SPENT, placement
from dradriver.state.records import PREPARED, PREPARING, ClaimRecord

log = logging.getLogger(__name__)


@dataclass
class Report:
    """What reconciliation found and did."""

    prepared_claims: list[str] = field(default_factory=list)  # kept, true again
    rolled_back_claims: list[str] = field(default_factory=list)
    reprepared_claims: list[str] = field(default_factory=list)  # after a reboot
    finished_claims: list[str] = field(default_factory=list)  # their objects were gone
    restored_specs: list[str] = field(default_factory=list)
    deleted_interfaces: list[str] = field(default_factory=list)
    removed_specs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def vanished(self) -> list[str]:
        """Claims whose kernel objects were found gone (repaired or finished)."""
        return self.reprepared_claims + self.finished_claims


def reconcile(
    records: Iterable[ClaimRecord], cdi_dir: Path, driver: str, lifecycle: ClaimLifecycle
) -> Report:
    """Roll back interrupted prepares, repair or finish stale ones, delete what leaked."""
    report = Report()
    records = list(records)
    known = {r.claim.uid for r in records}
    prepared = []
    present = {link.name for link in netlink.links()}
    for record in records:
        uid = record.claim.uid
        try:
            if record.phase == PREPARING:
                restored = lifecycle.roll_back(record)
                report.rolled_back_claims.append(uid)
                if restored is not None:  # an interrupted repair: the old record is back
                    prepared.append(restored)
            elif record.phase == PREPARED:
                kept = _keep_true(record, lifecycle, present, report)
                if kept is not None:
                    prepared.append(kept)
        except (DriverError, OSError) as exc:
            report.problems.append(f"claim {uid}: {exc}")
            event(log, logging.ERROR, "reconciling a claim failed", claim=uid, error=exc)
    report.prepared_claims = [r.claim.uid for r in prepared]
    owned = {n for r in prepared for d in r.devices for n in d.created_interfaces}
    _delete_leaked_links(lifecycle.context.owner, known, owned, report)
    _remove_orphan_specs(cdi_dir, driver, {r.claim.uid for r in prepared}, report)
    _remove_orphan_metadata(lifecycle.metadata_root, prepared, report)
    try:
        lifecycle.records.reindex(prepared)
    except OSError as exc:
        report.problems.append(f"pod index: {exc}")
    return report


def _keep_true(
    record: ClaimRecord, lifecycle: ClaimLifecycle, present: set[str], report: Report
) -> ClaimRecord | None:
    """A prepared record made true again (the record to keep), or finished (None)."""
    uid = record.claim.uid
    rebooted = (
        record.boot_id is not None
        and lifecycle.boot_id is not None
        and record.boot_id != lifecycle.boot_id
    )
    if rebooted:
        # Every kernel object is gone, but the kubelet still holds the claim as prepared
        # and will start the pod's containers with its CDI IDs: make them true again.
        try:
            again = lifecycle.prepare_again(record)
        except DriverError as exc:
            event(log, logging.ERROR, "cannot prepare again after a reboot", claim=uid, error=exc)
            report.problems.append(f"claim {uid}: cannot prepare again after a reboot: {exc}")
            lifecycle.release(record)
            report.finished_claims.append(uid)
            return None
        event(log, logging.WARNING, "node rebooted: claim prepared again", claim=uid)
        report.reprepared_claims.append(uid)
        return again
    restored, lost = lifecycle.restore_specs(record)
    report.restored_specs += restored
    # A network attached in a sandbox may have changed what the files say after they
    # were written (a crash in between): written again.
    lifecycle.restore_metadata(record, changed=bool(record.attached))
    if lost:  # kept: its pod may be running; only a record of an older driver lacks specs
        report.problems.append(f"claim {uid}: CDI spec {', '.join(lost)} is gone")
    stale = lifecycle.is_intact(record, present)
    if stale is not None and record.injection == NRI:
        # In NRI mode the claim outlives its pod's sandboxes: a veth dies with the
        # namespace it was moved into, and the pod's next sandbox gets the claim
        # prepared again (dradriver.nrimode.sandboxes). Unprepare still finishes it.
        _mark_spent(record, present, lifecycle)
        return record
    if stale is not None:
        # The claim's objects were destroyed (its pod's namespace went, or an unprepare
        # was interrupted): finish that unprepare.
        event(
            log,
            logging.WARNING,
            "prepared claim is stale: finishing its unprepare",
            claim=uid,
            why=stale,
        )
        lifecycle.release(record)
        report.finished_claims.append(uid)
        return None
    return record


def _mark_spent(record: ClaimRecord, present: set[str], lifecycle: ClaimLifecycle) -> None:
    """Devices whose host-side interfaces are gone: spent (prepared again before a move)."""
    changed = False
    for device in record.devices:
        where = record.placement.get(device.key, {})
        if where.get("state") != SPENT and any(n not in present for n in device.host_interfaces):
            record.placement[device.key] = placement(
                SPENT, where.get("sandbox", ""), where.get("netns", ""), where.get("pod", "")
            )
            changed = True
    if changed:
        lifecycle.records.save(record)
        event(
            log,
            logging.INFO,
            "claim's interfaces went with its pod's sandbox",
            claim=record.claim.uid,
        )


def _delete_leaked_links(owner: str, known: set[str], owned: set[str], report: Report) -> None:
    """Delete interfaces this instance tagged that no prepared record lists."""
    for link in netlink.links():
        tag = naming.parse_ifalias(link.alias)
        if link.name in owned or tag is None or not tag.owned_by(owner, known):
            continue
        try:
            if netlink.delete(link.name):
                report.deleted_interfaces.append(link.name)
                event(
                    log,
                    logging.WARNING,
                    "deleted leaked interface",
                    interface=link.name,
                    alias=link.alias or "",
                )
        except DriverError as exc:
            report.problems.append(str(exc))


def _remove_orphan_metadata(root: Path | None, prepared: list[ClaimRecord], report: Report) -> None:
    """Remove metadata directories of claims with no prepared record (an unprepare's
    removal a crash lost: the record's removal is the durable step)."""
    if root is None:
        return
    for path in metadata.orphans(root, [r.claim for r in prepared]):
        shutil.rmtree(path, ignore_errors=True)
        event(log, logging.WARNING, "removed device metadata without record", path=str(path))


def _remove_orphan_specs(cdi_dir: Path, driver: str, prepared: set[str], report: Report) -> None:
    """Remove our spec files without a prepared record, and anything of our name that is
    not a regular file (a symlink is removed itself, never followed)."""
    remove_stale_temp_files(cdi_dir)
    try:
        entries = sorted(os.scandir(cdi_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError as exc:
        report.problems.append(f"CDI directory {cdi_dir}: {exc.strerror}")
        return
    for entry in entries:
        path = Path(entry.path)
        uid = cdi.claim_uid_of(path, driver)
        if uid is None:
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            regular = stat.S_ISREG(mode)
            if regular and uid in prepared:
                continue
            if stat.S_ISDIR(mode):
                report.problems.append(f"{path} is a directory, not a CDI spec: remove it")
                event(log, logging.ERROR, "not a CDI spec file: left alone", file=str(path))
                continue
            if remove_durably(path):
                report.removed_specs.append(path.name)
                why = "CDI spec without record" if regular else "not a regular file"
                event(log, logging.WARNING, f"removed {why}", claim=uid, file=str(path))
        except OSError as exc:
            report.problems.append(f"{path}: {exc.strerror}")
            event(log, logging.ERROR, "cannot remove a CDI spec", file=str(path), error=exc)
