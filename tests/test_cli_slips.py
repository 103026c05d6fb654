"""What the `tmakit` command says to a user's slip: a dtype in capitals (read as it means).
An unknown one: exit 2, one line on stderr, nothing on stdout."""

import argparse

import pytest

from tmakit.cli import build_parser, main
from tmakit.reduce.bench import ReduceCase

COMMANDS = {
    name: parser
    for action in build_parser()._actions
    if isinstance(action, argparse._SubParsersAction)
    for name, parser in action.choices.items()
}


def refusal(capsys, *argv: str) -> str:
    """The one line `tmakit argv` refuses with: exit 2, nothing on stdout."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("tmakit: "), (code, out, err)
    return lines[0]


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
