"""Allocation records: one `<claim-uid>.alloc.json` per claim, written atomically.

A record in phase "prepared" is the commit point of a prepare: it holds the exact answer
given to the kubelet and everything teardown needs. A record in phase "preparing" is a
journal written before a handler changes a pre-existing object (e.g. a host NIC), so a
crash half-way can be undone at the next start.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dradriver import naming
from dradriver.atomicfile import remove_durably, remove_stale_temp_files, write_atomic
from dradriver.errors import DriverError
from dradriver.hookspecs import ClaimRef
from dradriver.log import event

log = logging.getLogger(__name__)

RECORD_VERSION = 1
PREPARING = "preparing"
PREPARED = "prepared"
_SUFFIX = ".alloc.json"


class CorruptRecord(DriverError):
    """A record could not be read; it has been renamed to `*.corrupt`."""


@dataclass
class DeviceRecord:
    """One prepared device: its allocation, handler, CDI ID and undo data."""

    key: str
    request: str
    pool: str
    device: str
    share_id: str | None
    type: str
    kind: str
    undo: Mapping[str, Any]
    cdi_device_id: str | None = None
    container_interfaces: list[str] = field(default_factory=list)
    created_interfaces: list[str] = field(default_factory=list)
    host_interfaces: list[str] = field(default_factory=list)
    network_data: Mapping[str, Any] | None = None


@dataclass
class ClaimRecord:
    """Everything the driver knows about one prepared (or preparing) claim."""

    claim: ClaimRef
    phase: str
    devices: list[DeviceRecord] = field(default_factory=list)
    pod_uids: list[str] = field(default_factory=list)
    cdi_specs: list[str] = field(default_factory=list)

    def answer(self) -> list[dict[str, Any]]:
        """The prepare answer: one entry per device, in kubelet field names."""
        out = []
        for d in self.devices:
            entry: dict[str, Any] = {
                "requestNames": [d.request],
                "poolName": d.pool,
                "deviceName": d.device,
                "cdiDeviceIds": [d.cdi_device_id] if d.cdi_device_id else [],
            }
            if d.share_id:
                entry["shareId"] = d.share_id
            out.append(entry)
        return out

    def to_json(self) -> bytes:
        """Serialise with the schema version and the answer, for operators to read."""
        doc = {
            "version": RECORD_VERSION,
            "claim": asdict(self.claim),
            "phase": self.phase,
            "podUIDs": self.pod_uids,
            "cdiSpecs": self.cdi_specs,
            "answer": self.answer(),
            "devices": [asdict(d) for d in self.devices],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> ClaimRecord:
        """Parse a record; raise ValueError (with the reason) if it is not a valid one."""
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        if doc.get("version") != RECORD_VERSION:
            raise ValueError(f"unsupported record version {doc.get('version')!r}")
        if doc.get("phase") not in (PREPARING, PREPARED):
            raise ValueError(f"unknown phase {doc.get('phase')!r}")
        try:
            return cls(
                claim=ClaimRef(**doc["claim"]),
                phase=doc["phase"],
                devices=[DeviceRecord(**d) for d in doc["devices"]],
                pod_uids=list(doc.get("podUIDs", [])),
                cdi_specs=list(doc.get("cdiSpecs", [])),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"missing or unexpected field: {exc}") from exc


class RecordStore:
    """The directory of allocation records."""

    def __init__(self, directory: Path) -> None:
        """Use (and create) `directory`; it must not be the CDI directory itself."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def path(self, claim_uid: str) -> Path:
        """The record file of one claim."""
        return self.directory / naming.record_filename(claim_uid)

    def save(self, record: ClaimRecord) -> None:
        """Write a record atomically."""
        write_atomic(self.path(record.claim.uid), record.to_json(), mode=0o600)

    def delete(self, claim_uid: str) -> None:
        """Remove a record durably (no error if it is already gone)."""
        remove_durably(self.path(claim_uid))

    def load(self, claim_uid: str) -> ClaimRecord | None:
        """The record of a claim, None if there is none; a corrupt one is quarantined."""
        path = self.path(claim_uid)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return self._parse(path, data, claim_uid)

    def load_all(self) -> tuple[list[ClaimRecord], list[str]]:
        """Every readable record, and a message for each corrupt one (quarantined)."""
        remove_stale_temp_files(self.directory)
        records, problems = [], []
        for path in self._files():
            uid = path.name[: -len(_SUFFIX)]
            try:
                records.append(self._parse(path, path.read_bytes(), uid))
            except CorruptRecord as exc:
                problems.append(str(exc))
            except FileNotFoundError:
                continue
        return records, problems

    def _files(self) -> Iterator[Path]:
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith("."):
                    yield self.directory / entry.name

    def _parse(self, path: Path, data: bytes, claim_uid: str) -> ClaimRecord:
        try:
            record = ClaimRecord.from_json(data)
            if record.claim.uid != claim_uid:
                raise ValueError(f"holds claim UID {record.claim.uid}, file name says {claim_uid}")
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise self._quarantine(path, str(exc)) from None
        return record

    def _quarantine(self, path: Path, reason: str) -> CorruptRecord:
        target = path.with_name(path.name + ".corrupt")
        path.replace(target)
        event(
            log,
            logging.ERROR,
            "corrupt allocation record quarantined",
            file=str(path),
            moved_to=str(target),
            reason=reason,
        )
        return CorruptRecord(f"allocation record {path} is corrupt ({reason}); moved to {target}")
