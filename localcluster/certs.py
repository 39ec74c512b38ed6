"""Throw-away PKI for a local cluster's control plane and kubelet: a CA, TLS and
client certificates, the service-account signing key, and kubeconfig files.

ECDSA P-256 keys everywhere: generating one takes well under a millisecond,
so a fresh PKI per control plane costs nothing measurable.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass(frozen=True)
class CertPair:
    """PEM files of one certificate and its key."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        """The certificate, PEM."""
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        """The key, PEM."""
        return self.key.read_bytes()


class CertificateAuthority:
    """A self-signed CA that writes PEM files into one directory."""

    def __init__(self, directory: Path, name: str = "dra-e2e-ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = self._write("ca", self._cert, self._key)

    def _write(
        self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
    ) -> CertPair:
        pair = CertPair(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def issue(
        self,
        stem: str,
        cn: str,
        *,
        orgs: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
    ) -> CertPair:
        """Issue a leaf certificate; written as ``<stem>.crt`` / ``<stem>.key``."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, orgs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return self._write(stem, builder.sign(self._key, hashes.SHA256()), key)


def issue_control_plane_certs(
    ca: CertificateAuthority, extra_ips: tuple[str, ...] = ()
) -> dict[str, CertPair]:
    """Serving certificates of the three components and client certificates of
    admin (system:masters), kube-scheduler, kube-controller-manager and of
    kube-apiserver towards kubelets. `extra_ips`: more addresses the API server is
    reached at (a cluster's control plane address)."""
    local: dict[str, Any] = {"server": True, "dns": ("localhost",), "ips": ("127.0.0.1",)}
    apiserver_names = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
    return {
        "apiserver": ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            dns=("localhost", *apiserver_names, "kubernetes.default.svc.cluster.local"),
            ips=("127.0.0.1", "10.96.0.1", *extra_ips),
        ),
        "scheduler-serving": ca.issue("scheduler-serving", "kube-scheduler", **local),
        "kcm-serving": ca.issue("kcm-serving", "kube-controller-manager", **local),
        "admin": ca.issue("admin", "e2e-admin", orgs=("system:masters",), client=True),
        # kube-apiserver's identity towards kubelets (exec, logs, port-forward).
        "apiserver-kubelet-client": ca.issue(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            orgs=("system:masters",),
            client=True,
        ),
        "scheduler": ca.issue("scheduler", "system:kube-scheduler", client=True),
        "kcm": ca.issue("kcm", "system:kube-controller-manager", client=True),
    }


def write_signing_key(directory: Path) -> tuple[Path, Path]:
    """The service-account token signing key pair (ES256): (private, public)."""
    key = _key()
    private = directory / "sa.key"
    public = directory / "sa.pub"
    private.write_bytes(_key_pem(key))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
) -> Path:
    """A self-contained kubeconfig (all data inline) with one context, as JSON (which
    every kubeconfig reader takes as YAML): a driver reading it, like the DaemonSet's
    in-cluster configuration, loads no YAML parser."""
    creds: dict[str, str] = {}
    if client is not None:
        creds["client-certificate-data"] = _b64(client.cert_pem())
        creds["client-key-data"] = _b64(client.key_pem())
    if token is not None:
        creds["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(0o600)
    return path


def issue_kubelet_certs(ca: CertificateAuthority, node: str, node_ip: str) -> dict[str, CertPair]:
    """A real kubelet's certificates: its client identity ``system:node:<node>`` (group
    ``system:nodes``, what the Node authorizer and NodeRestriction know) and its
    serving certificate for ``node_ip``, which kube-apiserver checks against the CA."""
    return {
        "client": ca.issue(
            f"kubelet-{node}", f"system:node:{node}", orgs=("system:nodes",), client=True
        ),
        "serving": ca.issue(
            f"kubelet-{node}-serving", node, server=True, dns=(node,), ips=(node_ip,)
        ),
    }
