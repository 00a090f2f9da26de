"""Generate the CSI driver's gRPC stubs (services/csi/proto/csi_pb2*.py) from csi.proto of the
pinned CSI spec v1.10.0, with the grpcio-tools that pyproject.toml pins, so the stubs always
match the grpcio and protobuf runtimes installed beside them. The proto comes from
csi-spec-1.10.0.tar.gz in ../shared/vendor/ or the other places of vendor_dirs (sha256
checked), else from the upstream tag. Nothing is done when the stubs exist and were made from
this proto by this grpcio-tools."""
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "services" / "csi" / "proto"
VERSION = "1.10.0"
TARBALL = f"csi-spec-{VERSION}.tar.gz"
SHA256 = "f6a062e6af076dc2380ce15f56ecae709a1173ba7846d4599f256f53320dc364"
UPSTREAM = ("https://raw.githubusercontent.com/container-storage-interface/spec/"
            f"v{VERSION}/csi.proto")


# where a tarball found once is kept, so that a later clone elsewhere on this machine (CI
# clones away from shared/) needs neither shared/ nor the network
CACHE = Path("/var/cache/strata/vendor")


def vendor_dirs() -> list[Path]:
    """Where shared/vendor may be: STRATA_VENDOR_DIR, beside this checkout, beside the main
    checkout of a git worktree, /work/shared/vendor (the development machines), or this
    machine's cache of what one of those held before."""
    dirs = [Path(os.environ["STRATA_VENDOR_DIR"])] if os.environ.get("STRATA_VENDOR_DIR") else []
    dirs += [ROOT.parent / "shared" / "vendor", Path("/work/shared/vendor"), CACHE]
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute",
                                 "--git-common-dir"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirs.append(Path(common).parent.parent / "shared" / "vendor")
    except (OSError, subprocess.CalledProcessError):
        pass
    return dirs


def read_proto() -> bytes:
    for folder in vendor_dirs():
        tarball = folder / TARBALL
        if tarball.is_file():
            data = tarball.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest != SHA256:
                sys.exit(f"gen_csi_stubs: {tarball} has sha256 {digest}, expected {SHA256}")
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                member = next(m for m in tar.getmembers() if m.name.endswith("/csi.proto"))
                proto = tar.extractfile(member).read()
            if folder != CACHE:
                try:
                    CACHE.mkdir(parents=True, exist_ok=True)
                    (CACHE / TARBALL).write_bytes(data)
                except OSError:
                    pass  # not root: the cache is only a convenience
            return proto
    print(f"gen_csi_stubs: no {TARBALL} in {', '.join(map(str, vendor_dirs()))}; "
          f"fetching {UPSTREAM}", file=sys.stderr)
    with urllib.request.urlopen(UPSTREAM, timeout=60) as resp:
        return resp.read()


def main() -> None:
    from importlib.metadata import version

    from grpc_tools import protoc  # installed by pyproject.toml's pins

    proto = read_proto()
    stamp_text = f"{hashlib.sha256(proto).hexdigest()} grpcio-tools {version('grpcio-tools')}\n"
    stamp = OUT / ".stamp"
    if stamp.exists() and stamp.read_text() == stamp_text and (OUT / "csi_pb2_grpc.py").exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        # laid out as the package path, so the generated modules import each other as
        # services.csi.proto.csi_pb2 (not a top-level csi_pb2)
        src = Path(tmp) / "services" / "csi" / "proto"
        src.mkdir(parents=True)
        (src / "csi.proto").write_bytes(proto)
        include = Path(protoc.__file__).parent / "_proto"
        rc = protoc.main(["grpc_tools.protoc", f"-I{tmp}", f"-I{include}",
                          f"--python_out={ROOT}", f"--pyi_out={ROOT}",
                          f"--grpc_python_out={ROOT}", "services/csi/proto/csi.proto"])
        if rc != 0:
            sys.exit(f"gen_csi_stubs: protoc failed ({rc})")
    stamp.write_text(stamp_text)
    print(f"gen_csi_stubs: generated {OUT.relative_to(ROOT)}/csi_pb2*.py from CSI spec v{VERSION}")


if __name__ == "__main__":
    main()
