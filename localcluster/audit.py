"""What the driver asks of the API server, as kube-apiserver's own audit log records it.

The local control plane logs, at Metadata level, every request by a service account of
the driver's namespace (nobody else's) to `audit.log` in its work directory. Counting
those entries gives the driver's requests by verb and resource, apart from the
scheduler's, the controllers' and the tests' own, which share the same resources.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from localcluster.manifests import DRIVER_NAMESPACE, DRIVER_SA

DRIVER_USER = f"system:serviceaccount:{DRIVER_NAMESPACE}:{DRIVER_SA}"  # the driver's token

POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{DRIVER_NAMESPACE}"]},
        {"level": "None"},
    ],
}


def apiserver_flags(workdir: Path) -> list[str]:
    """kube-apiserver's flags for the audit log (the policy file written here)."""
    policy = workdir / "audit-policy.json"
    policy.write_text(json.dumps(POLICY))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log_path(workdir)}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # each entry written before the answer: counts are exact
        "--audit-log-maxsize=0",
    ]


def log_path(workdir: Path) -> Path:
    """Where the audit log of the control plane in `workdir` is."""
    return workdir / "audit.log"


class AuditLog:
    """Reads the driver's requests from an audit log, from a mark on."""

    def __init__(self, path: Path) -> None:
        """Read `path` (missing: no requests yet)."""
        self._path = path
        self._offset = 0

    def mark(self) -> None:
        """Count only the requests after now."""
        self._offset = self._size()

    def entries(self) -> list[dict[str, Any]]:
        """The audit entries since the mark, each once (a watch's at its start)."""
        if not self._path.exists():
            return []
        with self._path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        out = []
        for line in data[: data.rfind(b"\n") + 1].splitlines():  # not a line being written
            entry = json.loads(line)
            started = entry.get("stage") == "ResponseStarted"
            if started == (entry.get("verb") == "watch"):
                out.append(entry)
        return out

    def counts(self, user: str | None = None) -> Counter[str]:
        """Requests since the mark as `verb resource[/subresource]` -> how many."""
        got: Counter[str] = Counter()
        for entry in self.entries():
            if user is not None and entry.get("user", {}).get("username") != user:
                continue
            got[describe(entry)] += 1
        return got

    def _size(self) -> int:
        return self._path.stat().st_size if self._path.exists() else 0


def describe(entry: dict[str, Any]) -> str:
    """`verb resource[/subresource]` of an audit entry."""
    ref = entry.get("objectRef") or {}
    resource = ref.get("resource") or entry.get("requestURI", "?")
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return f"{entry.get('verb')} {resource}"
