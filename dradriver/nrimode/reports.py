"""What the operator and the user hear of a sandbox's devices: a Warning Event on the pod
(and the claim) when its sandbox did not get them, and the check of the networks made
in running sandboxes when the driver starts again (a CNI network's CHECK)."""

from __future__ import annotations

import logging
from typing import Protocol

from dradriver.apiserver.events import ObjectRef
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.claims import attach
from dradriver.claims.failures import CHECK_REASON, FailureEvents
from dradriver.contract.registry import HandlerRegistry
from dradriver.state.moves import is_in
from dradriver.state.records import ClaimRecord

log = logging.getLogger(__name__)


class Sandbox(Protocol):
    """A pod sandbox as the runtime reports it (dradriver.nri.PodSandbox)."""

    @property
    def id(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def netns(self) -> str: ...


class SandboxReports:
    """Reports a sandbox's failures; checks the networks made in running sandboxes."""

    def __init__(self, registry: HandlerRegistry, failures: FailureEvents | None) -> None:
        """Events go through `failures` (none when it is None: a test, `--pod-name` unset)."""
        self.registry = registry
        self.failures = failures

    def failed(
        self, pod: Sandbox, reason: str, error: str, record: ClaimRecord | None = None
    ) -> None:
        """A Warning Event on the pod, and on the record's claim if given."""
        if self.failures is None:
            return
        try:
            ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid, "v1")
        except ValueError:
            return  # not a name the API server gave: nothing to post about
        self.failures.sandbox(ref, reason, error, record.claim if record else None)

    def check(self, pod: Sandbox, record: ClaimRecord) -> None:
        """Check what the pod's sandbox holds of the claim's devices made in it; a
        failure is logged and reported on the pod and the claim, never hidden."""
        for key in sorted(record.attached):
            if not is_in(record.placement.get(key), pod.id):
                continue
            try:
                attach.check(self.registry, record, key)
            except DriverError as exc:
                claim = f"claim {record.claim} ({record.claim.uid})"
                error = f"{claim}: request {key.split('/', 1)[0]}: {exc}"
                event(
                    log, logging.ERROR, "network check failed",
                    claim=record.claim.uid, pod_uid=pod.uid, error=error,
                )  # fmt: skip
                self.failed(pod, CHECK_REASON, error, record)
