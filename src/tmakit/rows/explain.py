"""`tmakit plan` and `tmakit explain` of rows by index: `--kernel rows --rows OP:COUNT`, a plan of
COUNT rows of the --shape tensor and, explained, the bulk copies of its first stage fill."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from ..cli.args import CommandError, digits_at_most, emit, needed, refuse_given
from ..cli.kernels import described_route, family_flags, route_lines
from ..config import compact_strides, dtype_named
from ..limits import GPUS
from ..plan.budget import budgeted_sm_count
from ..plan.reduce_ops import REDUCE_OP_ALIASES
from ..plan.route import Route, TensorFacts
from ..validate import one_of
from .plan import MAX_INDEX_ENTRIES, ROW_OPS, RowsFacts, RowsPlan, call_plan, rows_route

KERNELS = ("rows",)  # the --kernel names this family plans and explains
FLAGS = ("rows",)  # the options only it reads: every other kernel refuses them
WHAT = "rows by index with --rows OP:COUNT"  # what --kernel rows plans, for the help
METAVAR = "gather|scatter|add|min|max:COUNT"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--rows`, on `plan` and `explain` alike."""
    parser.add_argument("--rows", metavar=METAVAR, help="--kernel rows: the op and how many rows it moves")


def rows_plan(args: argparse.Namespace) -> tuple[Route, RowsPlan | None, list[int]]:
    """`--kernel rows --rows OP:COUNT`: COUNT rows of the --shape tensor (its rows the first
    extent, a row the rest) moved by index with OP: the route the call takes on --gpu, and where
    bulk copies serve it their plan and the entries of the example index its first fill reads (the
    only ones shown): entry i names row (i * 7919) mod rows, spread over the tensor. Its ring's
    depth is --stages where given."""
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
    op, _, count = needed(args.rows, "--rows", "rows", METAVAR, "gather:16384").partition(":")
    count = count.strip()
    if not (count.isascii() and count.isdigit()):
        raise CommandError(f"--rows {args.rows!r}: give OP:COUNT, e.g. gather:16384 ({METAVAR})")
    if not digits_at_most(count, MAX_INDEX_ENTRIES):
        raise CommandError(
            f"--rows {args.rows!r}: COUNT is at most {MAX_INDEX_ENTRIES}, the rows kernel's count of "
            "index entries (a 32-bit integer); split the index"
        )
    op = REDUCE_OP_ALIASES.get(op.strip(), op.strip())  # torch's names (amax, amin) read as ours
    one_of(op, "rows op", ROW_OPS)
    element = dtype_named(args.dtype)
    rows, row_bytes = args.shape[0], math.prod(args.shape[1:]) * element.nbytes
    budgeted_sm_count(args.sms, GPUS[args.gpu][1])  # refused past the GPU on every route, as the call
    route = route_on_gpu(args, op, int(count))
    if route.path != "tma-rows-bulk":
        return route, None, []
    stages = {"stages": args.stages} if "stages" in args.given else {}
    # the call's plan (its ring, on --sms's budget), for these rows and this count
    called = call_plan(op, row_bytes, element.name, GPUS[args.gpu][1], args.sms)
    plan = replace(called, rows=rows, count=int(count), **stages)
    # The first fill's entries alone (at most a stage's rows), never COUNT of them.
    return route, plan, [(i * 7919) % rows for i in plan.entries(0)]


def route_on_gpu(args: argparse.Namespace, op: str, count: int) -> Route:
    """The route a rows call takes on --gpu (`rows_route`, what `rows_path` reads): `op` on a
    compact table of --shape, an int64 index of `count` entries, the compact tensor of its rows."""
    element = dtype_named(args.dtype)
    shape = tuple(args.shape)
    table = TensorFacts(shape, compact_strides(shape), element.torch_name, element.nbytes, 1 << 40, 0)
    rows_shape = (count, *shape[1:])
    strides = compact_strides(rows_shape)
    compact = TensorFacts(rows_shape, strides, element.torch_name, element.nbytes, 1 << 41, 0)
    return rows_route(RowsFacts(op, table, compact, 0, "int64", gpu=GPUS[args.gpu][0]))


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel rows --rows OP:COUNT`: the route the call takes on --gpu, then the plan."""
    route, rows, _ = rows_plan(args)
    lines = route_lines(route, args.gpu, [] if rows is None else rows.summary().splitlines())
    emit(args, {"kernel": {"kind": "rows", **described_route(route, args.gpu, lines)}}, "\n".join(lines))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel rows --rows OP:COUNT`: the route on --gpu, the plan, then each bulk copy
    of its first stage fill for an example index, and the bytes that fill's full barrier expects."""
    route, plan, index = rows_plan(args)
    if plan is None:
        lines = route_lines(route, args.gpu, [])
        emit(args, {"kernel": {"kind": "rows", **described_route(route, args.gpu, lines)}}, "\n".join(lines))
        return 0
    moves = plan.describe_step(0, index) if plan.count else ["  (no rows: nothing moves)"]
    shown = moves if len(moves) <= 12 else [*moves[:8], f"  ... {len(moves) - 10} more", *moves[-2:]]
    example = "the example index: entry i names row (i * 7919) mod rows"
    lines = route_lines(route, args.gpu, plan.summary().splitlines())
    text = "\n".join([*lines, "", f"The first stage fill ({example})", *shown])
    kernel = {"kind": "rows", **described_route(route, args.gpu, lines), "first_fill": moves}
    emit(args, {"kernel": kernel}, text)
    return 0
