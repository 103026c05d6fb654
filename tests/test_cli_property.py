"""Every command line the parser can be handed, each flag given a good value or a wrong one (a
float, a negative, a huge or non-finite number, a string, an empty one, a shape with too few or
too many extents, a path that cannot be written): `tmakit` succeeds, finds a problem (check, exit
1), or refuses in one line on stderr (exit 2). It never raises, never prints a traceback.

The flags are read from the parser, so a new one is drawn too. Nothing compiles or runs long:
demo's kernel is not compiled (its arguments are checked as ever), and verify and bench are told
there is no GPU, as on a machine without one (test_cli.py checks the real refusal)."""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tmakit import cli

COMMANDS = {
    name: parser
    for action in cli.build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
    for name, parser in action.choices.items()
}

# Values a flag may reasonably get, by its dest; flags not named here draw from their choices
# or from the wrong values alone.
GOOD = {
    "shape": ["64x256", "128x512", "2x64x256", "1x16", "1000x777", "1x8x8x16"],
    "tile": ["64x64", "16x16", "1x16", "64x256"],
    "dtype": ["fp16", "uint8", "fp32", "bf16", "float16"],
    "highlight": ["0,0", "1,1", "0,2"],
    "cluster": ["1x2", "2x1", "2x2", "1x4"],
    "stages": ["1", "2", "4"],
    "consumer_warps": ["1", "2"],
    "sweep": ["0", "1", "3"],
    "seed": ["0", "7"],
    "timeout": ["5", "0.5"],
    "prefetch": ["0", "1", "2"],
    "sizes": ["1", "4,16", ""],
    "copy": ["default", "tile=16x256,stages=8", "bulk", "store_depth=2"],
    "pipeline": ["stages=4", "stages=2,consumer_warps=2", "stages=4,persistent"],
    "reduce": ["add", "max:fp16", "add:fp32,bf16"],
    "persistent_clusters": ["auto", "2"],
    "samples": ["10", "1"],
    "commit": ["abc123"],
    "im2col": ["kernel=3", "kernel=3,stride=2", "kernel=3x3,padding=1,tile=64x16", "kernel=1,stages=2"],
}
WRONG = [
    "", " ", "-", "0", "-1", "1.5", "4.0", "1e3", "1e309", "-1e309", "inf", "-inf", "nan",
    "99999999999999999999", "2147483648", "4294967296", "x", "abc", "none", "auto", "True",
    "64x", "x64", "64xx64", "64x64x", "1x2x3x4x5x6x7x8", "0x0", "-64x256", "64x-256", "64,256",
    "1,2,3", "1,", ",", "0x10", "64X256", "64*256", "\u0661\u0662", "kernel=", "kernel=3,tile=128",
    "stages=", "=", "a=b,c", "add:", ":fp16", "fp99", "9" * 5000,
]  # fmt: skip
# --json and --plot draw paths only (a wrong value of another kind would be a file here).
PATHS = ["-", "out.json", "sub/out.json", "no/such/folder/out.json", ".", "", "/dev/full", "plot.png"]


def flag_values(action: argparse.Action) -> st.SearchStrategy[str]:
    if action.dest in ("json", "plot"):
        return st.sampled_from(PATHS)
    good = GOOD.get(action.dest) or [str(choice) for choice in action.choices or []]
    if not good:
        return st.sampled_from(WRONG)
    good_value = st.sampled_from(good)
    return st.one_of(good_value, good_value, good_value, st.sampled_from(WRONG))  # one in four wrong


@st.composite
def command_lines(draw: st.DrawFn, name: str) -> list[str]:
    """`name` with a few of its options, each once or (a repeatable one) several times, in any
    order; now and then a value cut off, a switch given a value, or a stray word."""
    argv = [name]
    actions = [a for a in COMMANDS[name]._actions if a.option_strings and a.dest != "help"]
    for action in draw(st.lists(st.sampled_from(actions), max_size=4, unique=True)):
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:  # a switch
            given_a_value = draw(st.integers(0, 4)) == 2
            argv.append(f"{flag}={draw(st.sampled_from(WRONG))}" if given_a_value else flag)
            continue
        for _ in range(draw(st.integers(1, 2)) if action.__class__.__name__ == "_AppendAction" else 1):
            value = draw(flag_values(action))
            if action.nargs == "?" and value == "-" and draw(st.booleans()):
                argv.append(flag)  # a bare --json
            else:
                argv.append(f"{flag}={value}" if draw(st.booleans()) else flag)
                if not argv[-1].startswith(f"{flag}="):
                    argv.append(value)
    if draw(st.integers(0, 9)) == 5:  # (hypothesis draws the ends of a range more often)
        argv.insert(draw(st.integers(1, len(argv))), draw(st.sampled_from(["--shape", "stray", "--", "-x"])))
    return argv


def no_gpu(command: str) -> str:
    raise cli.CommandError(f"{command} needs a Hopper GPU: none in this test")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_any_command_line_succeeds_or_is_refused_in_one_line(name):
    with (
        tempfile.TemporaryDirectory() as folder,
        contextlib.chdir(folder),  # a path drawn for --json is written here, if anywhere
        mock.patch.object(cli.verify, "hopper_gpu", no_gpu),
        mock.patch.object(cli.bench, "hopper_gpu", no_gpu),
        mock.patch.object(cli.demo, "run_demo", lambda *args: True),
    ):
        (Path(folder) / "sub").mkdir()

        @settings(
            derandomize=True,
            max_examples=200,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(command_lines(name))
        def one_line_or_success(argv: list[str]) -> None:
            code, out, err = run(argv)
            assert "Traceback" not in out + err, (argv, err)
            if code == 2:
                lines = err.splitlines()
                assert len(lines) == 1 and lines[0].startswith("tmakit: "), (argv, err)
                assert out == "", (argv, out[:200])
            else:
                assert code == 0 or (code == 1 and name == "check"), (argv, code, err)
                assert err == "", (argv, err)

        one_line_or_success()
