"""Claim resolution: UID check, our allocation results, class-then-claim opaque config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dradriver.base.errors import ClaimError
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.metadata import POD_CLAIM_ANNOTATION


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of our driver, with the merged opaque config of its request."""

    request: str
    pool: str
    device: str
    share_id: str | None
    parameters: Mapping[str, Any] | None
    # What the request takes of the device's capacities: the scheduler's consumedCapacity
    # for a shared device, the request's own capacity.requests for a whole one.
    consumed: Mapping[str, str] = field(default_factory=dict)

    @property
    def base_request(self) -> str:
        """The request name without a firstAvailable sub-request suffix (`req/sub` -> `req`)."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True)
class ResolvedClaim:
    """What the API says about a claim, reduced to what prepare needs."""

    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    pod_uids: tuple[str, ...]
    pod_names: tuple[str, ...]  # of the same pods, as status.reservedFor names them
    pod_claim: str | None = None  # the pod spec's name of a claim made from a template


def resolve(claim: Mapping[str, Any], ref: ClaimRef, driver: str) -> ResolvedClaim:
    """Check a ResourceClaim object against the kubelet's reference and extract our devices."""
    uid = claim.get("metadata", {}).get("uid")
    if uid != ref.uid:
        raise ClaimError(f"replaced: the API has UID {uid}, the kubelet asked for {ref.uid}")
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        raise ClaimError("not allocated (status.allocation is empty)")
    results = (allocation.get("devices") or {}).get("results") or []
    configs = _ordered_configs((allocation.get("devices") or {}).get("config") or [], driver)
    asked = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    devices = []
    for result in results:
        if result.get("driver") != driver:
            continue
        if result.get("adminAccess"):
            raise ClaimError(
                f"request {result.get('request')}: adminAccess is not supported "
                "for network devices (an interface can be handed to one pod only)"
            )
        request = str(result.get("request", ""))
        devices.append(
            AllocatedDevice(
                request=request,
                pool=str(result.get("pool", "")),
                device=str(result.get("device", "")),
                share_id=result.get("shareID") or None,
                parameters=_merged_parameters(configs, request),
                consumed=_consumed(result.get("consumedCapacity"))
                or _consumed(_requested(asked, request)),
            )
        )
    pods = [
        r for r in status.get("reservedFor") or [] if r.get("resource") == "pods" and r.get("uid")
    ]
    return ResolvedClaim(
        ref=ref,
        devices=tuple(devices),
        pod_uids=tuple(str(r["uid"]) for r in pods),
        pod_names=tuple(str(r.get("name") or "") for r in pods),
        pod_claim=(claim.get("metadata", {}).get("annotations") or {}).get(POD_CLAIM_ANNOTATION),
    )


def _consumed(capacity: object) -> dict[str, str]:
    """A result's consumedCapacity as capacity name -> quantity (nothing else kept)."""
    if not isinstance(capacity, Mapping):
        return {}
    return {str(k): str(v) for k, v in capacity.items() if isinstance(v, str | int)}


def _requested(requests: list[Mapping[str, Any]], name: str) -> object:
    """The capacity.requests of request `name` (`req` or `req/sub`) in the claim's spec."""
    base, _, sub = name.partition("/")
    for request in requests:
        if request.get("name") != base:
            continue
        if not sub:
            return ((request.get("exactly") or {}).get("capacity") or {}).get("requests")
        for option in request.get("firstAvailable") or []:
            if option.get("name") == sub:
                return (option.get("capacity") or {}).get("requests")
    return None


def _ordered_configs(
    configs: list[Mapping[str, Any]], driver: str
) -> list[tuple[tuple[str, ...], Any]]:
    """Our opaque configs as (requests, parameters): FromClass first, then FromClaim."""
    ours = [c for c in configs if (c.get("opaque") or {}).get("driver") == driver]
    ordered = [c for c in ours if c.get("source") == "FromClass"]
    ordered += [c for c in ours if c.get("source") != "FromClass"]
    return [(tuple(c.get("requests") or ()), c["opaque"].get("parameters")) for c in ordered]


def _merged_parameters(
    configs: list[tuple[tuple[str, ...], Any]], request: str
) -> Mapping[str, Any] | None:
    """Merge the configs that apply to `request` in order; later entries win field by field."""
    base = request.split("/", 1)[0]
    merged: Any = None
    for requests, parameters in configs:
        if requests and request not in requests and base not in requests:
            continue
        merged = deep_merge(merged, parameters)
    return merged  # type: ignore[no-any-return]  # validated by the schema later


MERGE_DEPTH = 32  # deeper than any valid config: below it `upper` simply replaces


def deep_merge(lower: Any, upper: Any, depth: int = 0) -> Any:
    """`upper` over `lower`: objects merge key by key, anything else is replaced.

    Below MERGE_DEPTH levels objects are replaced too (the merged config is refused
    for its depth anyway), so a hostile nesting cannot exhaust the stack.
    """
    if isinstance(lower, dict) and isinstance(upper, dict) and depth < MERGE_DEPTH:
        out = dict(lower)
        for key, value in upper.items():
            out[key] = deep_merge(lower.get(key), value, depth + 1)
        return out
    return upper
