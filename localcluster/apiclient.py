"""A small JSON/REST client for a local cluster's API server, as its admin.

Raw JSON on purpose: the tests must see exactly what the API server stored
and returned (a typed client model would hide fields it does not know, and
add ones that are unset). Server-side apply of multi-document YAML needs only
discovery of kind -> resource, which is done here and cached per group/version.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from .certs import CertPair

FIELD_MANAGER = "dra-e2e"


Source = Path | str | dict[str, Any] | Iterable[dict[str, Any]]


def dns_label(text: str) -> str:
    """A valid object name (DNS label) made of `text`: lower case, dashes, 63 bytes."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")


class ApiError(Exception):
    """An HTTP error answer of the API server, with its Status object."""

    def __init__(self, method: str, url: str, code: int, body: str) -> None:
        self.code = code
        self.body = body
        try:
            self.status: dict[str, Any] = json.loads(body)
        except ValueError:
            self.status = {}
        reason = self.status.get("message", body[:500])
        super().__init__(f"{method} {url}: HTTP {code}: {reason}")


def load_documents(source: Source) -> list[dict[str, Any]]:
    """Objects from a YAML file path, a YAML string, an object or a list of them.
    ``kind: List`` documents are flattened; empty documents are skipped."""
    if isinstance(source, dict):
        docs: list[Any] = [source]
    elif isinstance(source, Path) or (
        isinstance(source, str) and "\n" not in source and Path(source).is_file()
    ):
        docs = list(yaml.safe_load_all(Path(source).read_text()))
    elif isinstance(source, str):
        docs = list(yaml.safe_load_all(source))
    else:
        docs = list(source)
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not doc:
            continue
        if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
            out.extend(d for d in doc["items"] if d)
        else:
            out.append(doc)
    return out


class Rest:
    """Admin access to one API server over TLS with a client certificate."""

    def __init__(self, server: str, ca_file: Path, client: CertPair) -> None:
        self.server = server.rstrip("/")
        self._ctx = ssl.create_default_context(cafile=str(ca_file))
        self._ctx.load_cert_chain(str(client.cert), str(client.key))
        self._anon_ctx = ssl.create_default_context(cafile=str(ca_file))
        # No proxies: everything is on 127.0.0.1.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._discovery: dict[str, list[dict[str, Any]]] = {}

    def close(self) -> None:
        """Forget what discovery cached (there is no connection to close)."""
        self._discovery.clear()

    def forget_discovery(self) -> None:
        """Forget the cached discovery (after an API server restart)."""
        self._discovery.clear()

    # ----------------------------------------------------------- transport
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        base: str | None = None,
        timeout: float = 30,
    ) -> Any:
        """One API call; the decoded JSON answer (text if not JSON, None if empty)."""
        url = (base or self.server) + path
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        ctx = self._ctx
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
            ctx = self._anon_ctx
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        handler = urllib.request.HTTPSHandler(context=ctx)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), handler)
        try:
            with opener.open(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(method, url, e.code, e.read().decode("utf-8", "replace")) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def get(self, path: str, *, missing_ok: bool = False) -> Any:
        """GET a path; with `missing_ok`, None when it does not exist."""
        try:
            return self.request("GET", path)
        except ApiError as e:
            if missing_ok and e.code == 404:
                return None
            raise

    def delete(self, path: str, *, missing_ok: bool = True) -> Any:
        """DELETE a path; with `missing_ok` (the default), no error when it is gone."""
        try:
            return self.request("DELETE", path)
        except ApiError as e:
            if missing_ok and e.code == 404:
                return None
            raise

    def healthy(self, path: str, base: str | None = None) -> bool:
        """Whether a health endpoint (`/readyz`, `/healthz`) answers ok."""
        return bool(self.request("GET", path, base=base, timeout=5) == "ok")

    def plain_health(self, url: str) -> bool:
        """Whether etcd's plain-HTTP `/health` at `url` says healthy."""
        with self._opener.open(url, timeout=5) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")

    # -------------------------------------------------------------- apply
    def resource_for(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection path prefix, namespaced) for a kind, via discovery."""
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        for attempt in (0, 1):
            if attempt or api_version not in self._discovery:
                self._discovery[api_version] = self.request("GET", prefix)["resources"]
            for r in self._discovery[api_version]:
                if r["kind"] == kind and "/" not in r["name"]:
                    return f"{prefix}/{r['name']}", bool(r["namespaced"])
        raise LookupError(f"the API server serves no {kind} in {api_version}")

    def object_path(self, obj: dict[str, Any], namespace: str | None = None) -> str:
        """The API path of one object (its namespace, else `namespace`, else default)."""
        meta = obj.get("metadata", {})
        collection, namespaced = self.resource_for(obj["apiVersion"], obj["kind"])
        if namespaced:
            ns = meta.get("namespace") or namespace or "default"
            prefix, _, plural = collection.rpartition("/")
            collection = f"{prefix}/namespaces/{ns}/{plural}"
        return f"{collection}/{meta['name']}"

    def apply_one(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Server-side apply (forced) of one object; returns what the server stored."""
        path = self.object_path(obj, namespace)
        query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        return dict(
            self.request(
                "PATCH", f"{path}?{query}", obj, content_type="application/apply-patch+yaml"
            )
        )

    def apply(
        self,
        source: Source,
        namespace: str | None = None,
        after_namespace: Callable[[str], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Server-side apply of every object of `source` in order; what the server stored."""
        out = []
        for obj in load_documents(source):
            out.append(self.apply_one(obj, namespace))
            if obj["kind"] == "Namespace" and obj["apiVersion"] == "v1" and after_namespace:
                after_namespace(obj["metadata"]["name"])
        return out
