"""The mixture-of-experts rings (`moe.plan`): non-tensor bulk copies addressed from the row map.

- `DispatchKernel`: one bulk copy loads a stage of consecutive token rows of `x` (read once);
  the consumer warp's lanes store each row to every row its token's slots name
  (`row_map[t, j]`), a bulk copy each, committed as one bulk group a lane per step, a stage freed
  once every store that reads it has (`LateRelease`).
- `QuantizeDispatchKernel`: the dispatch's ring, the consumer warps first quantizing the stage's
  rows to e4m3 by 1 x 128 blocks (a half-warp a block: amax across its lanes, the scale, the
  bytes into the stage's fp8 rows, the scale to each slot's row of the scales), then, fenced to
  the async proxy and met at a named barrier, storing each fp8 row to its slots' rows.
- `CombineKernel`: a step is one token's chunk of columns: the producer warp's lanes load the
  chunk of the row each slot names (lane j, slot j; each declares its own bytes), the consumer
  warps read the stage 16 bytes a thread, sum the slots in order in fp32 (times the slot's
  probability where weighted), store the token's chunk and free the stage.
- `CombineGradKernel`: the combine's backward on the same ring, lane topk (lane 0 at topk 32)
  also loading the chunk of the output's gradient g[t] beside the slots' rows: each consumer
  thread stores probs[t, j] * g[t] to slot j's row of y's gradient, 16 bytes at a time, and adds
  g[t] . y[row] into slot j's fp32 partial sum; a warp's partial sums of a step are reduced
  across its lanes and written, one a (token, slot, chunk, warp), for the caller to sum in a
  fixed order.

A row-map entry outside the rows' tensor moves nothing: every lane checks it before it forms an
address, the producer's and the consumers' alike, so the bytes a barrier expects and the slots
summed agree. Every row is viewed as bytes where only moved; the combine reads its dtype.

- `RoutingKernel`: the routing the rings read (`row_map`, each expert's count and padded group),
  three launches on one stream, plain SIMT: a count of each block's slots per expert, one block's
  scan, an assign of each slot's row (`moe.plan.RoutingPlan`; `moe.model.replay_routing` is the
  same algorithm on the CPU).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..kernels.ring import BulkLoadRing, BulkRingKernel, RingContext, RunTimeWalk
from ..kernels.tma import shared_tile_layout
from ..limits import WARP_THREADS
from .plan import (
    AMAX_FLOOR,
    FP8_MAX,
    QUANT_BLOCK,
    ROUTING_ROUNDS,
    ROUTING_SCAN_THREADS,
    ROUTING_SMEM_ALIGN,
    ROUTING_THREADS,
    ROUTING_WARPS,
    ZERO_ROWS_THREADS,
    CombinePlan,
    DispatchPlan,
    QuantizePlan,
    RoutingPlan,
    routing_block_slots,
)

__all__ = ["CombineGradKernel", "CombineKernel", "DispatchKernel", "QuantizeDispatchKernel", "RoutingKernel"]


@cute.jit
def steps_walk(steps, persistent_blocks: int) -> RunTimeWalk:
    """A walk of `steps` run-time steps over a persistent grid of at most `persistent_blocks`."""
    grid = cutlass.min(steps, cutlass.Int32(persistent_blocks))
    divisor = cute.fast_divmod_create_divisor_v2
    one = divisor(cutlass.Int32(1))
    return RunTimeWalk(divisor(steps), one, divisor(steps), divisor(grid), cutlass.Int32(1))


@cute.jit
def slot_row(row_map, token, slot, rows):
    """(whether slot `slot` of `token` names a row of a tensor of `rows` rows, that row)."""
    row = cutlass.Int64(row_map[token, slot])
    inside = row >= 0 and row < rows
    return inside, row if inside else cutlass.Int64(0)  # an address formed only for a real row


class DispatchKernel(BulkRingKernel):
    """x's token rows to their experts' rows: one load a stage, a store a (row, slot)."""

    def __init__(self, dispatch: DispatchPlan, hang_guard: bool = False):
        super().__init__(dispatch.pipeline, shape_generic=True, hang_guard=hang_guard)
        self.dispatch = dispatch
        self.late = dispatch.stores_in_flight - 1

    @cute.jit
    def __call__(
        self,
        x: cute.Tensor,
        row_map: cute.Tensor,
        out: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`x`: (tokens, row_bytes) uint8, its rows back to back; `row_map`: (tokens, topk)
        int32; `out`: (rows, row_bytes) uint8, rows a run-time stride apart; `guard`: GUARD_WORDS
        int32 zeros. The caller launches only for one token or more."""
        self.launch_token_rows(x, (row_map, out), guard, stream)

    @cute.jit
    def launch_token_rows(self, x: cute.Tensor, sink, guard: cute.Tensor, stream: cuda.CUstream):
        """The ring over x's token rows, a stage of `tokens_per_stage` a step, on a persistent
        grid; `sink`: what the consumers read besides the stages."""
        per_stage = self.dispatch.tokens_per_stage
        tokens = cutlass.Int32(cute.size(x, mode=[0]))
        run_time = steps_walk((tokens + (per_stage - 1)) // per_stage, self.pipeline.persistent_blocks)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        self.launch((x,), sink, guard, shared_layout, stream, run_time)

    @cute.jit
    def step_tokens(self, context: RingContext, tokens, step):
        """The `step`-th step of this block: (its first token, how many it moves)."""
        _, stage_block, _ = context.walk.tile_of(context.block, step)
        per_stage = self.dispatch.tokens_per_stage
        first = stage_block * per_stage
        return first, cutlass.min(tokens - first, cutlass.Int32(per_stage))

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """One thread declares and loads the step's token rows (after a guard timeout, nothing)."""
        (x,) = source
        if not failed:
            first, moved = self.step_tokens(context, cutlass.Int32(cute.size(x, mode=[0])), step)
            barrier = context.full + stage
            with cute.arch.elect_one():
                size = moved * self.dispatch.row_bytes
                cute.arch.mbarrier_arrive_and_expect_tx(barrier, size)
                start = x.iterator + cutlass.Int64(first) * self.dispatch.row_bytes
                prims.cp_async_bulk_shared_cluster_global(
                    self.staged(context, stage, 0), start, barrier, size
                )

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each (row, slot) of the landed stage to the row it names, a lane each; then this
        lane's stores as one bulk group and the wait that lets the stage `late` steps back go."""
        row_map, out = state
        topk, row_bytes = self.dispatch.topk, self.dispatch.row_bytes
        first, moved = self.step_tokens(context, cutlass.Int32(cute.size(row_map, mode=[0])), step)
        rows = cutlass.Int64(cute.size(out, mode=[0]))
        for pair in cutlass.range(cute.arch.lane_idx(), moved * topk, WARP_THREADS, unroll=1):
            slot = pair // topk
            inside, row = slot_row(row_map, first + slot, pair - slot * topk, rows)
            if inside:
                prims.cp_async_bulk_global_shared_cta(
                    out.iterator + row * cutlass.Int64(out.stride[0]),
                    self.staged(context, stage, slot * row_bytes),
                    row_bytes,
                )
        self.commit_stores()


QUANT_VECTOR = 8  # a lane's share of a block: 16 bytes of 16-bit elements
QUANT_LANES = QUANT_BLOCK // QUANT_VECTOR  # a block's lanes: half a warp
FP32_EXPONENT_BIAS = 127
FP32_MANTISSA_BITS = 23


@cute.jit
def block_scale(amax, ue8m0: cutlass.Constexpr[bool]):
    """A block's (scale, its reciprocal the values are multiplied by, the scale's stored bits):
    amax / FP8_MAX and FP8_MAX / amax in fp32 (each one correctly rounded division); with
    `ue8m0`, amax / FP8_MAX rounded up to a power of two, its reciprocal exact, the stored byte
    its biased exponent."""
    amax = cute.arch.fmax(amax, cutlass.Float32(AMAX_FLOOR))
    scale = amax / cutlass.Float32(FP8_MAX)
    if cutlass.const_expr(ue8m0):
        bits = scale.bitcast(cutlass.Int32)
        exponent = (bits >> FP32_MANTISSA_BITS) & 0xFF
        if bits & ((1 << FP32_MANTISSA_BITS) - 1):
            exponent = exponent + 1
        power = (exponent << FP32_MANTISSA_BITS).bitcast(cutlass.Float32)
        inverse = ((2 * FP32_EXPONENT_BIAS - exponent) << FP32_MANTISSA_BITS).bitcast(cutlass.Float32)
        return power, inverse, exponent
    return scale, cutlass.Float32(FP8_MAX) / amax, scale


class QuantizeDispatchKernel(DispatchKernel):
    """x's token rows quantized to e4m3 by 1 x 128 blocks and stored to their experts' rows, each
    block's scale to its rows' scales: the dispatch's load, a quantize and a store a (row, slot)."""

    def __init__(self, quantize: QuantizePlan, hang_guard: bool = False):
        super().__init__(quantize, hang_guard=hang_guard)  # the dispatch's stage, load and walk

    @cute.jit
    def __call__(
        self,
        x: cute.Tensor,
        row_map: cute.Tensor,
        out: cute.Tensor,
        scales: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`x`: (tokens, row_bytes) uint8, its rows back to back; `row_map`: (tokens, topk)
        int32; `out`: (rows, hidden) uint8, rows a run-time stride apart; `scales`: (blocks,
        lead) fp32 (or uint8 exponents), block b's scale of row r at [b, r]; `guard`: GUARD_WORDS
        int32 zeros. The caller launches only for one token or more."""
        self.launch_token_rows(x, (row_map, out, scales), guard, stream)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(row_map, out, scales, the stages' loaded vectors, their fp8 vectors): a vector is a
        lane's 8 elements of a block, (element, lane, block, token, stage)."""
        row_map, out, scales = sink
        plan = self.dispatch
        element = cutlass.BFloat16 if cutlass.const_expr(plan.dtype == "bf16") else cutlass.Float16
        shape = (QUANT_VECTOR, QUANT_LANES, plan.blocks, plan.tokens_per_stage, self.pipeline.stages)
        stage_bytes = self.pipeline.stage_bytes
        loaded = cute.make_tensor(
            cute.recast_ptr(context.stages.iterator, dtype=element),
            cute.make_layout(shape, stride=(1, QUANT_VECTOR, QUANT_BLOCK, plan.hidden, stage_bytes // 2)),
        )
        base = cute.recast_ptr(context.stages.iterator, dtype=cutlass.Uint8) + plan.loaded_bytes
        quantized = cute.make_tensor(
            cute.recast_ptr(base, dtype=cutlass.Float8E4M3FN),
            cute.make_layout(shape, stride=(1, QUANT_VECTOR, QUANT_BLOCK, plan.hidden, stage_bytes)),
        )
        return row_map, out, scales, loaded, quantized

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """The stage's blocks quantized, two a warp at a time (a half-warp each); the fp8 rows
        fenced to the async proxy and the consumer warps met; then each (row, slot) stored to
        the row it names, a consumer lane each, as one bulk group a lane."""
        row_map, out, scales, loaded, quantized = state
        plan = self.dispatch
        first, moved = self.step_tokens(context, cutlass.Int32(cute.size(row_map, mode=[0])), step)
        rows = cutlass.Int64(cute.size(out, mode=[0]))
        lane = cute.arch.lane_idx()
        part = lane % QUANT_LANES
        warps = self.pipeline.consumer_warps
        units = moved * plan.blocks
        # A warp takes two blocks a round, every lane in every round: the shuffles span the warp.
        for pair in cutlass.range(consumer, (units + 1) // 2, warps, unroll=1):
            unit = pair * 2 + lane // QUANT_LANES
            inside = unit < units
            token = unit // plan.blocks if inside else cutlass.Int32(0)
            block = unit - token * plan.blocks if inside else cutlass.Int32(0)
            values = loaded[None, part, block, token, stage].load().to(cutlass.Float32)
            amax = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(QUANT_VECTOR):
                amax = cute.arch.fmax(amax, cute.arch.fmax(values[i], -values[i]))
            for offset in cutlass.range_constexpr(4):
                amax = cute.arch.fmax(amax, cute.arch.shuffle_sync_bfly(amax, QUANT_LANES >> (offset + 1)))
            scale, inverse, stored = block_scale(amax, plan.scale_format == "ue8m0")
            if inside:
                quantized[None, part, block, token, stage].store((values * inverse).to(cutlass.Float8E4M3FN))
                for slot in cutlass.range(part, plan.topk, QUANT_LANES, unroll=1):
                    named, row = slot_row(row_map, first + token, slot, rows)
                    if named:
                        scales[block, row] = stored.to(scales.element_type)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=1, number_of_threads=warps * WARP_THREADS)
        thread = consumer * WARP_THREADS + lane
        for pair in cutlass.range(thread, moved * plan.topk, warps * WARP_THREADS, unroll=1):
            slot = pair // plan.topk
            named, row = slot_row(row_map, first + slot, pair - slot * plan.topk, rows)
            if named:
                prims.cp_async_bulk_global_shared_cta(
                    out.iterator + row * cutlass.Int64(out.stride[0]),
                    self.staged(context, stage, plan.loaded_bytes + slot * plan.hidden),
                    plan.hidden,
                )
        self.commit_stores()


class CombineKernel(BulkLoadRing):
    """out[t] = sum over slots j of probs[t, j] * y[row_map[t, j]], a token's chunk a step."""

    def __init__(self, combine: CombinePlan, hang_guard: bool = False):
        super().__init__(combine.pipeline, shape_generic=True, hang_guard=hang_guard)
        self.combine = combine

    @cute.jit
    def __call__(
        self,
        y: cute.Tensor,
        row_map: cute.Tensor,
        probs: cute.Tensor,
        out: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`y`: (rows, row_bytes) uint8, rows a run-time stride apart; `row_map`: (tokens, topk)
        int32; `probs`: (tokens, topk) fp32 (unweighted: any fp32 tensor, not read); `out`:
        (tokens, row elements) of the plan's dtype, rows a run-time stride apart. The caller
        launches only for one token or more."""
        tokens = cutlass.Int32(cute.size(row_map, mode=[0]))
        run_time = steps_walk(tokens * self.combine.chunks, self.pipeline.persistent_blocks)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        self.launch((y, row_map, probs), (y, row_map, probs, out), guard, shared_layout, stream, run_time)

    @cute.jit
    def step_chunk(self, context: RingContext, step):
        """The `step`-th step of this block: (its token, the chunk of the token's row)."""
        _, index, _ = context.walk.tile_of(context.block, step)
        token = index // self.combine.chunks
        return token, index - token * self.combine.chunks

    @cute.jit
    def slot_table(self, context: RingContext, stage):
        """`stage`'s slot table: (each slot's row of y, -1 for none (topk,) int32, its weight
        (topk,) fp32), after the stage's chunks (`CombinePlan.stage_bytes`)."""
        topk = self.combine.topk
        base = self.staged(context, stage, self.combine.table_offset)
        rows = cute.make_tensor(cute.recast_ptr(base, dtype=cutlass.Int32), cute.make_layout(topk))
        weights = cute.make_tensor(
            cute.recast_ptr(base + topk * 4, dtype=cutlass.Float32), cute.make_layout(topk)
        )
        return rows, weights

    @cute.jit
    def note_slot(self, context: RingContext, stage, row_map, probs, token, slot, rows):
        """Lane `slot` of the producer: its slot's row in y (whether inside, the row), written to
        the stage's slot table with its weight. The warp meets and one lane arrives on the full
        barrier after (`lanes_arrive`), so the consumers' wait orders the table before them."""
        inside, row = slot_row(row_map, token, slot, rows)
        table_rows, table_weights = self.slot_table(context, stage)
        table_rows[slot] = cutlass.Int32(row) if inside else cutlass.Int32(-1)
        if cutlass.const_expr(self.combine.weighted):
            table_weights[slot] = probs[token, slot]
        return inside, row

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Lane j notes slot j's row and weight in the stage's table and loads its chunk
        (declaring its bytes first); then one arrival."""
        barrier = context.full + stage
        if not failed:
            token, chunk = self.step_chunk(context, step)
            if cute.arch.lane_idx() < self.combine.topk:
                self.load_slot(context, source, stage, token, chunk, barrier)
        self.lanes_arrive(barrier, failed)

    @cute.jit
    def load_slot(self, context: RingContext, source, stage, token, chunk, barrier):
        """A producer lane j < topk: slot j's row and weight noted in the stage's table, its
        chunk of y loaded where the row is inside."""
        y, row_map, probs = source
        slot = cute.arch.lane_idx()
        rows = cutlass.Int64(cute.size(y, mode=[0]))
        inside, row = self.note_slot(context, stage, row_map, probs, token, slot, rows)
        if inside:
            self.load_chunk(
                context, barrier, stage, slot, y.iterator + row * cutlass.Int64(y.stride[0]), chunk
            )

    @cute.jit
    def load_chunk(self, context: RingContext, barrier, stage, slot, row_start, chunk):
        """Chunk `chunk` of the row at `row_start` into `stage`'s place `slot` (its bytes declared
        on `barrier` first)."""
        size = self.combine.chunk_bytes
        self.lane_load(barrier, self.staged(context, stage, slot * size), row_start + chunk * size, size)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(y, row_map, probs, the output's vectors, the stages' vectors, this thread, its fp32
        accumulator): a vector is 16 bytes of one slot's chunk (the stages) or of the token's row
        (the output), (element, vector, slot or chunk, stage or token)."""
        y, row_map, probs, out = sink
        out_vectors = self.row_vectors(out, cute.size(row_map, mode=[0]))
        slots = self.stage_vectors(context, out.element_type)
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        total = cute.make_rmem_tensor(self.combine.vector_elements, cutlass.Float32)
        return y, row_map, probs, out_vectors, slots, thread, total

    @cute.jit
    def stage_vectors(self, context: RingContext, element):
        """The stages as 16-byte vectors of `element`: (element, vector, chunk of the step, stage)."""
        combine = self.combine
        vector = combine.vector_elements
        return cute.make_tensor(
            cute.recast_ptr(context.stages.iterator, dtype=element),
            cute.make_layout(
                (vector, combine.vectors, combine.loads, self.pipeline.stages),
                stride=(
                    1,
                    vector,
                    combine.chunk_bytes // combine.element_bytes,
                    self.pipeline.stage_bytes // combine.element_bytes,
                ),
            ),
        )

    @cute.jit
    def row_vectors(self, rows, count):
        """`count` rows of a (rows, row elements) tensor as 16-byte vectors: (element, vector,
        chunk, row)."""
        combine = self.combine
        vector = combine.vector_elements
        return cute.make_tensor(
            rows.iterator,
            cute.make_layout(
                (vector, combine.vectors, combine.chunks, count),
                stride=(1, vector, combine.chunk_bytes // combine.element_bytes, rows.stride[0]),
            ),
        )

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each of this thread's vectors: the slots' values in order, in fp32, stored as the
        output's dtype; which slots name a row, and their weights, from the stage's table."""
        y, row_map, probs, out_vectors, slots, thread, total = state
        combine = self.combine
        token, chunk = self.step_chunk(context, step)
        table_rows, table_weights = self.slot_table(context, stage)
        threads = self.pipeline.consumer_warps * WARP_THREADS
        for vector in cutlass.range(thread, combine.vectors, threads, unroll=1):
            total.fill(0.0)
            for slot in cutlass.range_constexpr(combine.topk):
                if table_rows[slot] >= 0:
                    values = slots[None, vector, slot, stage].load().to(cutlass.Float32)
                    if cutlass.const_expr(combine.weighted):
                        values = values * table_weights[slot]
                    total.store(total.load() + values)
            out_vectors[None, vector, chunk, token].store(total.load().to(out_vectors.element_type))


class CombineGradKernel(CombineKernel):
    """y's and probs' gradients of out[t] = sum over j of probs[t, j] * y[row_map[t, j]], a
    token's chunk a step: probs[t, j] * g[t] stored to row row_map[t, j], g[t] . y[row] added up."""

    @cute.jit
    def __call__(
        self,
        y: cute.Tensor,
        grad: cute.Tensor,
        row_map: cute.Tensor,
        probs: cute.Tensor,
        grad_y: cute.Tensor,
        partials: cute.Tensor,
        named: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`y`: (rows, row_bytes) uint8, rows a run-time stride apart; `grad`: (tokens, row_bytes)
        uint8, the output's gradient, rows a run-time stride apart; `row_map`: (tokens, topk)
        int32; `probs`: (tokens, topk) fp32; `grad_y`: (rows, row elements) of the plan's dtype,
        rows a run-time stride apart, any contents; `partials`: (tokens, topk, plan.partials)
        fp32, every entry written; `named`: (rows + 1,) uint8, nonzero for each row a slot names
        (the last entry not read): first the rows no slot names are zeroed (`zero_unnamed`), then
        the ring writes the others. The caller launches only for one token and one row or more."""
        rows = cutlass.Int32(cute.size(grad_y, mode=[0]))
        blocks = cutlass.min(rows, cutlass.Int32(self.pipeline.persistent_blocks))
        self.zero_unnamed(named, grad_y).launch(
            grid=(blocks, 1, 1), block=(ZERO_ROWS_THREADS, 1, 1), stream=stream
        )
        tokens = cutlass.Int32(cute.size(row_map, mode=[0]))
        run_time = steps_walk(tokens * self.combine.chunks, self.pipeline.persistent_blocks)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        self.launch(
            (y, grad, row_map, probs),
            (y, row_map, probs, grad_y, partials),
            guard,
            shared_layout,
            stream,
            run_time,
        )

    @cute.kernel
    def zero_unnamed(self, named: cute.Tensor, grad_y: cute.Tensor):
        """The rows of y's gradient no slot names (padding, a skipped slot's) zeroed, 16 bytes a
        thread, a row a block at a time: what a memset of the whole gradient did, writing only
        those rows."""
        combine = self.combine
        thread, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        row_vectors = self.row_vectors(grad_y, cute.size(grad_y, mode=[0]))
        rows = cutlass.Int32(cute.size(grad_y, mode=[0]))  # within 32 bits (`check_routing_sizes`)
        zeros = cute.make_rmem_tensor(combine.vector_elements, grad_y.element_type)
        zeros.fill(0)
        vectors = combine.vectors * combine.chunks
        for row in cutlass.range(block, rows, grid, unroll=1):
            if named[row] == 0:
                for index in cutlass.range(thread, vectors, ZERO_ROWS_THREADS, unroll=1):
                    chunk = index // combine.vectors
                    vector = index - chunk * combine.vectors
                    row_vectors[None, vector, chunk, cutlass.Int64(row)].store(zeros.load())

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Lane j notes slot j's row and weight in the stage's table and loads its chunk of y
        where its row is inside, lane `grad_lane` the gradient's chunk too (each declaring its
        own bytes first); then one arrival."""
        y, grad, row_map, probs = source
        topk = self.combine.topk
        barrier = context.full + stage
        if not failed:
            token, chunk = self.step_chunk(context, step)
            lane = cute.arch.lane_idx()
            if lane < topk:
                self.load_slot(context, (y, row_map, probs), stage, token, chunk, barrier)
            if lane == self.combine.grad_lane:
                start = grad.iterator + cutlass.Int64(token) * cutlass.Int64(grad.stride[0])
                self.load_chunk(context, barrier, stage, topk, start, chunk)
        self.lanes_arrive(barrier, failed)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(y, row_map, probs, y's gradient's vectors, the partial sums, the stages' vectors, this
        thread, its slots' fp32 partial sums): as `CombineKernel.consumer_begin`, the stages'
        vectors one slot more (the gradient's chunk, last)."""
        y, row_map, probs, grad_y, partials = sink
        row_vectors = self.row_vectors(grad_y, cute.size(grad_y, mode=[0]))
        slots = self.stage_vectors(context, grad_y.element_type)
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        sums = cute.make_rmem_tensor(self.combine.topk, cutlass.Float32)
        return y, row_map, probs, row_vectors, partials, slots, thread, sums

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each of this thread's vectors: g's values in fp32, times each slot's probability
        stored to its row, and their products with the slot's values added to its partial sum;
        then the warp's partial sums, one a slot, written by lane 0."""
        y, row_map, probs, row_vectors, partials, slots, thread, sums = state
        combine = self.combine
        token, chunk = self.step_chunk(context, step)
        table_rows, table_weights = self.slot_table(context, stage)
        threads = self.pipeline.consumer_warps * WARP_THREADS
        sums.fill(0.0)
        for vector in cutlass.range(thread, combine.vectors, threads, unroll=1):
            grad = slots[None, vector, combine.topk, stage].load().to(cutlass.Float32)
            for slot in cutlass.range_constexpr(combine.topk):
                row = table_rows[slot]
                if row >= 0:
                    values = slots[None, vector, slot, stage].load().to(cutlass.Float32)
                    sums[slot] += (grad * values).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
                    scaled = grad * table_weights[slot]
                    row_vectors[None, vector, chunk, cutlass.Int64(row)].store(
                        scaled.to(row_vectors.element_type)
                    )
        lane = cute.arch.lane_idx()
        for slot in cutlass.range_constexpr(combine.topk):
            total = cute.arch.warp_reduction(sums[slot], lambda a, b: a + b)
            if lane == 0:
                partials[cutlass.Int64(token), slot, chunk * self.pipeline.consumer_warps + consumer] = total


# -- the routing ----------------------------------------------------------------------------------
ALL_LANES = 0xFFFFFFFF
SCAN_BATCH = 8  # counts the scan loads before it adds them: loads in flight, not one at a time


@cute.jit
def slot_key(ids, slot, experts: int):
    """A slot's key: its expert (an id in [0, experts)), `experts` for a dropped id, `experts + 1`
    for -1 (no expert). Compared at the ids' width: an int64 id is never cut to 32 bits."""
    value = ids[slot]
    inside = value >= 0 and value < experts
    outside = cutlass.Int32(experts + 1) if value == -1 else cutlass.Int32(experts)
    return cutlass.Int32(value) if inside else outside


@cute.jit
def round_keys(ids, first, start, stride, share, experts: int):
    """The keys of slots `first + start + k * stride`, k < ROUTING_ROUNDS, no expert's past
    `share` (a lane's `start` is the round's first plus its own place): every load issued before
    any key is used (a clamped slot read, not a branch), so a thread waits for its rounds' loads
    once."""
    keys = []
    for k in cutlass.range_constexpr(ROUTING_ROUNDS):
        index = start + k * stride
        key = slot_key(ids, cutlass.Int64(first) + cutlass.min(index, share - 1), experts)
        keys.append(key if index < share else cutlass.Int32(experts + 1))
    return keys


@cute.jit
def lane_group(key):
    """(the lanes whose key is this lane's, whether this lane is the highest of them): the
    group's highest lane speaks for it, so one shared access a group and expert a round."""
    peers = cute.arch.match_sync(ALL_LANES, key)
    return peers, (peers & cute.arch.lanemask_gt()) == cutlass.Uint32(0)


@cute.jit
def warp_inclusive_sum(value):
    """The sum of `value` over this lane and the lanes below it."""
    lane = cute.arch.lane_idx()
    for offset in cutlass.range_constexpr(5):
        below = cute.arch.shuffle_sync_up(value, 1 << offset)
        if lane >= (1 << offset):
            value = value + below
    return value


class RoutingKernel:
    """The routing of (T * topk) ids among `experts`: `row_map[s]` the output row of slot s
    (expert-major, slots of an expert in order, each expert's group from `expert_offsets[e]`
    padded to a multiple of `align`; -1 for no expert), each expert's tokens, the groups' first
    rows and the rows used, the dropped slots. Deterministic (integer counts, a fixed order) and
    free of host synchronisation.

    1. count: block b takes `routing_block_slots` consecutive slots and counts them per expert
       (and the dropped) in shared memory, writing its row of the workspace (all E + 1 counts).
    2. scan (one block): each expert's counts over the blocks become each block's first rank in
       the expert (in place); the experts' groups, padded, become the expert offsets.
    3. assign: block b's warps each take a contiguous share of its range; each warp counts its
       share per expert, the block turns those counts into each warp's first row per expert
       (the expert's offset, the block's rank, the warps before), and each warp walks its share
       again in rounds of 32 lanes: a slot's row is its warp's next row for the expert plus the
       lanes below it with the same expert.
    """

    def __init__(self, routing: RoutingPlan):
        self.routing = routing

    @cute.jit
    def __call__(
        self,
        ids: cute.Tensor,
        row_map: cute.Tensor,
        tokens_per_expert: cute.Tensor,
        expert_offsets: cute.Tensor,
        dropped: cute.Tensor,
        workspace: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`ids`: (slots,) int32 or int64, one or more; `row_map`: (slots,) int32;
        `tokens_per_expert`: (E,), `expert_offsets`: (E + 1,), `dropped`: (1,) int32;
        `workspace`: `RoutingPlan.workspace_shape(slots)` int32, any contents; `guard`: not
        read (the launchers pass one to every kernel)."""
        routing = self.routing
        per_block = cutlass.Int32(routing_block_slots(cutlass.Int64(cute.size(ids, mode=[0]))))
        blocks = cutlass.Int32(cute.size(workspace, mode=[0]))
        self.count(ids, workspace, per_block).launch(
            grid=(blocks, 1, 1), block=(ROUTING_THREADS, 1, 1), smem=routing.count_smem_bytes, stream=stream
        )
        self.scan(workspace, tokens_per_expert, expert_offsets, dropped).launch(
            grid=(1, 1, 1), block=(ROUTING_SCAN_THREADS, 1, 1), smem=routing.scan_smem_bytes, stream=stream
        )
        self.assign(ids, workspace, expert_offsets, row_map, per_block).launch(
            grid=(blocks, 1, 1), block=(ROUTING_THREADS, 1, 1), smem=routing.smem_bytes, stream=stream
        )

    @cute.jit
    def block_range(self, ids, per_block):
        """(this block's first slot, how many it takes)."""
        block, _, _ = cute.arch.block_idx()
        first = block * per_block
        return first, cutlass.min(per_block, cutlass.Int32(cute.size(ids, mode=[0])) - first)

    @cute.kernel
    def count(self, ids: cute.Tensor, workspace: cute.Tensor, per_block: cutlass.Int32):
        experts = self.routing.experts
        thread, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        counters = cutlass.memory.SmemAllocator().allocate_tensor(
            cutlass.Int32, cute.make_layout(experts + 1), ROUTING_SMEM_ALIGN
        )
        for key in cutlass.range(thread, experts + 1, ROUTING_THREADS, unroll=1):
            counters[key] = 0
        cute.arch.barrier()
        first, share = self.block_range(ids, per_block)
        # the bounds are the block's alike: every lane of a warp takes every round (match.sync)
        for start in cutlass.range(0, share, ROUTING_THREADS * ROUTING_ROUNDS, unroll=1):
            for key in round_keys(ids, first, start + thread, ROUTING_THREADS, share, experts):
                peers, speaks = lane_group(key)
                if speaks and key <= experts:  # other warps add to the same counters
                    count = cute.arch.popc(peers).to(cutlass.Int32)
                    cute.arch.atomic_add((counters.iterator + key).llvm_ptr, count)
        cute.arch.barrier()
        for key in cutlass.range(thread, experts + 1, ROUTING_THREADS, unroll=1):
            workspace[block, key] = counters[key]

    @cute.kernel
    def scan(
        self,
        workspace: cute.Tensor,
        tokens_per_expert: cute.Tensor,
        expert_offsets: cute.Tensor,
        dropped: cute.Tensor,
    ):
        routing = self.routing
        experts, align = routing.experts, routing.align
        thread, _, _ = cute.arch.thread_idx()
        warp, lane = cute.arch.warp_idx(), cute.arch.lane_idx()
        allocator = cutlass.memory.SmemAllocator()
        totals = allocator.allocate_tensor(cutlass.Int32, cute.make_layout(experts + 1), ROUTING_SMEM_ALIGN)
        warp_sums = allocator.allocate_tensor(
            cutlass.Int32, cute.make_layout(ROUTING_SCAN_THREADS // WARP_THREADS), ROUTING_SMEM_ALIGN
        )
        blocks = cutlass.Int32(cute.size(workspace, mode=[0]))
        for key in cutlass.range(thread, experts + 1, ROUTING_SCAN_THREADS, unroll=1):
            running = cutlass.Int32(0)
            for batch in cutlass.range(0, blocks, SCAN_BATCH, unroll=1):
                counts = [
                    workspace[cutlass.min(batch + k, blocks - 1), key] for k in range(SCAN_BATCH)
                ]  # a load past the last block reads the last and adds nothing
                for k in cutlass.range_constexpr(SCAN_BATCH):
                    if batch + k < blocks:
                        workspace[batch + k, key] = running
                        running = running + counts[k]
            totals[key] = running
        cute.arch.barrier()
        expert = cutlass.min(thread, cutlass.Int32(experts - 1))
        total = totals[expert] if thread < experts else cutlass.Int32(0)
        padded = (total + (align - 1)) // align * align
        inclusive = warp_inclusive_sum(padded)
        if lane == 31:
            warp_sums[warp] = inclusive
        cute.arch.barrier()
        if warp == 0:
            warp_total = warp_sums[lane]
            warp_sums[lane] = warp_inclusive_sum(warp_total) - warp_total
        cute.arch.barrier()
        inclusive = inclusive + warp_sums[warp]
        if thread < experts:
            tokens_per_expert[thread] = total
            expert_offsets[thread] = inclusive - padded
        if thread == experts - 1:
            expert_offsets[experts] = inclusive
        if thread == 0:
            dropped[0] = totals[experts]

    @cute.kernel
    def assign(
        self,
        ids: cute.Tensor,
        workspace: cute.Tensor,
        expert_offsets: cute.Tensor,
        row_map: cute.Tensor,
        per_block: cutlass.Int32,
    ):
        experts = self.routing.experts
        thread, _, _ = cute.arch.thread_idx()
        block, _, _ = cute.arch.block_idx()
        warp, lane = cute.arch.warp_idx(), cute.arch.lane_idx()
        # (warp, expert): the warp's count of the expert, then its next row for the expert
        counters = cutlass.memory.SmemAllocator().allocate_tensor(
            cutlass.Int32, cute.make_layout(ROUTING_WARPS * experts), ROUTING_SMEM_ALIGN
        )
        rows = cute.make_tensor(
            counters.iterator, cute.make_layout((ROUTING_WARPS, experts), stride=(experts, 1))
        )
        for index in cutlass.range(thread, ROUTING_WARPS * experts, ROUTING_THREADS, unroll=1):
            counters[index] = 0
        cute.arch.barrier()
        block_first, block_share = self.block_range(ids, per_block)
        warp_slots = per_block // ROUTING_WARPS
        before = cutlass.min(warp * warp_slots, block_share)
        first = block_first + before
        share = cutlass.min(warp_slots, block_share - before)
        for start in cutlass.range(0, share, WARP_THREADS * ROUTING_ROUNDS, unroll=1):
            for key in round_keys(ids, first, start + lane, WARP_THREADS, share, experts):
                peers, speaks = lane_group(key)
                if speaks and key < experts:  # this warp's row alone: no other lane writes it
                    rows[warp, key] = rows[warp, key] + cute.arch.popc(peers).to(cutlass.Int32)
                cute.arch.sync_warp()  # the next round's speaker may be another lane
        cute.arch.barrier()
        for expert in cutlass.range(thread, experts, ROUTING_THREADS, unroll=1):
            running = expert_offsets[expert] + workspace[block, expert]
            for other in cutlass.range_constexpr(ROUTING_WARPS):
                count = rows[other, expert]
                rows[other, expert] = running
                running = running + count
        cute.arch.barrier()
        below = cute.arch.lanemask_lt()
        for start in cutlass.range(0, share, WARP_THREADS * ROUTING_ROUNDS, unroll=1):
            keys = round_keys(ids, first, start + lane, WARP_THREADS, share, experts)
            for k in cutlass.range_constexpr(ROUTING_ROUNDS):
                key = keys[k]
                peers, speaks = lane_group(key)
                group_first = cutlass.Int32(0)
                if speaks and key < experts:
                    group_first = rows[warp, key]
                    rows[warp, key] = group_first + cute.arch.popc(peers).to(cutlass.Int32)
                highest = 31 - cute.arch.clz(peers.to(cutlass.Int32))
                group_first = cute.arch.shuffle_sync(group_first, highest)
                row = group_first + cute.arch.popc(peers & below).to(cutlass.Int32)
                index = start + lane + k * WARP_THREADS
                if index < share:
                    row_map[cutlass.Int64(first) + index] = row if key < experts else cutlass.Int32(-1)
                cute.arch.sync_warp()
