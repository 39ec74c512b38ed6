"""What of the build machine must not be in a published image, and finding it in one.

Each check returns findings (one line each, naming the layer and path or the config
field), empty when the image is clean. They look at every entry of every layer, a file a
later layer deletes included. The markers are byte strings the build machine has and an
image must not: its CA certificates that Debian does not ship (a TLS-intercepting proxy's
CA is one), its whole CA bundle, secret values of its environment."""

from __future__ import annotations

import base64
import fnmatch
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.imagearchive import Entry

PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+([A-Za-z0-9+/=\s]+?)-----END CERTIFICATE-----")

# Files that hold a package index's, a registry's or a host's credentials or settings.
CONFIG_FILES = {
    "pip.conf": "pip configuration",
    "pip.ini": "pip configuration",
    ".pypirc": "package index credentials",
    ".netrc": "netrc credentials",
    "_netrc": "netrc credentials",
    ".git-credentials": "git credentials",
    ".npmrc": "npm configuration",
}
CONFIG_PATHS = {
    "*/.docker/config.json": "registry credentials",
    "*/.aws/credentials": "cloud credentials",
    "*/.kube/config": "a kubeconfig",
    "*/.ssh/*": "ssh keys or configuration",
    "*/.config/pip/*": "pip configuration",
}
# A home directory holds only the skeleton Debian's base-files gives root.
SKELETON = {"root/.bashrc": "usr/share/base-files/dot.bashrc",
            "root/.profile": "usr/share/base-files/dot.profile"}  # fmt: skip
# Environment variables of the build that must not reach the image's configuration.
BUILD_ENV = re.compile(
    r"^(PIP_.*|.*_PROXY|SSL_CERT_.*|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|NODE_EXTRA_CA_CERTS)$",
    re.IGNORECASE,
)
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|INDEX_URL", re.I)


@dataclass(frozen=True)
class Marker:
    """Bytes that must not be in a file, but in the files whose content is `allowed_in`."""

    name: str
    data: bytes
    allowed_in: frozenset[bytes] = field(default_factory=frozenset)


def certificates(bundle: bytes) -> list[bytes]:
    """The DER bytes of each PEM certificate in a bundle."""
    return [base64.b64decode(b"".join(m.group(1).split())) for m in PEM.finditer(bundle)]


def local_certificates(bundle: bytes, debian: Iterable[bytes]) -> list[bytes]:
    """Certificates of a CA bundle that are not among Debian's (the .crt files of the
    ca-certificates package): the ones this machine added, such as a proxy's CA."""
    shipped = {der for crt in debian for der in certificates(crt)}
    return [der for der in certificates(bundle) if der not in shipped]


def certificate_markers(ders: Iterable[bytes], describe: str = "a local CA") -> list[Marker]:
    """A certificate as DER and as the first line of its PEM form (which holds its serial)."""
    markers = []
    for n, der in enumerate(ders, 1):
        pem_line = base64.b64encode(der)[:64]
        markers += [
            Marker(f"{describe} certificate #{n} (DER)", der),
            Marker(f"{describe} certificate #{n} (PEM)", pem_line),
        ]
    return markers


def secret_values(env: Mapping[str, str]) -> list[Marker]:
    """Values of the environment's secret-looking variables (named, never shown)."""
    return [
        Marker(f"the value of ${name}", value.encode())
        for name, value in sorted(env.items())
        if SECRET_NAME.search(name) and len(value) >= 8
    ]


def content_findings(
    files: Iterable[tuple[Entry, bytes | None]], markers: list[Marker]
) -> list[str]:
    """Files that hold a marker, in any layer."""
    findings = []
    for entry, data in files:
        if not data:
            continue
        for marker in markers:
            if marker.data in data and data not in marker.allowed_in:
                findings.append(f"layer {entry.layer}: /{entry.path} holds {marker.name}")
    return findings


def path_findings(
    files: Iterable[tuple[Entry, bytes | None]], forbidden: Mapping[str, str] | None = None
) -> list[str]:
    """Credentials and configuration files, anything from a home directory but Debian's
    skeleton, and the `forbidden` paths (a prefix: why) of the build machine."""
    findings = []
    skeleton: dict[str, bytes | None] = {}
    homes: list[tuple[Entry, bytes | None]] = []
    for entry, data in files:
        path = entry.path
        where = f"layer {entry.layer}: /{path}"
        base = posixpath.basename(path)
        if base in CONFIG_FILES and not entry.info.isdir():
            findings.append(f"{where} is {CONFIG_FILES[base]}")
        for pattern, what in CONFIG_PATHS.items():
            if fnmatch.fnmatch("/" + path, pattern):
                findings.append(f"{where} is {what}")
        for prefix, why in (forbidden or {}).items():
            top = prefix.strip("/")
            if path == top or path.startswith(top + "/"):
                findings.append(f"{where} is {why}")
        if path in SKELETON.values():
            skeleton[path] = data
        if path.startswith(("root/", "home/")):
            homes.append((entry, data))
    for entry, data in homes:
        if entry.info.isdir() and entry.path in ("root", "home"):
            continue
        original = SKELETON.get(entry.path)
        if original is not None and entry.info.isreg() and data == skeleton.get(original):
            continue
        findings.append(
            f"layer {entry.layer}: /{entry.path} is in a home directory"
            + (" (not Debian's skeleton file)" if original else "")
        )
    return findings


def config_findings(config: Mapping[str, Any], markers: list[Marker]) -> list[str]:
    """Build-time settings in the image's configuration (its environment, history, labels)."""
    findings = []
    env = (config.get("config") or {}).get("Env") or []
    for pair in env:
        name = pair.partition("=")[0]
        if BUILD_ENV.match(name):
            findings.append(f"config: Env has {name}, a setting of the build")
    text = json.dumps(config).encode()
    findings += [f"config: holds {m.name}" for m in markers if m.data in text]
    return findings
