"""The NRI mode's CreateContainer check: a container uses a network claim only in the
pod the claim serves.

The kubelet prepares a claim once, for the pods reserved at that moment; a pod added
to the claim later gets no prepare, so its sandbox is given nothing (the pod index does
not know it) and, in CDI mode, runc fails with "link not found". The claim's CDI
devices still reach the new pod's containers, with their `DRA_CLAIM_<uid>` variable
(dradriver.state.injection): here the driver sees it and refuses the container, naming
the claim and the pod holding it. The runtime fails the container, the kubelet reports
CreateContainerError with this message on the pod and retries; the holder keeps the
interfaces. Containers without the variable are answered without reading anything.

The variable is only a hint: a container's own environment can name any claim UID. A
claim is looked at only when it is in the pod's own namespace and, where the pod watch
has the pod, one its spec or status names; a refusal names nothing of another namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.claims.prefetch import claim_names
from dradriver.state import injection
from dradriver.state.moves import holder
from dradriver.state.records import PREPARED
from dradriver.state.recordstore import RecordStore

log = logging.getLogger(__name__)


class NewContainer(Protocol):
    """A container being created (dradriver.nri.Container)."""

    @property
    def name(self) -> str: ...
    @property
    def env(self) -> Sequence[str]: ...


class ContainerCheck:
    """Refuses containers of a pod that a network claim they use does not serve."""

    def __init__(self, records: RecordStore) -> None:
        """Read the claims' records from `records`; `pods` is the pod watch's copy by UID
        (None: no watch, or not in step)."""
        self.records = records
        self.pods: Callable[[], Mapping[str, Mapping[str, Any]] | None] = lambda: None

    def create_container(
        self, pod_uid: str, namespace: str, name: str, container: NewContainer
    ) -> None:
        """Raise DriverError if a claim the container's environment marks, and its pod
        (`namespace`/`name`) may use, serves another pod than `pod_uid`."""
        uids = injection.claims_in_env(container.env)
        if not uids:
            return
        pod = f"{namespace}/{name}"
        known = (self.pods() or {}).get(pod_uid)
        names = set(claim_names(known)) if known is not None else None
        for uid in uids:
            try:
                record = self.records.load(uid)
            except DriverError as exc:  # unusable: reported where the claim is used
                event(log, logging.WARNING, "claim of a container unreadable", claim=uid, error=exc)
                continue
            if record is None or record.phase != PREPARED:
                continue  # not ours (another driver's name), or not prepared here
            if record.claim.namespace != namespace or (
                names is not None and record.claim.name not in names
            ):
                event(log, logging.WARNING, "a container names a claim its pod does not use",
                      claim=uid, pod=pod, pod_uid=pod_uid, container=container.name)  # fmt: skip
                continue  # a forged variable: the pod cannot use that claim anyway
            held_by = holder(record.placement, record.pod_uids, pod_uid)
            if held_by is None:
                continue
            event(
                log,
                logging.WARNING,
                "container refused: its claim serves another pod",
                claim=uid,
                pod=pod,
                pod_uid=pod_uid,
                container=container.name,
                holder=held_by,
            )
            raise DriverError(
                f"claim {record.claim} ({uid}) serves pod {held_by}; container {container.name} "
                f"of pod {pod} ({pod_uid}) may not use it: a claim with a network interface "
                "goes into one pod, and the kubelet prepared it for that pod only. Give this "
                "pod its own claim (a ResourceClaimTemplate), or delete it and recreate it "
                "once the other pod is gone"
            )
