"""What the `tmakit` command says to a user's slip: a misspelt flag or choice (the nearest one
named, and the command's own --help), a dtype in capitals (read as it means), a shape with a
negative, zero or malformed dimension (the shape rule, not argparse's confusion over a value that
starts with a minus) and a kernel run without the flag it needs (the flag, its form and an
example that runs). Each: exit 2, one line on stderr, nothing on stdout."""

import argparse

import pytest

from entry_point import one_error_line, tmakit
from tmakit.cli import build_parser, main
from tmakit.reduce.bench import ReduceCase

COMMANDS = {
    name: parser
    for action in build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
    for name, parser in action.choices.items()
}
LONG_FLAGS = [
    (name, flag)
    for name, command in COMMANDS.items()
    for flag in command._option_string_actions
    if flag.startswith("--") and flag != "--help"
]


def refusal(capsys, *argv: str) -> str:
    """The one line `tmakit argv` refuses with: exit 2, nothing on stdout."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("tmakit: "), (code, out, err)
    return lines[0]


def misspelt(flag: str) -> str:
    """`flag` with its middle letter doubled ("--kerrnel"): no flag's prefix, so argparse cannot
    take it for an abbreviation."""
    middle = (len(flag) + 2) // 2
    return flag[:middle] + flag[middle - 1 :]


@pytest.mark.parametrize(("command", "flag"), LONG_FLAGS)
def test_a_misspelt_flag_of_every_command_names_the_nearest_and_the_commands_help(command, flag, capsys):
    typo = misspelt(flag)
    expected = f"tmakit: unknown flag {typo}; did you mean {flag}? (see 'tmakit {command} --help')"
    assert refusal(capsys, command, typo) == expected
    assert refusal(capsys, command, f"{typo}=1") == expected  # --flag=value: the flag alone named


def test_a_misspelt_flag_in_a_fresh_process_is_one_line_and_exit_2():
    run = tmakit("plan", "--kernal", "copy")
    assert run.returncode == 2 and run.stdout == ""
    assert (
        one_error_line(run)
        == "tmakit: unknown flag --kernal; did you mean --kernel? (see 'tmakit plan --help')"
    )


def test_a_flag_near_none_is_refused_without_a_guess(capsys):
    # Every flag starts with "--": compared with them, "--nope" would be near "--moe".
    assert refusal(capsys, "plan", "--nope") == "tmakit: unknown flag --nope (see 'tmakit plan --help')"
    assert (
        refusal(capsys, "explain", "stray")
        == "tmakit: unrecognized arguments: stray (see 'tmakit explain --help')"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["plnn"], "invalid choice: 'plnn' (choose from 'plan', "),
        (["plan", "--kernel", "copyy"], "argument --kernel: invalid choice: 'copyy' (choose from 'load', "),
        (["check", "--mistake", "expect-mroe"], "argument --mistake: invalid choice: 'expect-mroe' ("),
    ],
)
def test_a_misspelt_choice_names_the_nearest(argv, said, capsys):
    line = refusal(capsys, *argv)
    nearest = {"plnn": "plan", "copyy": "copy", "expect-mroe": "expect-more"}[argv[-1]]
    assert said in line and line.endswith(
        f"; did you mean {nearest}? (see '{' '.join(['tmakit', *argv[:-2]])} --help')"
    )


@pytest.mark.parametrize(
    ("text", "name"),
    [("BF16", "bf16"), ("FP16", "fp16"), ("Float16", "fp16"), ("BFloat16", "bf16"), ("HALF", "fp16"),
     ("torch.Float32", "fp32"), ("UInt32", "uint32"), (" Int32 ", "int32")],
)  # fmt: skip
def test_dtypes_are_read_in_any_case_wherever_one_is_taken(text, name):
    parser = build_parser()
    taking = [command for command, sub in COMMANDS.items() if "--dtype" in sub._option_string_actions]
    assert {"plan", "explain", "check", "verify", "demo", "bench"} <= set(taking)
    for command in taking:
        assert parser.parse_args([command, "--dtype", text]).dtype == name
    assert [case.dtype for case in ReduceCase.parse(f"add:{text}", "fp16")] == [name]  # bench --reduce


def test_an_unknown_dtype_is_named_as_typed(capsys):
    line = refusal(capsys, "plan", "--dtype", "FP17")
    assert "argument --dtype: dtype 'FP17' is not supported; tmakit knows fp16, bf16" in line
    assert "(torch's names: float16, bfloat16" in refusal(capsys, "plan", "--dtype", "Float17")
    assert "dtype 'DOUBLE' (float64) has no TMA type" in refusal(capsys, "plan", "--dtype", "DOUBLE")


SHAPE_COMMANDS = [name for name, command in COMMANDS.items() if "--shape" in command._option_string_actions]


@pytest.mark.parametrize("command", SHAPE_COMMANDS)
@pytest.mark.parametrize("shape", ["-5x10", "5x-10", "0x10", "5xx10", "5x1.5", "-1"])
def test_a_shape_that_is_not_positive_integers_names_the_shape_rule(command, shape, capsys):
    said = (
        f"tmakit: argument --shape: '{shape}': each dimension must be a positive integer, written like "
        f"8448x1792 (see 'tmakit {command} --help')"
    )
    assert refusal(capsys, command, "--shape", shape) == said  # a value, though it starts with a minus
    assert refusal(capsys, command, f"--shape={shape}") == said


def test_a_shape_of_the_wrong_rank_names_the_rank_rule(capsys):
    assert "argument --shape: tensor has 6 dimensions; tmakit loads 2 to 5" in refusal(
        capsys, "plan", "--shape", "1x2x3x4x5x6"
    )


def test_other_values_starting_with_a_minus_reach_their_own_rule(capsys):
    assert "tile rows is -64; a TMA box dimension must be 1..256" in refusal(
        capsys, "plan", "--tile", "-64x256"
    )
    assert "cluster -1x2 has no CTAs along one side" in refusal(capsys, "plan", "--cluster", "-1x2")


# What each kernel of `plan` and `explain` cannot plan without: the flag, its form, an example.
NEEDED = {
    "rows": ("--rows gather|scatter|add|min|max:COUNT", "--rows gather:16384"),
    "moe": ("--moe dispatch|combine|combine-grad|fp8-dispatch:TOPK:EXPERTS", "--moe dispatch:8:256"),
    "many": ("--many BYTES[xCOUNT],...", "--many 4096x1000,65536"),
    "reduce": ("--reduce OP (add, min, max, inc, dec, and, or, xor)", "--reduce add"),
    "im2col": (
        "--im2col kernel=K[,stride=S][,padding=P][,dilation=D][,tile=PIXELSxCHANNELS][,stages=N]"
        "[,by=loads|windows]",
        "--im2col kernel=3,padding=1 --shape 2x56x56x64",
    ),
}


@pytest.mark.parametrize("command", ["plan", "explain"])
@pytest.mark.parametrize("kernel", list(NEEDED))
def test_a_kernel_without_its_flag_says_what_to_give_and_the_example_runs(command, kernel, capsys):
    form, example = NEEDED[kernel]
    said = refusal(capsys, command, "--kernel", kernel)
    assert said == f"tmakit: --kernel {kernel} needs {form}, e.g. {example}"
    assert main([command, "--kernel", kernel, *example.split()]) == 0, capsys.readouterr().err


def test_every_kernel_that_needs_a_flag_is_listed():
    """A new kernel that plans nothing from the defaults alone fails here until NEEDED names its flag."""
    kernels = COMMANDS["plan"]._option_string_actions["--kernel"].choices
    refused = []
    for kernel in kernels:
        if main(["plan", "--kernel", kernel]) != 0:
            refused.append(kernel)
    assert sorted(refused) == sorted(NEEDED)


def test_a_kernel_without_its_flag_in_a_fresh_process_is_one_line_and_exit_2():
    run = tmakit("plan", "--kernel", "rows")
    assert run.returncode == 2 and run.stdout == ""
    assert one_error_line(run) == (
        "tmakit: --kernel rows needs --rows gather|scatter|add|min|max:COUNT, e.g. --rows gather:16384"
    )
