"""Allocation records: one `<claim-uid>.alloc.json` per claim, written atomically.

A record in phase "prepared" is the commit point of a prepare: it holds the exact answer
given to the kubelet and everything teardown needs. A record in phase "preparing" is a
journal written before a handler changes a pre-existing object (e.g. a host NIC), so a
crash half-way can be undone at the next start.

Versions, so that an old and a new instance can share the directory during a rolling
update in either direction (design.md, "Record versions"):

- `version` is the oldest record format whose readers can act on the record correctly;
  `writer` is the format of the instance that wrote it. This code writes format FORMAT
  and marks what it writes readable from READABLE_FROM.
- A reader uses a record whose `version` is at most its own FORMAT: fields it does not
  know are kept as they are and written back unchanged; fields an older writer did not
  write get their defaults (`_upgrade`).
- A record whose `version` is newer than FORMAT is left untouched and reported
  (UnreadableRecord): only an instance that understands it may change it.
- A file that is not a record at all (not JSON, fields missing, not a regular file) is
  renamed `*.corrupt` and reported (CorruptRecord); if even the rename fails (a read-only
  disk), it is reported and left.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dradriver import naming
from dradriver.atomicfile import remove_durably, remove_stale_temp_files, write_atomic
from dradriver.errors import DriverError
from dradriver.hookspecs import CDI, ClaimRef, DeviceRequest, NetworkData, Prepared, Validated
from dradriver.log import event
from dradriver.moves import Move

log = logging.getLogger(__name__)

FORMAT = 3  # what this code writes and understands (2: `writer`, unknown fields kept;
# 3: `injection`, `moves`, `placement` of the NRI mode, all top-level)
READABLE_FROM = 1  # the oldest format whose readers can use what this code writes
PREPARING = "preparing"
PREPARED = "prepared"
_SUFFIX = ".alloc.json"
_BY_POD = "by-pod"
_TOUCH = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # a pod index marker
_MAX_BYTES = 4 << 20  # far above any real record; a bigger file is not one of ours

_CLAIM_KEYS = {
    "version",
    "writer",
    "claim",
    "phase",
    "podUIDs",
    "cdiSpecs",
    "answer",
    "devices",
    "bootId",
    "configs",
    "specs",
    "injection",
    "moves",
    "placement",
}
_DEVICE_KEYS = {
    "key",
    "request",
    "pool",
    "device",
    "share_id",
    "type",
    "kind",
    "undo",
    "cdi_device_id",
    "container_interfaces",
    "created_interfaces",
    "host_interfaces",
    "network_data",
}


class CorruptRecord(DriverError):
    """A record could not be read at all; it has been renamed to `*.corrupt` (if it could)."""


class UnreadableRecord(DriverError):
    """A record written by a newer driver that this one cannot use; left untouched."""


@dataclass(frozen=True)
class DeviceAnswer:
    """One device of a prepare answer, as the kubelet gets it."""

    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """In kubelet field names, as the record shows it to operators."""
        entry: dict[str, Any] = {
            "requestNames": [self.request],
            "poolName": self.pool,
            "deviceName": self.device,
            "cdiDeviceIds": list(self.cdi_ids),
        }
        if self.share_id:
            entry["shareId"] = self.share_id
        return entry


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
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer formats, kept

    @classmethod
    def build(
        cls,
        req: DeviceRequest,
        type_: str,
        validated: Validated,
        undo: Mapping[str, Any],
        prepared: Prepared | None = None,
        cdi_device_id: str | None = None,
    ) -> DeviceRecord:
        """The record of one device: a journal entry (undo only) or prepared (all of it)."""
        return cls(
            key=req.key,
            request=req.request,
            pool=req.pool,
            device=req.device,
            share_id=req.share_id,
            type=type_,
            kind=req.kind,
            undo=dict(undo),
            cdi_device_id=cdi_device_id,
            container_interfaces=list(validated.container_interfaces),
            created_interfaces=list(prepared.created_interfaces) if prepared else [],
            host_interfaces=list(prepared.host_interfaces) if prepared else [],
            network_data=_network_data(prepared.network_data) if prepared else None,
        )

    def answer(self) -> DeviceAnswer:
        """What the kubelet is told about this device."""
        cdi_ids = (self.cdi_device_id,) if self.cdi_device_id else ()
        return DeviceAnswer(self.request, self.pool, self.device, cdi_ids, self.share_id)

    def to_json(self) -> dict[str, Any]:
        """As stored (the keys format 1 wrote, then anything kept from a newer format)."""
        doc = {k: getattr(self, k) for k in sorted(_DEVICE_KEYS)}
        return {**self.extra, **doc}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DeviceRecord:
        """Parse one device; unknown keys are kept in `extra`."""
        known = {k: doc[k] for k in _DEVICE_KEYS if k in doc}
        return cls(**known, extra={k: v for k, v in doc.items() if k not in _DEVICE_KEYS})


def _network_data(nd: NetworkData | None) -> dict[str, Any] | None:
    if nd is None:
        return None
    return {
        "interfaceName": nd.interface_name,
        "ips": list(nd.ips),
        "hardwareAddress": nd.hardware_address,
    }


@dataclass
class ClaimRecord:
    """Everything the driver knows about one prepared (or preparing) claim.

    `boot_id` is the kernel boot the kernel objects were made in; `configs` (by device
    key) and `specs` (by file name) are what it takes to prepare the claim again, or to
    write its CDI specs again, from the record alone (after a reboot, or when the CDI
    directory was emptied). All three are top-level, so format 1 readers ignore them.

    `injection` is the mode the claim was prepared in (CDI or NRI): it keeps it across
    restarts and mode changes. In NRI mode `moves` (by device key) say what goes into
    the pod's namespace and `placement` (by device key) where it is now (see IN etc.;
    a sandbox ID and its namespace path). Top-level too (format 3).
    """

    claim: ClaimRef
    phase: str
    devices: list[DeviceRecord] = field(default_factory=list)
    pod_uids: list[str] = field(default_factory=list)
    cdi_specs: list[str] = field(default_factory=list)
    boot_id: str | None = None
    configs: dict[str, Any] = field(default_factory=dict)
    specs: dict[str, Any] = field(default_factory=dict)
    injection: str = CDI
    moves: dict[str, list[Move]] = field(default_factory=dict)
    placement: dict[str, dict[str, str]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer formats, kept

    def answer(self) -> list[DeviceAnswer]:
        """The prepare answer: one entry per device."""
        return [d.answer() for d in self.devices]

    def to_json(self) -> bytes:
        """Serialise with the versions and the answer, for operators to read."""
        doc = {
            **self.extra,
            "version": READABLE_FROM,
            "writer": FORMAT,
            "claim": {
                "namespace": self.claim.namespace,
                "name": self.claim.name,
                "uid": self.claim.uid,
            },
            "phase": self.phase,
            "podUIDs": self.pod_uids,
            "cdiSpecs": self.cdi_specs,
            "answer": [a.to_json() for a in self.answer()],
            "devices": [d.to_json() for d in self.devices],
            "bootId": self.boot_id,
            "configs": self.configs,
            "specs": self.specs,
            "injection": self.injection,
            "moves": {k: [m.to_json() for m in v] for k, v in self.moves.items()},
            "placement": self.placement,
        }
        # One line: without `indent` json uses its C encoder (several times faster, and
        # a record is written twice per prepare); `jq . <file>` reads it as well.
        return json.dumps(doc, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> ClaimRecord:
        """Parse a record; ValueError if it is not one, UnreadableRecord if it is too new."""
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        version = doc.get("version")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"no valid format version ({version!r})")
        if version > FORMAT:
            raise UnreadableRecord(
                f"written by a newer driver (readable from format {version}, writer format "
                f"{doc.get('writer', '?')}); this driver reads format {FORMAT}"
            )
        doc = _upgrade(doc)
        if doc.get("phase") not in (PREPARING, PREPARED):
            raise ValueError(f"unknown phase {doc.get('phase')!r}")
        try:
            return cls(
                claim=ClaimRef(**doc["claim"]),
                phase=doc["phase"],
                devices=[DeviceRecord.from_json(d) for d in doc["devices"]],
                pod_uids=list(doc.get("podUIDs", [])),
                cdi_specs=list(doc.get("cdiSpecs", [])),
                boot_id=doc.get("bootId"),
                configs=dict(doc.get("configs") or {}),
                specs=dict(doc.get("specs") or {}),
                injection=str(doc.get("injection") or CDI),
                moves={
                    str(k): [Move.from_json(m) for m in v]
                    for k, v in (doc.get("moves") or {}).items()
                },
                placement={str(k): dict(v) for k, v in (doc.get("placement") or {}).items()},
                extra={k: v for k, v in doc.items() if k not in _CLAIM_KEYS},
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"missing or unexpected field: {exc}") from exc


def _upgrade(doc: dict[str, Any]) -> dict[str, Any]:
    """Bring a record of an older writer up to FORMAT, in memory.

    Format 1 had no `writer`, `bootId`, `configs` or `specs` (their defaults: unknown
    boot, and a claim that can only be prepared again from the API); formats 1 and 2 no
    `injection`, `moves`, `placement` (CDI mode, nothing to move).
    """
    doc.setdefault("writer", 1)
    return doc


class RecordStore:
    """The directory of allocation records."""

    def __init__(self, directory: Path) -> None:
        """Use `directory` (created on the first write); not the CDI directory itself."""
        self.directory = directory
        self._dir = os.fspath(directory)  # per-claim paths are strings: see atomicfile

    def path(self, claim_uid: str) -> str:
        """The record file of one claim."""
        return os.path.join(self._dir, naming.record_filename(claim_uid))

    def save(self, record: ClaimRecord, durable: bool = True) -> None:
        """Write a record atomically (`durable=False`: a journal, see write_atomic)."""
        write_atomic(self.path(record.claim.uid), record.to_json(), mode=0o600, durable=durable)

    def delete(self, claim_uid: str) -> None:
        """Remove a record durably (no error if it is already gone)."""
        remove_durably(self.path(claim_uid))

    # -- which claims a pod has (container interface names must not repeat in a pod) --

    def index(self, record: ClaimRecord) -> None:
        """Note the claim under each of its pods (`by-pod/<pod>/<claim>`; not durable:
        start-up rebuilds the index from the records)."""
        for pod in record.pod_uids:
            if naming.is_claim_uid(pod):
                folder = os.path.join(self._dir, _BY_POD, pod)
                os.makedirs(folder, exist_ok=True)
                os.close(os.open(os.path.join(folder, record.claim.uid), _TOUCH, 0o600))

    def unindex(self, record: ClaimRecord) -> None:
        """Forget the claim under its pods; best effort (a marker left behind names a claim
        without a record, which readers skip, and start-up removes it)."""
        for pod in record.pod_uids:
            if naming.is_claim_uid(pod):
                folder = os.path.join(self._dir, _BY_POD, pod)
                with contextlib.suppress(OSError):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(folder, record.claim.uid))
                    os.rmdir(folder)  # fails while other claims of the pod remain: fine
                    os.rmdir(os.path.dirname(folder))  # and this while other pods remain

    def claims_of_pod(self, pod_uid: str) -> list[str]:
        """UIDs of the claims indexed under a pod."""
        if not naming.is_claim_uid(pod_uid):
            return []
        try:
            return sorted(os.listdir(os.path.join(self._dir, _BY_POD, pod_uid)))
        except FileNotFoundError:
            return []

    def reindex(self, records: list[ClaimRecord]) -> None:
        """Make the pod index match `records` exactly (start-up)."""
        wanted = {(p, r.claim.uid) for r in records for p in r.pod_uids if naming.is_claim_uid(p)}
        root = self.directory / _BY_POD
        with contextlib.suppress(FileNotFoundError):
            for pod in root.iterdir():
                for claim in pod.iterdir():
                    if (pod.name, claim.name) not in wanted:
                        claim.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    pod.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
        for record in records:
            self.index(record)

    def load(self, claim_uid: str) -> ClaimRecord | None:
        """The record of a claim, None if there is none.

        Raises CorruptRecord (quarantined) or UnreadableRecord (left untouched).
        """
        path = self.path(claim_uid)
        try:
            data = _read(path)
        except FileNotFoundError:
            return None
        except _NotARecord as exc:
            raise self._quarantine(path, str(exc)) from None
        return self._parse(path, data, claim_uid)

    def load_all(self) -> tuple[list[ClaimRecord], list[str]]:
        """Every usable record, and a message for each entry that is not (never raises)."""
        remove_stale_temp_files(self.directory)
        records, problems = [], []
        for path in self._files():
            try:
                record = self.load(os.path.basename(path)[: -len(_SUFFIX)])
            except DriverError as exc:
                problems.append(str(exc))
                continue
            except OSError as exc:  # EIO, EACCES: say which file, keep serving the rest
                problems.append(f"allocation record {path} cannot be read: {exc.strerror}")
                event(
                    log,
                    logging.ERROR,
                    "allocation record cannot be read",
                    file=str(path),
                    error=exc,
                )
                continue
            if record is not None:
                records.append(record)
        return records, problems

    def claim_uids(self) -> list[str]:
        """The claims with a record file (nothing is read, removed or quarantined)."""
        return sorted(os.path.basename(p)[: -len(_SUFFIX)] for p in self._files())

    def _files(self) -> Iterator[str]:
        try:
            entries = os.scandir(self.directory)
        except FileNotFoundError:
            return
        with entries:
            for entry in entries:
                if entry.name.endswith(_SUFFIX) and not entry.name.startswith("."):
                    yield entry.path

    def _parse(self, path: str, data: bytes, claim_uid: str) -> ClaimRecord:
        try:
            record = ClaimRecord.from_json(data)
            if record.claim.uid != claim_uid:
                raise ValueError(f"holds claim UID {record.claim.uid}, file name says {claim_uid}")
        except UnreadableRecord as exc:
            event(
                log, logging.ERROR, "allocation record left untouched", file=str(path), reason=exc
            )
            raise UnreadableRecord(f"allocation record {path} is {exc}; left untouched") from None
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            raise self._quarantine(path, str(exc)) from None
        return record

    def _quarantine(self, path: str, reason: str) -> CorruptRecord:
        target = path + ".corrupt"
        try:
            os.replace(path, target)
        except OSError as exc:
            event(
                log,
                logging.ERROR,
                "corrupt allocation record cannot be moved aside; left in place",
                file=str(path),
                reason=reason,
                error=exc,
            )
            return CorruptRecord(
                f"allocation record {path} is corrupt ({reason}) and cannot be moved aside "
                f"({exc.strerror}); fix or remove it"
            )
        event(
            log,
            logging.ERROR,
            "corrupt allocation record quarantined",
            file=path,
            moved_to=target,
            reason=reason,
        )
        return CorruptRecord(f"allocation record {path} is corrupt ({reason}); moved to {target}")


class _NotARecord(Exception):
    """The entry exists but is no file we would have written."""


def _read(path: str) -> bytes:
    """A record's bytes, refusing symlinks, FIFOs, directories and giant files.

    O_NONBLOCK: opening a FIFO must not wait for a writer that never comes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotARecord("a symbolic link, not a file the driver wrote") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _NotARecord(f"not a regular file (mode {stat.filemode(info.st_mode)})")
        if info.st_size > _MAX_BYTES:
            raise _NotARecord(f"{info.st_size} bytes, far more than a record holds")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
