"""The load family's kernels: tile loads, one stage (the seed's kernel) or an N-stage ring.

`TileLoadKernel`: the seed's kernel, for any shape, dtype, layout and swizzle TMA can serve. One
warp per block; block (row_block, batch) walks its strip's column tiles one after another into one
shared tile guarded by one mbarrier. For the seed's configuration this is the seed's kernel,
instruction for instruction. What happens to each loaded tile is the `consumer`:
- "none": nothing (the seed's load-only kernel, for timing);
- "store": copy the tile, read through its (swizzled) layout, to a scratch output - the
  correctness experiment the seed proposes;
- "raw": copy the tile's raw shared-memory bytes, as TMA placed them, to a byte scratch - to
  check the physical swizzle against an independent model.

`PipelinedLoadKernel`: an N-stage ring of shared tiles, a producer warp and consumer warps. The
ring's protocol (full/empty barriers, parities, the hang guard) is `kernels.tile_ring.TileRing`,
and the ring kernel's skeleton (set-up, producer and consumer loops) `kernels.ring.TmaRingKernel`;
its consumers read the tiles:
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
from cutlass.cute.nvgpu import cpasync

from ..kernels.one_stage import OneStageKernel
from ..kernels.ring import RingContext, TmaRingKernel
from ..kernels.tma import (
    combine_row_shares,
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tile_coordinate,
    tile_counts,
    tma_load_views,
)
from ..limits import WARP_THREADS
from ..plan import LoadPlan, PipelinePlan

TILE_LOAD_CONSUMERS = ("none", "store", "raw")  # what TileLoadKernel does with each tile
PIPELINED_CONSUMERS = ("none", "store", "rowsum")  # what PipelinedLoadKernel's consumer warps do


class TileLoadKernel(OneStageKernel):
    """Host side in `__call__` (views, atom, launch), device side `OneStageKernel`'s.

    `tile_shift` (row_blocks, column_tiles) makes each block load a neighbouring tile instead of
    its own; it exists only so tests can prove the verifier catches a wrong tile origin.
    """

    def __init__(
        self,
        plan: LoadPlan,
        consumer: str = "store",
        tile_shift: tuple[int, int] = (0, 0),
        shape_generic: bool = False,
    ):
        if consumer not in TILE_LOAD_CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {TILE_LOAD_CONSUMERS}")
        if shape_generic and consumer == "raw":
            raise ValueError("the raw consumer's scratch is sized per shape: it is not shape-generic")
        self.plan = plan
        self.shape_generic = shape_generic
        self.consumer = consumer
        self.tile_shift = tile_shift
        self.element_type = getattr(cutlass, plan.config.element.cutlass_name)

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        """Launch on `stream`. `src`'s layout is the tensor's own (strides read from it, never
        rebuilt around its pointer). `out` is the consumer's scratch (ignored for "none")."""
        plan = self.plan
        matrix_view = matrix_first_view(src, len(plan.config.shape))
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), matrix_view, shared_layout, plan.config.tile
        )
        row_blocks, _, batch_count = tile_counts(plan, matrix_view, self.shape_generic)
        self.kernel(load_atom, coordinate_view, self._scratch_view(out), shared_layout).launch(
            grid=(row_blocks, batch_count, 1),
            block=(plan.threads_per_block, 1, 1),
            smem=plan.smem_bytes,
            stream=stream,
        )

    def _scratch_view(self, out: cute.Tensor) -> cute.Tensor:
        """The consumer's output as (tile rows, tile cols, tile index...) coordinates."""
        plan = self.plan
        if cutlass.const_expr(self.shape_generic):  # the padded scratch's own (run-time) layout
            view = matrix_first_view(out, len(plan.config.shape))
            if cutlass.const_expr(len(plan.config.shape) == 2):  # a batch mode of one, as for 3-D
                view = cute.make_tensor(view.iterator, cute.append(view.layout, cute.make_layout(1)))
            return view
        if cutlass.const_expr(self.consumer == "raw"):
            # One row of raw bytes per tile load: (tile bytes, column tile, row block, batch).
            return cute.make_tensor(
                out.iterator,
                cute.make_layout(
                    (plan.expected_tx_bytes, plan.tiles_per_block, plan.row_blocks, plan.batch_count)
                ),
            )
        return padded_matrix_view(out, plan.padded_shape, plan.batch_count)

    @cute.jit
    def position(self):
        """(row block, batch): the block's strip."""
        row_block, batch, _ = cute.arch.block_idx()
        return row_block, batch

    def column_tiles(self, coordinate_view: cute.Tensor):
        _, column_tiles, _ = tile_counts(self.plan, coordinate_view, self.shape_generic)
        return column_tiles

    @cute.jit
    def tile_views(self, load_atom, coordinate_view, shared_tile, where, column_tile):
        plan = self.plan
        row_block, batch = where
        tile_coord = tile_coordinate(
            row_block + self.tile_shift[0],
            column_tile + self.tile_shift[1],
            batch,
            len(plan.config.shape),
        )
        return tma_load_views(load_atom, coordinate_view, shared_tile, plan.config.tile, tile_coord)

    @cute.jit
    def use_tile(self, tile_ptr, shared_tile, scratch, where, column_tile, thread):
        """The consumer: nothing, the tile to the scratch, or its raw bytes."""
        plan = self.plan
        row_block, batch = where
        if cutlass.const_expr(self.consumer == "store"):
            out_tile = cute.local_tile(scratch, plan.config.tile, (row_block, column_tile, batch))
            self.copy_tile_out(shared_tile, out_tile, thread)
        if cutlass.const_expr(self.consumer == "raw"):
            raw_tile = cute.make_tensor(
                cute.recast_ptr(tile_ptr, dtype=cutlass.Uint8), cute.make_layout(plan.expected_tx_bytes)
            )
            out_bytes = scratch[None, column_tile, row_block, batch]
            for index in cutlass.range(thread, plan.expected_tx_bytes, plan.threads_per_block):
                out_bytes[index] = raw_tile[index]
        if cutlass.const_expr(self.consumer != "none"):
            # Buffer reuse: every thread's reads of this tile finish before the next TMA
            # load (issued after this block-wide barrier) may overwrite it.
            cute.arch.barrier()


class PipelinedLoadKernel(TmaRingKernel):
    """Host side in `__call__`; the device side is `TmaRingKernel`'s, the producer loading one
    tile per step and the consumer warps using each stage as `consumer` says."""

    def __init__(self, pipeline: PipelinePlan, consumer: str = "store", **ring_options: Any):
        if consumer not in PIPELINED_CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {PIPELINED_CONSUMERS}")
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
