"""Start-up reconciliation of kernel objects, CDI specs and allocation records."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dradriver import cdi, naming, netlink
from dradriver.atomicfile import remove_durably, remove_stale_temp_files
from dradriver.log import event
from dradriver.records import PREPARED, PREPARING, ClaimRecord

log = logging.getLogger(__name__)


@dataclass
class Report:
    """What reconciliation found and did."""

    deleted_interfaces: list[str] = field(default_factory=list)
    rolled_back_claims: list[str] = field(default_factory=list)
    removed_specs: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)


def is_ours(link: netlink.Link) -> bool:
    """Whether the driver created `link`: our ifalias tag, or our name shape and no alias.

    The kernel ignores an alias in the request that creates a link, so a crash between
    creating and tagging leaves an untagged link; only this driver makes 15-byte names
    of the form `dr<role><12 base32 chars>`.
    """
    if naming.parse_ifalias(link.alias) is not None:
        return True
    return not link.alias and naming.is_host_ifname(link.name)


def reconcile(
    records: Iterable[ClaimRecord],
    cdi_dir: Path,
    driver: str,
    roll_back: Callable[[ClaimRecord], None],
) -> Report:
    """Undo interrupted prepares, delete leaked interfaces and specs, report vanished ones."""
    report = Report()
    prepared = []
    for record in records:
        if record.phase == PREPARING:
            roll_back(record)
            report.rolled_back_claims.append(record.claim.uid)
        elif record.phase == PREPARED:
            prepared.append(record)
    owned = {n for r in prepared for d in r.devices for n in d.created_interfaces}
    present = set()
    for link in netlink.links():
        present.add(link.name)
        if is_ours(link) and link.name not in owned and netlink.delete(link.name):
            report.deleted_interfaces.append(link.name)
            event(
                log,
                logging.WARNING,
                "deleted leaked interface",
                interface=link.name,
                alias=link.alias or "",
            )
    for record in prepared:
        for device in record.devices:
            for name in device.host_interfaces:
                if name not in present:
                    report.vanished.append(f"{record.claim.uid}/{name}")
                    event(
                        log,
                        logging.WARNING,
                        "interface of a prepared claim vanished",
                        claim=record.claim.uid,
                        interface=name,
                    )
    prepared_uids = {r.claim.uid for r in prepared}
    remove_stale_temp_files(cdi_dir)
    for spec in sorted(cdi_dir.glob(f"{driver}-*_*.json")):
        uid = cdi.claim_uid_of(spec, driver)
        if uid is not None and uid not in prepared_uids and remove_durably(spec):
            report.removed_specs.append(spec.name)
            event(
                log, logging.WARNING, "removed CDI spec without record", claim=uid, file=str(spec)
            )
    return report


def delete_claim_interfaces(claim_uid: str) -> list[str]:
    """Delete every interface tagged with `claim_uid` (used when its record is lost)."""
    deleted = []
    for link in netlink.links():
        tag = naming.parse_ifalias(link.alias)
        if tag and tag[0] == claim_uid and netlink.delete(link.name):
            deleted.append(link.name)
    return deleted
