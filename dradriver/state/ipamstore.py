"""The pool addresses this node handed out, and the blocks it holds: one file per pool,
`<state dir>/ipam/<pool>.json`, read and written under the cross-instance lock, so the
two instances of a rolling update never hand out one address twice.

The claims' records are the truth: at start the addresses are rebuilt from the prepared
records (dradriver.claims.ipam), so a file a crash left behind, or lost, costs nothing.
The file is what an operator reads to see which claim has which address:

    {"pool": "data", "addresses": {"10.50.0.7": {"claim": <uid>, "key": <device key>,
     "namespace": "default", "name": "web-0-net"}}, "blocks": [3, 4]}
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dradriver.base.errors import StorageError, storage_error
from dradriver.state.atomicfile import remove_stale_temp_files, write_atomic

DIRECTORY = "ipam"


@dataclass(frozen=True)
class Holder:
    """Who an address was handed to."""

    claim: str  # UID
    key: str  # the device key within the claim
    namespace: str = ""
    name: str = ""

    def to_json(self) -> dict[str, str]:
        """As the file stores it."""
        return {
            "claim": self.claim,
            "key": self.key,
            "namespace": self.namespace,
            "name": self.name,
        }


@dataclass
class PoolState:
    """One pool's addresses handed out on this node, and the blocks the node holds."""

    pool: str
    addresses: dict[str, Holder] = field(default_factory=dict)
    blocks: list[int] = field(default_factory=list)

    def of_claim(self, claim: str) -> dict[str, Holder]:
        """The addresses handed to one claim."""
        return {a: h for a, h in self.addresses.items() if h.claim == claim}


class IpamStore:
    """The per-pool files of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir / DIRECTORY

    def path(self, pool: str) -> Path:
        """The file of one pool."""
        return self._dir / f"{pool}.json"

    def load(self, pool: str) -> PoolState:
        """The pool's file (empty if there is none); StorageError if it cannot be read, so
        that no address is handed out on a guess (at start the records rebuild it)."""
        path = self.path(pool)
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            return PoolState(pool)
        except OSError as exc:
            raise storage_error(exc) from None
        except ValueError as exc:
            raise StorageError(
                f"{path}: not the pool's addresses ({exc}); restart the driver to rebuild "
                "it from the records"
            ) from None
        if not isinstance(doc, dict):
            raise StorageError(
                f"{path}: not the pool's addresses; restart the driver to rebuild it"
            )
        return PoolState(
            pool,
            {str(a): _holder(h) for a, h in (doc.get("addresses") or {}).items()},
            [int(b) for b in doc.get("blocks") or []],
        )

    def save(self, state: PoolState) -> None:
        """Replace the pool's file (not fsynced: after a machine crash the records rebuild
        it); a pool with nothing handed out and no block has none."""
        if not state.addresses and not state.blocks:
            try:
                self.path(state.pool).unlink(missing_ok=True)
            except OSError as exc:
                raise storage_error(exc) from None
            with contextlib.suppress(OSError):  # the last pool with nothing: no directory
                self._dir.rmdir()
            return
        doc = {
            "pool": state.pool,
            "addresses": {a: h.to_json() for a, h in sorted(state.addresses.items())},
            "blocks": sorted(state.blocks),
        }
        try:
            write_atomic(self.path(state.pool), json.dumps(doc).encode() + b"\n", durable=False)
        except OSError as exc:
            raise storage_error(exc) from None

    def tidy(self) -> None:
        """Remove the temp files a crash left in the directory (at start, under the lock)."""
        if self._dir.is_dir():
            remove_stale_temp_files(self._dir)

    def pools(self) -> Iterator[str]:
        """The pools that have a file."""
        try:
            files = sorted(self._dir.iterdir())
        except FileNotFoundError:
            return
        for path in files:
            if path.suffix == ".json":
                yield path.stem


def _holder(doc: Mapping[str, Any]) -> Holder:
    return Holder(
        str(doc.get("claim", "")),
        str(doc.get("key", "")),
        str(doc.get("namespace", "")),
        str(doc.get("name", "")),
    )
