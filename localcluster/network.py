"""The network of a local cluster: a namespace of its own (named after the cluster)
holding the bridge the nodes' eth0 hang on, as kind's nodes hang on a Docker network.

The bridge has the gateway's address, which is also where the control plane serves
(controlplane.py, `advertise`); the `kubernetes` Service's address is a local address
of the same namespace, so in-cluster clients (the driver's pods) reach kube-apiserver
at the address and port their environment names, with no kube-proxy. The namespace
routes each node's pod range to that node, so pods on different nodes reach each
other. Nothing of it touches the host's own namespace.
"""

from __future__ import annotations

import subprocess

from .components import KUBERNETES_SERVICE_IP
from .layout import GATEWAY_IP, NODE_PREFIX, node_ip, pod_subnet

CLUSTER_BRIDGE = "br0"


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip() or res.returncode}")


def create_cluster_netns(ns: str, nodes: int) -> None:
    """The cluster's namespace: the bridge with the gateway's address, the Service
    address on lo, forwarding on, a route to every node's pod range."""
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", ns, "addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo")
        _run("ip", "-n", ns, "link", "add", CLUSTER_BRIDGE, "type", "bridge")
        _run("ip", "-n", ns, "addr", "add", f"{GATEWAY_IP}/{NODE_PREFIX}", "dev", CLUSTER_BRIDGE)
        _run("ip", "-n", ns, "link", "set", CLUSTER_BRIDGE, "up")
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for index in range(1, nodes + 1):
            _run("ip", "-n", ns, "route", "add", pod_subnet(index), "via", node_ip(index))
    except BaseException:
        delete_netns(ns)
        raise


def delete_netns(ns: str) -> None:
    """Remove a namespace (and the links in it); nothing if it is gone."""
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
