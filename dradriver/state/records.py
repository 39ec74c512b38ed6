"""Allocation records: one `<claim-uid>.alloc.json` per claim, written atomically.

A record in phase "prepared" is the commit point of a prepare: it holds the exact answer
given to the kubelet and everything teardown needs. A record in phase "preparing" is a
journal written before a handler changes a pre-existing object (e.g. a host NIC), so a
crash half-way can be undone at the next start.

Versions, so that an old and a new instance can share the directory during a rolling
update in either direction (docs/crash-safety.md, "Record versions"):

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

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dradriver.base.errors import DriverError
from dradriver.contract.hookspecs import (
    CDI,
    ClaimRef,
    DeviceRequest,
    NetworkData,
    Prepared,
    Validated,
)
from dradriver.state.moves import Move

FORMAT = 3  # what this code writes and understands (2: `writer`, unknown fields kept;
# 3: `injection`, `moves`, `placement` of the NRI mode, all top-level)
READABLE_FROM = 1  # the oldest format whose readers can use what this code writes
PREPARING = "preparing"
PREPARED = "prepared"

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
    "podClaimName",
    "capacity",
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
            network_data=network_data_json(prepared.network_data) if prepared else None,
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


def network_data_json(nd: NetworkData | None) -> dict[str, Any] | None:
    """A device's network data as records and claim statuses hold it."""
    if nd is None:
        return None
    return {
        "interfaceName": nd.interface_name,
        "ips": list(nd.ips),
        "hardwareAddress": nd.hardware_address,
    }


class Encoded(str):
    """A value of `ClaimRecord.extra` already in JSON, written as it is: a large value
    that every write of a journal repeats is encoded once, not at every write."""


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
    a sandbox ID and its namespace path). Top-level too (format 3). `pod_claim_name`
    is the pod's name for a claim made from a template (where its metadata file shows).
    `consumed` (by device key, written as `capacity` when there is any) is what the
    scheduler gave a device of a shareable device's capacities, e.g. its bandwidth.
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
    pod_claim_name: str | None = None
    consumed: dict[str, dict[str, str]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of newer formats, kept

    @property
    def attached(self) -> set[str]:
        """The devices (by key) their handler makes in the pod sandbox, not moved."""
        return {k for k, moves in self.moves.items() if any(m.attach for m in moves)}

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
            "podClaimName": self.pod_claim_name,
        }
        if self.consumed:
            doc["capacity"] = self.consumed
        # One line: without `indent` json uses its C encoder (several times faster, and
        # a record is written twice per prepare); `jq . <file>` reads it as well.
        encoded = {k: doc.pop(k) for k in list(doc) if isinstance(doc[k], Encoded)}
        text = json.dumps(doc, sort_keys=True)
        if encoded:  # spliced in as they are (doc is never empty: it ends with "}")
            text = text[:-1] + "".join(f", {json.dumps(k)}: {v}" for k, v in encoded.items())
            text += "}"
        return text.encode() + b"\n"

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
                pod_claim_name=doc.get("podClaimName") or None,
                consumed={str(k): dict(v) for k, v in (doc.get("capacity") or {}).items()},
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
