"""The mixture-of-experts rings (`moe.plan`): non-tensor bulk copies addressed from the row map.

- `DispatchKernel`: one bulk copy loads a stage of consecutive token rows of `x` (read once);
  the consumer warp's lanes store each row to every row its token's slots name
  (`row_map[t, j]`), a bulk copy each, committed as one bulk group a lane per step, a stage freed
  once every store that reads it has (`LateRelease`).
- `CombineKernel`: a step is one token's chunk of columns: the producer warp's lanes load the
  chunk of the row each slot names (lane j, slot j; each declares its own bytes), the consumer
  warps read the stage 16 bytes a thread, sum the slots in order in fp32 (times the slot's
  probability where weighted), store the token's chunk and free the stage.
- `CombineGradKernel`: the combine's backward on the same ring, lane topk loading the chunk of
  the output's gradient g[t] beside the slots' rows: each consumer thread stores probs[t, j] *
  g[t] to slot j's row of y's gradient, 16 bytes at a time, and adds g[t] . y[row] into slot j's
  fp32 partial sum; a warp's partial sums of a step are reduced across its lanes and written,
  one a (token, slot, chunk, warp), for the caller to sum in a fixed order.

A row-map entry outside the rows' tensor moves nothing: every lane checks it before it forms an
address, the producer's and the consumers' alike, so the bytes a barrier expects and the slots
summed agree. Every row is viewed as bytes where only moved; the combine reads its dtype.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..kernels.ring import BulkLoadRing, BulkRingKernel, RingContext, RunTimeWalk
from ..kernels.tma import shared_tile_layout
from ..limits import WARP_THREADS
from .plan import CombinePlan, DispatchPlan

__all__ = ["CombineGradKernel", "CombineKernel", "DispatchKernel"]


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
        per_stage = self.dispatch.tokens_per_stage
        tokens = cutlass.Int32(cute.size(x, mode=[0]))
        run_time = steps_walk((tokens + (per_stage - 1)) // per_stage, self.pipeline.persistent_blocks)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        self.launch((x,), (row_map, out), guard, shared_layout, stream, run_time)

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
        self.launch((y, row_map), (y, row_map, probs, out), guard, shared_layout, stream, run_time)

    @cute.jit
    def step_chunk(self, context: RingContext, step):
        """The `step`-th step of this block: (its token, the chunk of the token's row)."""
        _, index, _ = context.walk.tile_of(context.block, step)
        token = index // self.combine.chunks
        return token, index - token * self.combine.chunks

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Lane j loads slot j's chunk (declaring its bytes first); then one arrival."""
        y, row_map = source
        combine = self.combine
        barrier = context.full + stage
        if not failed:
            token, chunk = self.step_chunk(context, step)
            lane = cute.arch.lane_idx()
            if lane < combine.topk:
                inside, row = slot_row(row_map, token, lane, cutlass.Int64(cute.size(y, mode=[0])))
                if inside:
                    start = y.iterator + row * cutlass.Int64(y.stride[0]) + chunk * combine.chunk_bytes
                    self.lane_load(
                        barrier,
                        self.staged(context, stage, lane * combine.chunk_bytes),
                        start,
                        combine.chunk_bytes,
                    )
        self.lanes_arrive(barrier, failed)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(y, row_map, probs, the output's vectors, the stages' vectors, this thread, its fp32
        accumulator): a vector is 16 bytes of one slot's chunk (the stages) or of the token's row
        (the output), (element, vector, slot or chunk, stage or token)."""
        y, row_map, probs, out = sink
        combine = self.combine
        element = out.element_type
        vector, vectors = combine.vector_elements, combine.vectors
        chunk_elements = combine.chunk_bytes // combine.element_bytes
        stage_elements = self.pipeline.stage_bytes // combine.element_bytes
        slots = cute.make_tensor(
            cute.recast_ptr(context.stages.iterator, dtype=element),
            cute.make_layout(
                (vector, vectors, combine.topk, self.pipeline.stages),
                stride=(1, vector, chunk_elements, stage_elements),
            ),
        )
        tokens = cute.size(row_map, mode=[0])
        out_vectors = cute.make_tensor(
            out.iterator,
            cute.make_layout(
                (vector, vectors, combine.chunks, tokens),
                stride=(1, vector, chunk_elements, out.stride[0]),
            ),
        )
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        total = cute.make_rmem_tensor(vector, cutlass.Float32)
        return y, row_map, probs, out_vectors, slots, thread, total

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each of this thread's vectors: the slots' values in order, in fp32, stored as the
        output's dtype."""
        y, row_map, probs, out_vectors, slots, thread, total = state
        combine = self.combine
        token, chunk = self.step_chunk(context, step)
        rows = cutlass.Int64(cute.size(y, mode=[0]))
        threads = self.pipeline.consumer_warps * WARP_THREADS
        for vector in cutlass.range(thread, combine.vectors, threads, unroll=1):
            total.fill(0.0)
            for slot in cutlass.range_constexpr(combine.topk):
                inside, _ = slot_row(row_map, token, slot, rows)
                if inside:
                    values = slots[None, vector, slot, stage].load().to(cutlass.Float32)
                    if cutlass.const_expr(combine.weighted):
                        values = values * probs[token, slot]
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
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`y`: (rows, row_bytes) uint8, rows a run-time stride apart; `grad`: (tokens, row_bytes)
        uint8, the output's gradient, rows a run-time stride apart; `row_map`: (tokens, topk)
        int32; `probs`: (tokens, topk) fp32; `grad_y`: (rows, row elements) of the plan's dtype,
        rows a run-time stride apart (the rows no slot names are not written); `partials`:
        (tokens, topk, plan.partials) fp32, every entry written. The caller launches only for one
        token or more."""
        tokens = cutlass.Int32(cute.size(row_map, mode=[0]))
        run_time = steps_walk(tokens * self.combine.chunks, self.pipeline.persistent_blocks)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        self.launch(
            (y, grad, row_map), (y, row_map, probs, grad_y, partials), guard, shared_layout, stream, run_time
        )

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Lane j loads slot j's chunk of y where its row is inside, lane topk the gradient's
        chunk (each declaring its own bytes first); then one arrival."""
        y, grad, row_map = source
        combine = self.combine
        barrier = context.full + stage
        if not failed:
            token, chunk = self.step_chunk(context, step)
            lane = cute.arch.lane_idx()
            offset = chunk * combine.chunk_bytes
            if lane < combine.topk:
                inside, row = slot_row(row_map, token, lane, cutlass.Int64(cute.size(y, mode=[0])))
                if inside:
                    start = y.iterator + row * cutlass.Int64(y.stride[0]) + offset
                    self.lane_load(
                        barrier,
                        self.staged(context, stage, lane * combine.chunk_bytes),
                        start,
                        combine.chunk_bytes,
                    )
            if lane == combine.topk:
                start = grad.iterator + cutlass.Int64(token) * cutlass.Int64(grad.stride[0]) + offset
                self.lane_load(
                    barrier,
                    self.staged(context, stage, lane * combine.chunk_bytes),
                    start,
                    combine.chunk_bytes,
                )
        self.lanes_arrive(barrier, failed)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(y, row_map, probs, y's gradient's vectors, the partial sums, the stages' vectors, this
        thread, its slots' fp32 partial sums): as `CombineKernel.consumer_begin`, the stages'
        vectors one slot more (the gradient's chunk, last)."""
        y, row_map, probs, grad_y, partials = sink
        combine = self.combine
        element = grad_y.element_type
        vector, vectors = combine.vector_elements, combine.vectors
        chunk_elements = combine.chunk_bytes // combine.element_bytes
        stage_elements = self.pipeline.stage_bytes // combine.element_bytes
        slots = cute.make_tensor(
            cute.recast_ptr(context.stages.iterator, dtype=element),
            cute.make_layout(
                (vector, vectors, combine.loads, self.pipeline.stages),
                stride=(1, vector, chunk_elements, stage_elements),
            ),
        )
        rows = cute.size(grad_y, mode=[0])
        row_vectors = cute.make_tensor(
            grad_y.iterator,
            cute.make_layout(
                (vector, vectors, combine.chunks, rows),
                stride=(1, vector, chunk_elements, grad_y.stride[0]),
            ),
        )
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        sums = cute.make_rmem_tensor(combine.topk, cutlass.Float32)
        return y, row_map, probs, row_vectors, partials, slots, thread, sums

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each of this thread's vectors: g's values in fp32, times each slot's probability
        stored to its row, and their products with the slot's values added to its partial sum;
        then the warp's partial sums, one a slot, written by lane 0."""
        y, row_map, probs, row_vectors, partials, slots, thread, sums = state
        combine = self.combine
        token, chunk = self.step_chunk(context, step)
        rows = cutlass.Int64(cute.size(y, mode=[0]))
        threads = self.pipeline.consumer_warps * WARP_THREADS
        sums.fill(0.0)
        for vector in cutlass.range(thread, combine.vectors, threads, unroll=1):
            grad = slots[None, vector, combine.topk, stage].load().to(cutlass.Float32)
            for slot in cutlass.range_constexpr(combine.topk):
                inside, row = slot_row(row_map, token, slot, rows)
                if inside:
                    values = slots[None, vector, slot, stage].load().to(cutlass.Float32)
                    sums[slot] += (grad * values).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
                    scaled = grad * probs[token, slot]
                    row_vectors[None, vector, chunk, row].store(scaled.to(row_vectors.element_type))
        lane = cute.arch.lane_idx()
        for slot in cutlass.range_constexpr(combine.topk):
            total = cute.arch.warp_reduction(sums[slot], lambda a, b: a + b)
            if lane == 0:
                partials[token, slot, chunk * self.pipeline.consumer_warps + consumer] = total
