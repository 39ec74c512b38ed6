"""Generate the Python gRPC modules from dradriver/kubelet/proto/*.proto (`make proto`)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = Path("dradriver/kubelet/proto")


def generate(out_dir: Path) -> list[Path]:
    """Run protoc over every .proto into out_dir (repo-relative package layout); return outputs."""
    from grpc_tools import protoc  # noqa: PLC0415 - only needed at generation time

    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / PROTO_DIR).glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted((out_dir / PROTO_DIR).glob("*_pb2*"))


if __name__ == "__main__":
    outputs = generate(ROOT)
    print("\n".join(str(p.relative_to(ROOT)) for p in outputs), file=sys.stdout)
