"""Container images for the local node, assembled here: no registry is reachable.

* `busybox:1.37.0`, the name the examples use, holds Debian's static busybox
  (package busybox-static, whatever version Debian ships: `busybox_version()` says
  which) with a link for each of its applets (sh, ip, cat, ls, sleep, true, ...).
* The sandbox image holds the static `pause` program built by hack/build-node.sh.

Each is an OCI image layout in a tar archive (`oci-layout`, `index.json` naming the
image with the `io.containerd.image.name` annotation, blobs by digest) that
`ctr images import` takes. Archives are byte-for-byte reproducible: the same inputs
give the same digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nodeconfig import SANDBOX_IMAGE

BUSYBOX_IMAGE = "docker.io/library/busybox:1.37.0"
BUSYBOX = Path("/bin/busybox")  # from Debian's busybox-static
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class Image:
    """One image archive, ready for `ctr images import`."""

    name: str
    archive: Path
    manifest_digest: str


def arch() -> str:
    """The OCI architecture of this machine."""
    return _ARCH.get(platform.machine(), platform.machine())


def busybox_version(busybox: Path = BUSYBOX) -> str:
    """The busybox version, e.g. 'v1.35.0 (Debian 1:1.35.0-4+b3)'."""
    out = subprocess.run([str(busybox)], capture_output=True, text=True, check=False).stdout
    first = out.splitlines()[0] if out else ""
    return first.removeprefix("BusyBox ").removesuffix(" multi-call binary.").strip()


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class _Layer:
    """A reproducible layer tar built in memory."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 (closed by close())
        self.dirs: set[str] = set()

    def dir(self, name: str, mode: int = 0o755) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            path = "/".join(parts[:i])
            if path not in self.dirs:
                self.dirs.add(path)
                self.tar.addfile(_info(path, tarfile.DIRTYPE, mode if i == len(parts) else 0o755))

    def _parent(self, name: str) -> None:
        if "/" in name:
            self.dir(name.rsplit("/", 1)[0])

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._parent(name)
        info = _info(name, mode=mode)
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def link(self, name: str, target: str) -> None:
        self._parent(name)
        info = _info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self.tar.addfile(info)

    def close(self) -> bytes:
        self.tar.close()
        return self.buf.getvalue()


def busybox_layer(busybox: Path = BUSYBOX) -> bytes:
    """/bin/busybox, a link per applet at its usual path, and a minimal /etc."""
    layer = _Layer()
    for d in ("dev", "proc", "sys", "root", "var", "usr/bin", "usr/sbin", "sbin", "etc"):
        layer.dir(d)
    layer.dir("tmp", 0o1777)
    layer.file("bin/busybox", busybox.read_bytes(), 0o755)
    listed = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for path in sorted(set(listed) - {"bin/busybox"}):
        layer.link(path, "/bin/busybox")
    layer.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    layer.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return layer.close()


def pause_layer(pause: Path) -> bytes:
    """The static pause program at /pause."""
    layer = _Layer()
    layer.file("pause", pause.read_bytes(), 0o755)
    return layer.close()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(path: Path, name: str, layer: bytes, config: dict[str, Any]) -> Image:
    """An OCI image layout with one layer, as a tar archive at `path`."""
    layer_digest = _digest(layer)
    image_config = _json(
        {
            "architecture": arch(),
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [
                {"created_by": "localcluster/images.py", "created": "1970-01-01T00:00:00Z"}
            ],
            "created": "1970-01-01T00:00:00Z",
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(image_config),
                "size": len(image_config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest,
                    "size": len(layer),
                }
            ],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch(), "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    )
    out = _Layer()
    out.file("oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
    out.file("index.json", index)
    for blob in (layer, image_config, manifest):
        out.file(f"blobs/sha256/{_digest(blob).split(':')[1]}", blob)
    path.write_bytes(out.close())
    return Image(name, path, _digest(manifest))


def build_images(directory: Path, pause: Path, busybox: Path = BUSYBOX) -> list[Image]:
    """The busybox and sandbox image archives, written into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_archive(
            directory / "busybox.tar",
            BUSYBOX_IMAGE,
            busybox_layer(busybox),
            {"Env": [PATH_ENV], "Cmd": ["sh"]},
        ),
        write_archive(
            directory / "pause.tar",
            SANDBOX_IMAGE,
            pause_layer(pause),
            {"Env": [PATH_ENV], "Entrypoint": ["/pause"]},
        ),
    ]
