"""Every name the driver derives: host interfaces, ifalias tags, CDI names, device names."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import NamedTuple

IFNAMSIZ = 15  # bytes of an interface name, without the terminating NUL
HOST_IFNAME_PREFIX = "dr"
_HASH_CHARS = IFNAMSIZ - len(HOST_IFNAME_PREFIX) - 1
# Every whole-string check below uses fullmatch: with match, `$` also matches before a
# final newline, so "name\n" would pass.
HOST_IFNAME_RE = re.compile(rf"{HOST_IFNAME_PREFIX}[a-z][a-z2-7]{{{_HASH_CHARS}}}")
ALIAS_PREFIX = "dra-driver"
_ALIAS_RE = re.compile(
    rf"{ALIAS_PREFIX}(?: owner=(?P<owner>[0-9a-f]{{12}}))? claim=(?P<uid>[0-9a-f-]{{36}}) "
    r"(?P<key>[!-~]+)"
)

_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RESOURCE_SHORT_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_UID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CDI_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:-]")


def is_dns_label(name: str) -> bool:
    """Whether `name` is a Kubernetes DNS label (device names, request names)."""
    return len(name) <= 63 and bool(_DNS_LABEL_RE.fullmatch(name))


def is_dns_subdomain(name: str) -> bool:
    """Whether `name` is a Kubernetes DNS subdomain (driver and node names)."""
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN_RE.fullmatch(name))


def is_resource_name(name: str) -> bool:
    """Whether `name` is an extended resource name (`<domain>/<name>`, as device plugins
    and Multus name resources), short enough for a device attribute."""
    domain, slash, short = name.partition("/")
    return (
        bool(slash)
        and len(name) <= 63
        and is_dns_subdomain(domain)
        and _RESOURCE_SHORT_RE.fullmatch(short) is not None
    )


def is_claim_uid(uid: str) -> bool:
    """Whether `uid` looks like a Kubernetes object UID (it reaches file names)."""
    return bool(_UID_RE.fullmatch(uid))


def device_key(request: str, device: str, share_id: str | None) -> str:
    """Identify one allocated device within a claim: request, device and share ID."""
    return f"{request}/{device}" + (f"/{share_id}" if share_id else "")


def host_ifname(claim_uid: str, key: str, role: str = "c") -> str:
    """A deterministic 15-byte host interface name from the full claim UID and device key.

    `role` tells apart several interfaces of one device ('c' goes to the container,
    'h' stays on the host, e.g. the two ends of a veth). The 12 characters are 60 bits
    of SHA-256 over the whole UID and key, so two claims never share a name by accident.
    """
    if not re.fullmatch(r"[a-z]", role):
        raise ValueError(f"role must be one lower-case letter, got {role!r}")
    digest = hashlib.sha256(f"{claim_uid}\0{key}\0{role}".encode()).digest()
    tail = base64.b32encode(digest).decode().lower()[:_HASH_CHARS]
    return f"{HOST_IFNAME_PREFIX}{role}{tail}"


def is_host_ifname(name: str) -> bool:
    """Whether `name` has the shape of a host interface name this driver creates."""
    return bool(HOST_IFNAME_RE.fullmatch(name))


def owner_id(driver: str, state_dir: str) -> str:
    """Which driver instance owns an interface: its driver name and state directory.

    Instances of one driver that share a state directory (a rolling update) are one
    owner, as they share the records; any other instance (another driver name, a canary,
    a test instance with its own --state-dir) is another owner, whose interfaces are
    never touched.
    """
    return hashlib.sha256(f"{driver}\0{state_dir}".encode()).hexdigest()[:12]


class Tag(NamedTuple):
    """What an ifalias tag says: the claim, the device, and the owner (None: written by a
    driver version before owners were tagged)."""

    claim_uid: str
    key: str
    owner: str | None

    def owned_by(self, owner: str, known_claims: set[str]) -> bool:
        """Whether the instance `owner` owns the interface with this tag.

        Its own owner ID, or a tag of a driver version before owners were tagged for a
        claim that instance has a record of. Untagged interfaces are never anyone's to
        delete: a prepare journals the names it will create before creating them, so a
        crash between creating and tagging is rolled back from the journal.
        """
        if self.owner is None:
            return self.claim_uid in known_claims
        return self.owner == owner


def ifalias(owner: str, claim_uid: str, key: str) -> str:
    """The ifalias tag put on every interface the driver creates, naming its owner."""
    return f"{ALIAS_PREFIX} owner={owner} claim={claim_uid} {key}"


def parse_ifalias(alias: str | None) -> Tag | None:
    """The tag written by `ifalias` (or by a driver before owners), or None if not ours."""
    match = _ALIAS_RE.fullmatch(alias or "")
    return Tag(match["uid"], match["key"], match["owner"]) if match else None


def cdi_kind(driver: str, device_type: str) -> str:
    """CDI kind `<vendor>/<class>` for devices of one type, e.g. dra.example.com/netdev."""
    return f"{driver}/{device_type}"


def cdi_spec_filename(driver: str, device_type: str, claim_uid: str) -> str:
    """The conventional transient CDI file name `<vendor>-<class>_<claim-uid>.json`."""
    return f"{driver}-{device_type}_{claim_uid}.json"


def cdi_device_name(claim_uid: str, key: str) -> str:
    """A CDI device name unique across claims: the claim UID plus the device key."""
    return _CDI_NAME_BAD.sub("_", f"{claim_uid}-{key.replace('/', '-')}")


def record_filename(claim_uid: str) -> str:
    """File name of a claim's allocation record."""
    return f"{claim_uid}.alloc.json"


def published_device_name(prefix: str, ident: str) -> str:
    """A DNS-label device name for a discovered object (`nic-eth1`, `rdma-mlx5-0`).

    Characters a DNS label cannot hold become '-'; when that changed the name, a short
    hash of the original keeps two objects from mapping to the same device name.
    """
    clean = re.sub(r"[^a-z0-9-]", "-", ident.lower()).strip("-")
    name = f"{prefix}-{clean}"
    if clean != ident or len(name) > 63:
        suffix = hashlib.sha256(ident.encode()).hexdigest()[:6]
        name = f"{name[: 63 - 7].rstrip('-')}-{suffix}"
    return name
