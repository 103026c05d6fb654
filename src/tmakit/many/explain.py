"""`tmakit plan` and `tmakit explain` of a grouped copy: `--kernel many --many BYTES[xCOUNT],...`,
the plan of a list of tensors of those sizes and, explained, the chunks of block 0's first fills."""

from __future__ import annotations

import argparse
from dataclasses import replace

from ..cli.args import CommandError, digits_at_most, emit, needed, refuse_given
from ..cli.kernels import family_flags
from ..limits import DEFAULT_SM_COUNT, MAX_DEVICE_INT
from .plan import ManyPlan, call_plan

KERNELS = ("many",)  # the --kernel names this family plans and explains
FLAGS = ("many",)  # the options only it reads: every other kernel refuses them
WHAT = "a grouped copy of tensors with --many SIZES"  # what --kernel many plans, for the help
METAVAR = "BYTES[xCOUNT],..."
MAX_MANY_TENSORS, MAX_TENSOR_BYTES = 1_000_000, 2**40  # what --many describes
# The chunks (four int64 words and a few temporaries each) `explain --kernel many` tables: 2^20
# take a fraction of a second and ~100 MB; the 2^31 the kernel counts would take hundreds of GB.
MAX_TABLE_CHUNKS = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--many`, on `plan` and `explain` alike."""
    parser.add_argument("--many", metavar=METAVAR, help="--kernel many: the tensors' sizes in bytes")


def many_plan(args: argparse.Namespace) -> tuple[ManyPlan, list[int]]:
    """`--kernel many --many BYTES[xCOUNT],...`: a grouped copy of tensors of those sizes in
    bytes (`4096x1000`: a thousand of 4 KiB), its ring's depth --stages where given."""
    refused = ("shape", "dtype", "tile", "swizzle", "layout", "pad", "highlight", "cluster", "consumer_warps",
               "copy", "reduce", "gpu", *family_flags(but=FLAGS))  # fmt: skip
    refuse_given(args, refused, "to --kernel many (tensors by their bytes, --many)")
    sizes: list[int] = []
    for part in needed(args.many, "--many", "many", METAVAR, "4096x1000,65536").split(","):
        size, times, count = part.strip().partition("x")
        if not (size.isascii() and size.isdigit() and (not times or (count.isascii() and count.isdigit()))):
            raise CommandError(
                f"--many {args.many!r}: give tensor sizes in bytes, e.g. 4096x1000,65536 ({METAVAR})"
            )
        left = MAX_MANY_TENSORS - len(sizes)
        if not (digits_at_most(size, MAX_TENSOR_BYTES) and digits_at_most(count or "1", left)):
            most = f"at most {MAX_MANY_TENSORS} tensors of at most {MAX_TENSOR_BYTES} bytes"
            raise CommandError(f"--many {args.many!r}: {most}")
        sizes += [int(size)] * (int(count) if count else 1)
    stages = {"stages": args.stages} if "stages" in args.given else {}
    plan = replace(call_plan(DEFAULT_SM_COUNT, args.sms), **stages)  # the call's, on --sms's budget
    if plan.counts(sizes)[1] > MAX_DEVICE_INT:
        raise CommandError(f"--many {args.many!r}: more than {MAX_DEVICE_INT} chunks, the kernel's count")
    return plan, sizes


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel many --many SIZES`: the group's counts and the plan's summary (no table)."""
    many, sizes = many_plan(args)
    steps, chunks = many.counts(sizes)
    head = f"tensors           {len(sizes)}, {sum(sizes)} bytes, {steps} step(s), {chunks} chunk(s)"
    summary = "\n".join([head, many.summary(steps, chunks)])
    emit(args, {"kernel": {"kind": "many", "summary": summary.splitlines()}}, summary)
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel many --many SIZES`: the grouped copy's plan, then block 0's first fills:
    the chunks each step moves, its bulk copies and the bytes its stage's full barrier expects."""
    plan, sizes = many_plan(args)
    steps, chunks = plan.counts(sizes)
    if chunks > MAX_TABLE_CHUNKS:
        raise CommandError(
            f"explain --kernel many builds the group's whole chunk table to show its first fills, at most "
            f"{MAX_TABLE_CHUNKS} chunks; these tensors make {chunks}: fewer bytes, or `tmakit plan "
            "--kernel many`, which counts them without a table"
        )
    fills = plan.describe_first_fills(sizes)
    where = "block 0's first fills (the tensors packed one after another into a second buffer)"
    text = "\n".join([plan.summary(steps, chunks), "", where, *fills])
    emit(
        args, {"kernel": {"kind": "many", "summary": plan.summary().splitlines(), "first_fills": fills}}, text
    )
    return 0
