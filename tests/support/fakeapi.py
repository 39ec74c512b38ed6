"""A local stand-in for the Kubernetes API: the paths, verbs and status codes the driver uses.

It answers like kube-apiserver does for those calls (Status objects, 404/409/422,
resourceVersion conflicts, field selectors on ResourceSlices, server-side apply of
claim status keyed by driver/pool/device/shareID, watches of ResourceSlices from a
resourceVersion with 410 for one it no longer has). `drop_consumable_capacity` makes it
silently drop the fields an API server with DRAConsumableCapacity off drops. Tests change
`slices` directly too: every change, however made, becomes a watch event.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from dradriver.apiserver.kubeapi import ApiError
from tests.support import netns

RES = "/apis/resource.k8s.io/v1"
_CLAIM = re.compile(rf"^{RES}/namespaces/([^/]+)/resourceclaims/([^/]+)(/status)?$")
_SLICE = re.compile(rf"^{RES}/resourceslices(?:/([^/]+))?$")
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
NADS = "/apis/k8s.cni.cncf.io/v1"
_NAD = re.compile(rf"^{NADS}/namespaces/([^/]+)/network-attachment-definitions/([^/]+)$")
PODS = "/api/v1/pods"  # listed and watched (claim prefetch): the fake holds no pods


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status like the API server sends with an error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeApi:
    """In-memory objects behind an HTTP server; inspect and change them from tests."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.nads: dict[tuple[str, str], dict[str, Any]] = {}  # NetworkAttachmentDefinitions
        self.requests: list[tuple[str, str]] = []
        self.drop_consumable_capacity = False
        self.claim_delay = 0.0
        self.fail_status_writes = False
        self.refuse_watches = False  # answer watches 405, as a server without them would
        self.oldest_watchable = 0  # watches from an older resourceVersion get 410 Gone
        self.watch_era = 0  # end_watches() ends the watches opened before it
        self.events: list[tuple[int, dict[str, Any]]] = []  # (resourceVersion, slice event)
        self._shadow: dict[str, dict[str, Any]] = {}  # the slices as the events last saw them
        self._rv = 0
        self.lock = threading.RLock()
        self.server: ThreadingHTTPServer | None = None

    # -- objects ------------------------------------------------------------------

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def add_node(self, name: str) -> str:
        uid = str(uuid.uuid4())
        self.nodes[name] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": uid},
        }
        return uid

    def add_claim(self, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        meta.setdefault("resourceVersion", self.next_rv())
        with self.lock:
            self.claims[(meta["namespace"], meta["name"])] = claim

    def add_nad(self, namespace: str, name: str, config: str) -> None:
        """A NetworkAttachmentDefinition whose spec.config is `config`."""
        with self.lock:
            self.nads[(namespace, name)] = {
                "apiVersion": "k8s.cni.cncf.io/v1",
                "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
                "spec": {"config": config},
            }

    def get_network_attachment(
        self, namespace: str, name: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """GET a NetworkAttachmentDefinition in-process, as the driver's API client does."""
        path = f"{NADS}/namespaces/{namespace}/network-attachment-definitions/{name}"
        code, body = self.handle("GET", path, {}, None)
        if code >= 400:
            raise ApiError(code, body["reason"], body["message"])
        return dict(json.loads(json.dumps(body)))

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.claims[(namespace, name)])

    def get_claim(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any]:
        """GET a claim in-process, as the driver's API client does (Preparer's
        ClaimSource): the stand-in's answer, its errors as the client's ApiError. It
        answers at once, so `timeout` (the call's budget) never runs out."""
        path = f"{RES}/namespaces/{namespace}/resourceclaims/{name}"
        code, body = self.handle("GET", path, {}, None)
        if code >= 400:
            raise ApiError(code, body["reason"], body["message"])
        try:  # through JSON, as over the wire
            return dict(json.loads(json.dumps(body)))
        except RecursionError:  # what the real client says of JSON nested too deeply
            raise ApiError(
                code, "BadResponse", f"JSON from {path} is nested too deeply to read"
            ) from None

    # -- server -------------------------------------------------------------------

    @contextmanager
    def serving(self, namespace: str | None = None) -> Iterator[str]:
        """Serve on 127.0.0.1 (inside `namespace` if given); yield the base URL."""
        api = self

        class Handler(_Handler):
            fake = api

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        if namespace:
            server.socket.close()
            with netns.inside(namespace):  # the socket belongs to the namespace it is made in
                server.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.server_bind()
        server.server_activate()
        server.daemon_threads = True
        self.server = server
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            self.server = None  # ends the watches being served
            server.shutdown()
            server.server_close()
            thread.join(5)

    def kubeconfig(self, url: str, path: Path) -> Path:
        """Write a kubeconfig pointing at `url` with a bearer token."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": url}}],
                    "users": [{"name": "driver", "user": {"token": "fake-token"}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "driver"}}
                    ],
                }
            )
        )
        return path

    # -- verbs ------------------------------------------------------------------------

    def sync_events(self) -> None:
        """Turn every change of `slices` since the last call into watch events."""
        with self.lock:
            for name, obj in list(self.slices.items()):
                old = self._shadow.get(name)
                if old is obj:
                    continue
                kind = "ADDED" if old is None else "MODIFIED"
                self.events.append((int(obj["metadata"]["resourceVersion"]), _event(kind, obj)))
            for name in set(self._shadow) - set(self.slices):
                gone = copy.deepcopy(self._shadow[name])
                gone["metadata"]["resourceVersion"] = self.next_rv()
                self.events.append((self._rv, _event("DELETED", gone)))
            self._shadow = dict(self.slices)

    def end_watches(self) -> None:
        """End every open watch, as the server does when its timeout comes."""
        with self.lock:
            self.watch_era += 1

    def watch_from(self, version: int, selector: dict[str, str]) -> tuple[int, list[Any]]:
        """The events after `version` of slices matching `selector`, and the last version."""
        self.sync_events()
        with self.lock:
            found = [
                ev
                for rv, ev in self.events
                if rv > version and all(_field(ev["object"], k) == v for k, v in selector.items())
            ]
            return self._rv, copy.deepcopy(found)

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        self.requests.append((method, path))
        self.sync_events()
        with self.lock:
            if m := _CLAIM.match(path):
                return self._claim(method, unquote(m[1]), unquote(m[2]), bool(m[3]), body)
            if m := _SLICE.match(path):
                return self._slice(method, unquote(m[1]) if m[1] else None, query, body)
            if path == PODS and method == "GET":
                return 200, {
                    "kind": "PodList",
                    "items": [],
                    "metadata": {"resourceVersion": str(self._rv)},
                }
            if (m := _NAD.match(path)) and method == "GET":
                nad = self.nads.get((unquote(m[1]), unquote(m[2])))
                if nad is None:
                    message = f'network-attachment-definitions.k8s.cni.cncf.io "{m[2]}" not found'
                    return 404, status(404, "NotFound", message)
                return 200, nad
            if (m := _NODE.match(path)) and method == "GET":
                node = self.nodes.get(unquote(m[1]))
                return (
                    (200, node)
                    if node
                    else (404, status(404, "NotFound", f'nodes "{m[1]}" not found'))
                )
        return 404, status(404, "NotFound", "the server could not find the requested resource")

    def _claim(
        self, method: str, ns: str, name: str, is_status: bool, body: Any
    ) -> tuple[int, Any]:
        claim = self.claims.get((ns, name))
        if claim is None:
            return 404, status(
                404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found'
            )
        if method == "GET" and not is_status:
            if self.claim_delay:
                time.sleep(self.claim_delay)
            return 200, claim
        if method == "PATCH" and is_status:
            if self.fail_status_writes:
                return 500, status(500, "InternalError", "injected failure")
            return self._apply_status(claim, body)
        return 405, status(405, "MethodNotAllowed", f"{method} not allowed")

    def _apply_status(self, claim: dict[str, Any], body: Any) -> tuple[int, Any]:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        allowed = {(r["driver"], r["pool"], r["device"], r.get("shareID")) for r in results}
        current = {
            (d["driver"], d["pool"], d["device"], d.get("shareID")): d
            for d in (claim.get("status") or {}).get("devices") or []
        }
        for entry in (body.get("status") or {}).get("devices") or []:
            key = (entry["driver"], entry["pool"], entry["device"], entry.get("shareID"))
            if key not in allowed:
                return 422, status(422, "Invalid", f"status.devices: device {key} is not allocated")
            current[key] = entry
        claim.setdefault("status", {})["devices"] = list(current.values())
        claim["metadata"]["resourceVersion"] = self.next_rv()
        return 200, claim

    def _slice(
        self, method: str, name: str | None, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        if method == "GET" and name is None:
            wanted = _selector(query)
            items = [
                s for s in self.slices.values() if all(_field(s, k) == v for k, v in wanted.items())
            ]
            return 200, {
                "kind": "ResourceSliceList",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": items,
            }
        if method == "POST" and name is None:
            name = body["metadata"]["name"]
            if name in self.slices:
                return 409, status(
                    409, "AlreadyExists", f'resourceslices.resource.k8s.io "{name}" already exists'
                )
            return 201, self._store(body)
        if name is None or name not in self.slices:
            return 404, status(
                404, "NotFound", f'resourceslices.resource.k8s.io "{name}" not found'
            )
        if method == "PUT":
            if (
                body["metadata"].get("resourceVersion")
                != self.slices[name]["metadata"]["resourceVersion"]
            ):
                return 409, status(
                    409,
                    "Conflict",
                    "the object has been modified; please "
                    "apply your changes to the latest version and try again",
                )
            return 200, self._store(body, self.slices[name]["metadata"]["uid"])
        if method == "DELETE":
            del self.slices[name]
            return 200, status(200, "", "")
        return 405, status(405, "MethodNotAllowed", f"{method} not allowed")

    def _store(self, body: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        obj["metadata"]["uid"] = uid or str(uuid.uuid4())
        for device in obj["spec"].get("devices") or []:
            for cap in (device.get("capacity") or {}).values():  # as Quantity stores it
                cap["value"] = _canonical(str(cap.get("value", "")))
        if self.drop_consumable_capacity:
            for device in obj["spec"].get("devices") or []:
                device.pop("allowMultipleAllocations", None)
                for cap in (device.get("capacity") or {}).values():
                    cap.pop("requestPolicy", None)
        self.slices[obj["metadata"]["name"]] = obj
        return obj


def _canonical(value: str) -> str:
    """A plain integer quantity as the API server stores it (1000 -> 1k)."""
    if not value.isdigit() or int(value) == 0:
        return value
    n, suffix = int(value), ""
    for unit in ("k", "M", "G"):
        if n % 1000:
            break
        n, suffix = n // 1000, unit
    return f"{n}{suffix}"


def _selector(query: dict[str, list[str]]) -> dict[str, str]:
    return dict(
        kv.split("=", 1) for s in query.get("fieldSelector", [""]) for kv in s.split(",") if kv
    )


def _event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": copy.deepcopy(obj)}


def _field(obj: dict[str, Any], dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        value = (value or {}).get(part)
    return value


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApi
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Like kube-apiserver (Go sets TCP_NODELAY on every connection): without it the
        # body segment waits for the client's delayed ACK of the headers, ~40 ms a call.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        query = parse_qs(url.query)
        if self.headers.get("Authorization") != "Bearer fake-token":
            code, payload = 401, status(401, "Unauthorized", "Unauthorized")
        elif query.get("watch") == ["true"] and (_SLICE.match(url.path) or url.path == PODS):
            self.fake.requests.append(("WATCH", url.path))
            if self.fake.refuse_watches:
                code, payload = 405, status(405, "MethodNotAllowed", "watch not allowed")
            else:
                self._watch(query, pods=url.path == PODS)
                return
        else:
            code, payload = self.fake.handle(self.command, url.path, query, body)
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _watch(self, query: dict[str, list[str]], pods: bool = False) -> None:
        """Stream slice events after the asked version until timeoutSeconds, as chunks
        (a watch of `pods` gets bookmarks only)."""
        version = int(query.get("resourceVersion", ["0"])[0] or 0)
        if version < self.fake.oldest_watchable:
            self._send_json(200, _event("ERROR", status(410, "Expired", "too old")))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        # Said, as the connection is closed after the watch: a client that took it back
        # into its pool would otherwise send its next request down a closing socket.
        self.send_header("Connection", "close")
        self.end_headers()
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["60"])[0])
        selector = _selector(query)
        era = self.fake.watch_era
        bookmark = time.monotonic() + 1.0
        try:
            while (
                time.monotonic() < deadline
                and self.fake.server is not None
                and self.fake.watch_era == era
            ):
                version, found = self.fake.watch_from(version, selector)
                found = [] if pods else found
                if query.get("allowWatchBookmarks") == ["true"] and time.monotonic() > bookmark:
                    found.append(
                        _event("BOOKMARK", {"metadata": {"resourceVersion": str(version)}})
                    )
                    bookmark = time.monotonic() + 1.0
                for ev in found:
                    data = json.dumps(ev).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                time.sleep(0.02)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away
            pass
        self.close_connection = True

    def _send_json(self, code: int, payload: Any) -> None:
        data = json.dumps(payload).encode() + b"\n"
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


def allocated_claim(
    name: str,
    results: list[dict[str, Any]],
    *,
    namespace: str = "default",
    uid: str | None = None,
    config: list[dict[str, Any]] | None = None,
    pods: list[str] | None = None,
    driver: str = "dra.example.com",
) -> dict[str, Any]:
    """A ResourceClaim as the scheduler leaves it: allocated, reserved for `pods`."""
    for r in results:
        r.setdefault("driver", driver)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r["request"].split("/")[0],
                        "exactly": {"deviceClassName": "virtual-network"},
                    }
                    for r in results
                ]
            }
        },
        "status": {
            "allocation": {"devices": {"results": results, "config": config or []}},
            "reservedFor": [
                {"resource": "pods", "name": f"pod-{p[:8]}", "uid": p}
                for p in (pods if pods is not None else [str(uuid.uuid4())])
            ],
        },
    }


def opaque(
    parameters: Any,
    *,
    requests: list[str] | None = None,
    source: str = "FromClaim",
    driver: str = "dra.example.com",
) -> dict[str, Any]:
    """One allocation config entry with opaque parameters for `driver`."""
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": parameters},
    }
    if requests:
        entry["requests"] = requests
    return entry
