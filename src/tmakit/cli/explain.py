"""`tmakit explain`: the seed's three questions answered from the real CuTe objects, for a load, a
ring, a cluster, a reduce store or a family's kernel (an im2col box, rows by index, ...) (no GPU)."""

from __future__ import annotations

import argparse

from ..explain import explain, highlight_tile, to_text
from ..plan import REDUCE_OP_ALIASES, REDUCE_OPS, PipelinePlan
from . import kernels
from .args import (
    COUNT,
    CommandError,
    add_json,
    add_load_arguments,
    check_listed_tiles,
    emit,
    load_plan,
    multicast_plan,
    refuse_given,
)
from .kernels import TOO_MANY_TILES_FIX


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_load_arguments(parser, "also trace each CTA's slice of the tile in a cluster of this shape")
    parser.add_argument(
        "--stages", type=COUNT, default=1, metavar="N", help="ring stages (default 1: the seed's kernel)"
    )
    parser.add_argument(
        "--consumer-warps", type=COUNT, default=1, metavar="N", help="warps consuming each stage (default 1)"
    )
    kernels.add_kernel_arguments(
        parser,
        f"what to explain: the tile load or its ring (default), or {kernels.family_help()}",
        f"also explain the reduce store of the tile with this op ({', '.join(REDUCE_OPS)}; "
        f"torch's {', '.join(REDUCE_OP_ALIASES)} too)",
    )
    add_json(parser, "the explanation")


def run(args: argparse.Namespace) -> int:
    alone = kernels.explained_alone(args)  # `explain --im2col SPEC`: the family its flag names
    if alone is not None:
        flag, owner = alone
        if args.kernel not in ("load", *owner.KERNELS):
            raise CommandError(
                f"--{flag.replace('_', '-')} explains {owner.EXPLAINS_ALONE}: drop --kernel {args.kernel}"
            )
        return owner.explain(args)
    if args.kernel != "load":
        return kernels.family_kernels()[args.kernel].explain(args)  # argparse's choices leave no other
    named = ", ".join(kernels.family_kernels())
    refuse_given(args, ("copy", "gpu", "sms", *kernels.family_flags()), f"without --kernel {named}")
    load = load_plan(args)
    if args.consumer_warps > 1 and args.stages == 1:
        raise CommandError("--consumer-warps sets the consumers of a ring: give --stages 2 or more")
    pipeline = PipelinePlan(load, stages=args.stages, consumer_warps=args.consumer_warps)
    multicast = multicast_plan(args, load)
    check_listed_tiles(pipeline.tiles_of_block(0), "explain", TOO_MANY_TILES_FIX)
    result = explain(pipeline, highlight_tile(load, args.highlight), multicast, args.reduce)
    emit(args, result, to_text(result))
    return 0
