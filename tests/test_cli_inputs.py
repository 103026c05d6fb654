"""What the `tmakit` command does with inputs it cannot use: a path it cannot write, a number that
is not finite or out of range, a configuration its plan refuses: one line on stderr and exit 2,
never a traceback. And `check` stays small and quick however large the block it is given."""

import argparse
import os
import time

import pytest

from entry_point import one_error_line, tmakit
from tmakit import LoadConfig, LoadPlan
from tmakit.cli import build_parser, main
from tmakit.demo import _demo_compile_only
from tmakit.model import REPLAYED_TILES, SHOWN_TILES


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def options(command: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of a command that take a value (not --help or a switch)."""
    return [a for a in command._actions if a.option_strings and a.nargs != 0]


def is_numeric(action: argparse.Action) -> bool:
    """An option whose value is a number (or numbers): its type reads "1", "2" or "32" as one."""
    for text in ("1", "2", "32"):
        try:
            value = action.type(text) if action.type else None
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        values = value if isinstance(value, list) else [value]
        if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return True
    return False


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def single_error(code: int, err: str) -> str:
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("tmakit: "), (code, err)
    return lines[0]


JSON_COMMANDS = [
    name for name, command in subcommands().items() if "--json" in command._option_string_actions
]
NUMERIC_FLAGS = [
    (name, flag)
    for name, command in subcommands().items()
    for action in options(command)
    if is_numeric(action)
    for flag in action.option_strings
]
NOT_FINITE_OR_OUT_OF_RANGE = ["inf", "-inf", "nan", "NaN", "1e309", "-1e309", "-1", "1e400", "9" * 30]


def test_the_parser_walk_finds_every_json_command_and_numeric_flag():
    assert {"plan", "explain", "check", "verify", "bench"} <= set(JSON_COMMANDS)
    found = set(NUMERIC_FLAGS)
    for expected in [
        ("bench", "--sizes"),
        ("bench", "--samples"),
        ("bench", "--persistent-clusters"),
        ("verify", "--timeout"),
        ("verify", "--seed"),
        ("explain", "--consumer-warps"),
        ("check", "--stages"),
        ("bench", "--stages"),
        ("plan", "--swizzle"),
    ]:
        assert expected in found, expected


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_an_unwritable_json_path_is_one_line_before_any_work(command, capsys, tmp_path):
    missing = str(tmp_path / "no" / "such" / "out.json")
    for path, reason in [
        (missing, f"folder {tmp_path / 'no' / 'such'} does not exist"),
        (str(tmp_path), f"it is a folder; name a file in it, e.g. {tmp_path / 'out.json'}"),
        ("", "the path is empty"),
        (str(tmp_path / "file" / "out.json"), "is not a folder"),
    ]:
        (tmp_path / "file").touch()
        code, out, err = run(capsys, command, "--json", path)
        line = single_error(code, err)
        assert out == "" and "argument --json: cannot write" in line and reason in line, line
        assert "Hopper" not in line  # refused as it was parsed: before a GPU is looked for
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["plan", "explain", "check"])
def test_a_failing_write_is_one_line_and_exit_2(command, capsys):
    """/dev/full opens fine and fails only as it is written to."""
    code, out, err = run(capsys, command, "--json", "/dev/full")
    line = single_error(code, err)
    assert out == "" and line.startswith("tmakit: cannot write /dev/full: ") and "--json" in line


def test_an_unwritable_plot_path_is_refused_as_it_is_parsed(capsys, tmp_path):
    code, _, err = run(capsys, "bench", "--plot", str(tmp_path))
    assert "argument --plot: cannot write" in single_error(code, err)


@pytest.mark.parametrize(("command", "flag"), NUMERIC_FLAGS)
def test_every_numeric_flag_refuses_non_finite_and_out_of_range_values(command, flag, capsys):
    for value in NOT_FINITE_OR_OUT_OF_RANGE:
        code, out, err = run(capsys, command, f"{flag}={value}")
        line = single_error(code, err)
        assert out == "" and f"argument {flag}" in line, (value, line)


def test_numbers_name_their_range():
    assert "'1e309' is not a number of MiB > 0" in one_error_line(tmakit("bench", "--sizes", "1,1e309"))
    assert "'inf' is not a number of seconds > 0" in one_error_line(tmakit("verify", "--timeout", "inf"))
    assert "'4.0' is not an integer >= 1" in one_error_line(tmakit("explain", "--stages", "4.0"))


def test_a_configuration_the_plan_refuses_is_one_line(capsys):
    """The im2col spec's tile is checked by its plan: whatever it says, it says it in one line."""
    code, out, err = run(capsys, "explain", "--shape", "1x8x8x16", "--im2col", "kernel=3,tile=128")
    single_error(code, err)
    assert out == ""


LARGE_BLOCKS = [
    ["--shape", "64x16777216", "--tile", "64x16", "--dtype", "uint8"],
    ["--stages", "4", "--shape", "1x268435456", "--tile", "1x256", "--dtype", "uint8"],
    ["--shape", "64x2147483648"],
    ["--cluster", "1x2", "--shape", "64x268435456"],
    ["--json", "-", "--shape", "64x1048576", "--tile", "64x16"],
    [
        "--stages",
        "1614",
        "--shape",
        "64x16777216",
        "--tile",
        "1x16",
        "--dtype",
        "uint8",
        "--mistake",
        "skip-empty-wait",
    ],
]


@pytest.mark.parametrize("args", LARGE_BLOCKS, ids=lambda args: " ".join(args[:4]))
def test_check_of_a_large_block_is_quick_and_short(args, capsys):
    start = time.perf_counter()
    code, out, err = run(capsys, "check", *args)
    seconds = time.perf_counter() - start
    assert code == (1 if "--mistake" in args else 0), err
    assert seconds < 20 and len(out.encode()) + len(err.encode()) < 2**20, (seconds, len(out))
    assert "--full replays all" in out  # what was left out is said, and how to get it


def test_check_replays_every_tile_with_full(capsys):
    code, out, _ = run(capsys, "check", "--full", "--shape", "64x8192", "--tile", "64x16", "--dtype", "uint8")
    assert code == 0 and "tile 511: " in out and "not shown" not in out and "--full" not in out
    code, out, _ = run(capsys, "check", "--shape", "64x8192", "--tile", "64x16", "--dtype", "uint8")
    assert code == 0 and f"replayed as a block of its first {REPLAYED_TILES} tiles" in out
    assert f"tile {REPLAYED_TILES - 1}: " in out and f"tile {REPLAYED_TILES}: " not in out
    assert f"{REPLAYED_TILES - SHOWN_TILES} tiles not shown, between tile" in out


def test_a_small_block_is_replayed_and_shown_whole(capsys):
    code, out, _ = run(capsys, "check")
    assert code == 0 and "tile 6: " in out and "--full" not in out and "not shown" not in out


def test_a_rings_first_waits_name_no_phase_before_phase_0(capsys):
    code, out, _ = run(capsys, "check", "--stages", "4")
    assert code == 0 and "phase -" not in out
    assert "tile 0: wait parity 1 -> returns at once (fresh barrier)" in out


def test_the_demos_replay_of_a_large_block_is_short():
    lines = []
    assert _demo_compile_only(LoadPlan(LoadConfig((64, 16777216), "uint8", (64, 16))), lines.append)
    text = "\n".join(lines)
    assert len(text) < 20_000 and f"(its first {REPLAYED_TILES} of 1048576 tiles" in text


@pytest.mark.parametrize(
    "alias, name", [("half", "fp16"), ("float", "fp32"), ("torch.float16", "fp16"), ("long", "int64")]
)
def test_torchs_dtype_names_and_aliases_read_as_tmakits(alias, name):
    """`--dtype half` is `--dtype fp16`, as torch.half is torch.float16; one a TMA load lacks is refused."""
    parser = build_parser()
    assert parser.parse_args(["plan", "--dtype", alias]).dtype == name
    from tmakit.reduce.bench import ReduceCase

    assert [case.dtype for case in ReduceCase.parse("add:half,float", "fp16")] == ["fp16", "fp32"]
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--dtype", "double"])
