"""`make gpu-check` writes gpu-check.json only where asked: into $OUT (the GPU machine's folder
that comes back) or a new temporary folder by default; the committed
benchmarks/results/gpu-check.json only when named (`RESULTS=benchmarks/results`, `--out DIR`)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACKED = ROOT / "benchmarks" / "results" / "gpu-check.json"


def gpu_check() -> types.ModuleType:
    """scripts/gpu_check.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def test_the_folder_is_the_one_named_else_out_else_a_new_temporary_one():
    output_folder = gpu_check().output_folder
    assert output_folder("benchmarks/results", {"OUT": "/elsewhere"}) == Path("benchmarks/results")
    assert output_folder(None, {"OUT": "/device/out"}) == Path("/device/out")
    folders = [output_folder(None, {}), output_folder(None, {"OUT": ""})]  # an empty $OUT is none
    try:
        for folder in folders:
            assert folder.is_dir() and list(folder.iterdir()) == []
            assert folder.is_relative_to(Path(tempfile.gettempdir())) and not folder.is_relative_to(ROOT)
        assert folders[0] != folders[1]  # a new one each run
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def test_a_run_given_no_folder_leaves_the_committed_file_alone(tmp_path, monkeypatch, capsys):
    """The whole script with a GPU, its tests and the demo stood in for: the JSON goes to a new
    temporary folder, not into the tree."""
    module = gpu_check()
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.chdir(ROOT)  # where make and gpu_check.sh run it
    monkeypatch.setattr(module, "find_hopper_gpu", lambda: ("NVIDIA H100 80GB HBM3", None))
    monkeypatch.setattr(module, "device_context", lambda commit: {"commit": commit})
    monkeypatch.setattr(module.pytest, "main", lambda arguments, plugins: 0)
    demo = types.SimpleNamespace(stdout="demo ran\n", stderr="", returncode=0)
    monkeypatch.setattr(module, "subprocess", types.SimpleNamespace(run=lambda *a, **k: demo))
    monkeypatch.setattr(module, "signal", types.SimpleNamespace(signal=lambda *a: None, SIGTERM=15))
    before = digest(TRACKED)
    untracked_before = set(ROOT.glob("gpu-check.json"))

    assert module.main(["--commit", "abc1234"]) == 0
    written = Path(capsys.readouterr().out.split("wrote ", 1)[1].split(":", 1)[0])
    try:
        assert written.name == "gpu-check.json" and written.exists()
        assert written.is_relative_to(Path(tempfile.gettempdir())) and not written.is_relative_to(ROOT)
        assert digest(TRACKED) == before and set(ROOT.glob("gpu-check.json")) == untracked_before
    finally:
        shutil.rmtree(written.parent, ignore_errors=True)
    monkeypatch.setenv("OUT", str(tmp_path))  # the GPU machine's call: into $OUT
    assert module.main(["--commit", "abc1234"]) == 0 and (tmp_path / "gpu-check.json").exists()
    assert digest(TRACKED) == before


@pytest.mark.parametrize(
    ("command", "out"),
    [
        (["bash", "scripts/gpu_check.sh"], None),
        (["make", "--no-print-directory", "gpu-check"], None),
        (["make", "--no-print-directory", "gpu-check", "RESULTS=benchmarks/results"], "benchmarks/results"),
        (["bash", "scripts/gpu_check.sh", "--out", "some/folder"], "some/folder"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_make_and_the_script_name_a_folder_only_when_asked(command, out, tmp_path):
    """What gpu_check.py is handed, seen by a stand-in interpreter (TMAKIT_PYTHON)."""
    if shutil.which(command[0]) is None:
        pytest.skip(f"no {command[0]} here")
    seen = tmp_path / "argv"
    stand_in = tmp_path / "python"
    stand_in.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {seen}\n')
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "RESULTS")}
    env.update(TMAKIT_PYTHON=str(stand_in), TMAKIT_COMMIT="abc1234")
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    argv = seen.read_text().splitlines()
    assert argv[:3] == ["scripts/gpu_check.py", "--commit", "abc1234"]
    assert argv[3:] == ([] if out is None else ["--out", out])
