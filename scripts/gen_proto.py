"""Generate the Python protobuf / gRPC code of proto/ in place, or check that it is current.

Usage: python scripts/gen_proto.py [--check]
The generated files sit next to the .proto they come from (proto/hpcdispatch/v1/) and install
as the package hpcdispatch.v1. --check regenerates into a temporary folder and fails when the
committed files differ, so CI notices a .proto edited without regenerating.
"""

from __future__ import annotations

import filecmp
import os
import sys
import tempfile
from pathlib import Path

from google.rpc import status_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def generate(out_dir: Path) -> None:
    # protoc finds the mypy plugins (protoc-gen-mypy, from mypy-protobuf) on PATH.
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    # google/rpc/status.proto (SessionStreamResponse.error), from googleapis-common-protos.
    googleapis = Path(status_pb2.__file__).parent.parent.parent
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"-I{googleapis}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def generated_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.name.endswith(GENERATED_SUFFIXES)}


def main() -> int:
    check = "--check" in sys.argv[1:]
    if not check:
        generate(PROTO_ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        expected, committed = generated_files(fresh), generated_files(PROTO_ROOT)
        stale = sorted(str(p) for p in expected ^ committed)
        stale += sorted(
            str(p) for p in expected & committed
            if not filecmp.cmp(fresh / p, PROTO_ROOT / p, shallow=False)
        )
    if stale:
        print("generated protobuf code is stale; run `python scripts/gen_proto.py`:", *stale,
              sep="\n  ")
        return 1
    print("generated protobuf code matches proto/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
