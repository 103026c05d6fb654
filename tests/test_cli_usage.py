"""The command's conventions, those of ruff, pytest, pip and git: --help on every option, --version,
usage errors as one line on stderr (exit 2), quiet success, no traceback where a message belongs."""

import argparse
import os
import re
import subprocess
import sys

import pytest

import tmakit as package
from entry_point import ROOT, one_error_line, tmakit
from tmakit.cli import build_parser
from tmakit.cli.bench import PLOT_TITLES
from tmakit.runtime.device import find_hopper_gpu


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    missing = [
        f"{name} {'/'.join(action.option_strings)}"
        for name, command in {"tmakit": parser, **subcommands(parser)}.items()
        for action in command._actions
        if action.option_strings and not (action.help or "").strip()
    ]
    assert missing == []
    run = tmakit("bench", "--help")
    assert run.returncode == 0 and run.stderr == ""
    assert "--samples N" in run.stdout and "the median is reported" in run.stdout


def test_version_names_tmakit_and_the_dsl():
    run = tmakit("--version")
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout.startswith(f"tmakit {package.__version__} (nvidia-cutlass-dsl ")


@pytest.mark.parametrize("command", ["plan", "check", "explain"])
def test_a_closed_pipe_ends_the_command_quietly(command):
    """`tmakit plan | head -1`: the reader is gone before the output is flushed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = tmakit(command, stdout=write_end)
    finally:
        os.close(write_end)
    assert run.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert run.returncode == 141


def test_plot_without_matplotlib_says_which_extra_before_anything_runs(tmp_path):
    blocker = tmp_path / "matplotlib"  # a matplotlib that cannot be imported, first on the path
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n")
    run = tmakit("bench", "--plot", str(tmp_path / "out.png"), env={"PYTHONPATH": str(tmp_path)})
    assert run.returncode == 2 and run.stdout == ""
    assert "--plot: plotting needs matplotlib" in one_error_line(run) and "tmakit[plot]" in run.stderr


def test_each_bench_kernel_plots_under_its_own_title():
    assert PLOT_TITLES["copy"] == "tmakit.copy_ vs torch copy_"
    assert "load" not in PLOT_TITLES["copy"] and "load" not in PLOT_TITLES["transpose"]
    kernels = subcommands(build_parser())["bench"]._option_string_actions["--kernel"].choices
    assert set(PLOT_TITLES) == set(kernels)


@pytest.mark.skipif(find_hopper_gpu()[0] is not None, reason="a Hopper GPU is here: the check would run")
@pytest.mark.parametrize(
    "command", [["make", "--no-print-directory", "gpu-check"], ["bash", "scripts/gpu_check.sh"]]
)
def test_gpu_check_without_a_gpu_says_so_in_the_projects_environment(command, tmp_path):
    venv_python = ROOT / ".venv" / "bin" / "python"
    env = {**os.environ, "OUT": str(tmp_path)}
    if not venv_python.exists():  # no project environment here: name this interpreter instead
        env["TMAKIT_PYTHON"] = sys.executable
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and "ModuleNotFoundError" not in run.stderr
    assert "gpu_check: needs a Hopper GPU: " in run.stderr
    # The project's environment, not whatever python3 is first on PATH.
    assert f"(Python: {venv_python if venv_python.exists() else sys.executable})" in run.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_command_line_in_the_readme_parses():
    """The README's CLI section shows command lines; each must still be one the parser accepts."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The CLI") : readme.index("## Running on a GPU")]
    lines = [
        snippet.split()[1:]
        for snippet in re.findall(r"`(tmakit [^`]+)`", section)
        if not re.search(r"--help|--version|[A-Z]{3,}", snippet)  # placeholders such as COMMAND
    ]
    assert len(lines) >= 8
    parser = build_parser()
    for args in lines:
        parser.parse_args(args)  # a usage error exits (SystemExit 2) and fails the test
