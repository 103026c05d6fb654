"""Every command with every flag it lists, each given a good value: the command succeeds, finds a
problem (exit 1) or refuses in one line (exit 2), and a flag it accepts changes what it prints. A
flag that a run does not use is refused, never accepted and ignored. torch's names (dtypes,
reduce ops) are taken wherever tmakit's are.

The flags are read from the parser, so a new flag fails here until it has a value below. Runs
in-process: verify and bench stop at "needs a Hopper GPU" on a machine without one, after every
argument is checked."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import pytest

from tmakit import cli
from tmakit.config import TORCH_DTYPE_ALIASES
from tmakit.plan import REDUCE_OP_ALIASES
from tmakit.runtime.device import find_hopper_gpu

COMMANDS = {
    name: parser
    for action in cli.build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
    for name, parser in action.choices.items()
}
NO_GPU = find_hopper_gpu()[0] is None

# A good value of each flag, by dest, unlike its default (None: a flag without a value).
VALUE = {
    "shape": "512x1024",
    "dtype": "bfloat16",
    "tile": "64x64",
    "swizzle": "128",
    "layout": "col",
    "pad": None,
    "highlight": "0,0",
    "cluster": "1x2",
    "json": "-",
    "stages": "2",
    "consumer_warps": "2",
    "reduce": "sum",
    "im2col": "kernel=3,padding=1",
    "mistake": "expect-more",
    "full": None,
    "sweep": "3",
    "seed": "1",
    "timeout": "5",
    "prefetch": "1",
    "sizes": "1",
    "kernel": "copy",
    "only": "hot",
    "copy": "stages=4",
    "rows": "gather:100",
    "moe": "dispatch:2:8",
    "many": "4096x10",
    "gpu": "h100",
    "specialised": None,
    "pipeline": "stages=4",
    "persistent_clusters": "auto",
    "samples": "5",
    "hot_l2": None,
    "ncu": None,
    "commit": "abc1234",
    "plot": "PLOT",
    "sms": "16",
}
# What a flag needs beside it to apply (the run it configures): by dest, then by (command, dest)
# where one command differs; the baseline has it too.
NEEDS = {"swizzle": ["--tile", "64x64"], "pad": ["--shape", "1000x777"]}
CONTEXT = {
    ("check", "full"): ["--shape", "64x8192"],  # a long block: --full replays all of it
    ("explain", "consumer_warps"): ["--stages", "2"],
    ("explain", "im2col"): ["--shape", "2x56x56x64"],
    ("demo", "shape"): [],
    ("plan", "gpu"): ["--kernel", "copy"],  # the GPU whose call a kernel's route and plan are
    ("explain", "gpu"): ["--kernel", "rows", "--rows", "gather:100", "--shape", "1000x64"],
    ("plan", "sms"): ["--kernel", "transpose"],  # an SM budget: the grid of a call's kernel
    ("explain", "sms"): ["--kernel", "rows", "--rows", "gather:100", "--shape", "1000x64"],
}


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


def _cases() -> list[tuple[str, str, list[str]]]:
    cases = []
    for name, parser in COMMANDS.items():
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            cases.append((name, action.dest, action.option_strings[-1]))
    return cases


@pytest.mark.parametrize(("command", "dest", "flag"), _cases(), ids=lambda value: str(value))
def test_every_flag_of_every_command_applies_or_is_refused(tmp_path, command, dest, flag):
    assert dest in VALUE, f"{command} {flag}: give this flag a good value in VALUE"
    value = VALUE[dest]
    if value == "PLOT":
        value = str(tmp_path / "plot.png")
    default = NEEDS.get(dest, ["--shape", "512x1024"] if command == "demo" else [])
    context = CONTEXT.get((command, dest), default)
    baseline = _run(command, *context)
    code, out, err = _run(command, *context, flag, *([] if value is None else [value]))
    assert code in (0, 1, 2) and "Traceback" not in out + err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("tmakit: "), err
        if command in ("verify", "bench") and NO_GPU and "needs a Hopper GPU" in err:
            return  # every argument was checked before the GPU was looked for
        assert flag in err or f"--{dest.replace('_', '-')}" in err, err  # the refusal names the flag
        return
    assert (code, out) != baseline[:2], f"{command} {flag} {value} was accepted and changed nothing"


@pytest.mark.parametrize("alias", sorted(TORCH_DTYPE_ALIASES))
def test_torchs_dtype_names_are_taken_or_pointed_at_the_same_size_type(alias):
    code, out, err = _run("plan", "--dtype", alias, "--json")
    if code == 0:
        assert json.loads(out)["configuration"]["dtype"] in ("fp16", "fp32", "int32", "int64")
    else:
        assert code == 2 and "has no TMA type" in err and "name " in err


@pytest.mark.parametrize("alias", sorted(REDUCE_OP_ALIASES))
def test_torchs_reduce_names_are_taken(alias):
    code, out, _ = _run("explain", "--reduce", alias, "--shape", "256x512")
    assert code == 0 and f"What does a reduce store ({REDUCE_OP_ALIASES[alias]}) do" in out
