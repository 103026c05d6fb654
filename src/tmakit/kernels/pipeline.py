"""Pipelined tile loads: an N-stage ring of shared tiles, a producer warp and consumer warps.

The ring's protocol (full/empty barriers, parities, the hang guard) is `kernels.tile_ring.TileRing`,
and the ring kernel's skeleton (set-up, producer and consumer loops) `kernels.ring.TmaRingKernel`;
`PipelinedLoadKernel` is the family whose consumers read the tiles:
- "none": wait and release (load-only, for timing);
- "store": copy the tile to a padded scratch output (every element verified);
- "rowsum": per row of each tile, the fp32 sum of its elements, added into a (rows,) output.
The copies (a TMA store of each stage, transposing or not, and bulk copies) are `kernels.copy`.

`hang_guard=True` bounds every wait (see `TileRing`); the host then raises instead of hanging.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from ..limits import WARP_THREADS
from ..plan import PipelinePlan
from ..plan.ring import GUARD_WORDS
from .ring import RingContext, RunTimeWalk, TmaRingKernel
from .tma import combine_row_shares, padded_matrix_view

__all__ = ["CONSUMERS", "GUARD_WORDS", "PipelinedLoadKernel", "RunTimeWalk", "TmaRingKernel"]

CONSUMERS = ("none", "store", "rowsum")


class PipelinedLoadKernel(TmaRingKernel):
    """Host side in `__call__`; the device side is `TmaRingKernel`'s, the producer loading one
    tile per step and the consumer warps using each stage as `consumer` says."""

    def __init__(self, pipeline: PipelinePlan, consumer: str = "store", **ring_options: Any):
        if consumer not in CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {CONSUMERS}")
        super().__init__(pipeline, **ring_options)
        self.consumer = consumer

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`out`: the consumer's output ("store": padded scratch of the dtype; "rowsum": fp32
        zeros of `PipelinePlan.rowsum_shape`, (batch..., padded rows), added into; "none":
        ignored). `guard`: GUARD_WORDS int32 zeros."""
        plan, pipeline = self.plan, self.pipeline
        load_atom, coordinate_view, shared_layout = self.ring.make_load_atom(src)
        if cutlass.const_expr(self.consumer == "rowsum"):
            padded_rows = pipeline.rowsum_shape[-1]
            out_view = cute.make_tensor(
                out.iterator, cute.make_layout((padded_rows, plan.batch_count), stride=(1, padded_rows))
            )
        else:
            out_view = padded_matrix_view(out, plan.padded_shape, plan.batch_count)
        self.launch((load_atom, coordinate_view), out_view, guard, shared_layout, stream)

    @cute.jit
    def consumer_begin(self, context: RingContext, out_view, consumer):
        """(out view, lane, the stages' rows as stored, fp32 row sums): a row-major rowsum reads
        16-byte chunks and accumulates over a strip's tiles."""
        plan, pipeline = self.plan, self.pipeline
        lane = cute.arch.lane_idx()
        stage_rows = sums = None
        if cutlass.const_expr(self.consumer == "rowsum" and not plan.rows_contiguous):
            stage_rows = self.ring.physical_rows(context.stages)  # rows as stored, 16-byte chunks
            sums = cute.make_rmem_tensor(pipeline.rowsum_mapping.row_slots, cutlass.Float32)
            sums.fill(0.0)
        return out_view, lane, stage_rows, sums

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """This warp's share of the tile: stored to the scratch, or added into the row sums."""
        plan, pipeline = self.plan, self.pipeline
        out_view, lane, stage_rows, sums = state
        tile_rows, tile_cols = plan.config.tile
        tile = context.stages[None, None, stage]
        batch, row_block, column_tile = context.walk.tile_of(context.block, step)
        if cutlass.const_expr(self.consumer == "store"):
            out_tile = cute.local_tile(out_view, plan.config.tile, (row_block, column_tile, batch))
            for row in cutlass.range(consumer, tile_rows, pipeline.consumer_warps, unroll=1):
                for col in cutlass.range(lane, tile_cols, WARP_THREADS):
                    out_tile[row, col] = tile[row, col]
        if cutlass.const_expr(self.consumer == "rowsum"):
            if cutlass.const_expr(plan.rows_contiguous):
                self.add_column_major_rowsums(tile, out_view, row_block, batch, consumer, lane)
            else:
                self.add_rowsums(stage_rows, stage, sums, consumer * WARP_THREADS + lane)
                # Flush when the block's next tile starts another strip of rows (or at the end).
                next_batch, next_row_block, _ = context.walk.tile_of(context.block, step + 1)
                if step + 1 == context.steps or next_row_block != row_block or next_batch != batch:
                    self.flush_rowsums(sums, out_view, row_block, batch, consumer * WARP_THREADS + lane)

    @cute.jit
    def add_rowsums(self, stage_rows, stage, sums, thread):
        """Row sums of a row-major stage into this thread's fp32 accumulators: 16-byte shared
        loads in the bank-conflict-free order of `RowSumMapping`. Rows are read as stored: with
        a swizzle (one span wide) a row's chunks are permuted within the row, and a sum does not
        mind the order."""
        mapping = self.pipeline.rowsum_mapping
        tile_rows = self.plan.config.tile[0]
        for slot in cutlass.range_constexpr(mapping.row_slots):
            row, part = mapping.row_and_part(thread, slot)
            if row < tile_rows:
                total = cutlass.Float32(0.0)
                for j in cutlass.range_constexpr(mapping.chunks // mapping.threads_per_row):
                    values = (
                        stage_rows[row, mapping.chunk(row, part, j), None, stage].load().to(cutlass.Float32)
                    )
                    total += values.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
                sums[slot] += total

    @cute.jit
    def flush_rowsums(self, sums, out_view, row_block, batch, thread):
        """Combine the lanes that share a row, add each row's sum into the output, restart."""
        mapping = self.pipeline.rowsum_mapping
        tile_rows = self.plan.config.tile[0]
        for slot in cutlass.range_constexpr(mapping.row_slots):
            row, part = mapping.row_and_part(thread, slot)
            total = combine_row_shares(sums[slot], mapping.threads_per_row)
            if part == 0 and row < tile_rows:
                self.add_to(out_view, row_block * tile_rows + row, batch, total)
            sums[slot] = cutlass.Float32(0.0)

    @cute.jit
    def add_column_major_rowsums(self, tile, out_view, row_block, batch, consumer, lane):
        """Rows are strided in a column-major tile: a warp per row, scalar reads, one atomic
        add of each tile's partial row sum."""
        tile_rows, tile_cols = self.plan.config.tile
        for row in cutlass.range(consumer, tile_rows, self.pipeline.consumer_warps, unroll=1):
            partial = cutlass.Float32(0.0)
            for col in cutlass.range(lane, tile_cols, WARP_THREADS):
                partial += tile[row, col].to(cutlass.Float32)
            partial = cute.arch.warp_reduction(partial, lambda a, b: a + b)
            if lane == 0:
                self.add_to(out_view, row_block * tile_rows + row, batch, partial)

    @cute.jit
    def add_to(self, out_view, row, batch, value):
        """out[row, batch] += value, atomically: blocks that share a strip add to the same rows."""
        target = out_view.iterator + cute.crd2idx((row, batch), out_view.layout)
        cute.arch.red(target, value, op="add", dtype="f32", sem="relaxed", scope="gpu")
