"""A new torch-facing family is one new package and two edits elsewhere, a registry line and the
docs. The toy family (tests/fixtures/toy_family/toy: a plan, a kernel, its launch, a public
function, a torch op, a bench record and `plan`/`explain`) is copied into a copy of src/tmakit as
`tmakit.toy`; a line "toy" is added to `tmakit.registry.PACKAGES` and a line to the layout in
docs/architecture.md, and nothing else changes. In that tree every front end finds the family (the
facade, the torch ops, the bench, `tmakit plan` and `tmakit explain`), its kernel compiles for
sm_90a without a GPU to a TMA load, and the architecture rules hold."""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY = Path(__file__).parent / "fixtures" / "toy_family" / "toy"
IGNORED = shutil.ignore_patterns("__pycache__")
PACKAGES = "PACKAGES: tuple[str, ...] = ("  # the registry's list, as registry.py writes it
REGISTRY_LINE = '    "toy",'
DOCS_LINE = "  toy/             the toy family: " + ", ".join(
    sorted(path.name for path in TOY.glob("*.py") if path.name != "__init__.py")
)
TOY_WHAT = "the toy ring of the --shape tensor's tiles"  # its explain part's WHAT, in the help
TMA_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global")

# Run in a child process whose tmakit is the grown tree: what each front end makes of the toy, as
# JSON on the last line.
FRONT_ENDS = """
import argparse, json, subprocess, sys


def loaded():
    return sorted(name for name in ("cutlass", "torch") if name in sys.modules)


import tmakit
import tmakit.toy.api

seen = {"tmakit": tmakit.__file__, "exported": "toy_load" in tmakit.__all__}
seen["is_the_function"] = getattr(tmakit, "toy_load", None) is tmakit.toy.api.toy_load
from tmakit.cli import build_parser
from tmakit.families import families

(commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
seen["bench_kernels"] = list(commands.choices["bench"]._option_string_actions["--kernel"].choices)
for command in ("plan", "explain"):
    kernel = commands.choices[command]._option_string_actions["--kernel"]
    seen[f"{command}_kernels"] = [list(kernel.choices), kernel.help]
seen["studies"] = list(families())
seen["loaded_by_the_facade_and_the_cli"] = loaded()
for command in ("plan", "explain"):
    line = [sys.executable, "-m", "tmakit", command, "--kernel", "toy"]
    run = subprocess.run(line, capture_output=True, text=True)
    seen[command] = [run.returncode, run.stdout, run.stderr]
study = families()["toy"]
ptx = study.compile(study.example(), keep_ptx=True).ptx
seen["bulk_tensor_lines"] = [line.strip() for line in ptx.splitlines() if "cp.async.bulk.tensor" in line]
try:
    import torch
except ImportError:
    seen["op"] = None
else:
    import tmakit.api.tensors
    import tmakit.ops

    seen["op"] = str(torch.ops.tmakit.toy_load.default._schema)
    seen["ops_exports_it"] = tmakit.ops.toy_load is torch.ops.tmakit.toy_load.default
    seen["refusals"] = []
    for call in (tmakit.toy_load, torch.ops.tmakit.toy_load):
        try:
            call(torch.zeros(64, 256))
        except tmakit.TmaConfigError as error:
            seen["refusals"].append(str(error))
    # What a call launches on a GPU: the device rule waived, the launcher recording.
    tmakit.api.tensors.check_on_gpu = lambda tensor, name: None
    launched = []
    tmakit.toy.api.toy_launcher = lambda plan, device: lambda src: launched.append((plan, device, src))
    src = torch.zeros(128, 512, dtype=torch.float16)
    returned = tmakit.toy_load(src, stages=3)
    ((plan, device, tensor),) = launched
    seen["launch"] = {
        "returns_src": returned is src,
        "shape": list(plan.load.config.shape),
        "dtype": plan.load.config.dtype,
        "stages": plan.stages,
        "device": device,
        "same_memory": tensor.data_ptr() == src.data_ptr(),
    }
print(json.dumps(seen))
"""


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (caches aside), by its path there."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def changed_lines(before: bytes, after: bytes) -> tuple[list[str], list[str]]:
    """The lines one text lost and the lines it gained."""
    diff = difflib.ndiff(before.decode().splitlines(), after.decode().splitlines())
    lines = [line for line in diff if line[:2] in ("- ", "+ ")]
    return [line[2:] for line in lines if line[0] == "-"], [line[2:] for line in lines if line[0] == "+"]


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Path:
    """src/tmakit and docs/architecture.md copied, the toy package added as tmakit/toy/, and the
    two edits made: a line "toy" in `PACKAGES`, its line closing the layout block of the docs.
    Returns the copy's `src`."""
    tree = tmp_path_factory.mktemp("grown")
    src = tree / "src"
    shutil.copytree(ROOT / "src" / "tmakit", src / "tmakit", ignore=IGNORED)
    shutil.copytree(TOY, src / "tmakit" / "toy", ignore=IGNORED)
    registry = src / "tmakit" / "registry.py"
    text = registry.read_text()
    assert text.count(PACKAGES) == 1, "registry.py no longer writes PACKAGES as this test expects"
    registry.write_text(text.replace(PACKAGES, f"{PACKAGES}\n{REGISTRY_LINE}"))
    docs = (ROOT / "docs" / "architecture.md").read_text()
    head, layout = docs.split("## Layout of the code", 1)
    opening, block, rest = layout.split("```", 2)
    (tree / "docs").mkdir()
    grown_layout = "```".join([opening, f"{block}{DOCS_LINE}\n", rest])
    (tree / "docs" / "architecture.md").write_text(f"{head}## Layout of the code{grown_layout}")
    return src


