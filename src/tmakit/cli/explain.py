"""`tmakit explain`: the seed's three questions answered from the real CuTe objects, for a load, a
ring, a cluster, a reduce store or an im2col box (no GPU)."""

from __future__ import annotations

import argparse

from ..explain import (
    explain,
    explain_im2col,
    explain_windows,
    highlight_tile,
    im2col_to_text,
    to_text,
    windows_to_text,
)
from ..plan import REDUCE_OP_ALIASES, REDUCE_OPS, PipelinePlan
from . import kernels
from .args import (
    COUNT,
    CommandError,
    Subparsers,
    add_json,
    add_load_arguments,
    check_listed_tiles,
    emit,
    load_plan,
    multicast_plan,
    refuse_given,
)
from .kernels import TOO_MANY_TILES_FIX


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "explain", help="the seed's three questions answered from the real CuTe objects (no GPU)"
    )
    add_load_arguments(parser, "also trace each CTA's slice of the tile in a cluster of this shape")
    parser.add_argument(
        "--stages", type=COUNT, default=1, metavar="N", help="ring stages (default 1: the seed's kernel)"
    )
    parser.add_argument(
        "--consumer-warps", type=COUNT, default=1, metavar="N", help="warps consuming each stage (default 1)"
    )
    kernels.add_kernel_arguments(
        parser,
        "what to explain: the tile load or its ring (default), the ring tmakit.copy_ runs into the "
        "tensor's layout (copy) or the other (transpose), an im2col box (with --im2col SPEC), or "
        f"{kernels.family_help()}",
        f"also explain the reduce store of the tile with this op ({', '.join(REDUCE_OPS)}; "
        f"torch's {', '.join(REDUCE_OP_ALIASES)} too)",
        "explain a box of tmakit.im2col instead: --shape is the NHWC activation (NxHxWxC), "
        "--highlight picks (row block, column tile) of the patch matrix; K, S, P, D an int or HxW",
    )
    add_json(parser, "the explanation")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.im2col is not None and args.kernel not in ("load", "im2col"):
        raise CommandError(f"--im2col explains an im2col box: drop --kernel {args.kernel}")
    if args.im2col is not None or args.kernel == "im2col":
        return _explain_im2col(args)
    family = kernels.family_kernels().get(args.kernel)
    if family is not None:
        return family.explain(args)
    if args.kernel != "load":
        return _explain_copy(args)  # copy, transpose: argparse's choices leave no other
    named = ", ".join(("copy", "transpose", *kernels.family_kernels()))
    refuse_given(args, ("copy", "gpu", *kernels.family_flags()), f"without --kernel {named}")
    load = load_plan(args)
    if args.consumer_warps > 1 and args.stages == 1:
        raise CommandError("--consumer-warps sets the consumers of a ring: give --stages 2 or more")
    pipeline = PipelinePlan(load, stages=args.stages, consumer_warps=args.consumer_warps)
    multicast = multicast_plan(args, load)
    check_listed_tiles(pipeline.tiles_of_block(0), "explain", TOO_MANY_TILES_FIX)
    result = explain(pipeline, highlight_tile(load, args.highlight), multicast, args.reduce)
    emit(args, result, to_text(result))
    return 0


def _explain_copy(args: argparse.Namespace) -> int:
    """`explain --kernel copy|transpose`: the route `tmakit.copy_` takes on --gpu, then, where TMA
    serves it, the seed's three questions of its ring."""
    choice = kernels.copy_choice(args)
    lines = choice.lines(args.gpu)
    if choice.plan is None:
        emit(args, {"kernel": {"kind": args.kernel, **choice.described(args.gpu)}}, "\n".join(lines))
        return 0
    copy = choice.plan
    check_listed_tiles(copy.ring.tiles_of_block(0), "explain", TOO_MANY_TILES_FIX)
    result = explain(copy.ring, highlight_tile(copy.load, None), None, None)
    result["kernel"] = {"kind": args.kernel, **choice.described(args.gpu)}
    emit(args, result, "\n".join([*lines, "", to_text(result)]))
    return 0


def _explain_im2col(args: argparse.Namespace) -> int:
    """`explain --im2col SPEC` (or `--kernel im2col`): one box of the patch matrix."""
    choice = kernels.im2col_plan(args, "with --im2col")
    if choice.call.windows:
        if args.highlight is not None:
            raise CommandError(
                "--highlight marks a box of the im2col loads; this call takes the windows copy "
                "(add by=loads to the --im2col spec to explain the loads)"
            )
        result = {
            "route": choice.reason,
            "chosen": choice.how,
            **explain_windows(choice.call.conv, choice.plan.dtype),
        }
        emit(args, result, f"route: {choice.reason} ({choice.how})\n{windows_to_text(result)}")
        return 0
    result = explain_im2col(choice.plan, args.highlight)
    emit(args, result, im2col_to_text(result))
    return 0
