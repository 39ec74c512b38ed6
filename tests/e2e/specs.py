"""Command lines of the control-plane components, and the manifests of the
stand-in objects (Node, driver Pod) that replace what a kubelet would do."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .certs import CertPair

K8S_VERSION = "v1.36.3"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/24"  # only allocates Service objects; no traffic goes there


def dns_label(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")


def gates_flag(gates: Mapping[str, bool]) -> str:
    return "--feature-gates=" + ",".join(
        f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items())
    )


@dataclass
class Layout:
    """Where everything of one control plane is: binaries, files, ports."""

    bin_dir: Path
    workdir: Path
    verbosity: int = 2
    # A real kubelet joins (the node tier): kube-apiserver talks to it, and the
    # node lifecycle controller and the not-ready taint do their usual job.
    real_nodes: bool = False
    ports: dict[str, int] = field(default_factory=dict)
    pki: dict[str, CertPair] = field(default_factory=dict)
    ca_cert: Path = Path()
    sa_key: Path = Path()
    sa_pub: Path = Path()

    def kubeconfig(self, user: str) -> Path:
        return self.workdir / f"{user}.kubeconfig"


def etcd_argv(lay: Layout) -> list[str]:
    client = f"http://127.0.0.1:{lay.ports['etcd']}"
    peer = f"http://127.0.0.1:{lay.ports['etcd-peer']}"
    return [
        str(lay.bin_dir / "etcd"),
        "--name=e2e",
        f"--data-dir={lay.workdir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=e2e={peer}",
        "--unsafe-no-fsync=true",  # throw-away data: skip fsync
        "--log-level=warn",
    ]


def apiserver_argv(lay: Layout, gates: Mapping[str, bool]) -> list[str]:
    return [
        str(lay.bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{lay.ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={lay.ports['apiserver']}",
        f"--cert-dir={lay.workdir / 'apiserver'}",
        f"--tls-cert-file={lay.pki['apiserver'].cert}",
        f"--tls-private-key-file={lay.pki['apiserver'].key}",
        f"--client-ca-file={lay.ca_cert}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={lay.sa_pub}",
        f"--service-account-signing-key-file={lay.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        *(_kubelet_access(lay) if lay.real_nodes else _no_kubelet()),
        "--enable-admission-plugins=NodeRestriction",
        # 127.0.0.1 is no valid Endpoints address for the kubernetes Service.
        "--endpoint-reconciler-type=none",
        # Close open watches at shutdown instead of letting them hold the HTTP
        # server's 60 s shutdown timeout (a restart with clients connected).
        "--shutdown-watch-termination-grace-period=2s",
        "--allow-privileged=true",
        "--profiling=false",
        gates_flag(gates),
        f"--v={lay.verbosity}",
    ]


def _no_kubelet() -> list[str]:
    # No kubelet keeps the Node Ready: a new Node must not get the not-ready
    # NoSchedule taint that only the node lifecycle controller would lift.
    return ["--disable-admission-plugins=TaintNodesByCondition"]


def _kubelet_access(lay: Layout) -> list[str]:
    """How kube-apiserver reaches a real kubelet (kubectl exec, logs): by the node's
    InternalIP, with a client certificate the kubelet's x509 authenticator accepts,
    checking the kubelet's serving certificate against the cluster CA."""
    client = lay.pki["apiserver-kubelet-client"]
    return [
        f"--kubelet-client-certificate={client.cert}",
        f"--kubelet-client-key={client.key}",
        f"--kubelet-certificate-authority={lay.ca_cert}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def _client_flags(lay: Layout, user: str, gates: Mapping[str, bool]) -> list[str]:
    kubeconfig = lay.kubeconfig(user)
    serving = lay.pki[f"{user}-serving"]
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        # Don't read the request-header CA from the cluster at start-up: with it,
        # the component exits if the API server is not serving yet, so it could
        # not be started together with the API server.
        "--authentication-skip-lookup=true",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports[user]}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        "--leader-elect=false",  # one instance; skips the lease dance at start
        "--profiling=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        gates_flag(gates),
        f"--v={lay.verbosity}",
    ]


def controller_manager_argv(lay: Layout, gates: Mapping[str, bool]) -> list[str]:
    return [
        str(lay.bin_dir / "kube-controller-manager"),
        *_client_flags(lay, "kcm", gates),
        # Every default controller (resourceclaim, serviceaccount(-token),
        # deployment, replicaset, daemonset, garbage collector, ...) but, without
        # a real kubelet, node lifecycle: it would set the stand-in Node's Ready
        # condition to Unknown, taint the Node and evict its pods.
        "--controllers=*" if lay.real_nodes else "--controllers=*,-node-lifecycle-controller",
        "--use-service-account-credentials=true",
        # Its flex-volume prober creates this directory (default
        # /usr/libexec/kubernetes/kubelet-plugins/volume/exec) on the host.
        f"--flex-volume-plugin-dir={lay.workdir / 'flexvolume'}",
        f"--service-account-private-key-file={lay.sa_key}",
        f"--root-ca-file={lay.ca_cert}",
    ]


def scheduler_argv(lay: Layout, gates: Mapping[str, bool]) -> list[str]:
    return [str(lay.bin_dir / "kube-scheduler"), *_client_flags(lay, "scheduler", gates)]


def node_manifest(
    name: str, resources: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A Node as a kubelet would register it: Ready, with allocatable resources."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "e2e stand-in node, no kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": K8S_VERSION,
                "containerRuntimeVersion": "none://0",
                "kernelVersion": "",
                "osImage": "",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kubeProxyVersion": "",
            },
        },
    }


def standin_pod_manifest(name: str, sa_name: str, node_name: str) -> dict[str, Any]:
    """A Pod bound to ``node_name`` that never runs: the object a pod-bound
    ServiceAccount token of the driver refers to."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"dra-e2e/stand-in": "driver"}},
        "spec": {
            "nodeName": node_name,
            "serviceAccountName": sa_name,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "driver", "image": "stand-in.invalid/driver:e2e"}],
        },
    }


def token_request(pod_name: str, pod_uid: str, expiration_seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],  # empty: the API server's own audiences
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod_name, "uid": pod_uid},
        },
    }
