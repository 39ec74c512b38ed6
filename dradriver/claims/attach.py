"""Devices a handler makes inside each pod sandbox (AttachingHandler, a CNI network).

The NRI mode attaches them at RunPodSandbox; they are detached when the sandbox stops
or goes, when the claim is unprepared, and at start-up for an attach a crash cut short.
Everything a detach needs is in the record: the device's undo data, and the
placement, which names the sandbox and keeps what the attach returned (`attached`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from dradriver.apiserver import networkstatus
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.contract.hookspecs import AttachingHandler, PodSandbox
from dradriver.contract.registry import HandlerRegistry
from dradriver.state.moves import IN, SPENT, is_in, placement
from dradriver.state.records import ClaimRecord, DeviceRecord, network_data_json

log = logging.getLogger(__name__)


def handler_of(registry: HandlerRegistry, device: DeviceRecord) -> AttachingHandler:
    """The device's handler, which must attach (its record says it does)."""
    handler = registry.get(device.type, device.kind)
    if not callable(getattr(handler, "attach", None)):
        raise DriverError(
            f"the handler of {device.type}/{device.kind} does not make devices in a pod "
            "sandbox, but the record says it did (a plugin changed under the record)"
        )
    return handler  # type: ignore[return-value]


def sandbox_at(where: Mapping[str, str]) -> PodSandbox:
    """The sandbox a placement names (and its pod's name, where the attach kept it)."""
    return PodSandbox(
        id=where.get("sandbox", ""),
        netns=where.get("netns", ""),
        pod_uid=where.get("pod", ""),
        pod_namespace=where.get("podNamespace", ""),
        pod_name=where.get("podName", ""),
    )


def _device(record: ClaimRecord, key: str) -> DeviceRecord:
    return next(d for d in record.devices if d.key == key)


def prepare_for(registry: HandlerRegistry, record: ClaimRecord, keys: Collection[str]) -> None:
    """Before attaching devices `keys`: detach what an attach cut short, or an earlier
    sandbox, left of them; DriverError naming the requests if that fails."""
    failures = detach_all(registry, record, only=keys)
    if failures:
        raise DriverError("; ".join(failures))


def attach(
    registry: HandlerRegistry,
    record: ClaimRecord,
    key: str,
    sandbox: PodSandbox,
    since: float,
    together: Collection[str] = (),
) -> None:
    """Attach device `key` in `sandbox`; its placement becomes IN with the attach's
    state, and its network data what the pod got. On failure the devices `together`
    (attached with it) are detached again and a DriverError names the request. The
    caller journals and saves."""
    device = _device(record, key)
    try:
        attached = handler_of(registry, device).attach(device.undo, sandbox)
    except DriverError as exc:  # its own partial work the handler undid; the others go
        where = record.placement.get(key)
        if where is not None:
            record.placement[key] = {**where, "state": SPENT}
        for other in together:
            if other != key and is_in(record.placement.get(other), sandbox.id):
                detach_quietly(registry, record, other)
        raise DriverError(f"request {device.request}: {exc}") from exc
    record.placement[key] = placement(
        IN, sandbox.id, sandbox.netns, sandbox.pod_uid, since, json.dumps(attached.state)
    )
    where = record.placement[key]
    where |= {"podNamespace": sandbox.pod_namespace, "podName": sandbox.pod_name}
    if attached.network:
        where["network"] = attached.network
    if attached.network_data is not None:
        device.network_data = network_data_json(attached.network_data)


def state_of(where: Mapping[str, str]) -> Mapping[str, Any] | None:
    """What the attach a placement records returned (None: none finished)."""
    text = where.get("attached")
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None


def detach(registry: HandlerRegistry, record: ClaimRecord, key: str) -> None:
    """Detach device `key` from the sandbox its placement names (cut short or not);
    its placement becomes SPENT. The caller saves."""
    where = record.placement.get(key)
    if where is None or where.get("state") == SPENT:
        return
    device = _device(record, key)
    handler_of(registry, device).detach(device.undo, sandbox_at(where), state_of(where))
    record.placement[key] = {k: v for k, v in where.items() if k != "attached"} | {"state": SPENT}


def detach_all(
    registry: HandlerRegistry,
    record: ClaimRecord,
    sandbox: str | None = None,
    only: Collection[str] | None = None,
) -> list[str] | None:
    """Detach every attached device of the record that is not spent (in `sandbox`, of
    the devices `only`, if given); None when there was none, else the failures, each
    naming the request (what was detached is SPENT in the record: the caller saves)."""
    keys = [
        k
        for k, where in record.placement.items()
        if k in record.attached
        and where.get("state") != SPENT
        and (sandbox is None or where.get("sandbox") == sandbox)
        and (only is None or k in only)
    ]
    if not keys:
        return None
    failures = []
    for key in keys:
        try:
            detach(registry, record, key)
        except DriverError as exc:
            failures.append(f"request {key.split('/', 1)[0]}: {exc}")
    return failures


def network_status(records: Sequence[ClaimRecord], sandbox: str) -> list[dict[str, Any]]:
    """The pod's network-status entries: its devices made in `sandbox`, in order."""
    out = []
    for record in records:
        for device in record.devices:
            where = record.placement.get(device.key)
            if device.key not in record.attached or not is_in(where, sandbox) or not where:
                continue
            data = device.network_data or {}
            out.append(
                networkstatus.entry(
                    where.get("network") or device.request,
                    str(data.get("interfaceName") or ""),
                    list(data.get("ips") or ()),
                    data.get("hardwareAddress"),
                )
            )
    return out


def check(registry: HandlerRegistry, record: ClaimRecord, key: str) -> None:
    """Raise if what device `key`'s attach made is no longer as it made it."""
    where = record.placement.get(key) or {}
    state = state_of(where)
    if state is not None:
        device = _device(record, key)
        handler_of(registry, device).check(device.undo, sandbox_at(where), state)


def detach_quietly(registry: HandlerRegistry, record: ClaimRecord, key: str) -> None:
    """Detach device `key` after a failure elsewhere; a failure of its own stays in the
    placement (retried by unprepare or the next Synchronize)."""
    try:
        detach(registry, record, key)
    except DriverError as exc:
        event(log, logging.ERROR, "cannot detach", claim=record.claim.uid, error=exc)
