"""Planning a claim: resolve and validate every device before any kernel work.

A plan is made from an allocation result (a first prepare) or from a claim's record (the
claim prepared again after a reboot or a used-up sandbox): both build the handler's
request here, the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dradriver.apiserver.inventory import Inventory
from dradriver.base.errors import ClaimError, ConfigError, DeviceError, DriverError
from dradriver.claims import attachments, resolution
from dradriver.claims.ipam import AddressBook
from dradriver.contract import naming
from dradriver.contract.config import ConfigSchema
from dradriver.contract.hookspecs import (
    CDI,
    NRI,
    ClaimRef,
    Device,
    DeviceRequest,
    Handler,
    HandlerContext,
    Validated,
)
from dradriver.contract.registry import HandlerRegistry
from dradriver.state import cdi
from dradriver.state.records import ClaimRecord, DeviceRecord


@dataclass(frozen=True)
class Plan:
    """One allocated device, validated: its handler, request, config type, result and
    the CDI device ID its edits will be published under."""

    handler: Handler
    req: DeviceRequest
    type: str
    validated: Validated
    cdi_device_id: str


@contextmanager
def naming_the_request(request: str) -> Iterator[None]:
    """Errors of the block, told as errors of `request` (config paths prefixed)."""
    where = f"request {request}"
    try:
        yield
    except ConfigError as exc:
        raise ConfigError.many([(f"{where}: config {p}", m) for p, m in exc.issues]) from None
    except DriverError as exc:
        raise DriverError(f"{where}: {exc}") from None


def recorded_config(record: ClaimRecord, device: DeviceRecord) -> Mapping[str, Any]:
    """The config a recorded device was prepared with; an error naming the request when
    its record (of an older driver) does not hold it."""
    config: Mapping[str, Any] | None = record.configs.get(device.key)
    if config is None:
        raise DriverError(
            f"request {device.request}: its record does not hold the device's config "
            "(written by an older driver): it cannot be prepared again from the record"
        )
    return config


class Planner:
    """Turns allocation results into validated plans."""

    def __init__(
        self,
        context: HandlerContext,
        inventory: Inventory,
        schema: ConfigSchema,
        registry: HandlerRegistry,
        addresses: AddressBook | None = None,
    ) -> None:
        """Keep the collaborators (`addresses`: the pools a config's `ipam` takes from)."""
        self.context = context
        self.inventory = inventory
        self.schema = schema
        self.registry = registry
        self.addresses = addresses

    def plan(
        self,
        ref: ClaimRef,
        device: resolution.AllocatedDevice,
        injection: str = CDI,
        found: attachments.Read | None = None,
    ) -> Plan:
        """Resolve and validate one allocated device for the `injection` mode, with the
        NetworkAttachmentDefinitions the claim's configs name as `found` (attachments.py);
        errors name the request."""
        with naming_the_request(device.base_request):
            if device.pool != self.context.node_name:
                raise ClaimError(
                    f"device {device.device} is in pool {device.pool}, but this node "
                    f"publishes pool {self.context.node_name}"
                )
            published = self.inventory.lookup(device.device)
            if published is None:
                raise DeviceError(f"device {device.device} is not published by this node")
            resolved = self.schema.resolve(device.parameters, published)
            key = naming.device_key(device.base_request, device.device, device.share_id)
            config = attachments.inline(
                resolved.config, f"$.{resolved.type}", ref.namespace, found or {}
            )
            if self.addresses is not None and resolved.type == "netdev":
                nri = injection == NRI
                config = self.addresses.assign(ref, key, config, f"$.{resolved.type}", nri)
            elif self.addresses is not None and isinstance(config.get("netdev"), Mapping):
                # A family's netdev part (combo's RoCE netdev) names static addresses only.
                self.addresses.outside_pools(config["netdev"], f"$.{resolved.type}.netdev")
            recorded = DeviceRecord(
                key, device.base_request, device.pool, device.device, device.share_id,
                resolved.type, resolved.kind, undo={},
            )  # fmt: skip
            return self._plan(ref, recorded, config, injection, published, dict(device.consumed))

    def replan(self, record: ClaimRecord) -> list[Plan]:
        """The plans that prepare a recorded claim again from its record, in its mode;
        errors name the request."""
        plans = []
        for device in record.devices:
            config = recorded_config(record, device)
            with naming_the_request(device.request):
                consumed = record.consumed.get(device.key, {})
                plans.append(
                    self._plan(record.claim, device, config, record.injection, consumed=consumed)
                )
        return plans

    def _plan(
        self,
        ref: ClaimRef,
        device: DeviceRecord,
        config: Mapping[str, Any],
        injection: str,
        published: Device | None = None,
        consumed: Mapping[str, str] | None = None,
    ) -> Plan:
        """The one place a handler's request is built: from a device's allocation as its
        record has it (or will), validated by the handler."""
        handler = self.registry.get(device.type, device.kind)
        req = DeviceRequest(
            claim=ref,
            request=device.request,
            pool=device.pool,
            device=device.device,
            share_id=device.share_id,
            key=device.key,
            kind=device.kind,
            config=config,
            published=published or self.inventory.lookup(device.device),
            context=self.context,
            injection=injection,
            consumed=consumed or {},
        )
        cdi_id = device.cdi_device_id or cdi.device_id(
            self.context.driver_name, device.type, ref.uid, device.key
        )
        return Plan(handler, req, device.type, handler.validate(req), cdi_id)


def refuse_sharing(resolved: resolution.ResolvedClaim, plans: Sequence[Plan]) -> None:
    """Refuse a claim whose devices go into a pod's network namespace when more than one
    pod holds it: an interface lives in one namespace at a time, and taking it from a
    running pod for another would leave the first without its network, unnoticed."""
    movers = [p.req.request for p in plans if p.validated.into_pod]
    if len(resolved.pod_uids) < 2 or not movers:
        return
    ns = resolved.ref.namespace
    pods = ", ".join(
        f"{ns}/{name} ({uid})" if name else uid
        for uid, name in zip(resolved.pod_uids, resolved.pod_names, strict=True)
    )
    raise ClaimError(
        f"request {movers[0]}: its device goes into one pod's network namespace, but "
        f"{len(resolved.pod_uids)} pods hold the claim ({pods}): a claim with a network "
        "interface serves one pod; give each pod its own claim (a ResourceClaimTemplate)"
    )


# Devices of one claim a RunPodSandbox moves into the pod (NRI mode). Each move waits
# for the kernel (an RCU barrier: ~17 ms here, more on a busy node), and the runtime
# gives the whole event 1.5 s, of which the lock may take 0.6 s: 16 devices take 0.35 s
# idle and 0.42 s when the claim is prepared again for a new sandbox (make bench,
# placement; docs/performance.md), which leaves room for a node 2x slower.
MAX_POD_DEVICES = 16


def refuse_oversized(resolved: resolution.ResolvedClaim, plans: Sequence[Plan]) -> None:
    """Refuse an NRI claim with more devices going into the pod than a sandbox event can
    move within the runtime's budget."""
    movers = [p.req.request for p in plans if p.validated.into_pod and p.req.injection == NRI]
    if len(movers) <= MAX_POD_DEVICES:
        return
    raise ClaimError(
        f"request {movers[MAX_POD_DEVICES]}: {len(movers)} of the claim's devices go into "
        f"the pod's network namespace (spec.devices.requests); at most {MAX_POD_DEVICES} "
        "can be moved within the 1.5 s the container runtime gives the driver per pod "
        "sandbox (NRI injection mode), which moves every device of the pod's claims: "
        "give the pod fewer devices"
    )


def reserve_names(
    ref: ClaimRef,
    pod_uids: Sequence[str],
    uses: Sequence[tuple[str, Sequence[str]]],
    taken: dict[tuple[str, str], str],
) -> None:
    """Refuse a container interface name another device of the same pod already uses.

    `uses` are (request, container interface names) of this claim's devices; `taken`
    maps (pod UID, name) to the claim holding it, across the claims of one call.
    """
    mine: dict[str, str] = {}
    for request, names in uses:
        for name in names:
            if name in mine:
                raise ConfigError(
                    f"container interface name {name} is already used by request "
                    f"{mine[name]} of this claim",
                    f"request {request}: config $.interfaceName",
                )
            mine[name] = request
            for pod in pod_uids:
                other = taken.get((pod, name))
                if other is not None and other != ref.uid:
                    raise ConfigError(
                        f"container interface name {name} is already used by claim "
                        f"{other} of the same pod {pod}",
                        f"request {request}: config $.interfaceName",
                    )
    for name in mine:
        for pod in pod_uids:
            taken[(pod, name)] = ref.uid
