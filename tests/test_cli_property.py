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
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from time_limit import time_limit
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


# -- huge numbers: every command answers in seconds, whatever a number it is given ---------------
# Each number a flag takes, alone or inside its text, drawn huge: large yet within the 32-bit counts
# (10^8, 2^27, 2^30, 2^31 - 1), past them, 2^40, past int64, and past Python's 4300 digits.
HUGE = ["100000000", "134217728", "1073741824", "2147483647", "2147483648", "4294967296", "1099511627776"]
HUGE += ["9223372036854775808", "1" + "0" * 30, "9" * 5000]
LONG = 1000  # items of a list (--sizes, --many, --reduce's dtypes) or times a flag is repeated
# The longest blocks: 64 x N bytes in 64 x 16 tiles, or N one-column tiles of a column-major 16 x N.
ROWS_BLOCK = "--shape 64xN --tile 64x16 --dtype uint8"
COLS_BLOCK = "--layout col --shape 16xN --tile 16x1 --dtype uint8"


def lines(*texts: str) -> list[list[str]]:
    """Command-line templates, each a text of words split at spaces; N marks the huge number."""
    return [text.split() for text in texts]


def repeated(flag: str, value: str, times: int = LONG) -> str:
    return " ".join([f"{flag} {value}"] * times)


# Each numeric flag of each command, by dest: command lines that give it the number N, with what
# the flag needs beside it to reach the work it sizes (a --kernel, a --stages, a 4-D shape).
LOAD = {
    "shape": lines("--shape NxN", ROWS_BLOCK, COLS_BLOCK, "--shape Nx64x64 --tile 64x64"),
    "tile": lines("--tile NxN", "--tile 1xN", "--shape 64xN --tile 64xN --dtype uint8"),
    "highlight": lines("--highlight N,N", f"--highlight 0,N {ROWS_BLOCK}"),
    "cluster": lines("--cluster NxN", f"--cluster 2x2 {ROWS_BLOCK}"),
    "swizzle": lines("--swizzle N"),
    "json": lines(f"--json - {ROWS_BLOCK}", f"--json - {COLS_BLOCK}"),
}
STAGES = {"stages": lines("--stages N", f"--stages 4 {ROWS_BLOCK}", f"--stages 7 {COLS_BLOCK}")}
IM2COL = "--kernel im2col --shape 2x56x56x64 --im2col"
KERNELS = {
    "rows": lines(
        "--kernel rows --rows gather:N",
        "--kernel rows --rows add:N --dtype fp32 --shape Nx4",
        "--kernel rows --rows scatter:16 --shape Nx16 --stages N",
    ),
    "moe": lines(
        "--kernel moe --moe dispatch:N:8 --shape 64x64",
        "--kernel moe --moe combine:8:N --shape 64x64",
        "--kernel moe --moe combine:2:8 --shape NxN --dtype bf16",
        "--kernel moe --moe dispatch:2:8 --shape 64xN --stages N",
    ),
    "many": lines(
        "--kernel many --many N",
        "--kernel many --many 16xN",
        "--kernel many --many NxN",
        "--kernel many --many " + ",".join(["1099511627776x2"] * LONG),
    ),
    "copy": lines(
        *(f"--kernel copy --copy {field}=N" for field in ("stages", "store_depth", "blocks_per_sm")),
        "--kernel copy --copy tile=NxN",
        "--kernel transpose --shape NxN",
        "--kernel copy --copy tile=1x16,blocks_per_sm=1 --shape Nx16 --dtype uint8",
    ),
    "reduce": lines("--kernel reduce --reduce add --shape Nx16 --dtype fp32"),
    "im2col": lines(
        "--kernel im2col --shape 1xNxNx16 --im2col kernel=1",
        "--kernel im2col --shape Nx8x8x16 --im2col kernel=1,by=windows",
        *(
            f"{IM2COL} kernel=3,{field}=N"
            for field in ("stride", "padding", "dilation", "stages", "tile=Nx16")
        ),
        f"{IM2COL} kernel=N",
    ),
    "sms": lines(
        "--kernel transpose --sms N",
        "--kernel rows --rows gather:100 --sms N",
        "--kernel many --many 4096x10 --sms N",
        "--kernel moe --moe dispatch:2:8 --shape 64x64 --sms N",
        f"{IM2COL} kernel=3 --sms N",
    ),
}
HUGE_FLAGS = {
    "plan": {**LOAD, **STAGES, **KERNELS},
    "explain": {**LOAD, **STAGES, **KERNELS, "consumer_warps": lines("--stages 2 --consumer-warps N")},
    "check": {
        **LOAD,
        **STAGES,
        "full": lines(
            f"--full {ROWS_BLOCK}", f"--full --stages 4 {ROWS_BLOCK}", f"--full --cluster 1x2 {ROWS_BLOCK}"
        ),
    },
    "demo": LOAD,
    "verify": {
        **LOAD,
        **STAGES,
        "sweep": lines("--sweep N"),
        "seed": lines("--sweep 3 --seed N"),
        "timeout": lines("--timeout N"),
        "prefetch": lines("--prefetch N", "--stages 2 --prefetch N"),
    },
    "bench": {
        "shape": lines("--shape NxN", ROWS_BLOCK),
        "sizes": lines("--sizes N", "--sizes " + ",".join(["N"] * LONG), "--sizes " + ",".join(["1"] * LONG)),
        "tile": lines("--tile NxN"),
        "swizzle": lines("--swizzle N"),
        "copy": lines("--kernel copy --copy stages=N", "--kernel copy " + repeated("--copy", "stages=4")),
        "pipeline": lines(
            "--pipeline stages=N",
            "--pipeline stages=4,consumer_warps=N,prefetch_tiles=N",
            "--sizes 1 " + repeated("--pipeline", "stages=4"),
        ),
        "reduce": lines(
            "--kernel reduce --reduce add:" + ",".join(["fp32"] * LONG),
            "--kernel reduce --sizes 1 " + repeated("--reduce", "add"),
        ),
        "prefetch": lines("--prefetch N"),
        "cluster": lines("--cluster NxN"),
        "stages": lines("--cluster 2x2 --stages N"),
        "persistent_clusters": lines("--cluster 2x2 --persistent-clusters N"),
        "samples": lines("--samples N"),
        "json": lines("--json - --sizes N"),
    },
    # lint takes no number: its --kernel names a variant and --json a path (drawn huge all the same).
    "lint": {"json": lines("--json N", "--json - --kernel load")},
}
# The options that take no number (a name, a choice of words, a path): nothing in them to be huge.
NOT_NUMERIC = {"dtype", "layout", "kernel", "mistake", "only", "commit", "plot", "gpu"}
HUGE_SECONDS = 5  # per command line: the DSL's trace of an accepted configuration takes about one


