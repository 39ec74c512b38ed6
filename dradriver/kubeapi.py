"""The Kubernetes API calls the driver makes, as raw JSON over one HTTP connection pool.

Credentials come from the `kubernetes` client's own loaders (kubeconfig or in-cluster
service account, with token refresh). Only those modules are loaded: `import kubernetes`
eagerly imports every generated API model (about 35 MB of resident memory), which a
node daemon cannot afford, and the raw JSON keeps fields the client's models would drop.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from dradriver.errors import DriverError

log = logging.getLogger(__name__)

RESOURCE_API = "/apis/resource.k8s.io/v1"
_TIMEOUT = urllib3.Timeout(connect=5.0, read=20.0)


class ApiError(DriverError):
    """The API server refused a request or could not be reached."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"API {status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason


def load_client_configuration(kubeconfig: str | None) -> Any:
    """A kubernetes.client.Configuration from `kubeconfig`, or in-cluster when None."""
    configuration, kube_config, incluster_config = _client_config_modules()
    cfg = configuration.Configuration()
    if kubeconfig:
        kube_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        incluster_config.load_incluster_config(client_configuration=cfg)
    return cfg


def _client_config_modules() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """Import the client's configuration and loader modules without the package __init__s."""
    names = (
        "kubernetes.client.configuration",
        "kubernetes.config.kube_config",
        "kubernetes.config.incluster_config",
    )
    if "kubernetes" in sys.modules and not hasattr(sys.modules["kubernetes"], "__dradriver__"):
        import importlib  # noqa: PLC0415 - the package is already fully imported

        mods = [importlib.import_module(n) for n in names]
        return mods[0], mods[1], mods[2]
    spec = find_spec("kubernetes")
    if spec is None or spec.origin is None:
        raise DriverError("the kubernetes Python package is not installed")
    root = Path(spec.origin).parent
    before = set(sys.modules)
    for name, sub in (
        ("kubernetes", root),
        ("kubernetes.client", root / "client"),
        ("kubernetes.config", root / "config"),
    ):
        stub = types.ModuleType(name)
        stub.__path__ = [str(sub)]
        stub.__dradriver__ = True  # type: ignore[attr-defined]
        sys.modules[name] = stub
    try:
        import importlib  # noqa: PLC0415

        configuration = importlib.import_module(names[0])
        client_stub = sys.modules["kubernetes.client"]
        client_stub.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        client_stub.ApiClient = None  # type: ignore[attr-defined]  # only new_client_* use it
        kube_config = importlib.import_module(names[1])
        incluster = importlib.import_module(names[2])
    finally:
        # Leave no stub behind: a later `import kubernetes` must get the real package.
        for name in set(sys.modules) - before:
            if name == "kubernetes" or name.startswith("kubernetes."):
                del sys.modules[name]
    return configuration, kube_config, incluster


class KubeApi:
    """The driver's API calls: claims, claim status, nodes and ResourceSlices."""

    def __init__(self, kubeconfig: str | None = None, configuration: Any = None) -> None:
        """Connect with `configuration` or one loaded from `kubeconfig` / in-cluster."""
        self._cfg = configuration or load_client_configuration(kubeconfig)
        self._host = self._cfg.host.rstrip("/")
        kwargs: dict[str, Any] = {"maxsize": 4, "timeout": _TIMEOUT, "retries": False}
        if self._host.startswith("https://"):
            if self._cfg.verify_ssl:
                kwargs |= {"cert_reqs": "CERT_REQUIRED", "ca_certs": self._cfg.ssl_ca_cert}
            else:
                kwargs["cert_reqs"] = "CERT_NONE"
            if self._cfg.cert_file:
                kwargs |= {"cert_file": self._cfg.cert_file, "key_file": self._cfg.key_file}
        self._pool = urllib3.PoolManager(**kwargs)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request; return the decoded JSON body or raise ApiError."""
        url = self._host + path + (("?" + urlencode(query)) if query else "")
        headers = {"Accept": "application/json", "User-Agent": "dra-driver"}
        token = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            resp = self._pool.request(method, url, body=data, headers=headers)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiError(0, "unreachable", f"API server {self._host}: {exc}") from None
        try:
            payload = json.loads(resp.data) if resp.data else None
        except ValueError:  # a proxy's HTML error page, a truncated body
            payload = resp.data.decode(errors="replace")[:300]
        if resp.status >= 400:
            message = payload.get("message", "") if isinstance(payload, dict) else payload
            reason = payload.get("reason", "") if isinstance(payload, dict) else ""
            raise ApiError(resp.status, reason or str(resp.reason), str(message))
        if not isinstance(payload, (dict, type(None))):
            raise ApiError(resp.status, "BadResponse", f"not JSON from {path}: {payload}")
        return payload

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """GET a ResourceClaim (resource.k8s.io/v1)."""
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        result: dict[str, Any] = self.request("GET", path)
        return result

    def apply_claim_status(
        self, namespace: str, name: str, body: Mapping[str, Any], manager: str
    ) -> None:
        """Server-side apply a ResourceClaim status as field manager `manager`."""
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}/status"
        self.request(
            "PATCH",
            path,
            body,
            {"fieldManager": manager, "force": "true"},
            "application/apply-patch+yaml",
        )

    def get_node(self, name: str) -> dict[str, Any]:
        """GET a Node."""
        result: dict[str, Any] = self.request("GET", f"/api/v1/nodes/{quote(name)}")
        return result

    def list_slices(self, driver: str, node_name: str) -> list[dict[str, Any]]:
        """The ResourceSlices of `driver` for `node_name`."""
        selector = f"spec.driver={driver},spec.nodeName={node_name}"
        result = self.request(
            "GET", f"{RESOURCE_API}/resourceslices", None, {"fieldSelector": selector}
        )
        return list(result.get("items") or [])

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceSlice; return what the server stored."""
        result: dict[str, Any] = self.request("POST", f"{RESOURCE_API}/resourceslices", body)
        return result

    def update_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice (body carries its resourceVersion); return what was stored."""
        name = quote(body["metadata"]["name"])
        result: dict[str, Any] = self.request("PUT", f"{RESOURCE_API}/resourceslices/{name}", body)
        return result

    def delete_slice(self, name: str) -> None:
        """Delete a ResourceSlice (no error if it is already gone)."""
        try:
            self.request("DELETE", f"{RESOURCE_API}/resourceslices/{quote(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise
