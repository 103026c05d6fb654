"""Fetch the peer kernels the MoE study times beside tmakit's into `.peers/` (git-ignored):
TransformerEngine's Triton permutation kernels, out of its pure-Python wheel, and nothing else.

    python scripts/fetch_peers.py [--version 2.20.2] [--wheel PATH] [--dest .peers]

It runs `pip download transformer_engine==VERSION --no-deps` into a temporary folder (or reads the
wheel `--wheel` names), unpacks `transformer_engine/pytorch/triton/permutation.py` and
`transformer_engine/common/triton/permutation.py` with the wheel's license, writes empty
`__init__.py` stand-ins for their packages (the wheel's own import the whole of TransformerEngine,
its compiled library included) and the version in `.peers/transformer_engine/VERSION`. The kernels
then import with torch, Triton and `packaging` alone; `tmakit bench --kernel moe` puts `.peers` on
sys.path for that import only. The GPU machine has no registry: fetch here, carry `.peers` there.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "2.20.2"  # the release the study's TransformerEngine rows are timed on (tmakit.moe.bench)
PACKAGE = "transformer_engine"
KERNELS = (
    "transformer_engine/pytorch/triton/permutation.py",  # the torch wrappers the study calls
    "transformer_engine/common/triton/permutation.py",  # the Triton kernels they launch
)
# The packages above the kernels: empty stand-ins, so that importing them loads nothing else.
PACKAGES = (
    "transformer_engine",
    "transformer_engine/common",
    "transformer_engine/common/triton",
    "transformer_engine/pytorch",
    "transformer_engine/pytorch/triton",
)
STAND_IN = "# A stand-in written by scripts/fetch_peers.py: only the permutation kernels were unpacked.\n"


def download(version: str, folder: Path) -> Path:
    """The wheel of transformer_engine==`version` (no dependencies, no source build) in `folder`."""
    command = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}", "--no-deps"]
    command += ["--only-binary=:all:", "--dest", str(folder), "--quiet"]
    subprocess.run(command, check=True)
    wheels = sorted(folder.glob(f"{PACKAGE}-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"fetch_peers: pip brought no {PACKAGE}-{version} wheel into {folder}")
    return wheels[0]


def wheel_version(wheel: Path) -> str:
    """The version a wheel's file name states (NAME-VERSION-...whl)."""
    return wheel.name.split("-")[1]


def unpack(wheel: Path, dest: Path) -> list[Path]:
    """The kernels, the license and the stand-ins into `dest` (its transformer_engine/ replaced),
    and the version in transformer_engine/VERSION. Returns the files written."""
    target = dest / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    written = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [name for name in KERNELS if name not in names]
        if missing:
            raise SystemExit(f"fetch_peers: {wheel.name} holds no {', '.join(missing)}")
        for name in KERNELS:
            path = dest / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(name))
            written.append(path)
        licenses = sorted(n for n in names if ".dist-info/" in n and Path(n).name.startswith("LICENSE"))
        if licenses:
            (target / "LICENSE").write_bytes(archive.read(licenses[0]))
            written.append(target / "LICENSE")
    for package in PACKAGES:
        path = dest / package / "__init__.py"
        path.write_text(STAND_IN)
        written.append(path)
    (target / "VERSION").write_text(wheel_version(wheel) + "\n")
    written.append(target / "VERSION")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--version", default=VERSION, help=f"transformer_engine's release (default {VERSION})"
    )
    parser.add_argument("--wheel", type=Path, help="a transformer_engine wheel already here (no pip)")
    parser.add_argument("--dest", type=Path, default=ROOT / ".peers", help="where to unpack (default .peers)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        wheel = args.wheel or download(args.version, Path(folder))
        if wheel_version(wheel) != args.version:
            raise SystemExit(f"fetch_peers: {wheel.name} is not release {args.version}")
        written = unpack(wheel, args.dest)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
