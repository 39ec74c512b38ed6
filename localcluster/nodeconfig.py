"""The local node's configuration files, built as data (no I/O): containerd's
config.toml, the CNI network, the kubelet's KubeletConfiguration and kubeconfig,
and the kernel settings the kubelet insists on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .layout import NodeLayout

# The sandbox (pause) image of the node, built locally (images.py); containerd pins
# it, so neither it nor the kubelet ever tries to pull or collect it.
SANDBOX_IMAGE = "localhost/dra-driver/pause:local"
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
KUBELET_PORT = 10250  # the node's own network namespace: the usual ports are free
KUBELET_HEALTHZ_PORT = 10248

# What the kubelet checks in /proc/sys at start (pkg/kubelet/cm: setupKernelTunables)
# and, unless protectKernelDefaults, writes when they differ: machine-wide settings.
# The node's mount namespace shows the kubelet files with these values instead (see
# namespaces.py), so a test node never changes a shared machine's kernel settings.
KUBELET_SYSCTLS: dict[str, int] = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are valid TOML."""
    return json.dumps(value)


def _table(name: str, values: Mapping[str, Any]) -> str:
    lines = [f"[{name}]"]
    lines += [f"  {key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines)


def containerd_config(lay: NodeLayout, runc: Path, nri: bool = True) -> str:
    """containerd 2.x (config version 3): every path under the work directory, CRI with
    CDI (the driver's spec directory), the runc built here, the node's CNI network,
    NRI at its defaults but for a socket of its own (or, without `nri`, disabled, as
    an operator may have it)."""
    cd = lay.containerd_dir
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    tables = [
        _table("grpc", {"address": str(lay.containerd_socket)}),
        _table("ttrpc", {"address": f"{lay.containerd_socket}.ttrpc"}),
        _table("debug", {"level": "info"}),
        _table("plugins.'io.containerd.internal.v1.opt'", {"path": str(cd / "opt")}),
        _table(
            "plugins.'io.containerd.image-verifier.v1.bindir'",
            {"bin_dir": str(cd / "image-verifier")},
        ),
        # NRI stays enabled, as containerd ships it; only its socket moves into the
        # work directory, so another node's NRI plugins never meet this runtime.
        _table(
            "plugins.'io.containerd.nri.v1.nri'",
            {"disable": not nri, "socket_path": str(lay.nri_socket)},
        ),
        _table("plugins.'io.containerd.cri.v1.images'", {"snapshotter": "overlayfs"}),
        _table("plugins.'io.containerd.cri.v1.images'.pinned_images", {"sandbox": SANDBOX_IMAGE}),
        _table(
            cri_runtime,
            {
                "enable_cdi": True,
                "cdi_spec_dirs": [str(lay.cdi_dir)],
                # Root here lacks CAP_SYS_RESOURCE: negative OOM scores cannot be set.
                "restrict_oom_score_adj": True,
                # A lone node: pod network namespaces under the state directory, not
                # in `ip netns`; a cluster's node: in its own /var/run/netns, where a
                # real node has them and the chart's podNetnsDir finds them.
                "netns_mounts_under_state_dir": not lay.standard_paths,
            },
        ),
        _table(f"{cri_runtime}.containerd", {"default_runtime_name": "runc"}),
        _table(
            f"{cri_runtime}.containerd.runtimes.runc",
            {"runtime_type": "io.containerd.runc.v2"},
        ),
        _table(
            f"{cri_runtime}.containerd.runtimes.runc.options",
            {"BinaryName": str(runc), "Root": str(cd / "runc"), "SystemdCgroup": False},
        ),
        _table(
            f"{cri_runtime}.cni",
            {"bin_dirs": [CNI_BIN_DIR], "conf_dir": str(lay.cni_conf_dir), "max_conf_num": 1},
        ),
        _table("plugins.'io.containerd.grpc.v1.cri'", {"stream_server_address": "127.0.0.1"}),
    ]
    head = [
        "version = 3",
        f"root = {_toml(str(cd / 'root'))}",
        f"state = {_toml(str(cd / 'state'))}",
        f"temp = {_toml(str(cd / 'tmp'))}",
        "imports = []  # never the host's /etc/containerd/conf.d",
    ]
    return "\n".join(head) + "\n\n" + "\n\n".join(tables) + "\n"


def cni_network(lay: NodeLayout) -> dict[str, Any]:
    """A bridge network for the pods' eth0, addresses from host-local (state under the
    work directory). No masquerading: nothing leaves the node's namespace."""
    return {
        "cniVersion": "1.0.0",
        "name": lay.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(lay.cni_ipam_dir),
                    "ranges": [[{"subnet": lay.pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def kubelet_config(
    lay: NodeLayout,
    *,
    client_ca: Path,
    serving_cert: Path,
    serving_key: Path,
    feature_gates: Mapping[str, bool],
) -> dict[str, Any]:
    """The KubeletConfiguration: cgroupfs under a cgroup root of this node's own, the
    node's containerd, x509 authentication of kube-apiserver (exec, logs) with webhook
    authorization, and every directory under the work directory."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": lay.node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{lay.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        # With a shared /kubepods, two kubelets on one machine treat each other's pod
        # cgroups as orphans: every node has a root of its own.
        "cgroupRoot": lay.cgroup_root,
        "failCgroupV1": False,  # 1.35+ refuses cgroup v1 unless told otherwise
        "failSwapOn": False,
        # Checked, never written: the node's mount namespace shows the expected values.
        "protectKernelDefaults": True,
        "podLogsDir": str(lay.pod_logs),
        "volumePluginDir": str(lay.workdir / "volume-plugins"),
        "featureGates": dict(feature_gates),
        "registerNode": True,
        "nodeStatusUpdateFrequency": "4s",
        "serializeImagePulls": False,
        # Local images only: never collect them, never evict for a filling disk.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "containerLogMaxSize": "1Mi",
        # Restarting containers come back within 2 s, not after 10 s doubling to 5 min
        # (KubeletCrashLoopBackOffMax, beta and on since 1.35): tests of restarts stay short.
        "crashLoopBackOff": {"maxContainerRestartPeriod": "2s"},
        "kubeAPIQPS": 50,
        "kubeAPIBurst": 100,
    }


def kubelet_argv(lay: NodeLayout, kubelet: Path, config: Path, kubeconfig: Path) -> list[str]:
    """The kubelet's command line: what KubeletConfiguration cannot say."""
    return [
        str(kubelet),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={lay.kubelet_root}",
        f"--cert-dir={lay.kubelet_pki}",
        f"--hostname-override={lay.name}",
        f"--node-ip={lay.node_ip}",
        "--v=2",
        # Each DRA call's start and end (with the claims): what `make bench` times the
        # kubelet's calls by (its histogram's smallest bucket is 100 ms).
        "--vmodule=dra_plugin=4",
    ]
