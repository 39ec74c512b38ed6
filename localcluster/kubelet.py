"""The kubelet of the local node: certificates, configuration, the process, and its
own measurements (the `/metrics` it serves)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from .apiclient import ApiError
from .binaries import Binaries
from .certs import issue_kubelet_certs, write_kubeconfig
from .controlplane import ControlPlane
from .layout import NodeLayout
from .nodeconfig import kubelet_argv, kubelet_config
from .procs import Component
from .waiting import wait_for


class Kubelet:
    """A real kubelet, registering the node `lay.name` with `cp`."""

    def __init__(self, lay: NodeLayout, bins: Binaries, cp: ControlPlane) -> None:
        self.lay = lay
        self.bins = bins
        self.cp = cp
        self.config = lay.workdir / "kubelet-config.yaml"
        self.kubeconfig = lay.workdir / "kubelet.kubeconfig"
        self.component = Component(
            "kubelet",
            kubelet_argv(lay, bins.kubelet(), self.config, self.kubeconfig),
            lay.logs / "kubelet.log",
            wrap=lay.enter(),
        )

    def start(self, feature_gates: Mapping[str, bool]) -> None:
        """Issue its certificates, write its configuration, start it (no wait).

        It authenticates as ``system:node:<name>`` (the Node authorizer and
        NodeRestriction apply to it as to any node) and serves with a certificate for
        the node's InternalIP that kube-apiserver checks against the cluster CA."""
        lay = self.lay
        for d in (lay.kubelet_root, lay.kubelet_pki, lay.pod_logs, lay.logs):
            lay.on_host(d).mkdir(parents=True, exist_ok=True)
        certs = issue_kubelet_certs(self.cp.ca, lay.name, lay.node_ip)
        write_kubeconfig(
            self.kubeconfig,
            server=self.cp.node_server,
            ca_pem=self.cp.ca.pair.cert_pem(),
            user=f"system:node:{lay.name}",
            client=certs["client"],
        )
        config = kubelet_config(
            lay,
            client_ca=self.cp.ca.pair.cert,
            serving_cert=certs["serving"].cert,
            serving_key=certs["serving"].key,
            feature_gates=feature_gates,
        )
        self.config.write_text(yaml.safe_dump(config, sort_keys=False))
        self.component.start()

    def ready(self) -> bool:
        """Whether the Node is registered and Ready."""
        self.component.check()
        try:
            node: dict[str, Any] = self.cp.request("GET", f"/api/v1/nodes/{self.lay.name}")
        except ApiError as e:
            if e.code == 404:
                return False
            raise
        for cond in (node.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Ready":
                return bool(cond["status"] == "True")
        return False

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the Node is registered and Ready (fails if the kubelet exits)."""
        wait_for(f"node {self.lay.name} to be Ready", self.ready, timeout, log=self.component.tail)

    def metrics(self) -> str:
        """The kubelet's own Prometheus metrics, through the API server's node proxy."""
        return str(self.cp.request("GET", f"/api/v1/nodes/{self.lay.name}/proxy/metrics"))

    def stop(self) -> None:
        """Stop the kubelet (its pods keep running, as on a real node)."""
        self.component.stop()

    def running(self) -> bool:
        """Whether the kubelet runs."""
        return self.component.running()
