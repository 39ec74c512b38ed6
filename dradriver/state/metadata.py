"""Device metadata files (KEP-5304): what a container can read about the devices of its
claims, at a path it can compute from its pod spec.

One file per claim and request, on the host under the driver's plugin directory
(`<plugins dir>/<driver>/dra-device-metadata/<namespace>_<claim>_<uid>/<request>/metadata.json`),
bind-mounted read-only through the claim's CDI devices to
`/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`,
or `.../resourceclaimtemplates/<pod claim name>/...` for a claim made from a template (the
pod spec knows that name, not the generated one). The file is the same DeviceMetadata
object once per API version, newest first, as a JSON stream: a reader takes the first
version it knows. Written atomically (not fsynced, like the CDI specs: what it describes
does not outlive the machine); its `metadata.generation` grows with each rewrite.
The layout and format are the ones k8s.io/dynamic-resource-allocation writes for Go
drivers (kubeletplugin/metadata.go, api/metadata).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dradriver.base.errors import DriverError
from dradriver.contract import naming
from dradriver.contract.hookspecs import ClaimRef
from dradriver.state.atomicfile import write_atomic

GROUP = "metadata.resource.k8s.io"
VERSIONS = ("v1beta1", "v1alpha1")  # newest first: beta in 1.37, alpha in 1.36
SUBDIR = "dra-device-metadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FILE = "metadata.json"


def base_request(request: str) -> str:
    """The request a firstAvailable subrequest (`req/sub`) belongs to: names the file."""
    return request.split("/", 1)[0]


def claim_dir(root: Path, claim: ClaimRef) -> Path:
    """The host directory of a claim's files, by namespace, name and UID (a claim made
    again under the same name while the old one is still prepared gets its own); refuses
    names no claim has (they make paths)."""
    valid = naming.is_dns_label(claim.namespace) and naming.is_dns_subdomain(claim.name)
    if not (valid and naming.is_claim_uid(claim.uid)):
        raise DriverError(f"claim {claim}: not a Kubernetes namespace, name and UID")
    return root / SUBDIR / f"{claim.namespace}_{claim.name}_{claim.uid}"


def host_path(root: Path, claim: ClaimRef, request: str) -> Path:
    """The host file of one request of a claim."""
    base = base_request(request)
    if not naming.is_dns_label(base):
        raise DriverError(f"claim {claim}: request name {base!r} is not a DNS label")
    return claim_dir(root, claim) / base / FILE


def container_path(driver: str, claim: ClaimRef, pod_claim: str | None, request: str) -> str:
    """Where the container finds the file of one request of a claim."""
    if pod_claim and not naming.is_dns_label(pod_claim):
        raise DriverError(f"claim {claim}: pod claim name {pod_claim!r} is not a DNS label")
    where = f"resourceclaimtemplates/{pod_claim}" if pod_claim else f"resourceclaims/{claim.name}"
    return f"{CONTAINER_DIR}/{where}/{base_request(request)}/{driver}-metadata.json"


def mount(host: Path, container: str) -> dict[str, Any]:
    """The CDI mount edit that shows the file to a container, read-only."""
    return {"hostPath": str(host), "containerPath": container, "options": ["ro", "bind"]}


def document(
    claim: ClaimRef,
    pod_claim: str | None,
    generation: int,
    request: str,
    devices: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """A DeviceMetadata object without its apiVersion: `devices` as the file lists them
    (driver, pool, name, attributes, networkData)."""
    doc: dict[str, Any] = {
        "kind": "DeviceMetadata",
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "generation": generation,
        },
        "requests": [{"name": request, "devices": [dict(d) for d in devices]}],
    }
    if pod_claim:
        doc["podClaimName"] = pod_claim
    return doc


def encode(doc: Mapping[str, Any]) -> bytes:
    """The file's bytes: the object once per version, newest first, one per line group."""
    out = []
    for version in VERSIONS:
        versioned = {"kind": doc["kind"], "apiVersion": f"{GROUP}/{version}"}
        versioned |= {k: v for k, v in doc.items() if k != "kind"}
        out.append(json.dumps(versioned, indent=2) + "\n")
    return "".join(out).encode()


def generation(path: Path) -> int:
    """The generation of the file at `path` (0 when there is none or it is unreadable)."""
    try:
        first, _ = json.JSONDecoder().raw_decode(path.read_text())
        return int(first["metadata"]["generation"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def write(path: Path, doc: Mapping[str, Any]) -> None:
    """Write a request's file atomically (its directories made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, encode(doc), durable=False)


def remove_claim(root: Path, claim: ClaimRef, requests: Iterable[str] | None = None) -> None:
    """Remove every file of a claim (nothing if there is none). Given the `requests`
    its files were written for, those files and their directories go one system call
    each; anything else there (or an error) is left to a walk of the whole directory."""
    with contextlib.suppress(DriverError):
        folder = claim_dir(root, claim)
        try:
            files = None if requests is None else {host_path(root, claim, r) for r in requests}
        except DriverError:  # a bad request name: the walk finds whatever is there
            files = None
        if files is not None:
            try:
                for file in files:
                    with contextlib.suppress(FileNotFoundError):
                        file.unlink()
                    with contextlib.suppress(FileNotFoundError):
                        file.parent.rmdir()
                with contextlib.suppress(FileNotFoundError):
                    folder.rmdir()
                return
            except OSError:
                pass
        shutil.rmtree(folder, ignore_errors=True)


def orphans(root: Path, claims: Iterable[ClaimRef]) -> list[Path]:
    """Claim directories under `root` that belong to none of `claims`."""
    keep = {f"{c.namespace}_{c.name}_{c.uid}" for c in claims}
    base = root / SUBDIR
    try:
        return sorted(p for p in base.iterdir() if p.name not in keep)
    except OSError:
        return []