def numeric_options(name: str) -> list[str]:
    """The dests of `name`'s options that take a value, but for those that take no number."""
    actions = [a for a in COMMANDS[name]._actions if a.option_strings and a.nargs != 0 and a.dest != "help"]
    return [a.dest for a in actions if a.dest not in NOT_NUMERIC]


def test_every_numeric_flag_of_every_command_is_drawn_huge():
    """A new flag that takes a number fails here until HUGE_FLAGS gives it one."""
    for name in COMMANDS:
        missing = set(numeric_options(name)) - set(HUGE_FLAGS[name])
        assert not missing, f"tmakit {name}: give {sorted(missing)} huge values in HUGE_FLAGS"


def with_number(template: list[str], huge: str) -> list[str]:
    """`template` with N replaced by `huge` (in values; a flag's name is left as it is)."""
    return [word if word.startswith("-") else word.replace("N", huge) for word in template]


@st.composite
def huge_command_lines(draw: st.DrawFn, name: str, dest: str) -> list[str]:
    """`name` with its flag `dest` given a huge number beside another flag's."""
    argv = [name]
    for flag in (dest, draw(st.sampled_from(sorted(HUGE_FLAGS[name])))):
        argv += with_number(draw(st.sampled_from(HUGE_FLAGS[name][flag])), draw(st.sampled_from(HUGE)))
    return argv


@pytest.mark.parametrize(
    ("name", "dest"), [(name, dest) for name, flags in HUGE_FLAGS.items() for dest in sorted(flags)]
)
def test_any_huge_number_is_answered_in_seconds(name, dest):
    """Every command line with a huge number succeeds or is refused in one line, within
    HUGE_SECONDS: no flag value makes work or memory proportional to it. Each of the flag's
    templates is run with each number of HUGE, then hypothesis adds a second flag's."""
    with (
        tempfile.TemporaryDirectory() as folder,
        contextlib.chdir(folder),
        mock.patch.object(cli.verify, "hopper_gpu", no_gpu),
        mock.patch.object(cli.bench, "hopper_gpu", no_gpu),
        mock.patch.object(cli.demo, "run_demo", lambda *args: True),
    ):

        @settings(derandomize=True, max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
        @given(huge_command_lines(name, dest))
        def answered_in_seconds(argv: list[str]) -> None:
            start = time.perf_counter()
            with time_limit(HUGE_SECONDS):
                code, out, err = run(argv)
            seconds = time.perf_counter() - start
            shown = [word[:40] for word in argv]
            assert seconds < HUGE_SECONDS, (shown, seconds)
            assert "Traceback" not in out + err, (shown, err[-500:])
            assert code in (0, 1, 2), (shown, code, err[-500:])
            if code == 2:
                error = err.splitlines()
                assert len(error) == 1 and error[0].startswith("tmakit: "), (shown, err[-500:])

        for template in HUGE_FLAGS[name][dest]:
            for huge in HUGE:
                answered_in_seconds = example([name, *with_number(template, huge)])(answered_in_seconds)
        answered_in_seconds()
