"""Where the API server is and how to authenticate to it: in-cluster, or a kubeconfig file.

Written here, not borrowed from the `kubernetes` client: its loaders import the whole
client (every generated model, ~8 MB of resident memory even when loaded narrowly), and
the driver needs only this. Supported, as kubectl reads them: the current context's
cluster (server, certificate-authority[-data], insecure-skip-tls-verify, tls-server-name)
and user (client-certificate[-data] + client-key[-data], token, tokenFile, username +
password, and exec credential plugins of client.authentication.k8s.io v1 and v1beta1).
Legacy `auth-provider` entries and `proxy-url` are refused with a clear error.
In cluster, the service account token is read again every minute: the kubelet rotates
projected tokens.
"""

from __future__ import annotations

import atexit
import base64
import calendar
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dradriver.base.errors import DriverError
from dradriver.state.atomicfile import write_atomic

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
EXEC_TIMEOUT_SECONDS = 30.0
_EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class KubeconfigError(DriverError):
    """The API server's address or credentials cannot be worked out."""


@dataclass
class Credentials:
    """How requests authenticate: a bearer token (static, from a file, or from an exec
    plugin), basic auth, and/or a client certificate. Thread-safe."""

    token: str | None = None
    token_file: Path | None = None
    basic: tuple[str, str] | None = None
    cert: tuple[str, str] | None = None  # (certificate file, key file)
    plugin: ExecPlugin | None = None
    _read_at: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authorization(self) -> str | None:
        """The Authorization header value, refreshed when due."""
        with self._lock:
            if self.plugin is not None:
                token = self.plugin.credential().token
                if token:
                    return f"Bearer {token}"
            if self.token_file is not None and (
                self.token is None or time.monotonic() - self._read_at > TOKEN_REREAD_SECONDS
            ):
                self.token = _read_text(self.token_file, "token file").strip()
                self._read_at = time.monotonic()
            if self.token:
                return f"Bearer {self.token}"
            if self.basic is not None:
                pair = base64.b64encode(":".join(self.basic).encode()).decode()
                return f"Basic {pair}"
        return None

    def client_cert(self) -> tuple[str, str] | None:
        """(certificate file, key file) for TLS client authentication, if any."""
        with self._lock:
            if self.plugin is not None:
                cert = self.plugin.credential().cert
                if cert is not None:
                    return cert
        return self.cert

    def invalidate(self) -> None:
        """The server refused the credentials (401): fetch fresh ones next time."""
        with self._lock:
            if self.token_file is not None:
                self.token = None
            if self.plugin is not None:
                self.plugin.expire()


@dataclass(frozen=True)
class ApiConfig:
    """The API server's address, how to trust it, and how to authenticate."""

    server: str
    credentials: Credentials = field(default_factory=Credentials)
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    insecure: bool = False
    tls_server_name: str | None = None


def load(kubeconfig: str | None) -> ApiConfig:
    """The config of `kubeconfig` (its current context), or in-cluster when None."""
    return from_file(Path(kubeconfig)) if kubeconfig else in_cluster()


def in_cluster(env: Mapping[str, str] = os.environ, sa_dir: Path = SERVICE_ACCOUNT) -> ApiConfig:
    """The API server as a pod sees it: service environment and the service account."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset): give --kubeconfig"
        )
    if ":" in host:  # IPv6
        host = f"[{host}]"
    token = sa_dir / "token"
    _read_text(token, "service account token")
    return ApiConfig(
        server=f"https://{host}:{port}",
        credentials=Credentials(token_file=token),
        ca_file=str(sa_dir / "ca.crt"),
    )


def _parse(text: str, path: Path) -> Any:
    """A kubeconfig's document: JSON as it is, YAML otherwise (YAML loads only then)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml  # noqa: PLC0415 - in-cluster and JSON kubeconfigs leave 0.9 MB unloaded

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path} is not YAML: {exc}") from None


def from_file(path: Path) -> ApiConfig:
    """The current context of a kubeconfig file, resolved as kubectl resolves it."""
    doc = _parse(_read_text(path, "kubeconfig"), path)
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig object")
    current = doc.get("current-context")
    context = _named(doc, "contexts", current, "context", path)
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster", path)
    user = _named(doc, "users", context.get("user"), "user", path) if context.get("user") else {}
    base = path.parent
    if cluster.get("proxy-url"):
        raise KubeconfigError(f"kubeconfig {path}: proxy-url is not supported")
    if not cluster.get("server"):
        raise KubeconfigError(f"kubeconfig {path}: cluster {context.get('cluster')} has no server")
    return ApiConfig(
        server=str(cluster["server"]).rstrip("/"),
        credentials=_credentials(user, cluster, base, path),
        ca_file=_path(base, cluster.get("certificate-authority")),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
    )


def _named(doc: Mapping[str, Any], section: str, name: object, key: str, path: Path) -> Any:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(key) or {}
    raise KubeconfigError(f"kubeconfig {path}: no {key} named {name!r} in {section}")