def test_the_grown_tree_is_the_package_and_two_lines(grown):
    before, after = files(ROOT / "src" / "tmakit"), files(grown / "tmakit")
    toy = {f"toy/{name}": data for name, data in files(TOY).items()}
    assert set(after) == set(before) | set(toy)
    assert {name: after[name] for name in toy} == toy
    assert [name for name in before if after[name] != before[name]] == ["registry.py"]
    assert changed_lines(before["registry.py"], after["registry.py"]) == ([], [REGISTRY_LINE])
    docs = (ROOT / "docs" / "architecture.md").read_bytes()
    assert changed_lines(docs, (grown.parent / "docs" / "architecture.md").read_bytes()) == ([], [DOCS_LINE])


def test_every_front_end_finds_the_toy_family(grown):
    env = {**os.environ, "PYTHONPATH": str(grown)}
    run = subprocess.run(
        [sys.executable, "-c", FRONT_ENDS], capture_output=True, text=True, cwd=grown, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert Path(seen["tmakit"]).is_relative_to(grown)
    assert seen["exported"] and seen["is_the_function"]
    assert seen["loaded_by_the_facade_and_the_cli"] == []  # neither torch nor cutlass
    assert "toy" in seen["studies"] and "toy" in seen["bench_kernels"]
    for command in ("plan", "explain"):
        choices, help = seen[f"{command}_kernels"]
        assert "toy" in choices and TOY_WHAT in help
        returncode, stdout, stderr = seen[command]
        assert returncode == 0, stderr
        assert stdout.startswith("toy               every tile loaded into a ring of 2 stage(s)")
        assert "pipeline          2 stages x 32768 bytes" in stdout
    assert "block 0's loads (stage:parity): s0:p0, s1:p0, s0:p1" in seen["explain"][1]
    assert any(TMA_LOAD.search(line) for line in seen["bulk_tensor_lines"])
    if seen["op"] is None:
        pytest.skip("torch is not installed: the op and the function's launch are not checked")
    assert seen["op"] == "tmakit::toy_load(Tensor src, int stages=2) -> ()"
    assert seen["ops_exports_it"]
    refused = "src is on cpu; TMA loads from GPU memory, move it with .cuda() first"
    assert seen["refusals"] == [refused, f"torch.ops.tmakit.toy_load called eagerly: {refused}"]
    launch = {"shape": [128, 512], "dtype": "fp16", "stages": 3, "device": "cpu"}
    assert seen["launch"] == {"returns_src": True, **launch, "same_memory": True}


def test_the_architecture_holds_for_the_grown_tree(grown, monkeypatch):
    """tests/test_architecture.py's checks, each run on the grown tree (its docs included)."""
    monkeypatch.setenv("TMAKIT_ARCHITECTURE_SRC", str(grown))
    name = "architecture_of_the_grown_tree"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "test_architecture.py")
    architecture = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, architecture)  # its dataclasses look their module up
    spec.loader.exec_module(architecture)
    assert architecture.SRC == grown
    assert architecture.part_of("tmakit.toy.kernel") == "kernel"
    checks = [check for name, check in vars(architecture).items() if name.startswith("test_")]
    assert len(checks) >= 10
    for check in checks:
        check()
