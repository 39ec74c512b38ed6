"""Generate the Python protobuf modules next to our .proto files (`make proto`).

dradriver/kubelet/proto: messages, and the gRPC stubs the tests and bench call the driver
with (grpcio, a test dependency: the driver serves gRPC itself, dradriver/kubelet/
grpcserver.py, and never imports the stubs).
dradriver/nri/proto: messages only (NRI speaks ttrpc, framed by dradriver/nri itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# proto directory (repo-relative) -> whether it needs gRPC service stubs
PROTO_DIRS = {
    Path("dradriver/kubelet/proto"): True,
    Path("dradriver/nri/proto"): False,
}


def generate(out_dir: Path) -> list[Path]:
    """Run protoc over every .proto into out_dir (repo-relative package layout); return outputs."""
    from grpc_tools import protoc  # noqa: PLC0415 - only needed at generation time

    include = Path(protoc.__file__).parent / "_proto"
    outputs: list[Path] = []
    for proto_dir, grpc_stubs in PROTO_DIRS.items():
        protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / proto_dir).glob("*.proto"))
        args = [
            "protoc",
            f"-I{ROOT}",
            f"-I{include}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            *([f"--grpc_python_out={out_dir}"] if grpc_stubs else []),
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto_dir}")
        outputs += sorted((out_dir / proto_dir).glob("*_pb2*"))
    return outputs


if __name__ == "__main__":
    outputs = generate(ROOT)
    print("\n".join(str(p.relative_to(ROOT)) for p in outputs), file=sys.stdout)
