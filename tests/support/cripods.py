"""Pod sandboxes through containerd's CRI without a kubelet: a tiny client and an image.

The client sends hand-encoded protobuf over gRPC (no generated code): field numbers
from k8s.io/cri-api v0.36.3 pkg/apis/runtime/v1/api.proto, which containerd v2.2.9
serves. PodSandboxConfig{metadata 1 {name 1, uid 2, namespace 3}, hostname 2,
log_directory 3, linux 8 {cgroup_parent 1, security_context 2 {namespace_options 1
{network 1}}}};
NamespaceMode POD = 0, NODE = 2; RunPodSandboxRequest{config 1};
RunPodSandboxResponse{pod_sandbox_id 1}; Stop/RemovePodSandboxRequest{pod_sandbox_id 1}.

The sandbox image is an OCI layout archive holding one static `pause` binary, the
form `ctr images import` takes. (The node tier builds the same kind of image; use its
builder here once it is on main.)
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from pathlib import Path

import grpc

SERVICE = "/runtime.v1.RuntimeService/"
NAMESPACE_POD, NAMESPACE_NODE = 0, 2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes(field: int, value: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(value)) + value


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value) if value else b""


def _str(field: int, value: str) -> bytes:
    return _bytes(field, value.encode()) if value else b""


def sandbox_config(
    name: str, uid: str, namespace: str, logs: Path, cgroup_parent: str, host_network: bool
) -> bytes:
    """A serialized PodSandboxConfig (a host-network pod gets no hostname: runc refuses it)."""
    metadata = _str(1, name) + _str(2, uid) + _str(3, namespace)
    options = _int(1, NAMESPACE_NODE if host_network else NAMESPACE_POD)
    linux = _str(1, cgroup_parent) + _bytes(2, _bytes(1, options))
    return (
        _bytes(1, metadata)
        + _str(2, "" if host_network else name)
        + _str(3, str(logs))
        + _bytes(8, linux)
    )


class Cri:
    """RunPodSandbox, StopPodSandbox, RemovePodSandbox on a containerd socket."""

    def __init__(self, socket: Path) -> None:
        self._channel = grpc.insecure_channel(f"unix://{socket}")

    def _call(self, method: str, request: bytes, timeout: float = 60) -> bytes:
        call = self._channel.unary_unary(SERVICE + method)
        response: bytes = call(request, timeout=timeout)
        return response

    def run(self, config: bytes) -> str:
        """Create and start a sandbox; its ID. grpc.RpcError if the runtime refuses."""
        response = self._call("RunPodSandbox", _bytes(1, config))
        if response[:1] != b"\x0a":
            raise AssertionError(f"RunPodSandboxResponse without an ID: {response!r}")
        length, at = 0, 1
        for shift in range(0, 35, 7):  # the ID's length, a varint
            length |= (response[at] & 0x7F) << shift
            at += 1
            if not response[at - 1] & 0x80:
                break
        return response[at : at + length].decode()

    def stop(self, sandbox_id: str) -> None:
        """StopPodSandbox."""
        self._call("StopPodSandbox", _str(1, sandbox_id))

    def remove(self, sandbox_id: str) -> None:
        """RemovePodSandbox."""
        self._call("RemovePodSandbox", _str(1, sandbox_id))

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def remove_cgroup(name: str) -> None:
    """Remove cgroup `/name` and what is left below it, in every mounted hierarchy."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] not in ("cgroup", "cgroup2"):
            continue
        top = Path(fields[1]) / name
        if top.is_dir():
            for sub in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
                sub.rmdir()
            top.rmdir()


def _tar(files: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pause_image(pause: Path, name: str, archive: Path) -> None:
    """Write an OCI image archive `name` whose entrypoint is the static binary `pause`."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    layer = _tar([("pause", pause.read_bytes(), 0o755)])
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": ["/pause"]},
            "rootfs": {"type": "layers", "diff_ids": [add(layer)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": add(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": "sha256:" + hashlib.sha256(layer).hexdigest(),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": add(manifest),
                    "size": len(manifest),
                    "annotations": {"io.containerd.image.name": name},
                }
            ],
        }
    ).encode()
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644), ("index.json", index, 0o644)]
    files += [(f"blobs/sha256/{d.split(':')[1]}", data, 0o644) for d, data in blobs.items()]
    archive.write_bytes(_tar(files))
