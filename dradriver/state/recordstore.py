"""The directory of allocation records: load, save, delete, quarantine, the pod index.

Files only: the record format and its version rules are `records.py`. Entries that are
not records are never followed (symlinks), never block (FIFOs) and never stop the driver:
they are quarantined or reported (docs/crash-safety.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Collection, Iterator
from pathlib import Path

from dradriver.base.errors import ClaimError, DriverError
from dradriver.base.log import event
from dradriver.contract import naming
from dradriver.state.atomicfile import remove_durably, remove_stale_temp_files, write_atomic
from dradriver.state.records import PREPARED, ClaimRecord, CorruptRecord, UnreadableRecord

log = logging.getLogger(__name__)

_SUFFIX = ".alloc.json"
_BY_POD = "by-pod"
_AHEAD = "ahead"  # ahead/<claim>: the pod a claim was prepared for before the kubelet asked
_TOUCH = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # a pod index marker
_MAX_BYTES = 4 << 20  # far above any real record; a bigger file is not one of ours


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

    # -- claims prepared before the kubelet asked (dradriver/claims/ahead.py) ----------

    def mark_ahead(self, claim_uid: str, pod_uid: str) -> None:
        """Note that the claim is prepared for `pod_uid` before the kubelet asked (written
        before the claim's journal, durably: a record that outlives a machine's crash
        must not outlive its mark; off the kubelet's clock)."""
        write_atomic(self._ahead(claim_uid), pod_uid.encode(), mode=0o600)

    def ahead_pod(self, claim_uid: str) -> str | None:
        """The pod the claim was prepared for before the kubelet asked, while it has not."""
        try:
            with open(self._ahead(claim_uid), "rb") as f:
                pod = f.read(64).decode("ascii", "replace")
        except FileNotFoundError:
            return None
        return pod if naming.is_claim_uid(pod) else "?"  # damaged: still not the kubelet's

    def unmark_ahead(self, claim_uid: str, tidy: bool = True) -> bool:
        """Forget the mark (the kubelet asked, or the claim was unprepared); False if none.
        `tidy`: remove the directory of marks once it is empty (not in a kubelet's
        prepare call: its unprepare does it)."""
        path = self._ahead(claim_uid)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        finally:
            if tidy:
                with contextlib.suppress(OSError):  # other marks remain, or none ever was
                    os.rmdir(os.path.dirname(path))
        return True

    def ahead_claims(self) -> list[str]:
        """The claims with a mark."""
        try:
            names = os.listdir(os.path.join(self._dir, _AHEAD))
        except FileNotFoundError:
            return []
        return sorted(n for n in names if naming.is_claim_uid(n))

    def _ahead(self, claim_uid: str) -> str:
        if not naming.is_claim_uid(claim_uid):
            raise ClaimError(f"invalid claim UID {claim_uid!r}")
        return os.path.join(self._dir, _AHEAD, claim_uid)

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
                    file=path,
                    error=exc,
                )
                continue
            if record is not None:
                records.append(record)
        return records, problems

    def held_devices(self, names: Collection[str]) -> set[str]:
        """Which of the device `names` a prepared record holds (records that cannot be
        read are skipped: they are reported where they are loaded for their claim)."""
        wanted, held = set(names), set()
        for uid in self.claim_uids():
            try:
                record = self.load(uid)
            except (DriverError, OSError):
                continue
            if record is not None and record.phase == PREPARED:
                held |= {d.device for d in record.devices} & wanted
        return held

    def claim_uids(self) -> list[str]:
        """The claims with a record file (nothing is read, removed or quarantined)."""
        return sorted(os.path.basename(p)[: -len(_SUFFIX)] for p in self._files())

    def _files(self) -> Iterator[str]:
        try:
            entries = os.scandir(self._dir)
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
            event(log, logging.ERROR, "allocation record left untouched", file=path, reason=exc)
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
                file=path,
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
