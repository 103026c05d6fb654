"""`tmakit plan` and `tmakit explain` of mixture-of-experts movement: `--kernel moe --moe
OP:TOPK:EXPERTS` with `--shape TOKENSxHIDDEN`, the ring of a dispatch, combine, combine's
backward (combine-grad) or fp8 dispatch (fp8-dispatch: rows quantized to e4m3) of those tokens
and, explained, the copies of its first step and the bytes its full barrier expects."""

from __future__ import annotations

import argparse

from ..cli.args import CommandError, emit, needed, refuse_given
from ..cli.kernels import described_route, family_flags, route_lines
from ..config import compact_strides, dtype_named
from ..errors import TmaConfigError
from ..limits import GPUS, WARP_THREADS
from ..plan.budget import budget_grid
from ..plan.route import Route, TensorFacts
from .plan import (
    COMBINE_DTYPES,
    QUANT_BLOCK,
    QUANTIZE_OP,
    VECTOR_BYTES,
    CombinePlan,
    DispatchPlan,
    MoeFacts,
    QuantizePlan,
    check_routing_sizes,
    dispatch_rows,
    moe_route,
)

KERNELS = ("moe",)
FLAGS = ("moe",)
WHAT = (
    "a mixture-of-experts dispatch, combine, combine's backward or fp8 dispatch with --moe OP:TOPK:EXPERTS "
    "and --shape TOKENSxHIDDEN"
)
OPS = ("dispatch", "combine", "combine-grad", QUANTIZE_OP)
METAVAR = "dispatch|combine|combine-grad|fp8-dispatch:TOPK:EXPERTS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--moe`, on `plan` and `explain` alike."""
    parser.add_argument("--moe", metavar=METAVAR, help="--kernel moe: the op, slots a token and experts")


def moe_plan(
    args: argparse.Namespace,
) -> tuple[Route, DispatchPlan | CombinePlan | QuantizePlan | None, int, int]:
    """(route on --gpu, the plan where the kernels serve, tokens, topk) of `--moe OP:TOPK:EXPERTS`
    on --shape TOKENSxHIDDEN tokens of --dtype."""
    refused = ("tile", "swizzle", "layout", "pad", "highlight", "cluster", "consumer_warps", "copy", "reduce")
    refuse_given(args, (*refused, *family_flags(but=FLAGS)), "to --kernel moe (whole rows by bulk copies)")
    parts = needed(args.moe, "--moe", "moe", METAVAR, "dispatch:8:256").split(":")
    if len(parts) != 3 or not all(part.strip().isascii() and part.strip().isdigit() for part in parts[1:]):
        raise CommandError(f"--moe {args.moe!r}: give OP:TOPK:EXPERTS, e.g. dispatch:8:256 ({METAVAR})")
    op, topk, experts = parts[0].strip(), int(parts[1]), int(parts[2])
    if op not in OPS:
        raise CommandError(f"--moe {args.moe!r}: OP is {', '.join(OPS)}")
    grad = op == "combine-grad"
    op = "combine" if grad else op
    if len(args.shape) != 2:
        raise CommandError(f"--shape {'x'.join(map(str, args.shape))}: --kernel moe takes TOKENSxHIDDEN")
    tokens, hidden = args.shape
    element = dtype_named(args.dtype)
    try:
        check_routing_sizes(tokens, topk, experts, 1)
    except TmaConfigError as error:
        raise CommandError(str(error)) from None
    if op == "combine" and element.name not in COMBINE_DTYPES:
        raise CommandError(f"--dtype {args.dtype}: the combine sums {', '.join(COMBINE_DTYPES)}")
    if op == QUANTIZE_OP and hidden % QUANT_BLOCK:
        raise CommandError(
            f"--shape: hidden {hidden}; the fp8 dispatch's scales cover blocks of {QUANT_BLOCK}"
        )
    moved = (dispatch_rows(tokens, topk, experts, 1) if op == "combine" else tokens, hidden)
    facts = TensorFacts(moved, compact_strides(moved), element.torch_name, element.nbytes, 1 << 40, 0)
    out_rows = tokens if op == "combine" else dispatch_rows(tokens, topk, experts, 1)
    grid = budget_grid(args.sms, GPUS[args.gpu][1])  # the call's, on --sms's budget (refused past the GPU)
    route = moe_route(MoeFacts(op, facts, out_rows, 0, topk))
    if route.path != "tma-rows-bulk":
        return route, None, tokens, topk
    stages = {"stages": args.stages} if "stages" in args.given else {}
    stages.update(grid)
    row_bytes = hidden * element.nbytes
    if op == "dispatch":
        return route, DispatchPlan(row_bytes, topk, **stages), tokens, topk
    if op == QUANTIZE_OP:
        return route, QuantizePlan(hidden, topk, element.name, **stages), tokens, topk
    return route, CombinePlan(row_bytes, topk, element.name, grad=grad, **stages), tokens, topk


