"""Blocks of cluster-wide address pools, held by nodes through Leases.

A block is one Lease (coordination.k8s.io/v1) in the driver's namespace, named
`<driver>-ipam-<pool>-<index>` (dots of the driver name as dashes), labelled with the
pool and the node, held by the node (`holderIdentity`) and owned by its Node object:
- creating it takes the block: the API server creates one object of a name, so two
  nodes never hold one block (a 409 says another node was first);
- when the Node object is deleted, the garbage collector deletes the node's Leases, and
  their blocks return to the pool; never before, so a node that is only unreachable
  keeps its blocks while its pods may still use the addresses.
API cost: one LIST of the pool's Leases and one CREATE per block taken, nothing per
address; a node lists its own at start, and keeps one watch of the driver's block Leases
(label-selected: an event per block taken or given back anywhere in the cluster).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from dradriver.apiserver.kubeapi import ApiError, Watch, segment

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class Api(Protocol):
    """The API calls blocks need."""

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """Send one request."""

    def get_node(self, name: str) -> dict[str, Any]:
        """GET a Node."""

    def list_at(self, path: str, query: Mapping[str, str]) -> tuple[list[dict[str, Any]], str]:
        """LIST a collection: its objects and the list's resourceVersion."""

    def watch(self, path: str, query: Mapping[str, str], seconds: int) -> Watch:
        """WATCH a collection from a resourceVersion."""


def pool_label(driver: str) -> str:
    """The label naming a Lease's pool."""
    return f"{driver}/ipam-pool"


def node_label(driver: str) -> str:
    """The label naming the node holding a Lease's block."""
    return f"{driver}/ipam-node"


def label_value(node: str) -> str:
    """A node name as a label value: at most 63 characters (a longer one is cut and
    given a digest; `holderIdentity` keeps the whole name)."""
    if len(node) <= 63:
        return node
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{node[:52].rstrip('.-')}-{digest}"


def lease_name(driver: str, pool: str, index: int) -> str:
    """The Lease of block `index` of `pool`."""
    return f"{driver.replace('.', '-')}-ipam-{pool}-{index}"


class Blocks:
    """Takes and lists the blocks of cluster pools for one node."""

    def __init__(
        self, api: Api, driver: str, namespace: str, node: str, timeout: float = 10
    ) -> None:
        """`namespace`: the driver's own (the Leases live there)."""
        self._api = api
        self._driver = driver
        self._path = LEASES.format(namespace=segment(namespace))
        self._node = node
        self._timeout = timeout

    @property
    def node(self) -> str:
        """The node whose blocks these are (a Lease's holder)."""
        return self._node

    def list_leases(self) -> tuple[list[dict[str, Any]], str]:
        """The Leases of every pool of the driver, and the list's resourceVersion."""
        return self._api.list_at(self._path, {"labelSelector": pool_label(self._driver)})

    def watch_leases(self, version: str, seconds: int) -> Watch:
        """Watch the Leases of every pool of the driver from `version`."""
        query = {"labelSelector": pool_label(self._driver), "resourceVersion": version}
        return self._api.watch(self._path, query, seconds)

    def block_of(self, lease: dict[str, Any]) -> tuple[str, int, str] | None:
        """(pool, block, holder) of a Lease of this driver's blocks; None for another."""
        labels = (lease.get("metadata") or {}).get("labels") or {}
        pool = labels.get(pool_label(self._driver))
        try:
            index = self._index(lease)
        except (KeyError, ValueError, IndexError):
            return None
        if not isinstance(pool, str) or lease["metadata"]["name"] != lease_name(
            self._driver, pool, index
        ):
            return None
        return pool, index, str((lease.get("spec") or {}).get("holderIdentity") or "")

    def held(self, pool: str) -> list[int]:
        """The blocks of `pool` this node holds, as the API server has them."""
        return sorted(
            self._index(lease)
            for lease in self._list(pool)
            if (lease.get("spec") or {}).get("holderIdentity") == self._node
        )

    def take(self, pool: str, candidates: Iterable[int]) -> int | None:
        """Take the first block of `candidates` no node holds; None if all are held.
        ApiError for anything but another node being first."""
        leases = self._list(pool)
        mine = {self._index(x) for x in leases if x["spec"].get("holderIdentity") == self._node}
        held = {self._index(lease) for lease in leases}
        node = self._api.get_node(self._node)
        owner = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self._node,
            "uid": node["metadata"]["uid"],
        }
        for index in candidates:
            if index in mine:  # this node's already (the other instance of a rolling update)
                return index
            if index in held:
                continue
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": lease_name(self._driver, pool, index),
                    "labels": {
                        pool_label(self._driver): pool,
                        node_label(self._driver): label_value(self._node),
                    },
                    "ownerReferences": [owner],
                },
                "spec": {"holderIdentity": self._node},
            }
            try:
                self._api.request("POST", self._path, body, timeout=self._timeout)
            except ApiError as exc:
                if exc.status == 409:  # another node was first: the next one
                    continue
                raise
            return index
        return None

    def _list(self, pool: str) -> list[dict[str, Any]]:
        query = {"labelSelector": f"{pool_label(self._driver)}={pool}"}
        result = self._api.request("GET", self._path, None, query, timeout=self._timeout)
        return list(result.get("items") or [])

    @staticmethod
    def _index(lease: dict[str, Any]) -> int:
        name = str(lease["metadata"]["name"])
        return int(name.rsplit("-", 1)[1])
