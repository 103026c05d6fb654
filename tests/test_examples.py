"""Every example runs as a user runs it, `python examples/NAME.py`: on a Hopper GPU it checks its
result against torch and times itself; without one it compiles for sm_90a and says so."""

import subprocess
import sys

import pytest

from entry_point import ROOT
from tmakit.runtime.device import find_hopper_gpu

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def run_example(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_the_examples_are_found():
    assert {"ring_rowmax.py", "ring_reduce.py"} <= {path.name for path in EXAMPLES}


@pytest.mark.skipif(find_hopper_gpu()[0] is not None, reason="a Hopper GPU is here: the GPU test runs them")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_each_example_compiles_without_a_gpu_and_says_so(path):
    run = run_example(path)
    assert run.returncode == 0, run.stderr
    assert "No Hopper GPU here" in run.stdout and "for sm_90a" in run.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_each_example_checks_itself_against_torch_on_the_gpu(path):
    run = run_example(path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "equal torch's" in run.stdout and "us per launch" in run.stdout
