"""Mixture-of-experts token movement: the plans of its two rings and the rule that routes a call.

A layer of T tokens, each routed to up to `topk` of E experts, moves rows of `row_bytes` twice:

- dispatch ("permute"): each token's row to the rows of its experts, expert-major (expert e's
  tokens in token order, its group padded with zero rows to a multiple of `align`), `out_rows` =
  T*topk + E*(align-1) rows in all, so the size is known before the routing is read. The ring
  loads a stage of consecutive tokens' rows with one bulk copy (`x` is read once), and the
  consumer lanes store each row to each of its destinations (`row_map[t, j]`): topk stores a row.
- combine ("unpermute"): out[t] = sum over j of probs[t, j] * y[row_map[t, j]], accumulated in
  fp32 in the order j = 0, 1, ... (a slot with no row adds nothing). The ring's step is a token's
  `chunk_bytes` of columns: the producer lanes load the topk rows' chunks (one bulk copy each), the
  consumer warps sum them, 16 bytes a thread, and store the chunk of the token's row.

Both read the row map the routing makes on the device (`moe.call`): no host synchronisation, so a
CUDA graph may capture a layer. A slot whose row is outside the tensor moves nothing (the kernels
check each before they form an address). Pure Python: this module plans and checks, `moe.model`
replays a plan's copies on the CPU, `moe.kernel` runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import DTYPES
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, GLOBAL_BASE_ALIGN, MAX_DEVICE_INT, MAX_TX_BYTES, WARP_THREADS
from ..plan.ring import STAGE_TARGET_BYTES, PipelinePlan, check_bulk_ring, stand_in_ring
from ..plan.route import NOT_SM90, NOT_SM90_REASON, Route, TensorFacts, call_rule, torch_route
from ..validate import check_field_types, one_of

# What the combine sums (in fp32) and writes: the dtypes of expert outputs.
COMBINE_DTYPES = ("bf16", "fp16", "fp32")
COMBINE_TORCH_DTYPES = {DTYPES[name].torch_name: name for name in COMBINE_DTYPES}  # by torch's names
VECTOR_BYTES = 16  # a consumer thread's share of a chunk: one 16-byte shared load per slot
MAX_TOPK = 32  # a token's slots are one warp's lanes (the combine's producer loads one each)
# The dispatch's ring: stages of a whole number of token rows, at least this deep, so that a
# block keeps tens of KiB of loads in flight (a two-stage ping-pong starves on long rows).
DISPATCH_STAGES = 4
# The combine's ring: a step's loads are a token's topk chunks; deep enough for the rows in flight
# a block needs at the copy rate, and four consumer warps so that the sums keep up.
COMBINE_STAGES = 6
COMBINE_WARPS = 4
COMBINE_TARGET_BYTES = STAGE_TARGET_BYTES  # a step's loads: at most this, a whole chunk a slot


def dispatch_rows(tokens: int, topk: int, experts: int, align: int) -> int:
    """The rows of the dispatch's output: every token's topk rows and each expert's padding at
    most (align - 1 rows), whatever the routing."""
    return tokens * topk + experts * (align - 1)


def check_routing_sizes(tokens: int, topk: int, experts: int, align: int) -> None:
    """Refuse sizes no routing can take (TmaConfigError): each a positive count, the output's
    rows within the kernels' 32-bit row numbers."""
    for name, value in (("tokens", tokens), ("topk", topk), ("experts", experts), ("align", align)):
        if type(value) is not int or value < (0 if name == "tokens" else 1):
            least = "zero or more" if name == "tokens" else "one or more"
            raise TmaConfigError(f"{name} is {value!r}; it must be an integer, {least}")
    if topk > MAX_TOPK:
        raise TmaConfigError(f"topk is {topk}; a token takes at most {MAX_TOPK} experts (one warp's lanes)")
    rows = dispatch_rows(tokens, topk, experts, align)
    if rows > MAX_DEVICE_INT:
        raise TmaConfigError(
            f"{tokens} tokens x top-{topk} + {experts} experts x (align {align} - 1) = {rows} rows; the "
            f"row map holds 32-bit rows (at most {MAX_DEVICE_INT}): split the tokens"
        )


