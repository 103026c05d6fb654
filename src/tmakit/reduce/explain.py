"""`tmakit plan` and `tmakit explain` of a reduce: `--kernel reduce --reduce OP`, the route
`reduce_into_` takes on --gpu for the --shape tensor reduced into one of its layout (the decision
`reduce_path` reads, `reduce.plan.decide_reduce`, with `--copy`'s options but as_rows and bulk),
then where TMA serves it the plan of its ring (the copy's, whose stores reduce) and, explained,
the seed's questions on that ring with the reduce store of the tile. `--reduce` itself is the
core's: on the plain load, `explain --reduce OP` walks the seed's tile through a reduce store
(`explain.reduce_store`)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

from ..cli.args import PAD_FIX, CommandError, check_listed_tiles, emit, needed
from ..cli.kernels import (
    TOO_MANY_TILES_FIX,
    call_options,
    described_route,
    refuse_call_flags,
    route_lines,
)
from ..config import SEED, LoadConfig, dtype_named, major_of, padded_strides
from ..errors import TmaConfigError
from ..explain import explain as explain_ring
from ..explain import highlight_tile, to_text
from ..limits import GPUS
from ..plan import REDUCE_OPS, LoadPlan
from ..plan.copy_defaults import fits_l2
from ..plan.route import PairFacts, Route, TensorFacts
from ..validate import check_load_config
from .plan import ReduceDecision, ReducePlan, decide_reduce, reduce_plan

KERNELS = ("reduce",)  # the --kernel names this family plans and explains
FLAGS = ()  # --reduce is read by the core's load explain too: no option is only this family's
WHAT = "reduce_into_ with --reduce OP"  # what --kernel reduce plans, for the help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """None of its own: `--reduce OP` and `--copy` are the core's (`cli.kernels.add_kernel_arguments`)."""


@dataclass(frozen=True)
class ReduceChoice:
    """What `--kernel reduce` plans: the decision `reduce_into_` makes on the named GPU
    (`decision`: its route, then the reduce's class, as `reduce_path` reads it), the concrete plan
    of a TMA route's ring (None: torch's op serves the call) and its head line."""

    decision: ReduceDecision
    plan: ReducePlan | None
    head: str

    @property
    def route(self) -> Route:
        return self.decision.route

    def lines(self, gpu: str) -> list[str]:
        """The route on `gpu`, the facts assumed, then the plan (or why there is none)."""
        plan = [] if self.plan is None else [self.head, *self.plan.summary().splitlines()]
        return route_lines(self.route, gpu, plan)

    def described(self, gpu: str) -> dict:
        """`--json`'s kernel entry: the kind, the route, the GPU, the facts assumed and the lines."""
        return {"kind": "reduce", **described_route(self.route, gpu, self.lines(gpu))}


def reduce_choice(args: argparse.Namespace) -> ReduceChoice:
    """`--kernel reduce --reduce OP`: the decision `reduce_into_` makes on --gpu for a destination
    of the --shape tensor's layout (`reduce.plan.decide_reduce`, what `reduce_path` reads) with
    `--copy`'s options (a copy's but as_rows and bulk: a reduce stores through the tensors' own
    tensor maps) and `--tile`, and where TMA serves it the plan of its ring: the tensor (or the
    route's view of its memory) planned as the call plans it, or its class where only the class
    takes the view."""
    refuse_call_flags(args)
    needed(args.reduce, "--reduce", "reduce", f"OP ({', '.join(REDUCE_OPS)})", "add")
    options = call_options(args)
    if options.as_rows or options.bulk:
        raise CommandError("--kernel reduce: a reduce takes the copy's options but as_rows and bulk")
    if "tile" in args.given:
        options = replace(options, tile=args.tile)
    element = dtype_named(args.dtype)
    strides = padded_strides(args.shape, element.nbytes, args.layout) if args.pad else None
    source = LoadConfig(args.shape, element.name, SEED.tile, 0, args.layout, strides)
    _, sm_count, l2_bytes = GPUS[args.gpu]
    facts = PairFacts(*(
        TensorFacts(args.shape, source.element_strides, element.torch_name, element.nbytes, address, 0)
        for address in (1 << 40, 1 << 41)
    ))  # fmt: skip
    decision = decide_reduce(facts, args.reduce, options, (sm_count, l2_bytes), l2_bytes)
    planned = decision.plan
    if planned is None:
        return ReduceChoice(decision, None, "")
    tile = planned.copy.load.config.tile
    if decision.route.view is None:
        shape, layout, view = args.shape, args.layout, ""
    else:
        shape, strides, _ = decision.route.view
        layout, view = major_of(strides, shape), f", on its view {' x '.join(map(str, shape))}"
    config = LoadConfig(shape, element.name, tile, 0, layout, strides)
    try:
        check_load_config(config, stride_fix=PAD_FIX)
    except TmaConfigError:  # a view only its class takes (extent-1 dims dropped): the class's plan
        plan, view = planned, f"{view}, its class (extents given at each call)"
    else:
        fits = fits_l2(element.nbytes * math.prod(shape), l2_bytes)
        copy = options.plan(LoadPlan(config), False, sm_count, fits)  # one layout: no transpose
        plan = reduce_plan(copy, planned.op, planned.kernel, options.stages is not None)
    head = f"{args.kernel:<18}{layout}-major source into a {layout}-major destination{view}"
    return ReduceChoice(decision, plan, f"{head} ({options.describe()})")


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel reduce --reduce OP`: the route on --gpu, then the plan of its ring."""
    choice = reduce_choice(args)
    lines = choice.lines(args.gpu)
    emit(args, {"kernel": choice.described(args.gpu)}, "\n".join(lines))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel reduce --reduce OP`: the route on --gpu and the plan, then the seed's
    questions on block 0 of the copy's ring and the reduce store of its tile."""
    choice = reduce_choice(args)
    lines = choice.lines(args.gpu)
    if choice.plan is None:
        emit(args, {"kernel": choice.described(args.gpu)}, "\n".join(lines))
        return 0
    copy = choice.plan.copy
    check_listed_tiles(copy.ring.tiles_of_block(0), "explain", TOO_MANY_TILES_FIX)
    result = explain_ring(copy.ring, highlight_tile(copy.load, None), None, args.reduce)
    result["kernel"] = choice.described(args.gpu)
    emit(args, result, "\n".join([*lines, "", to_text(result)]))
    return 0
