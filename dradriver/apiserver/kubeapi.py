"""The Kubernetes API calls the driver makes, as raw JSON over one HTTP connection pool.

Where the server is and how to authenticate come from `kubeconfig.py` (in-cluster or a
kubeconfig file); the connections from `connections.py`. Raw JSON keeps fields a typed
client's models would drop.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from dradriver.apiserver import kubeconfig
from dradriver.apiserver.connections import ConnectionPool, Reply, Stream
from dradriver.apiserver.kubeconfig import ApiConfig
from dradriver.apiserver.transport import Timeouts, Unreachable
from dradriver.base.errors import DriverError
from dradriver.base.log import event
from dradriver.contract import naming

log = logging.getLogger(__name__)

_T = TypeVar("_T")
RESOURCE_API = "/apis/resource.k8s.io/v1"
NAD_API = "/apis/k8s.cni.cncf.io/v1"  # Multus's NetworkAttachmentDefinitions
SLICES = f"{RESOURCE_API}/resourceslices"
PODS = "/api/v1/pods"
_TIMEOUT = Timeouts(connect=5.0, read=20.0)
_WATCH_SLACK = 60  # seconds a watch may stay silent beyond the end the server was asked for


class ApiError(DriverError):
    """The API server refused a request or could not be reached."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"API {status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason


class KubeApi:
    """The driver's API calls: claims, claim status, nodes and ResourceSlices."""

    def __init__(self, kubeconfig_path: str | None = None, config: ApiConfig | None = None) -> None:
        """Connect with `config`, or one loaded from `kubeconfig_path` / in-cluster."""
        self._config = config or kubeconfig.load(kubeconfig_path)
        self._host = self._config.server
        self._lock = threading.Lock()
        self._cert: tuple[str, str] | None = None
        self._pool = self._new_pool()

    @property
    def server(self) -> str:
        """The API server's URL, as errors name it."""
        return self._host

    def _new_pool(self) -> ConnectionPool:
        """A connection pool trusting the configured CA, with the current client cert."""
        cfg = self._config
        tls = self._host.startswith("https://")
        self._cert = cfg.credentials.client_cert() if tls else None
        if cfg.insecure and tls:
            event(
                log,
                logging.WARNING,
                "the API server's certificate is not checked (insecure-skip-tls-verify)",
                server=self._host,
            )
        return ConnectionPool(
            self._host,
            ca_file=cfg.ca_file,
            ca_data=cfg.ca_data,
            insecure=cfg.insecure,
            cert=self._cert,
            server_name=cfg.tls_server_name,
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON body or raise ApiError.

        A 401 is retried once with fresh credentials (a rotated token or certificate).
        `timeout` (seconds) bounds the whole request instead of the default timeouts.
        """
        limit = _TIMEOUT
        if timeout is not None:
            limit = Timeouts(connect=min(timeout, 5.0), read=timeout, total=timeout)
        return self._fresh_on_401(
            lambda: _decode(self._send(method, path, body, query, content_type, limit), path)
        )

    def _fresh_on_401(self, call: Callable[[], _T]) -> _T:
        """`call()`, once more with fresh credentials after a 401 (a rotated token or
        certificate)."""
        for attempt in (0, 1):
            try:
                return call()
            except ApiError as exc:
                if exc.status != 401 or attempt:
                    raise
                self._config.credentials.invalidate()
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        query: Mapping[str, str] | None,
        content_type: str,
        timeout: Timeouts,
    ) -> Reply:
        """Send one request with the current credentials; return its whole answer."""
        pool, headers = self._pool_and_headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        try:
            return pool.request(method, _with_query(path, query), data, headers, timeout)
        except Unreachable as exc:
            raise ApiError(0, "unreachable", f"API server {self._host}: {exc}") from None

    def _pool_and_headers(self) -> tuple[ConnectionPool, dict[str, str]]:
        """The pool to send with (a new one for a new client certificate) and the headers
        of a request, its credentials included."""
        headers = {"Accept": "application/json", "User-Agent": "dra-driver"}
        credentials = self._config.credentials
        try:
            authorization = credentials.authorization()
            cert = credentials.client_cert()
        except DriverError as exc:
            raise ApiError(0, "Unauthorized", f"no credentials for {self._host}: {exc}") from None
        if authorization:
            headers["Authorization"] = authorization
        with self._lock:
            old = None
            if cert != self._cert and self._host.startswith("https://"):
                # an exec plugin handed out a new certificate
                old, self._pool = self._pool, self._new_pool()
            pool = self._pool
        if old is not None:
            old.close()
        return pool, headers

    def watch(self, path: str, query: Mapping[str, str], seconds: int) -> Watch:
        """Open a watch of the collection at `path` from `query`'s resourceVersion, with
        bookmarks; the server ends it after `seconds`. Raises ApiError if refused."""
        full = {
            **query,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        # A watch that hears nothing for longer than the server's own end is a dead one.
        limit = Timeouts(connect=5.0, read=seconds + _WATCH_SLACK)

        def open_watch() -> Watch:
            pool, headers = self._pool_and_headers()
            try:
                stream = pool.stream(_with_query(path, full), headers, limit)
                if stream.status >= 400:
                    try:
                        reply = Reply(stream.status, stream.reason, stream.body())
                    finally:
                        stream.close()
                    _decode(reply, path)  # raises the server's error
            except Unreachable as exc:
                raise ApiError(0, "unreachable", f"API server {self._host}: {exc}") from None
            return Watch(stream, path)

        return self._fresh_on_401(open_watch)

    def get_claim(
        self, namespace: str, name: str, timeout: float | None = None, version: str | None = None
    ) -> dict[str, Any]:
        """GET a ResourceClaim (resource.k8s.io/v1), within `timeout` seconds if given; with
        `version`, as the API server's cache has it at that resourceVersion or later."""
        query = {"resourceVersion": version} if version else None
        path = _claim_path(namespace, name)
        result: dict[str, Any] = self.request("GET", path, None, query, timeout=timeout)
        return result

    def get_network_attachment(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """GET a NetworkAttachmentDefinition (k8s.cni.cncf.io/v1), within `timeout` s."""
        if not naming.is_dns_label(namespace) or not naming.is_dns_subdomain(name):
            raise ApiError(0, "Invalid", f"{namespace}/{name} is not a namespace and name")
        path = (
            f"{NAD_API}/namespaces/{segment(namespace)}/network-attachment-definitions/"
            f"{segment(name)}"
        )
        result: dict[str, Any] = self.request("GET", path, None, None, timeout=timeout)
        return result

    def apply_claim_status(
        self, namespace: str, name: str, body: Mapping[str, Any], manager: str
    ) -> None:
        """Server-side apply a ResourceClaim status as field manager `manager`."""
        path = _claim_path(namespace, name) + "/status"
        self.request(
            "PATCH",
            path,
            body,
            {"fieldManager": manager, "force": "true"},
            "application/apply-patch+yaml",
        )

    def annotate_pod(
        self, namespace: str, name: str, uid: str, annotations: Mapping[str, str]
    ) -> None:
        """Merge `annotations` into pod `namespace/name`, if it still has UID `uid`."""
        if not naming.is_dns_label(namespace) or not naming.is_dns_subdomain(name):
            raise ApiError(0, "Invalid", f"{namespace}/{name} is not a namespace and name")
        body = {"metadata": {"uid": uid, "annotations": dict(annotations)}}
        path = f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}"
        self.request("PATCH", path, body, None, "application/merge-patch+json")

    def get_node(self, name: str) -> dict[str, Any]:
        """GET a Node."""
        result: dict[str, Any] = self.request("GET", f"/api/v1/nodes/{segment(name)}")
        return result

    def list_at(self, path: str, query: Mapping[str, str]) -> tuple[list[dict[str, Any]], str]:
        """The objects of the collection at `path` that `query` selects, and the list's
        resourceVersion (where a watch of the same goes on from)."""
        result = self.request("GET", path, None, query)
        return list(result.get("items") or []), str(result["metadata"]["resourceVersion"])

    def list_slices_at(self, driver: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """The ResourceSlices of `driver` for `node_name`, and the list's resourceVersion."""
        return self.list_at(SLICES, slice_selector(driver, node_name))

    def watch_slices(self, driver: str, node_name: str, version: str, seconds: int) -> Watch:
        """Watch the ResourceSlices of `driver` for `node_name` from `version`."""
        query = {**slice_selector(driver, node_name), "resourceVersion": version}
        return self.watch(SLICES, query, seconds)

    def list_pods_at(self, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """The Pods bound to `node_name`, and the list's resourceVersion."""
        return self.list_at(PODS, pod_selector(node_name))

    def watch_pods(self, node_name: str, version: str, seconds: int) -> Watch:
        """Watch the Pods bound to `node_name` from `version`."""
        return self.watch(PODS, {**pod_selector(node_name), "resourceVersion": version}, seconds)

    def list_device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass of the cluster."""
        result = self.request("GET", f"{RESOURCE_API}/deviceclasses", timeout=10.0)
        return list(result.get("items") or [])

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceSlice; return what the server stored."""
        result: dict[str, Any] = self.request("POST", SLICES, body)
        return result

    def update_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice (body carries its resourceVersion); return what was stored."""
        name = segment(body["metadata"]["name"])
        result: dict[str, Any] = self.request("PUT", f"{SLICES}/{name}", body)
        return result

    def delete_slice(self, name: str) -> None:
        """Delete a ResourceSlice (no error if it is already gone)."""
        try:
            self.request("DELETE", f"{SLICES}/{segment(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise


class Watch:
    """An open watch: its events as the server sends them; `close` ends it from any thread."""

    def __init__(self, stream: Stream, path: str) -> None:
        """Read events from `stream`, the answer to the watch of `path`."""
        self._stream = stream
        self._path = path

    def events(self) -> Iterator[dict[str, Any]]:
        """Each event ({type, object}) until the server ends the watch."""
        status = self._stream.status
        try:
            for line in self._stream.lines():
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                except (ValueError, RecursionError):
                    raise ApiError(
                        status, "BadResponse", f"not a watch event from {self._path}"
                    ) from None
                if not isinstance(ev, dict) or not isinstance(ev.get("object"), dict):
                    raise ApiError(status, "BadResponse", f"not a watch event from {self._path}")
                yield ev
        except Unreachable as exc:
            raise ApiError(0, "unreachable", f"watch of {self._path} ended: {exc}") from None

    def close(self) -> None:
        """End the watch from any thread: the thread reading its events sees them end."""
        self._stream.shutdown()

    def release(self) -> None:
        """Drop the watch's connection (by the thread that read it): never given back to
        the pool, where another request could read what is left of the stream."""
        self._stream.close()


def slice_selector(driver: str, node_name: str) -> dict[str, str]:
    """The query selecting the ResourceSlices of `driver` for `node_name`."""
    return {"fieldSelector": f"spec.driver={driver},spec.nodeName={node_name}"}


def pod_selector(node_name: str) -> dict[str, str]:
    """The query selecting the Pods bound to a node (indexed in the API server's cache)."""
    return {"fieldSelector": f"spec.nodeName={node_name}"}


def _with_query(path: str, query: Mapping[str, str] | None) -> str:
    """`path` with `query` encoded after it."""
    return path + (("?" + urlencode(query)) if query else "")


def _decode(resp: Reply, path: str) -> Any:
    """The JSON body of `resp`, or ApiError for an error status or a body that is not JSON."""
    try:
        payload = json.loads(resp.data) if resp.data else None
    except ValueError:  # a proxy's HTML error page, a truncated body
        payload = resp.data.decode(errors="replace")[:300]
    except RecursionError:  # valid JSON nested deeper than the decoder goes
        raise ApiError(
            resp.status, "BadResponse", f"JSON from {path} is nested too deeply to read"
        ) from None
    if resp.status >= 400:
        message = payload.get("message", "") if isinstance(payload, dict) else payload
        reason = payload.get("reason", "") if isinstance(payload, dict) else ""
        raise ApiError(resp.status, reason or str(resp.reason), str(message))
    if not isinstance(payload, (dict, type(None))):
        raise ApiError(resp.status, "BadResponse", f"not JSON from {path}: {payload}")
    return payload


def segment(value: str) -> str:
    """`value` as one URL path segment: every reserved character escaped, `/` included."""
    return quote(value, safe="")


def _claim_path(namespace: str, name: str) -> str:
    """The path of a ResourceClaim, after checking both names as Kubernetes names: they
    come from the kubelet and reach a URL, where `..` or `/` would address another object."""
    if not naming.is_dns_label(namespace):
        raise ApiError(0, "Invalid", f"namespace {namespace!r} is not a Kubernetes namespace name")
    if not naming.is_dns_subdomain(name):
        raise ApiError(0, "Invalid", f"name {name!r} is not a Kubernetes object name")
    return f"{RESOURCE_API}/namespaces/{segment(namespace)}/resourceclaims/{segment(name)}"
