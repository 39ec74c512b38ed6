"""The real driver daemon as a child process in a network namespace
(localcluster.driverproc), and a kubelet-side client: where no kubelet runs, the tests
play it and call the driver over its sockets."""

from __future__ import annotations

from typing import Any

import grpc

from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from localcluster.driverproc import DRIVER, RUNNING
from localcluster.driverproc import DriverProcess as Daemon

__all__ = ["DRIVER", "RUNNING", "DriverProcess"]


class DriverProcess(Daemon):
    """`dra-driver run` with its own kubelet directories under `root`, and the calls a
    kubelet makes to it (registration status, prepare, unprepare)."""

    def notify(self, registered: bool, error: str = "") -> None:
        with grpc.insecure_channel(f"unix://{self.reg_socket}") as ch:
            registration_pb2_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=registered, error=error),
                timeout=5,
            )

    def _stub(self, version: str, ch: grpc.Channel) -> Any:
        mod = dra_v1_pb2_grpc if version == "v1" else dra_v1beta1_pb2_grpc
        return mod.DRAPluginStub(ch)

    def prepare(
        self, claims: list[dict[str, Any]], version: str = "v1", timeout: float = 45.0
    ) -> Any:
        pb2 = dra_v1_pb2 if version == "v1" else dra_v1beta1_pb2
        req = pb2.NodePrepareResourcesRequest(claims=[_claim(pb2, c) for c in claims])
        with grpc.insecure_channel(f"unix://{self.service_socket}") as ch:
            return self._stub(version, ch).NodePrepareResources(req, timeout=timeout)

    def unprepare(
        self, claims: list[dict[str, Any]], version: str = "v1", timeout: float = 45.0
    ) -> Any:
        pb2 = dra_v1_pb2 if version == "v1" else dra_v1beta1_pb2
        req = pb2.NodeUnprepareResourcesRequest(claims=[_claim(pb2, c) for c in claims])
        with grpc.insecure_channel(f"unix://{self.service_socket}") as ch:
            return self._stub(version, ch).NodeUnprepareResources(req, timeout=timeout)


def _claim(pb2: Any, claim: dict[str, Any]) -> Any:
    meta = claim["metadata"]
    return pb2.Claim(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
