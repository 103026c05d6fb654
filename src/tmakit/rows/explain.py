"""`tmakit plan` and `tmakit explain` of rows by index: `--kernel rows --rows OP:COUNT`, a plan of
COUNT rows of the --shape tensor and, explained, the bulk copies of its first stage fill."""

from __future__ import annotations

import argparse
import math

from ..cli.args import CommandError, digits_at_most, emit, refuse_given
from ..cli.kernels import family_flags
from ..config import dtype_named
from .plan import MAX_INDEX_ENTRIES, RowsPlan

KERNELS = ("rows",)  # the --kernel names this family plans and explains
FLAGS = ("rows",)  # the options only it reads: every other kernel refuses them
WHAT = "rows by index with --rows OP:COUNT"  # what --kernel rows plans, for the help
METAVAR = "gather|scatter|add|min|max:COUNT"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--rows`, on `plan` and `explain` alike."""
    parser.add_argument("--rows", metavar=METAVAR, help="--kernel rows: the op and how many rows it moves")


def rows_plan(args: argparse.Namespace) -> tuple[RowsPlan, list[int]]:
    """`--kernel rows --rows OP:COUNT`: COUNT rows of the --shape tensor (its rows the first
    extent, a row the rest) moved by index with OP, and the entries of the example index its
    first fill reads (the only ones shown): entry i names row (i * 7919) mod rows, spread over the
    tensor. Its ring's depth is --stages where given."""
    refused = (
        "tile",
        "swizzle",
        "layout",
        "pad",
        "highlight",
        "cluster",
        "consumer_warps",
        "copy",
        "reduce",
        *family_flags(but=FLAGS),
    )
    refuse_given(args, refused, "to --kernel rows (whole rows by bulk copies)")
    op, _, count = (args.rows or "").partition(":")
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise CommandError(f"--rows {args.rows!r}: give OP:COUNT, e.g. gather:16384 ({METAVAR})")
    if not digits_at_most(count, MAX_INDEX_ENTRIES):
        raise CommandError(
            f"--rows {args.rows!r}: COUNT is at most {MAX_INDEX_ENTRIES}, the rows kernel's count of "
            "index entries (a 32-bit integer); split the index"
        )
    element = dtype_named(args.dtype)
    rows, row_bytes = args.shape[0], math.prod(args.shape[1:]) * element.nbytes
    stages = {"stages": args.stages} if "stages" in args.given else {}
    plan = RowsPlan(op.strip(), rows, row_bytes, int(count), dtype=element.name, **stages)
    # The first fill's entries alone (at most a stage's rows), never COUNT of them.
    return plan, [(i * 7919) % rows for i in plan.entries(0)]


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel rows --rows OP:COUNT`: the plan's summary."""
    rows, _ = rows_plan(args)
    emit(args, {"kernel": {"kind": "rows", "summary": rows.summary().splitlines()}}, rows.summary())
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel rows --rows OP:COUNT`: the plan, then each bulk copy of its first stage
    fill for an example index, and the bytes that fill's full barrier expects."""
    plan, index = rows_plan(args)
    moves = plan.describe_step(0, index) if plan.count else ["  (no rows: nothing moves)"]
    shown = moves if len(moves) <= 12 else [*moves[:8], f"  ... {len(moves) - 10} more", *moves[-2:]]
    example = "the example index: entry i names row (i * 7919) mod rows"
    text = "\n".join([plan.summary(), "", f"The first stage fill ({example})", *shown])
    emit(
        args, {"kernel": {"kind": "rows", "summary": plan.summary().splitlines(), "first_fill": moves}}, text
    )
    return 0