def _credentials(user: Mapping[str, Any], cluster: Any, base: Path, path: Path) -> Credentials:
    if user.get("auth-provider"):
        raise KubeconfigError(
            f"kubeconfig {path}: auth-provider is not supported; use an exec plugin"
        )
    cert = _path(base, user.get("client-certificate"))
    key = _path(base, user.get("client-key"))
    if user.get("client-certificate-data") or user.get("client-key-data"):
        cert = _secret_file("client.crt", _b64(user.get("client-certificate-data")) or "")
        key = _secret_file("client.key", _b64(user.get("client-key-data")) or "")
    if bool(cert) != bool(key):
        raise KubeconfigError(f"kubeconfig {path}: a client certificate needs its key, and back")
    token_file = _path(base, user.get("tokenFile"))
    username, password = user.get("username"), user.get("password")
    return Credentials(
        token=user.get("token"),
        token_file=Path(token_file) if token_file and not user.get("token") else None,
        basic=(str(username), str(password)) if username and password is not None else None,
        cert=(cert, key) if cert and key else None,
        plugin=ExecPlugin.of(user["exec"], cluster, base, path) if user.get("exec") else None,
    )


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin answered, and until when it holds."""

    token: str | None
    cert: tuple[str, str] | None
    expires: float | None  # unix time


@dataclass
class ExecPlugin:
    """A client-go credential plugin: a command that prints an ExecCredential."""

    api_version: str
    command: str
    args: list[str]
    env: dict[str, str]
    cluster: dict[str, Any] | None
    _cached: ExecCredential | None = None

    @classmethod
    def of(cls, spec: Mapping[str, Any], cluster: Any, base: Path, path: Path) -> ExecPlugin:
        """The plugin a kubeconfig `exec` entry describes."""
        version = spec.get("apiVersion")
        if version not in _EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"kubeconfig {path}: exec apiVersion {version!r} is not one of "
                f"{', '.join(_EXEC_API_VERSIONS)}"
            )
        command = str(spec.get("command") or "")
        if not command:
            raise KubeconfigError(f"kubeconfig {path}: exec has no command")
        if "/" in command and not Path(command).is_absolute():
            command = str(base / command)  # relative to the kubeconfig, as kubectl does
        info = None
        if spec.get("provideClusterInfo"):
            info = {k: v for k, v in cluster.items() if k != "extensions"}
        return cls(
            api_version=str(version),
            command=command,
            args=[str(a) for a in spec.get("args") or []],
            env={str(e["name"]): str(e["value"]) for e in spec.get("env") or []},
            cluster=info,
        )

    def credential(self) -> ExecCredential:
        """The plugin's credential, running it when there is none or it expired."""
        cached = self._cached
        if cached is None or (cached.expires is not None and time.time() > cached.expires - 10):
            self._cached = cached = self._run()
        return cached

    def expire(self) -> None:
        """Forget the cached credential."""
        self._cached = None

    def _run(self) -> ExecCredential:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        request = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(request)}
        try:
            res = subprocess.run(
                [self.command, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KubeconfigError(f"credential plugin {self.command} failed: {exc}") from None
        if res.returncode != 0:
            tail = res.stderr.decode(errors="replace").strip()[-300:]
            raise KubeconfigError(
                f"credential plugin {self.command} exited {res.returncode}: {tail}"
            )
        try:
            status = json.loads(res.stdout)["status"]
        except (ValueError, KeyError, TypeError):
            raise KubeconfigError(
                f"credential plugin {self.command} printed no ExecCredential status"
            ) from None
        cert = None
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            cert = (
                _secret_file("exec.crt", status["clientCertificateData"]),
                _secret_file("exec.key", status["clientKeyData"]),
            )
        return ExecCredential(
            status.get("token"), cert, _timestamp(status.get("expirationTimestamp"))
        )


def _timestamp(value: object) -> float | None:
    """An RFC 3339 UTC time (`2026-11-25T10:00:00Z`) as unix seconds."""
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _path(base: Path, value: object) -> str | None:
    return str(base / str(value)) if value else None


def _b64(value: object) -> str | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except ValueError:
        raise KubeconfigError("kubeconfig holds invalid base64 data") from None


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise KubeconfigError(f"cannot read the {what} {path}: {exc.strerror}") from None


_secrets: Path | None = None
_secrets_lock = threading.Lock()


def _secret_file(name: str, content: str) -> str:
    """A private file holding key material (TLS needs files); removed when the process ends."""
    global _secrets  # noqa: PLW0603 - one private directory per process
    with _secrets_lock:
        if _secrets is None:
            import tempfile  # noqa: PLC0415 - only inline key material needs it (5 ms)

            _secrets = Path(tempfile.mkdtemp(prefix="dra-driver-"))
            atexit.register(shutil.rmtree, _secrets, True)
    path = _secrets / name
    write_atomic(path, content.encode(), mode=0o600)
    return str(path)
