"""CDI 1.1.0 specs: built as pure data, written atomically, one file per claim and type."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dradriver.contract import naming
from dradriver.state.atomicfile import StrPath, remove_durably, write_atomic

CDI_VERSION = "1.1.0"


def qualified_id(driver: str, device_type: str, name: str) -> str:
    """The fully qualified CDI device ID `vendor/class=name`."""
    return f"{naming.cdi_kind(driver, device_type)}={name}"


def device_id(driver: str, device_type: str, claim_uid: str, key: str) -> str:
    """The CDI device ID of one allocated device of a claim (see naming.cdi_device_name)."""
    return qualified_id(driver, device_type, naming.cdi_device_name(claim_uid, key))


def device_name(qualified: str) -> str:
    """The `name` part of a fully qualified CDI device ID."""
    return qualified.rpartition("=")[2]


def build_spec(
    driver: str, device_type: str, devices: Sequence[tuple[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    """A CDI spec of kind `<driver>/<type>` holding (device name, containerEdits) pairs."""
    for name, edits in devices:
        if not any(edits.values()):
            raise ValueError(f"CDI device {name} has empty containerEdits")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": naming.cdi_kind(driver, device_type),
        "devices": [{"name": name, "containerEdits": dict(edits)} for name, edits in devices],
    }


def spec_file(cdi_dir: StrPath, name: str) -> str:
    """The path of the spec file `name` (a string: see atomicfile)."""
    return os.path.join(os.fspath(cdi_dir), name)


def write_spec(path: StrPath, spec: Mapping[str, Any]) -> None:
    """Write a spec atomically (readers never see a partial file); not fsynced: a spec
    describes kernel objects that a crash of the machine destroys, and after a reboot
    specs are written again (docs/crash-safety.md, "What is fsynced")."""
    data = json.dumps(spec, sort_keys=True).encode() + b"\n"  # one line: the C encoder
    write_atomic(path, data, durable=False)


def remove_claim_specs(
    cdi_dir: StrPath, driver: str, claim_uid: str, durable: bool = True
) -> list[str]:
    """Delete every spec file of one claim; return the ones that existed.

    `durable=False` skips the directory fsync, for callers whose next durable step
    makes a lost removal harmless (start-up reconciliation deletes specs of claims
    without a record).
    """
    prefix, suffix = f"{driver}-", f"_{claim_uid}.json"
    try:
        with os.scandir(cdi_dir) as entries:  # plain string tests: no regex per claim UID
            names = [
                e.name for e in entries if e.name.startswith(prefix) and e.name.endswith(suffix)
            ]
    except FileNotFoundError:  # the directory was removed: nothing of ours is left in it
        return []
    paths = [spec_file(cdi_dir, n) for n in names]
    if durable:
        return [p for p in paths if remove_durably(p)]
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def remove_named_specs(cdi_dir: StrPath, driver: str, claim_uid: str, names: Iterable[str]) -> None:
    """Delete the claim's spec files `names` (a prepared record's list), without the
    directory fsync (see remove_claim_specs); a name that is not one of the claim's
    spec files is not touched."""
    for name in names:
        if os.path.basename(name) == name and claim_uid_of(name, driver) == claim_uid:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spec_file(cdi_dir, name))


def claim_uid_of(path: StrPath, driver: str) -> str | None:
    """The claim UID in one of our spec file names, or None for someone else's file."""
    name = os.path.basename(path)
    if not (name.startswith(f"{driver}-") and name.endswith(".json") and "_" in name):
        return None
    uid = name[: -len(".json")].rsplit("_", 1)[1]
    return uid if naming.is_claim_uid(uid) else None
