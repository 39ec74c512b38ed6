"""Where one control plane keeps its files and ports (`Layout`), and the command lines
of its components: etcd, kube-apiserver, kube-controller-manager, kube-scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import audit
from .certs import CertPair

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CIDR = "10.96.0.0/24"  # allocates Service objects; only the first is reached
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service: in-cluster clients' API server
HTTPS_PORT = 443  # the `kubernetes` Service's port


def gates_flag(gates: Mapping[str, bool]) -> str:
    """The --feature-gates flag of `gates`, sorted by name."""
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
    # The control plane of a cluster (cluster.py): its address on the cluster's
    # network, where kube-apiserver serves on port 443 (the `kubernetes` Service's).
    advertise: str | None = None
    ports: dict[str, int] = field(default_factory=dict)
    pki: dict[str, CertPair] = field(default_factory=dict)
    ca_cert: Path = Path()
    sa_key: Path = Path()
    sa_pub: Path = Path()

    def kubeconfig(self, user: str) -> Path:
        """The kubeconfig file of one of the control plane's users (admin, scheduler, kcm)."""
        return self.workdir / f"{user}.kubeconfig"


def etcd_argv(lay: Layout) -> list[str]:
    """etcd's command line: one member on 127.0.0.1, data in the work directory, no fsync."""
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
    """kube-apiserver's command line, with `gates` (for stand-in or real nodes)."""
    return [
        str(lay.bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{lay.ports['etcd']}",
        # A cluster's: every address of its namespace (127.0.0.1 for the host's
        # forwarder, its address on the cluster network, the Service's address).
        f"--bind-address={'0.0.0.0' if lay.advertise else '127.0.0.1'}",
        f"--advertise-address={lay.advertise or '127.0.0.1'}",
        f"--secure-port={HTTPS_PORT if lay.advertise else lay.ports['apiserver']}",
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
        *audit.apiserver_flags(lay.workdir),
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
    """kube-controller-manager's command line, with `gates`."""
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
    """kube-scheduler's command line, with `gates`."""
    return [str(lay.bin_dir / "kube-scheduler"), *_client_flags(lay, "scheduler", gates)]
