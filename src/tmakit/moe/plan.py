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
- the combine's backward (`CombinePlan(grad=True)`): the same ring with the chunk of the output's
  gradient g[t] loaded beside the topk rows' chunks; the consumers store probs[t, j] * g[t] to
  row row_map[t, j] of y's gradient and add up each slot's dot product of g[t] with its row (the
  probabilities' gradient): each consumer warp's share of a chunk is one partial sum, summed
  after the kernel in a fixed order.

Both read the row map the routing makes on the device (`moe.call`): no host synchronisation, so a
CUDA graph may capture a layer. A slot whose row is outside the tensor moves nothing (the kernels
check each before they form an address). Pure Python: this module plans and checks, `moe.model`
replays a plan's copies on the CPU, `moe.kernel` runs it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..config import DTYPES
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, GLOBAL_BASE_ALIGN, MAX_DEVICE_INT, MAX_TX_BYTES, WARP_THREADS
from ..plan.ring import STAGE_TARGET_BYTES, PipelinePlan, check_bulk_ring, stand_in_ring
from ..plan.route import Route, TensorFacts, call_rule, device_rule, torch_route
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
ZERO_ROWS_THREADS = 128  # the combine's backward's zeroing of the rows no slot names: a block's threads
SLOT_TABLE_BYTES = 8  # a slot's entry in a combine stage's table: its row (int32), its weight (fp32)


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


# -- the routing on the device ---------------------------------------------------------------------
# The routing kernels (`moe.kernel.RoutingKernel`) read the ids three times: the count's, and the
# assign's two walks of each warp's share (its count, then its rows).
ROUTING_WARPS = 8  # a counting or assigning block's warps, each a contiguous share of its slots
ROUTING_THREADS = ROUTING_WARPS * WARP_THREADS
# A thread's loads issued together before it uses any: a block's least share of the slots is that
# many rounds of every thread (each warp's share a whole number of batches).
ROUTING_ROUNDS = 8
ROUTING_BLOCK_SLOTS = ROUTING_THREADS * ROUTING_ROUNDS
# Past this many blocks a block takes a larger multiple of ROUTING_BLOCK_SLOTS: the scan walks every
# block's counts one after another, one expert a thread.
ROUTING_MAX_BLOCKS = 512
ROUTING_SCAN_THREADS = 1024  # the scan's one block: one expert a thread (the padded prefix over them)
# The assign's budget for its (warp, expert) counters: within 48 KiB, so that several blocks share
# an SM and no launch needs the opt-in above the default.
ROUTING_SMEM_BYTES = 48 * 1024
ROUTING_ID_DTYPES = ("int32", "int64")
ROUTING_SMEM_ALIGN = 16  # bytes: where the kernels' shared allocator starts each array
# The most experts the kernels route: one a scan thread, and the assign's counters within
# ROUTING_SMEM_BYTES (`RoutingPlan.smem_bytes`); more are torch's sort.
MAX_ROUTING_EXPERTS = min(
    ROUTING_SCAN_THREADS, ROUTING_SMEM_BYTES // (4 * (ROUTING_WARPS + 1)) // WARP_THREADS * WARP_THREADS
)


def _smem_array(words: int) -> int:
    """The shared bytes of an int32 array of `words`, the next array aligned as the kernels ask."""
    return -(-4 * words // ROUTING_SMEM_ALIGN) * ROUTING_SMEM_ALIGN


def routing_block_slots(slots):
    """The slots each block of the routing kernels takes (the last block may take fewer): a
    multiple of `ROUTING_BLOCK_SLOTS`, the least that keeps the grid within `ROUTING_MAX_BLOCKS`.
    Plain arithmetic, so that the kernel computes it from its run-time count alike (in 64 bits:
    the sum may pass 2^31)."""
    whole_grid = ROUTING_BLOCK_SLOTS * ROUTING_MAX_BLOCKS
    return (slots + (whole_grid - 1)) // whole_grid * ROUTING_BLOCK_SLOTS


def routing_blocks(slots):
    """The routing kernels' grid for `slots` (T * topk) slots, one or more: each block a range of
    `routing_block_slots` consecutive slots."""
    per_block = routing_block_slots(slots)
    return (slots + (per_block - 1)) // per_block


def routing_rule(slots: int, experts: int, align: int) -> str | None:
    """Why the routing kernels cannot route `slots` ids among `experts` padded to `align` (None:
    they can; the rule that refuses is torch's sort's to serve)."""
    if slots < 1:
        return "no slot to route"
    if experts > MAX_ROUTING_EXPERTS:
        return (
            f"{experts} experts; the routing kernels count at most {MAX_ROUTING_EXPERTS} (a scan thread "
            f"each, {ROUTING_WARPS} warps' counters in {ROUTING_SMEM_BYTES} bytes of shared memory)"
        )
    if slots + experts * (align - 1) > MAX_DEVICE_INT:
        return f"{slots} slots and {experts} groups padded to {align}: rows past 32-bit row numbers"
    return None


@dataclass(frozen=True)
class RoutingPlan:
    """The routing kernels for `experts` experts, groups padded to `align` rows, ids of
    `id_dtype` (`ROUTING_ID_DTYPES`): a count of each block's slots per expert, one block's scan
    of those counts (each block's first row per expert, each expert's padded group), and an
    assign of each slot's row, a block's warps each a contiguous share in rounds of 32 lanes, a
    lane's rank the lanes below it with the same expert. Refused (TmaConfigError) where the
    kernels could not count the experts."""

    experts: int
    align: int
    id_dtype: str = "int32"

    def __post_init__(self) -> None:
        check_field_types(self)
        one_of(self.id_dtype, "routing id dtype", ROUTING_ID_DTYPES)
        check_routing_sizes(0, 1, self.experts, self.align)
        rule = routing_rule(1, self.experts, self.align)
        if rule is not None:
            raise TmaConfigError(f"{rule}: route them with torch (moe.call.route_ids_by_torch)")

    @property
    def count_smem_bytes(self) -> int:
        """The count's shared memory: a counter an expert and one for the dropped slots."""
        return _smem_array(self.experts + 1)

    @property
    def smem_bytes(self) -> int:
        """The assign's shared memory: a warp's row of counters (then first rows) an expert."""
        return _smem_array(ROUTING_WARPS * self.experts)

    @property
    def scan_smem_bytes(self) -> int:
        """The scan's shared memory: each expert's total and the dropped slots, a sum a warp."""
        return _smem_array(self.experts + 1) + _smem_array(ROUTING_SCAN_THREADS // WARP_THREADS)

    def workspace_shape(self, slots: int) -> tuple[int, int]:
        """The counts the kernels pass on: (block, expert and the dropped) int32."""
        return routing_blocks(slots), self.experts + 1

    def summary(self, slots: int) -> str:
        blocks = routing_blocks(slots)
        return "\n".join(
            [
                f"routing           {slots} slots of {self.id_dtype} ids among {self.experts} experts, "
                f"groups padded to {self.align} rows",
                f"count             {blocks} block(s) of {ROUTING_THREADS} threads, "
                f"{routing_block_slots(slots)} slots a block, {self.count_smem_bytes} bytes of shared memory",
                f"scan              1 block of {ROUTING_SCAN_THREADS} threads, each expert's prefix over the "
                f"blocks and the padded prefix over the experts",
                f"assign            {blocks} block(s), {ROUTING_WARPS} warps a block in rounds of "
                f"{WARP_THREADS} slots, {self.smem_bytes} bytes of shared memory",
            ]
        )


def whole_rows_rule(row_bytes: int) -> str | None:
    """Why bulk copies cannot move a row of `row_bytes` (None: they can)."""
    if row_bytes < 1:
        return "rows of no bytes"
    if row_bytes % GLOBAL_BASE_ALIGN:
        return f"a row is {row_bytes} bytes; a bulk copy moves a multiple of {GLOBAL_BASE_ALIGN}"
    return None


class TokenRowStages:
    """A ring whose stage is `tokens_per_stage` consecutive token rows of `row_bytes`, loaded by
    one bulk copy (the dispatch's, and the fp8 dispatch's): what its steps load and keep in
    flight."""

    row_bytes: int
    stages: int

    @property
    def tokens_per_stage(self) -> int:
        """Token rows a stage holds: as many as fit the stage target and one barrier phase."""
        return max(1, min(STAGE_TARGET_BYTES // self.row_bytes, MAX_TX_BYTES // self.row_bytes))

    @property
    def stores_in_flight(self) -> int:
        """Store groups a consumer lane keeps in flight before the oldest must have read its
        stage: all but one stage's."""
        return max(1, self.stages - 1)

    def steps(self, tokens: int) -> int:
        return math.ceil(tokens / self.tokens_per_stage)

    def expected_bytes(self, tokens: int, step: int) -> int:
        """What step `step`'s full barrier expects: its tokens' rows, one copy."""
        first = step * self.tokens_per_stage
        return max(0, min(self.tokens_per_stage, tokens - first)) * self.row_bytes


@dataclass(frozen=True)
class DispatchPlan(TokenRowStages):
    """The dispatch's ring for rows of `row_bytes` and `topk` destinations a row:
    `tokens_per_stage` consecutive rows of `x` loaded by one bulk copy a stage, `stages` deep,
    steps dealt to a persistent grid of at most `sm_count` blocks. Refused where its kernel could
    not run it (TmaConfigError)."""

    row_bytes: int
    topk: int
    stages: int = DISPATCH_STAGES
    sm_count: int = DEFAULT_SM_COUNT
    one_block_per_sm: bool = False  # an SM budget's grid (`plan.budget`)

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
    def stage_bytes(self) -> int:
        return self.tokens_per_stage * self.row_bytes

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring: full stages of token rows, a producer and a consumer warp, persistent."""
        return stand_in_ring(
            self.stage_bytes, self.stages, self.sm_count, one_block_per_sm=self.one_block_per_sm
        )

    def summary(self, tokens: int) -> str:
        steps = self.steps(tokens)
        return "\n".join(
            [
                f"dispatch          {tokens} token rows of {self.row_bytes} bytes, each stored to its "
                f"top-{self.topk} rows",
                f"stages            {self.stages} x {self.tokens_per_stage} token row(s) ({self.stage_bytes} "
                f"bytes, one bulk load); {self.pipeline.smem_bytes} bytes of shared memory",
                f"grid              {min(max(steps, 1), self.sm_count)} persistent block(s), {steps} stage "
                "fill(s)" + self.pipeline.budget_note,
                f"in flight         up to {self.stages * self.stage_bytes} bytes of loads a block, "
                f"{self.stores_in_flight} stage(s) of stores a lane before the oldest must be read",
                f"each fill         1 bulk load, its full barrier expects {self.stage_bytes} bytes for a "
                f"full stage; then up to {self.tokens_per_stage * self.topk} bulk stores of one row",
            ]
        )


@functools.lru_cache(maxsize=256)  # a search over the row's divisors, asked on every call's plan
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
    steps dealt to a persistent grid of at most `sm_count` x `blocks_per_sm` blocks (more than one
    a SM where two rings fit its shared memory: a block's steps then overlap another's). `grad`:
    the combine's backward on the same ring."""

    row_bytes: int
    topk: int
    dtype: str
    weighted: bool = True
    stages: int = COMBINE_STAGES
    consumer_warps: int = COMBINE_WARPS
    sm_count: int = DEFAULT_SM_COUNT
    grad: bool = False
    blocks_per_sm: int = 1
    one_block_per_sm: bool = False  # an SM budget's grid (`plan.budget`)

    def __post_init__(self) -> None:
        check_field_types(self)
        one_of(self.dtype, "combine dtype", COMBINE_DTYPES)
        rule = whole_rows_rule(self.row_bytes)
        if rule is not None:
            raise TmaConfigError(rule)
        check_routing_sizes(1, self.topk, 1, 1)
        if self.grad and not self.weighted:
            raise TmaConfigError(
                "an unweighted combine's backward is a dispatch of the gradient (moe_permute), not this ring"
            )
        full = f" ({self.loads} chunks of {self.chunk_bytes} bytes)"
        check_bulk_ring(self.stages, self.sm_count, self.stage_bytes, full, "rows this long are torch's")

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype].nbytes

    @property
    def loads(self) -> int:
        """Chunks a step loads: one a slot, and the output gradient's with `grad`."""
        return self.topk + int(self.grad)

    @property
    def chunk_bytes(self) -> int:
        return combine_chunk_bytes(self.row_bytes, self.loads, self.consumer_warps * WARP_THREADS)

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
    def grad_lane(self) -> int:
        """The producer lane that loads the output gradient's chunk in the backward: the one past
        the slots', or lane 0 (beside slot 0's) when the slots take the whole warp."""
        return self.topk % WARP_THREADS

    @property
    def loaded_bytes(self) -> int:
        """A step's loads for a token every slot of which names a row: what its barrier expects."""
        return self.loads * self.chunk_bytes

    @property
    def table_offset(self) -> int:
        """Where a stage's slot table starts: after its chunks."""
        return self.loaded_bytes

    @property
    def stage_bytes(self) -> int:
        """A stage: its chunks, then the slot table the producer's lanes write as they read the
        row map (each slot's row, -1 for none, then its fp32 weight), so that the consumers read
        a step's rows and weights from shared memory, not from global memory after each wait."""
        return self.table_offset + self.topk * SLOT_TABLE_BYTES

    @property
    def partials(self) -> int:
        """The backward's partial dot products a slot: one a chunk and consumer warp."""
        return self.chunks * self.consumer_warps

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring: stages of `loads` chunks, a producer warp and `consumer_warps`, persistent."""
        return stand_in_ring(
            self.stage_bytes,
            self.stages,
            self.sm_count,
            self.consumer_warps,
            self.blocks_per_sm,
            self.one_block_per_sm,
        )

    def steps(self, tokens: int) -> int:
        return tokens * self.chunks

    def slot_offset(self, slot: int) -> int:
        """Where slot `slot`'s chunk lands in its stage (slot `topk`: the output gradient's)."""
        return slot * self.chunk_bytes

    def expected_bytes(self, rows: list[int] | tuple[int, ...], y_rows: int) -> int:
        """What a step's full barrier expects for a token whose slots name `rows`: one chunk for
        each row inside y's `y_rows` (the producer's lanes read the row map before they declare),
        and the gradient's chunk with `grad`."""
        return sum(self.chunk_bytes for row in rows if 0 <= row < y_rows) + int(self.grad) * self.chunk_bytes

    def summary(self, tokens: int) -> str:
        steps = self.steps(tokens)
        weights = "probabilities (fp32)" if self.weighted else "weight 1"
        if self.grad:
            what = (
                f"combine backward  {tokens} tokens x top-{self.topk} rows of {self.row_bytes} bytes "
                f"({self.dtype}): y's gradient probs * g[t] to each slot's row, probs' gradient the dot "
                "product of g[t] with it in fp32"
            )
            use = (
                f"{self.consumer_warps} consumer warps store {self.vectors} vectors of 16 bytes a slot "
                f"and add up its dot product ({self.partials} partial sums a slot, summed after)"
            )
            extra = " and the gradient's chunk"
        else:
            what = (
                f"combine           {tokens} tokens x top-{self.topk} rows of {self.row_bytes} bytes "
                f"({self.dtype}), summed in fp32 in slot order, {weights}"
            )
            use = (
                f"{self.consumer_warps} consumer warps sum {self.vectors} vectors of 16 bytes a slot and "
                "store the token's chunk"
            )
            extra = ""
        return "\n".join(
            [
                what,
                f"stages            {self.stages} x {self.loads} chunks of {self.chunk_bytes} bytes and "
                f"{self.topk} slots' rows and weights ({self.stage_bytes} bytes); {self.pipeline.smem_bytes} "
                "bytes of shared memory",
                f"grid              {min(max(steps, 1), self.pipeline.persistent_blocks)} persistent "
                f"block(s), {steps} steps ({self.chunks} a token)" + self.pipeline.budget_note,
                f"in flight         up to {self.stages * self.loaded_bytes} bytes of loads a block "
                f"({self.stages * self.loads} chunks)",
                f"each step         up to {self.loads} bulk loads of one chunk, its full barrier expects "
                f"{self.chunk_bytes} bytes a row the token has{extra}; {use}",
            ]
        )


# -- the dispatch that quantizes to fp8 -----------------------------------------------------------
QUANT_BLOCK = 128  # elements a scale covers: 1 x 128 blocks of a row, as DeepGEMM reads them
FP8_MAX = 448.0  # e4m3fn's largest finite value: a block's amax maps to it
AMAX_FLOOR = 1e-4  # a block's least amax, so that an all-zero block's scale stays finite
SCALE_FORMATS = ("fp32", "ue8m0")  # a block's scale: fp32, or a power of two as its exponent byte
QUANTIZE_DTYPES = ("bf16", "fp16")  # what the kernel quantizes (16-byte vectors of 8 elements)
QUANTIZE_WARPS = 4  # consumer warps: a half-warp quantizes a block, the warps then store the rows
QUANTIZE_OP = "fp8-dispatch"  # the route's name of a dispatch that quantizes
SCALE_ROW_ALIGN_BYTES = 16  # the scales' rows padded so that each block's column starts 16-byte aligned (TMA)


def scale_rows(rows: int, scale_format: str) -> int:
    """The scales' leading dimension for `rows` rows: MN-major (a block's scales of every row
    contiguous), the row count padded to 16 bytes of scales, as a TMA load of them needs."""
    per = SCALE_ROW_ALIGN_BYTES // (4 if scale_format == "fp32" else 1)
    return -(-rows // per) * per


def quantize_rule(hidden: int, dtype: str) -> str | None:
    """Why the fp8 dispatch kernel cannot quantize rows of `hidden` elements of `dtype` (torch
    name or tmakit's), None where it can."""
    name = COMBINE_TORCH_DTYPES.get(dtype, dtype)
    if name not in QUANTIZE_DTYPES:
        return f"a row of {dtype}: the fp8 dispatch quantizes {', '.join(QUANTIZE_DTYPES)}"
    if hidden % QUANT_BLOCK:
        return f"a row of {hidden} elements: the scales cover whole blocks of {QUANT_BLOCK}"
    return None


@dataclass(frozen=True)
class QuantizePlan(TokenRowStages):
    """The dispatch that quantizes as it moves (`moe_dispatch(..., quantize="fp8")`): the
    dispatch's ring of `tokens_per_stage` token rows of `hidden` elements of `dtype` loaded by one
    bulk copy a stage; `consumer_warps` warps quantize each 1 x 128 block (a half-warp a block:
    its amax, its scale, its e4m3 bytes) into the stage's fp8 rows, then store each fp8 row to
    its `topk` rows by bulk copies and each block's scale to its rows' scales (`scale_format`).
    Refused where its kernel could not run it (TmaConfigError)."""

    hidden: int
    topk: int
    dtype: str = "bf16"
    scale_format: str = "fp32"
    stages: int = DISPATCH_STAGES
    consumer_warps: int = QUANTIZE_WARPS
    sm_count: int = DEFAULT_SM_COUNT
    one_block_per_sm: bool = False  # an SM budget's grid (`plan.budget`)

    def __post_init__(self) -> None:
        check_field_types(self)
        one_of(self.scale_format, "scale format", SCALE_FORMATS)
        rule = quantize_rule(self.hidden, self.dtype)
        if rule is not None:
            raise TmaConfigError(rule)
        check_routing_sizes(1, self.topk, 1, 1)
        full = f" ({self.tokens_per_stage} token row(s) of {self.row_bytes} bytes and their fp8 rows)"
        check_bulk_ring(self.stages, self.sm_count, self.stage_bytes, full, "rows this long are torch's")

    @property
    def row_bytes(self) -> int:
        """A token row's bytes as loaded."""
        return self.hidden * DTYPES[self.dtype].nbytes

    @property
    def blocks(self) -> int:
        """Scales a row: its 1 x 128 blocks."""
        return self.hidden // QUANT_BLOCK

    @property
    def loaded_bytes(self) -> int:
        """A full stage's load: what its barrier expects."""
        return self.tokens_per_stage * self.row_bytes

    @property
    def stage_bytes(self) -> int:
        """A stage: its loaded rows, then their fp8 rows (the bulk stores' source)."""
        return self.loaded_bytes + self.tokens_per_stage * self.hidden

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring: stages of token rows and their fp8 rows, a producer warp and
        `consumer_warps`, persistent."""
        return stand_in_ring(
            self.stage_bytes, self.stages, self.sm_count, self.consumer_warps,
            one_block_per_sm=self.one_block_per_sm,
        )  # fmt: skip

    def summary(self, tokens: int) -> str:
        steps = self.steps(tokens)
        scale = "fp32" if self.scale_format == "fp32" else "UE8M0 (a power of two, its exponent byte)"
        per_fill = self.tokens_per_stage
        return "\n".join(
            [
                f"fp8 dispatch      {tokens} token rows of {self.hidden} {self.dtype}, each quantized to "
                f"e4m3 in {self.blocks} blocks of {QUANT_BLOCK} and stored to its top-{self.topk} rows",
                f"scales            one {scale} a block, MN-major (a block's column of rows contiguous)",
                f"stages            {self.stages} x {per_fill} token row(s) ({self.loaded_bytes} bytes, one "
                f"bulk load) and their fp8 rows; {self.pipeline.smem_bytes} bytes of shared memory",
                f"grid              {min(max(steps, 1), self.sm_count)} persistent block(s), {steps} stage "
                "fill(s)" + self.pipeline.budget_note,
                f"each fill         1 bulk load, its full barrier expects {self.loaded_bytes} bytes for a "
                f"full stage; {self.consumer_warps} warps quantize its {per_fill * self.blocks} blocks (a "
                f"half-warp each), then up to {per_fill * self.topk} bulk stores of one fp8 row",
            ]
        )


# -- the route ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoeFacts:
    """What a dispatch's or combine's path is a function of: `op` ("dispatch", QUANTIZE_OP or "combine"), the
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
    unserved = device_rule(rows.device, facts.routing_device)
    if unserved is not None:
        return unserved
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
    loads_stages = facts.op in ("dispatch", QUANTIZE_OP)
    if loads_stages and stride != row_bytes:
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
        elif facts.op == QUANTIZE_OP:
            rule = quantize_rule(rows.shape[1], rows.dtype)
            if rule is not None:
                return rule
            QuantizePlan(rows.shape[1], facts.topk, COMBINE_TORCH_DTYPES[rows.dtype])
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
    how = {
        "dispatch": "a token's row loaded once, stored to its experts' rows",
        QUANTIZE_OP: (
            "a token's row loaded once, quantized to e4m3 by 1 x 128 blocks, stored to its experts' rows"
        ),
    }.get(facts.op, "a token's rows loaded a chunk at a time, summed in fp32")
    return Route(facts.op, "tma-rows-bulk", how)
