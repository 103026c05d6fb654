"""Fetch the peer kernels the studies time beside tmakit's into `.peers/` (git-ignored), and nothing
else of their projects: TransformerEngine's Triton permutation kernels (the MoE study), out of its
pure-Python wheel, and torch's CuTe DSL TMA scatter_add kernel (the rows study), out of torch's.

    python scripts/fetch_peers.py [--peer transformer_engine|torch ...] [--dest .peers]
        [--version 2.20.2] [--wheel PATH] [--torch-version 2.13.0] [--torch-wheel PATH]
        [--torch-site DIR] [--torch-index URL]

TransformerEngine: `pip download transformer_engine==VERSION --no-deps` into a temporary folder (or
the wheel `--wheel` names), then `transformer_engine/pytorch/triton/permutation.py` and
`transformer_engine/common/triton/permutation.py` unpacked with the wheel's license, empty
`__init__.py` stand-ins for their packages (the wheel's own import the whole of TransformerEngine,
its compiled library included) and the version in `.peers/transformer_engine/VERSION`. The kernels
then import with torch, Triton and `packaging` alone.

torch: `torch/_native/ops/scatter_add/tma_kernel.py` and the `_ptx.py` it imports, first shipped in
torch 2.13 (the GPU machine's torch is older), into `.peers/torch_native_scatter_add/` beside an
empty `__init__.py` (torch's registers its operator overrides), torch's license and the version.
They come from the wheel `--torch-wheel` names, else from an installed torch of that release (the
one in `--torch-site`, else this interpreter's, found without importing it), else from `pip
download torch==VERSION --no-deps` (`--torch-index`: the index to download from, e.g.
https://download.pytorch.org/whl/cpu for a CPU wheel a fraction of PyPI's CUDA one; the files are
the same). The kernel imports with the DSL and torch once the rows study stands in for the
`torch._vendor.quack.cache` it imports.

`tmakit bench` puts `.peers` on sys.path for a peer's import only. The GPU machine has no registry:
fetch here, carry `.peers` there.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "2.20.2"  # the release the study's TransformerEngine rows are timed on (tmakit.moe.peers)
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

TORCH_VERSION = "2.13.0"  # the release whose TMA scatter_add the rows study times (tmakit.rows.bench)
# Where torch's kernel is unpacked: a package of its own, since `torch` is the installed torch's.
TORCH_PACKAGE = "torch_native_scatter_add"
TORCH_KERNELS = {  # torch's file: its name in TORCH_PACKAGE
    "torch/_native/ops/scatter_add/tma_kernel.py": "tma_kernel.py",  # the kernel and its host function
    "torch/_native/ops/scatter_add/_ptx.py": "_ptx.py",  # the inline PTX it imports (relatively)
}
TORCH_STAND_IN = (
    "# A stand-in written by scripts/fetch_peers.py: only the TMA scatter_add kernel was unpacked\n"
    "# (torch's own __init__ registers its operator overrides).\n"
)
PEER_NAMES = ("transformer_engine", "torch")


def download(version: str, folder: Path, package: str = PACKAGE, index: str | None = None) -> Path:
    """The wheel of `package`==`version` (no dependencies, no source build) in `folder`, from
    `index` where one is named (pip's configured index otherwise)."""
    command = [sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps"]
    command += ["--only-binary=:all:", "--dest", str(folder), "--quiet"]
    if index:
        command += ["--index-url", index]
    subprocess.run(command, check=True)
    wheels = sorted(folder.glob(f"{package}-{version}[-+]*.whl"))  # torch's may be 2.13.0+cpu
    if not wheels:
        raise SystemExit(f"fetch_peers: pip brought no {package}-{version} wheel into {folder}")
    return wheels[0]


def wheel_version(wheel: Path) -> str:
    """The version a wheel's file name states (NAME-VERSION-...whl)."""
    return wheel.name.split("-")[1]


def public_version(version: str) -> str:
    """A version without its local label: 2.13.0+cpu is release 2.13.0."""
    return version.split("+")[0]


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


# -- torch's TMA scatter_add -----------------------------------------------------------------------
def is_torch_license(name: str) -> bool:
    """torch's own license in its dist-info (not a third party's under licenses/third_party/)."""
    parts = name.split("/")
    return (
        parts[0].startswith("torch-")
        and parts[0].endswith(".dist-info")
        and parts[1:] in (["LICENSE"], ["licenses", "LICENSE"])
    )


def torch_files_of_wheel(wheel: Path) -> tuple[dict[str, bytes], bytes | None]:
    """(the kernel's files by torch's name, torch's license) out of a torch wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [name for name in TORCH_KERNELS if name not in names]
        if missing:
            raise SystemExit(f"fetch_peers: {wheel.name} holds no {', '.join(missing)}")
        licenses = sorted(name for name in names if is_torch_license(name))
        license = archive.read(licenses[0]) if licenses else None
        return {name: archive.read(name) for name in TORCH_KERNELS}, license


def installed_torch_version(site: Path) -> str | None:
    """The version of the torch installed in `site` (its torch/version.py), None if none is."""
    path = site / "torch" / "version.py"
    if not path.is_file():
        return None
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def interpreter_site() -> Path | None:
    """The folder holding this interpreter's torch, found without importing it (None: none)."""
    spec = importlib.util.find_spec("torch")
    return Path(spec.origin).parents[1] if spec is not None and spec.origin else None


def torch_files_installed(site: Path) -> tuple[dict[str, bytes], bytes | None]:
    """(the kernel's files by torch's name, torch's license) out of the torch installed in `site`."""
    missing = [name for name in TORCH_KERNELS if not (site / name).is_file()]
    if missing:
        raise SystemExit(f"fetch_peers: the torch in {site} holds no {', '.join(missing)}")
    licenses = sorted(
        path
        for path in site.glob("torch-*.dist-info/**/LICENSE")
        if is_torch_license(path.relative_to(site).as_posix())
    )
    license = licenses[0].read_bytes() if licenses else None
    return {name: (site / name).read_bytes() for name in TORCH_KERNELS}, license


def unpack_torch(files: dict[str, bytes], license: bytes | None, version: str, dest: Path) -> list[Path]:
    """torch's kernel files, the stand-in `__init__.py`, the license and the version into
    `dest`/TORCH_PACKAGE (replaced). Returns the files written."""
    target = dest / TORCH_PACKAGE
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    written = []
    for name, data in files.items():
        path = target / TORCH_KERNELS[name]
        path.write_bytes(data)
        written.append(path)
    (target / "__init__.py").write_text(TORCH_STAND_IN)
    written.append(target / "__init__.py")
    if license is not None:
        (target / "LICENSE").write_bytes(license)
        written.append(target / "LICENSE")
    (target / "VERSION").write_text(version + "\n")
    written.append(target / "VERSION")
    return written


def fetch_torch(args: argparse.Namespace, folder: Path) -> list[Path]:
    """torch's kernel from `--torch-wheel`, else an installed torch of the release (`--torch-site`,
    else this interpreter's), else a wheel pip downloads into `folder`; unpacked into --dest."""
    if args.torch_wheel is None:
        site = args.torch_site or interpreter_site()
        version = installed_torch_version(site) if site is not None else None
        if version is not None and public_version(version) == args.torch_version:
            return unpack_torch(*torch_files_installed(site), version, args.dest)
        if args.torch_site is not None:
            raise SystemExit(f"fetch_peers: {site} holds torch {version}, not release {args.torch_version}")
    wheel = args.torch_wheel or download(args.torch_version, folder, "torch", args.torch_index)
    if public_version(wheel_version(wheel)) != args.torch_version:
        raise SystemExit(f"fetch_peers: {wheel.name} is not release {args.torch_version}")
    return unpack_torch(*torch_files_of_wheel(wheel), wheel_version(wheel), args.dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--peer", action="append", choices=PEER_NAMES, help="a peer to fetch (repeatable; default: every one)"
    )
    parser.add_argument("--dest", type=Path, default=ROOT / ".peers", help="where to unpack (default .peers)")
    parser.add_argument(
        "--version", default=VERSION, help=f"transformer_engine's release (default {VERSION})"
    )
    parser.add_argument("--wheel", type=Path, help="a transformer_engine wheel already here (no pip)")
    parser.add_argument(
        "--torch-version", default=TORCH_VERSION, help=f"torch's release (default {TORCH_VERSION})"
    )
    parser.add_argument("--torch-wheel", type=Path, help="a torch wheel already here (no pip)")
    parser.add_argument(
        "--torch-site", type=Path, help="a folder holding an installed torch (default: this interpreter's)"
    )
    parser.add_argument("--torch-index", help="the index pip downloads torch from (default: pip's own)")
    args = parser.parse_args(argv)
    written = []
    with tempfile.TemporaryDirectory() as folder:
        if PACKAGE in (args.peer or PEER_NAMES):
            wheel = args.wheel or download(args.version, Path(folder))
            if wheel_version(wheel) != args.version:
                raise SystemExit(f"fetch_peers: {wheel.name} is not release {args.version}")
            written += unpack(wheel, args.dest)
        if "torch" in (args.peer or PEER_NAMES):
            written += fetch_torch(args, Path(folder))
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
