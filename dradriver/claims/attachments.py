"""NetworkAttachmentDefinitions a claim's configs name: read outside the lock, kept.

A config whose type's object has `networkAttachment` (`<name>` in the claim's
namespace, or `<namespace>/<name>` where the operator allows that namespace:
--nad-namespaces) reaches its handler with the NAD's `spec.config` in `config`. The
NAD is read once, when the claim is first prepared, with the claim's object and outside
the serialisation lock; the record keeps the config, so a NAD changed later changes
only claims prepared after it (docs/cni.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError
from dradriver.base.errors import ConfigError, DriverError
from dradriver.contract import naming

FIELD = "networkAttachment"
KIND = "NetworkAttachmentDefinition"

Read = Mapping[str, "str | DriverError"]  # by "<namespace>/<name>": spec.config or why not


class AttachmentSource(Protocol):
    """Where NetworkAttachmentDefinitions come from (the API server)."""

    def get_network_attachment(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """The object as JSON, within `timeout` seconds if given."""


def qualified(value: str, namespace: str) -> tuple[str, str]:
    """(namespace, name) of a `networkAttachment` value of a claim in `namespace`."""
    ns, _, name = value.rpartition("/")
    return ns or namespace, name


def refusal(value: str, namespace: str, allowed: Iterable[str]) -> str | None:
    """Why a claim in `namespace` may not name NAD `value` (None: it may)."""
    ns, name = qualified(value, namespace)
    if not naming.is_dns_label(ns) or not naming.is_dns_subdomain(name):
        return f"{value!r} is not <name> or <namespace>/<name>"
    spaces = set(allowed)
    if ns != namespace and ns not in spaces and "*" not in spaces:
        return (
            f"{KIND} {ns}/{name} is in another namespace than the claim's ({namespace}); "
            f"the operator allows {', '.join(sorted(spaces)) or 'none'} (--nad-namespaces)"
        )
    return None


def named(claim: Mapping[str, Any], driver: str) -> set[str]:
    """Every `<namespace>/<name>` our opaque configs of the claim's allocation name."""
    namespace = str((claim.get("metadata") or {}).get("namespace") or "")
    allocation = (claim.get("status") or {}).get("allocation") or {}
    out = set()
    for entry in (allocation.get("devices") or {}).get("config") or ():
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping) or not isinstance(params.get("type"), str):
            continue
        body = params.get(params["type"])
        if isinstance(body, Mapping) and isinstance(body.get(FIELD), str):
            ns, name = qualified(body[FIELD], namespace)
            out.add(f"{ns}/{name}")
    return out


def for_claims(
    api: AttachmentSource | None,
    claims: Mapping[str, Mapping[str, Any]],
    left: Callable[[], float],
    allowed: Iterable[str],
    driver: str,
) -> dict[str, Read]:
    """What `read` gives for the NADs each claim (by UID) names."""
    out: dict[str, Read] = {}
    for uid, claim in claims.items():
        keys = named(claim, driver)
        namespace = str((claim.get("metadata") or {}).get("namespace") or "")
        out[uid] = read(api, keys, left, allowed, namespace) if keys else {}
    return out


def read(
    api: AttachmentSource | None,
    keys: Iterable[str],
    left: Callable[[], float],
    allowed: Iterable[str],
    claim_namespace: str,
) -> dict[str, str | DriverError]:
    """Each NAD's `spec.config`, or the error that is the answer of the claims naming it;
    each GET bounded by `left()` seconds. NADs the claim may not name are not read."""
    out: dict[str, str | DriverError] = {}
    for key in sorted(keys):
        ns, name = qualified(key, claim_namespace)
        why = refusal(key, claim_namespace, allowed)
        if why is not None:
            out[key] = ConfigError(why, f"$.*.{FIELD}")
        elif api is None:
            out[key] = DriverError(f"{KIND} {key}: this driver reads none (no API server)")
        elif left() <= 0:
            out[key] = DriverError(f"{KIND} {key} was not read within the call's budget")
        else:
            out[key] = _get(api, ns, name, left())
    return out


def _get(api: AttachmentSource, ns: str, name: str, timeout: float) -> str | DriverError:
    what = f"{KIND} {ns}/{name}"
    try:
        doc = api.get_network_attachment(ns, name, timeout=timeout)
    except ApiError as exc:
        if exc.status == 404:
            return DriverError(f"{what} not found (or its CRD is not installed)")
        if exc.status == 403:
            return DriverError(
                f"{what}: the driver may not read it ({exc}); the chart's cni.enabled gives "
                "its ClusterRole get on network-attachment-definitions"
            )
        return DriverError(f"{what} could not be read: {exc}")
    except DriverError as exc:
        return DriverError(f"{what} could not be read: {exc}")
    text = (doc.get("spec") or {}).get("config")
    if not isinstance(text, str) or not text.strip():
        return DriverError(
            f"{what} has no spec.config (a configuration file named like it on the node, "
            "which Multus can read, is not supported)"
        )
    return text


def inline(
    config: Mapping[str, Any], path: str, claim_namespace: str, found: Read
) -> Mapping[str, Any]:
    """The config with its NAD's `spec.config` in `config` (unchanged when it names
    none; the schema lets a config name a NAD only without `config`); an error naming
    `path` when the NAD could not be read."""
    value = config.get(FIELD)
    if not isinstance(value, str):
        return config
    ns, name = qualified(value, claim_namespace)
    got = found.get(f"{ns}/{name}")
    if got is None:
        got = DriverError(f"{KIND} {ns}/{name} was not read (a driver bug)")
    if isinstance(got, ConfigError):
        raise ConfigError(got.issues[0][1], f"{path}.{FIELD}")
    if isinstance(got, DriverError):
        raise ConfigError(str(got), f"{path}.{FIELD}")
    return {**config, FIELD: f"{ns}/{name}", "config": got}
