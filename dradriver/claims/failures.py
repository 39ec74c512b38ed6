"""Warning Events for claims that could not be prepared, so `kubectl describe pod` says why.

The kubelet's own error for a failed prepare reaches the pod's Events only as a generic
"failed to prepare dynamic resources"; ours carries the claim, the field and what to fix.
The Event is about each pod the claim is reserved for, or about the claim itself when no
pod is known (its GET failed, or it names none). The recorder posts each distinct Event
once per process and rate-limits the rest (apiserver/events.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dradriver.apiserver.events import WARNING, EventRecorder, ObjectRef
from dradriver.base.log import event
from dradriver.contract.hookspecs import ClaimRef

log = logging.getLogger(__name__)

REASON = "PrepareFailed"
SANDBOX_REASON = "SandboxNetworkFailed"  # a device could not be put into a pod's sandbox
CHECK_REASON = "NetworkCheckFailed"  # what a sandbox holds of a claim is no longer as made
CLAIM_API = "resource.k8s.io/v1"


def regarding(ref: ClaimRef, claim: Mapping[str, Any] | None) -> list[ObjectRef]:
    """The objects an Event about `ref`'s failure is about: the pods the claim object is
    reserved for when it is the claim the kubelet named, else the claim."""
    pods = []
    if claim is not None and (claim.get("metadata") or {}).get("uid") == ref.uid:
        for entry in (claim.get("status") or {}).get("reservedFor") or []:
            if entry.get("resource") == "pods" and entry.get("name") and entry.get("uid"):
                pods.extend(_ref(ref, "Pod", entry["name"], entry["uid"], "v1"))
    return pods or _ref(ref, "ResourceClaim", ref.name, ref.uid, CLAIM_API)


def _ref(ref: ClaimRef, kind: str, name: str, uid: str, api_version: str) -> list[ObjectRef]:
    """[the object], or [] when its name could not be one the API server gave."""
    try:
        return [ObjectRef(kind, ref.namespace, name, uid, api_version)]
    except ValueError as exc:
        event(log, logging.DEBUG, "no event: bad object name", claim=ref.uid, error=exc)
        return []


class FailureEvents:
    """Records a Warning Event for each claim whose prepare failed."""

    def __init__(self, recorder: EventRecorder) -> None:
        """Events go through `recorder` (never blocks)."""
        self._recorder = recorder

    def __call__(self, ref: ClaimRef, error: str, claim: Mapping[str, Any] | None) -> None:
        """Report that preparing `ref` failed with `error` (`claim`: its object, if fetched)."""
        for obj in regarding(ref, claim):
            self._recorder.record(obj, WARNING, REASON, error)

    def sandbox(self, pod: ObjectRef, reason: str, error: str, claim: ClaimRef | None) -> None:
        """Report on `pod` (and on `claim`, if given) what failed at its sandbox."""
        self._recorder.record(pod, WARNING, reason, error)
        if claim is not None:
            for obj in _ref(claim, "ResourceClaim", claim.name, claim.uid, CLAIM_API):
                self._recorder.record(obj, WARNING, reason, error)

    def stop(self) -> None:
        """Post the Events still queued."""
        self._recorder.stop()
