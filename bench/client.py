"""A kubelet-like client: one persistent channel per socket, as the kubelet keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from dradriver.kubelet.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)


def claims_pb(claims: list[dict[str, Any]]) -> list[Any]:
    """Claim references as the kubelet sends them."""
    return [
        dra_v1_pb2.Claim(
            namespace=c["metadata"]["namespace"],
            name=c["metadata"]["name"],
            uid=c["metadata"]["uid"],
        )
        for c in claims
    ]


class Kubelet:
    """NodePrepareResources / NodeUnprepareResources over one open channel."""

    def __init__(self, service_socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{service_socket}")
        self.stub = dra_v1_pb2_grpc.DRAPluginStub(self.channel)

    def prepare(self, claims: list[dict[str, Any]]) -> Any:
        resp = self.stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=claims_pb(claims)), timeout=120
        )
        errors = [v.error for v in resp.claims.values() if v.error]
        if errors:
            raise RuntimeError(f"prepare failed: {errors[:3]}")
        return resp

    def unprepare(self, claims: list[dict[str, Any]]) -> Any:
        resp = self.stub.NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claims_pb(claims)), timeout=120
        )
        errors = [v.error for v in resp.claims.values() if v.error]
        if errors:
            raise RuntimeError(f"unprepare failed: {errors[:3]}")
        return resp

    def close(self) -> None:
        self.channel.close()


def get_info(reg_socket: Path, timeout: float = 1.0) -> Any:
    """GetInfo on the registration socket (raises grpc.RpcError if not serving)."""
    with grpc.insecure_channel(f"unix://{reg_socket}") as ch:
        return registration_pb2_grpc.RegistrationStub(ch).GetInfo(
            registration_pb2.InfoRequest(), timeout=timeout
        )