def whole_rows_rule(row_bytes: int) -> str | None:
    """Why bulk copies cannot move a row of `row_bytes` (None: they can)."""
    if row_bytes < 1:
        return "rows of no bytes"
    if row_bytes % GLOBAL_BASE_ALIGN:
        return f"a row is {row_bytes} bytes; a bulk copy moves a multiple of {GLOBAL_BASE_ALIGN}"
    return None


@dataclass(frozen=True)
class DispatchPlan:
    """The dispatch's ring for rows of `row_bytes` and `topk` destinations a row:
    `tokens_per_stage` consecutive rows of `x` loaded by one bulk copy a stage, `stages` deep,
    steps dealt to a persistent grid of at most `sm_count` blocks. Refused where its kernel could
    not run it (TmaConfigError)."""

    row_bytes: int
    topk: int
    stages: int = DISPATCH_STAGES
    sm_count: int = DEFAULT_SM_COUNT

    def __post_init__(self) -> None:
        check_field_types(self)
        rule = whole_rows_rule(self.row_bytes)
        if rule is not None:
            raise TmaConfigError(rule)
        check_routing_sizes(1, self.topk, 1, 1)
        rows = self.tokens_per_stage
        full = f" ({rows} token row(s) of {self.row_bytes} bytes)"
        check_bulk_ring(self.stages, self.sm_count, rows * self.row_bytes, full, "rows this long are torch's")

    @property
    def tokens_per_stage(self) -> int:
        """Token rows a stage holds: as many as fit the stage target and one barrier phase."""
        return max(1, min(STAGE_TARGET_BYTES // self.row_bytes, MAX_TX_BYTES // self.row_bytes))

    @property
    def stage_bytes(self) -> int:
        return self.tokens_per_stage * self.row_bytes

    @property
    def stores_in_flight(self) -> int:
        """Store groups a consumer lane keeps in flight before the oldest must have read its
        stage: all but one stage's."""
        return max(1, self.stages - 1)

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring: full stages of token rows, a producer and a consumer warp, persistent."""
        return stand_in_ring(self.stage_bytes, self.stages, self.sm_count)

    def steps(self, tokens: int) -> int:
        return math.ceil(tokens / self.tokens_per_stage)

    def expected_bytes(self, tokens: int, step: int) -> int:
        """What step `step`'s full barrier expects: its tokens' rows, one copy."""
        first = step * self.tokens_per_stage
        return max(0, min(self.tokens_per_stage, tokens - first)) * self.row_bytes

    def summary(self, tokens: int) -> str:
        steps = self.steps(tokens)
        return "\n".join(
            [
                f"dispatch          {tokens} token rows of {self.row_bytes} bytes, each stored to its "
                f"top-{self.topk} rows",
                f"stages            {self.stages} x {self.tokens_per_stage} token row(s) ({self.stage_bytes} "
                f"bytes, one bulk load); {self.pipeline.smem_bytes} bytes of shared memory",
                f"grid              {min(max(steps, 1), self.sm_count)} persistent block(s), {steps} stage "
                "fill(s)",
                f"in flight         up to {self.stages * self.stage_bytes} bytes of loads a block, "
                f"{self.stores_in_flight} stage(s) of stores a lane before the oldest must be read",
                f"each fill         1 bulk load, its full barrier expects {self.stage_bytes} bytes for a "
                f"full stage; then up to {self.tokens_per_stage * self.topk} bulk stores of one row",
            ]
        )


def combine_chunk_bytes(row_bytes: int, topk: int, threads: int = COMBINE_WARPS * WARP_THREADS) -> int:
    """The columns of a combine step: the longest run of 16-byte vectors that divides the row
    (a row's chunks are then all alike) and whose topk copies fit a step's target, a multiple of
    the consumer `threads` where one is (every thread then sums as many vectors)."""
    vectors = row_bytes // VECTOR_BYTES
    most = max(1, COMBINE_TARGET_BYTES // (topk * VECTOR_BYTES))
    runs = [d for d in range(1, min(vectors, most) + 1) if vectors % d == 0]
    even = [d for d in runs if d % threads == 0]
    return VECTOR_BYTES * max(even or runs)


@dataclass(frozen=True)
class CombinePlan:
    """The combine's ring for rows of `row_bytes` of `dtype` (`COMBINE_DTYPES`), `topk` rows a
    token, `weighted` by fp32 probabilities or not: a step is one token's chunk of
    `chunk_bytes` columns from each of its rows, `stages` deep, `consumer_warps` warps summing,
    steps dealt to a persistent grid of at most `sm_count` blocks."""

    row_bytes: int
    topk: int
    dtype: str
    weighted: bool = True
    stages: int = COMBINE_STAGES
    consumer_warps: int = COMBINE_WARPS
    sm_count: int = DEFAULT_SM_COUNT

    def __post_init__(self) -> None:
        check_field_types(self)
        one_of(self.dtype, "combine dtype", COMBINE_DTYPES)
        rule = whole_rows_rule(self.row_bytes)
        if rule is not None:
            raise TmaConfigError(rule)
        check_routing_sizes(1, self.topk, 1, 1)
        full = f" ({self.topk} chunks of {self.chunk_bytes} bytes)"
        check_bulk_ring(self.stages, self.sm_count, self.stage_bytes, full, "rows this long are torch's")

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype].nbytes

    @property
    def chunk_bytes(self) -> int:
        return combine_chunk_bytes(self.row_bytes, self.topk, self.consumer_warps * WARP_THREADS)

    @property
    def chunks(self) -> int:
        """Steps a token takes: its row's chunks."""
        return self.row_bytes // self.chunk_bytes

    @property
    def vectors(self) -> int:
        """16-byte vectors in a chunk (each a consumer thread's, per slot)."""
        return self.chunk_bytes // VECTOR_BYTES

    @property
    def vector_elements(self) -> int:
        return VECTOR_BYTES // self.element_bytes

    @property
    def stage_bytes(self) -> int:
        return self.topk * self.chunk_bytes

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring: stages of topk chunks, a producer warp and `consumer_warps`, persistent."""
        ring = stand_in_ring(self.stage_bytes, self.stages, self.sm_count)
        return PipelinePlan(
            ring.load,
            stages=self.stages,
            persistent=True,
            sm_count=self.sm_count,
            consumer_warps=self.consumer_warps,
        )

    def steps(self, tokens: int) -> int:
        return tokens * self.chunks

    def slot_offset(self, slot: int) -> int:
        """Where slot `slot`'s chunk lands in its stage."""
        return slot * self.chunk_bytes

    def expected_bytes(self, rows: list[int] | tuple[int, ...], y_rows: int) -> int:
        """What a step's full barrier expects for a token whose slots name `rows`: one chunk for
        each row inside y's `y_rows` (the producer's lanes read the row map before they declare)."""
        return sum(self.chunk_bytes for row in rows if 0 <= row < y_rows)

    def summary(self, tokens: int) -> str:
        steps = self.steps(tokens)
        weights = "probabilities (fp32)" if self.weighted else "weight 1"
        return "\n".join(
            [
                f"combine           {tokens} tokens x top-{self.topk} rows of {self.row_bytes} bytes "
                f"({self.dtype}), summed in fp32 in slot order, {weights}",
                f"stages            {self.stages} x {self.topk} chunks of {self.chunk_bytes} bytes "
                f"({self.stage_bytes} bytes); {self.pipeline.smem_bytes} bytes of shared memory",
                f"grid              {min(max(steps, 1), self.sm_count)} persistent block(s), {steps} steps "
                f"({self.chunks} a token)",
                f"in flight         up to {self.stages * self.stage_bytes} bytes of loads a block "
                f"({self.stages * self.topk} row chunks)",
                f"each step         up to {self.topk} bulk loads of one chunk, its full barrier expects "
                f"{self.chunk_bytes} bytes a row the token has; {self.consumer_warps} consumer warps sum "
                f"{self.vectors} vectors of 16 bytes a slot and store the token's chunk",
            ]
        )


# -- the route ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoeFacts:
    """What a dispatch's or combine's path is a function of: `op` ("dispatch" or "combine"), the
    moved rows' tensor (`x` or `y`), the rows written (a new compact tensor the call allocates),
    the row map's device and width, a lazily applied bit."""

    op: str
    rows: TensorFacts
    out_rows: int
    routing_device: int
    topk: int
    lazy: str | None = None


def moe_tma_rule(facts: MoeFacts) -> str | None:
    """Why bulk row copies cannot serve a dispatch or combine (None: they can): the device, a
    lazily applied bit, rows that are not contiguous 16-byte multiples at 16-byte aligned
    addresses, a combine dtype it does not sum, a ring that does not fit."""
    rows = facts.rows
    if rows.device == NOT_SM90:
        return NOT_SM90_REASON
    if rows.device < 0 or facts.routing_device != rows.device:
        return "the tensors and the routing are not on one CUDA device"
    applied = call_rule(facts.lazy, False)
    if applied is not None:
        return applied
    if len(rows.shape) != 2:
        return f"a tensor of rank {len(rows.shape)}: the rows are (tokens, hidden)"
    row_bytes = rows.shape[1] * rows.nbytes
    rule = whole_rows_rule(row_bytes)
    if rule is not None:
        return rule
    if rows.shape[1] > 1 and rows.strides[1] != 1:
        return f"the rows are not contiguous (strides {rows.strides})"
    stride = rows.strides[0] * rows.nbytes if rows.shape[0] > 1 else row_bytes
    if facts.op == "dispatch" and stride != row_bytes:
        return (
            f"x's rows are {stride} bytes apart, not back to back ({row_bytes}): one bulk copy loads a stage"
        )
    if stride < row_bytes or stride % GLOBAL_BASE_ALIGN:
        return f"the rows are {stride} bytes apart; each must start {GLOBAL_BASE_ALIGN}-byte aligned"
    if rows.address % GLOBAL_BASE_ALIGN:
        return f"the rows' base address is not {GLOBAL_BASE_ALIGN}-byte aligned"
    # Each op's plan as the call builds it: a ring the call could not build is torch's route.
    try:
        if facts.op == "dispatch":
            DispatchPlan(row_bytes, facts.topk)
        else:
            if rows.dtype not in COMBINE_TORCH_DTYPES:
                return f"a combine of {rows.dtype}: the kernel sums {', '.join(COMBINE_DTYPES)}"
            combine = CombinePlan(row_bytes, facts.topk, COMBINE_TORCH_DTYPES[rows.dtype])
            steps, slots = facts.out_rows * combine.chunks, facts.out_rows * facts.topk
            if max(steps, slots) > MAX_DEVICE_INT:
                return (
                    f"{facts.out_rows} tokens x {combine.chunks} chunks ({steps} steps) or x "
                    f"top-{facts.topk} ({slots} slots): the kernel counts them in 32 bits (at most "
                    f"{MAX_DEVICE_INT})"
                )
    except TmaConfigError as error:
        return str(error)
    return None


def moe_route(facts: MoeFacts) -> Route:
    """The route of a dispatch or combine: nothing to move, the bulk-copy ring, or torch's
    expressions with the rule that refused. What `moe_path`, the call and `tmakit plan`/`explain
    --kernel moe` read."""
    if len(facts.rows.shape) == 2 and not (facts.out_rows and facts.rows.shape[0] and facts.rows.shape[1]):
        return Route(facts.op, "empty", "no token to move")
    rule = moe_tma_rule(facts)
    if rule is not None:
        return torch_route(facts.op, rule)
    how = (
        "a token's row loaded once, stored to its experts' rows"
        if facts.op == "dispatch"
        else ("a token's rows loaded a chunk at a time, summed in fp32")
    )
    return Route(facts.op, "tma-rows-bulk", how)
