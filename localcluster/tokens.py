"""Service-account tokens of a local cluster's control plane, bound to pods on nodes, as
the kubelet would mount them (the API server then adds the node's name to the user)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .apiclient import Rest, dns_label
from .certs import CertificateAuthority, write_kubeconfig
from .standins import standin_pod_manifest

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def token_request(pod_name: str, pod_uid: str, expiration_seconds: int) -> dict[str, Any]:
    """A TokenRequest for a token bound to a Pod, for the API server's own audiences."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],  # empty: the API server's own audiences
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod_name, "uid": pod_uid},
        },
    }


class ServiceAccountTokens:
    """Mixed into ControlPlane: what it provides is declared here."""

    workdir: Path
    ca: CertificateAuthority

    @property
    def server(self) -> str:
        """The API server's URL."""
        raise NotImplementedError

    def _rest(self) -> Rest:
        raise NotImplementedError

    def create_namespace(self, name: str) -> None:
        """Create a namespace."""
        raise NotImplementedError

    def serviceaccount_kubeconfig(
        self, namespace: str, sa_name: str, node_name: str, *, expiration_seconds: int = 86400
    ) -> Path:
        """Kubeconfig with a token of ``namespace/sa_name`` bound to a stand-in Pod on
        ``node_name`` (created if missing, like the namespace and the ServiceAccount),
        so the API server adds ``authentication.kubernetes.io/node-name`` to the
        user's extra; checked with a SelfSubjectReview before returning."""
        rest = self._rest()
        if rest.get(f"/api/v1/namespaces/{namespace}", missing_ok=True) is None:
            self.create_namespace(namespace)
        ns_path = f"/api/v1/namespaces/{namespace}"
        sa_path = f"{ns_path}/serviceaccounts/{sa_name}"
        if rest.get(sa_path, missing_ok=True) is None:
            rest.request(
                "POST",
                f"{ns_path}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa_name}},
            )
        pod_name = dns_label(f"{sa_name}-standin-{node_name}")
        pod = rest.get(f"{ns_path}/pods/{pod_name}", missing_ok=True)
        if pod is None:
            pod = rest.request(
                "POST", f"{ns_path}/pods", standin_pod_manifest(pod_name, sa_name, node_name)
            )
        return self.bound_token_kubeconfig(
            namespace, sa_name, pod, node_name, expiration_seconds=expiration_seconds
        )

    def pod_kubeconfig(self, pod: Mapping[str, Any], *, expiration_seconds: int = 86400) -> Path:
        """Kubeconfig with a token of ``pod``'s ServiceAccount bound to ``pod`` (which must
        be bound to a node), as the kubelet would mount it."""
        return self.bound_token_kubeconfig(
            pod["metadata"]["namespace"],
            pod["spec"]["serviceAccountName"],
            pod,
            pod["spec"]["nodeName"],
            expiration_seconds=expiration_seconds,
        )

    def bound_token_kubeconfig(
        self,
        namespace: str,
        sa_name: str,
        pod: Mapping[str, Any],
        node_name: str,
        *,
        expiration_seconds: int = 86400,
    ) -> Path:
        """Kubeconfig with a token of ``namespace/sa_name`` bound to ``pod`` (an existing
        Pod on ``node_name``), as the kubelet would mount it into that pod; the API
        server adds ``authentication.kubernetes.io/node-name``, checked with a
        SelfSubjectReview before returning."""
        meta = pod["metadata"]
        stem = dns_label(f"{namespace}-{meta['name']}")
        token = self._rest().request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa_name}/token",
            token_request(meta["name"], meta["uid"], expiration_seconds),
        )["status"]["token"]
        user = self.whoami(token)
        extra = user.get("extra", {})
        if extra.get(NODE_NAME_EXTRA) != [node_name]:
            raise RuntimeError(
                f"token of {namespace}/{sa_name} lacks {NODE_NAME_EXTRA}="
                f"{node_name}: user info is {user}"
            )
        return write_kubeconfig(
            self.workdir / f"sa-{stem}.kubeconfig",
            server=self.server,
            ca_pem=self.ca.pair.cert_pem(),
            user=f"{namespace}-{sa_name}",
            token=token,
        )

    def whoami(self, token: str) -> dict[str, Any]:
        """``status.userInfo`` of a SelfSubjectReview made with ``token``."""
        review = self._rest().request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            token=token,
        )
        return dict(review["status"]["userInfo"])