def first_step(plan: DispatchPlan | CombinePlan | QuantizePlan, tokens: int) -> list[str]:
    """The copies of block 0's first step, and what its full barrier expects."""
    if isinstance(plan, (DispatchPlan, QuantizePlan)):
        moved = min(plan.tokens_per_stage, tokens)
        nbytes = plan.expected_bytes(tokens, 0)
        load = [
            f"  load   x rows 0-{moved - 1} -> stage 0  (cp.async.bulk, one copy of {nbytes} bytes)",
            f"  the full barrier expects {nbytes} bytes (mbarrier.arrive.expect_tx by one thread)",
        ]
    if isinstance(plan, QuantizePlan):
        return [
            *load,
            f"  quantize {moved * plan.blocks} blocks of {QUANT_BLOCK}, a half-warp each "
            f"({plan.consumer_warps} warps, two blocks a warp at a time): amax by 4 shuffles, scale amax "
            f"/ 448 ({plan.scale_format}), the e4m3 bytes to the stage's fp8 rows at {plan.loaded_bytes}, "
            "the scale to each slot's row of the scales (st.global)",
            f"  fence.proxy.async, the {plan.consumer_warps} consumer warps meet (bar.sync 1)",
            f"  store  each fp8 row to its {plan.topk} rows row_map[t, 0..{plan.topk - 1}]  "
            f"(cp.async.bulk.global.shared::cta, {plan.hidden} bytes each, a consumer lane each)",
        ]
    if isinstance(plan, DispatchPlan):
        return [
            *load,
            f"  store  each of the {moved} row(s) to its {plan.topk} rows row_map[t, 0..{plan.topk - 1}]  "
            f"(cp.async.bulk.global.shared::cta, {plan.row_bytes} bytes each; a slot of -1 stores nothing)",
        ]
    load = (
        f"  load   lane j: y row row_map[0, j], bytes 0-{plan.chunk_bytes - 1} -> stage 0 at j x "
        f"{plan.chunk_bytes}  (cp.async.bulk, j < {plan.topk}); the row and its weight noted in "
        f"the stage's table at {plan.table_offset}, which the consumers read"
    )
    threads = f"{plan.consumer_warps * WARP_THREADS} threads, {VECTOR_BYTES} bytes of each slot a thread"
    if plan.grad:
        return [
            f"  before the ring, one launch: the rows of y's gradient no slot names zeroed ({VECTOR_BYTES} "
            "bytes a thread), the others left to the ring",
            load,
            f"  load   lane {plan.grad_lane}: the output's gradient g row 0, the same bytes -> stage 0 at "
            f"{plan.slot_offset(plan.topk)}",
            f"  the full barrier expects {plan.chunk_bytes} bytes a slot whose row exists and "
            f"{plan.chunk_bytes} for g (each lane declares its own), {plan.loaded_bytes} for a token with "
            f"{plan.topk}; then one arrival",
            f"  store  {threads}: probs[0, j] * g in fp32 to row row_map[0, j] of y's gradient (st.global)",
            f"  sum    each slot's g . y[row] in fp32, a warp's lanes reduced, {plan.consumer_warps} partial "
            f"sums written (of {plan.partials} a slot, summed after the kernel); the stage is freed",
        ]
    return [
        load,
        f"  the full barrier expects {plan.chunk_bytes} bytes a slot whose row exists (each lane declares "
        f"its own, mbarrier.expect_tx), {plan.loaded_bytes} for a token with {plan.topk}; then one arrival",
        f"  sum    {threads}, fp32, slots in order",
        f"  store  out row 0, bytes 0-{plan.chunk_bytes - 1}  (st.global, {VECTOR_BYTES} bytes a "
        "thread); the stage is freed",
    ]


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel moe --moe OP:TOPK:EXPERTS`: the route on --gpu, then the ring."""
    route, ring, tokens, _ = moe_plan(args)
    lines = route_lines(route, args.gpu, [] if ring is None else ring.summary(tokens).splitlines())
    emit(args, {"kernel": {"kind": "moe", **described_route(route, args.gpu, lines)}}, "\n".join(lines))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel moe --moe OP:TOPK:EXPERTS`: the route, the ring, then its first step."""
    route, ring, tokens, _ = moe_plan(args)
    lines = route_lines(route, args.gpu, [] if ring is None else ring.summary(tokens).splitlines())
    steps = [] if ring is None or not tokens else first_step(ring, tokens)
    text = "\n".join([*lines, *(["", "The first step (block 0)", *steps] if steps else [])])
    emit(
        args,
        {"kernel": {"kind": "moe", **described_route(route, args.gpu, lines), "first_step": steps}},
        text,
    )
    return 0
