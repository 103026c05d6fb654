"""`tmakit plan`: the seed's arithmetic for a configuration, and the grid of its tiles (no GPU)."""

from __future__ import annotations

import argparse
import math

from ..config import LoadConfig, dtype_named, padded_strides
from ..explain import describe_plan
from ..limits import DEFAULT_L2_BYTES, DEFAULT_SM_COUNT
from ..plan import CopyOptions, CopyPlan, Im2colPlan, LoadPlan, MulticastPlan, PipelinePlan, ReducePlan
from ..plan.copy import fits_l2
from .args import (
    COUNT,
    REDUCE_OP,
    CommandError,
    Subparsers,
    add_count,
    add_json,
    add_load_arguments,
    emit,
    refuse_given,
    shown_load,
)

KERNELS = ("load", "copy", "transpose", "reduce", "im2col")


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the seed's arithmetic for a configuration (no GPU)")
    add_load_arguments(parser, "also show each CTA's slice in a cluster sharing every tile by multicast")
    add_count(parser, "--stages", COUNT, "ring stages (default 1: the seed's one-stage kernel)", default=1)
    parser.add_argument(
        "--kernel",
        choices=KERNELS,
        default="load",
        help="what to plan: the tile load (default), tmakit.copy_ of the tensor into one of its layout "
        "(copy) or of the other (transpose), reduce_into_ with --reduce OP, or im2col with --im2col SPEC",
    )
    parser.add_argument(
        "--copy", metavar="NAME=VALUE,...", help="--kernel copy/transpose/reduce: tmakit.CopyOptions fields"
    )
    parser.add_argument(
        "--reduce", type=REDUCE_OP, metavar="OP", help="--kernel reduce: the op (add, max, ...)"
    )
    parser.add_argument(
        "--im2col",
        metavar="kernel=K[,stride=S][,padding=P][,dilation=D][,tile=PIXELSxCHANNELS][,stages=N]",
        help="--kernel im2col: the convolution; --shape is the NHWC activation",
    )
    add_json(parser, "the plan's numbers")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.kernel != "load":
        return _plan_kernel(args)
    refuse_given(args, ("copy", "reduce", "im2col"), "without --kernel copy, transpose, reduce or im2col")
    load, multicast, highlight = shown_load(args)
    if multicast is not None and args.stages > 1:
        multicast = MulticastPlan(load, args.cluster, stages=args.stages)
    numbers = describe_plan(load, highlight, multicast)
    if multicast is not None:
        summary = "\n".join([load.summary(multicast.grid_line()), multicast.summary()])
    elif args.stages > 1:
        ring = PipelinePlan(load, stages=args.stages)
        summary = ring.summary()
        numbers["ring"] = {
            "stages": ring.stages,
            "stage_bytes": ring.stage_bytes,
            "threads_per_block": ring.threads_per_block,
            "shared_memory_requested": ring.smem_bytes,
            "most_stages_that_fit": ring.max_stages,
        }
    else:
        summary = load.summary()
    if multicast is not None and args.stages > 1:
        numbers["clusters"]["stages"] = args.stages
    emit(args, numbers, "\n".join([summary, "", load.diagram(highlight)]))
    return 0


def _plan_kernel(args: argparse.Namespace) -> int:
    """`plan --kernel copy|transpose|reduce|im2col`: the plan tmakit's call makes on an H200 (its
    SM count and L2), from the tensor's flags and the kernel's options."""
    kernel = args.kernel
    refuse_given(args, ("highlight", "cluster", "stages"), f"to --kernel {kernel} (its ring is the copy's)")
    if kernel == "im2col":
        refuse_given(args, ("tile", "swizzle", "layout", "pad", "copy", "reduce"), "to --kernel im2col")
        if args.im2col is None:
            raise CommandError("--kernel im2col plans a convolution: give --im2col kernel=K[,...]")
        plan = Im2colPlan.parse(args.shape, dtype_named(args.dtype).name, args.im2col)
        emit(args, {"kernel": kernel, "summary": plan.summary().splitlines()}, plan.summary())
        return 0
    refuse_given(args, ("im2col",), f"to --kernel {kernel}")
    if kernel == "reduce" and args.reduce is None:
        raise CommandError("--kernel reduce plans a reduce store: give --reduce OP (add, max, ...)")
    if kernel != "reduce":
        refuse_given(args, ("reduce",), f"to --kernel {kernel}")
    options = CopyOptions.parse(args.copy or "")
    element = dtype_named(args.dtype)
    transpose = kernel == "transpose"
    nbytes = element.nbytes
    tensor_bytes = nbytes * math.prod(args.shape)
    tile = args.tile if "tile" in args.given else None
    tile = (
        options.default_tile(element.name, transpose, None, DEFAULT_SM_COUNT, tensor_bytes)
        if tile is None
        else tile
    )
    strides = padded_strides(args.shape, nbytes, args.layout) if args.pad else None
    load = LoadPlan(LoadConfig(args.shape, element.name, tile, args.swizzle, args.layout, strides))
    copy: CopyPlan = options.plan(load, transpose, DEFAULT_SM_COUNT, fits_l2(tensor_bytes, DEFAULT_L2_BYTES))
    plan = ReducePlan(copy, args.reduce) if kernel == "reduce" else copy
    other = {"row": "col", "col": "row"}[args.layout] if transpose else args.layout
    head = f"{kernel:<18}{args.layout}-major source into a {other}-major destination ({options.describe()})"
    emit(
        args, {"kernel": kernel, "summary": [head, *plan.summary().splitlines()]}, f"{head}\n{plan.summary()}"
    )
    return 0
