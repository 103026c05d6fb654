"""The package as pip builds and installs it: one version, the license and type hints in the wheel,
classifiers, the extras a GPU user and a plotting user need, and a build with no warning."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import tmakit
from entry_point import ROOT


@pytest.fixture(scope="module")
def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the wheel test covers 3.10
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_read_from_the_package(pyproject):
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tmakit.__version__"}


def test_license_is_an_spdx_expression_with_its_file(pyproject):
    project = pyproject["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_extras_bring_what_their_paths_need(pyproject):
    extras = pyproject["project"]["optional-dependencies"]
    assert any(r.startswith("torch") for r in extras["gpu"])
    assert "apache-tvm-ffi" in extras["gpu"]  # the fast copy_ path, not silently the slow one
    assert any(r.startswith("matplotlib") for r in extras["plot"])  # tmakit bench --plot


def test_the_dsl_range_is_the_one_ci_runs_at_both_ends(pyproject):
    """pyproject.toml's range starts at the oldest version CI installs and admits the newest the
    GPU checks ran on; the version warning names both."""
    from tmakit.runtime.compile import TESTED_DSL_VERSIONS

    (requirement,) = [r for r in pyproject["project"]["dependencies"] if r.startswith("nvidia-cutlass-dsl")]
    oldest, newest = TESTED_DSL_VERSIONS
    major, minor = oldest.split(".")[:2]
    assert requirement == f"nvidia-cutlass-dsl>={oldest},<{major}.{int(minor) + 1}"
    assert newest.startswith(f"{major}.{minor}.")
    assert f"DSL=nvidia-cutlass-dsl=={oldest}" in (ROOT / ".ci" / "run").read_text()


def test_the_wheel_carries_license_types_and_classifiers(tmp_path):
    source = tmp_path / "source"  # a copy: pip builds in the tree it is given (build/, egg-info)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = build.stdout + build.stderr
    if build.returncode != 0 and "No matching distribution found for setuptools" in output:
        pytest.skip("no package index here to fetch the build backend from")
    assert build.returncode == 0, output
    for warning in ("BuildBackendWarning", "DeprecationWarning", "deprecated"):
        assert warning not in output, output
    (wheel,) = tmp_path.glob("tmakit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "tmakit/py.typed" in names
    assert "tmakit/data/h200-measured.json" in names  # what `tmakit explain --cluster` quotes
    assert "tmakit/data/tuning.json" in names  # the measured thresholds every route reads
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert f"Version: {tmakit.__version__}" in metadata and "License-Expression: MIT" in metadata
    assert (
        "Classifier: Typing :: Typed" in metadata
        and "Classifier: Programming Language :: Python :: 3.13" in metadata
    )
    assert 'Requires-Dist: apache-tvm-ffi; extra == "gpu"' in metadata


def test_make_test_adds_torch_only_where_the_venv_has_none():
    """`make test` runs the torch-facing tests too: it installs $(TORCH) behind an `import torch`
    guard (an installed torch, a CUDA build above all, is never replaced), and `TORCH=` runs
    without it. Without an NVIDIA GPU, a CUDA build pip brought is replaced by the CPU build from
    torch's CPU index (asked only then), or the run stops; CI's run asserts the venv's torch is a
    CPU build."""
    if shutil.which("make") is None:
        pytest.skip("no make here")

    def dry_run(*variables: str) -> str:
        # A make above this test (CI's `make test TORCH=`) passes its variables down in MAKEFLAGS
        # and exports a command-line variable into the environment too.
        inherited = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH")
        env = {k: v for k, v in os.environ.items() if k not in inherited}
        run = subprocess.run(["make", "-n", "-o", ".venv/.installed", "test", *variables], cwd=ROOT,
                             capture_output=True, text=True, env=env)  # fmt: skip
        assert run.returncode == 0, run.stderr
        return run.stdout

    plain = dry_run()
    assert plain.index('-c "import torch"') < plain.index("pip install -q 'torch==")  # only if it fails
    assert '[ -n "" ]' in dry_run("TORCH=")  # the install's condition is false
    install = plain.index("pip install -q 'torch==")
    gpu = plain.index("nvidia-smi -L", install)
    cuda_build = plain.index("sys.exit(torch.version.cuda is not None)")
    cpu_install = "--force-reinstall --no-deps --index-url 'https://download.pytorch.org/whl/cpu' 'torch=="
    assert install < gpu < cuda_build < plain.index(cpu_install)  # the CPU index only after a CUDA build
    assert plain.index(cpu_install) < plain.rindex("sys.exit(torch.version.cuda is not None)")
    assert "assert torch.version.cuda is None" in (ROOT / ".ci" / "run").read_text()


def test_the_cuda_classifier_is_the_cuda_the_gpu_checks_ran(pyproject):
    """The classifier names the CUDA major version the committed GPU check ran (its context)."""
    context = json.loads((ROOT / "benchmarks" / "results" / "gpu-check.json").read_text())["context"]
    cuda = "Environment :: GPU :: NVIDIA CUDA"
    assert [c for c in pyproject["project"]["classifiers"] if c.startswith(cuda)] == [
        f"{cuda} :: {context['cuda_runtime'].split('.')[0]}"
    ]
