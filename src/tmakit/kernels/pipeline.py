"""Pipelined tile loads: an N-stage ring of shared tiles, a producer warp and consumer warps.

The ring's protocol (full/empty barriers, parities, the hang guard) is `kernels.ring.TileRing`.
`TmaRingKernel` is the part every pipelined kernel shares (the block's set-up and the producer
warp's TMA loads, with optional L2 prefetch); `PipelinedLoadKernel` adds the consumers that read
the tiles:
- "none": wait and release (load-only, for timing);
- "store": copy the tile to a padded scratch output (every element verified);
- "rowsum": per row of each tile, the fp32 sum of its elements, added into a (rows,) output.
The copies (a TMA store of each stage, transposing or not, and bulk copies) are `kernels.copy`.

`hang_guard=True` bounds every wait (see `TileRing`); the host then raises instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..limits import WARP_THREADS
from ..plan import PipelinePlan, TileWalk
from ..plan.ring import GUARD_WORDS
from .ring import TileRing
from .tma import combine_row_shares, padded_matrix_view, tile_coordinate, tile_counts, tma_load_views

__all__ = ["CONSUMERS", "GUARD_WORDS", "PipelinedLoadKernel", "RunTimeWalk", "TmaRingKernel"]

CONSUMERS = ("none", "store", "rowsum")


@dataclass
class RunTimeWalk:
    """A shape-generic kernel's walk (`TileWalk`), made in its host function from the tensor's
    run-time extents and passed to the kernel: each count the walk divides by as a fast divisor
    (`.divisor` is the count; `//` multiplies and shifts where a division instruction would cost
    tens of instructions per tile), and the batch count."""

    row_blocks: cute.FastDivmodDivisorV2
    column_tiles: cute.FastDivmodDivisorV2
    matrix_tiles: cute.FastDivmodDivisorV2
    grid: cute.FastDivmodDivisorV2
    batch_count: cutlass.Int32


class TmaRingKernel:
    """What every pipelined kernel shares: the ring (`TileRing`), the block's set-up (`begin`) and
    the producer warp (`produce`: wait for a free stage, declare its bytes, start the TMA load).
    Subclasses add the host side (`__call__`), the device entry (`kernel`) and the consumers.
    `ring_options` go to `TileRing` (the hang guard and the test-only mistakes)."""

    def __init__(self, pipeline: PipelinePlan, shape_generic: bool = False, **ring_options: Any):
        if shape_generic and not pipeline.persistent:
            raise ValueError("shape-generic kernels take persistent plans (their grid is run-time)")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.shape_generic = shape_generic
        self.ring = TileRing(pipeline, **ring_options)

    @property
    def smem_bytes(self) -> int:
        """The shared memory a block requests: the ring's (a copy adds its staging tiles)."""
        return self.pipeline.smem_bytes

    def run_time_walk(self, matrix_view: cute.Tensor) -> RunTimeWalk | None:
        """In the host function: a shape-generic kernel's walk over the tensor (viewed matrix
        first) on `PipelinePlan.grid`'s run-time value of blocks; None for a kernel compiled
        for one shape, whose walk is the plan's."""
        if not self.shape_generic:
            return None
        row_blocks, column_tiles, batch = tile_counts(self.plan, matrix_view, True)
        matrix_tiles = row_blocks * column_tiles
        grid = cutlass.min(matrix_tiles * batch, cutlass.Int32(self.pipeline.persistent_blocks))
        divisor = cute.fast_divmod_create_divisor_v2
        return RunTimeWalk(
            divisor(row_blocks), divisor(column_tiles), divisor(matrix_tiles), divisor(grid), batch
        )

    def walk(self, run_time: RunTimeWalk | None) -> TileWalk:
        """In the kernel: which tiles this block loads (`PipelinePlan.walk`, or the same walk
        over `run_time_walk`'s counts)."""
        if not self.shape_generic:
            return self.pipeline.walk
        return self.pipeline.walk_of(
            run_time.row_blocks.divisor,
            run_time.column_tiles.divisor,
            run_time.batch_count,
            run_time.grid.divisor,
            run_time,
        )

    def launch(self, kernel, stream: cuda.CUstream, run_time: RunTimeWalk | None = None) -> None:
        """Launch a traced `kernel(...)` with the plan's grid (or `run_time`'s), block and shared
        memory."""
        pipeline = self.pipeline
        kernel.launch(
            grid=(pipeline.grid if run_time is None else run_time.grid.divisor, 1, 1),
            block=(pipeline.threads_per_block, 1, 1),
            smem=self.smem_bytes,
            stream=stream,
            use_pdl=pipeline.pdl,
        )

    @cute.jit
    def begin(self, shared_layout: cute.ComposedLayout, walk: TileWalk):
        """The block's set-up: (warp, block, ring, full, empty, tiles this block loads)."""
        pipeline = self.pipeline
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block, _, _ = cute.arch.block_idx()
        ring, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)
        if cutlass.const_expr(pipeline.pdl):
            # Nothing above touched global memory; everything below may read what the previous
            # kernel wrote or overwrite what it reads.
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        tiles = cutlass.Int32(walk.tiles_of_block(block))
        return warp, block, ring, full, empty, tiles

    @cute.jit
    def produce(self, load_atom, coordinate_view, ring, full, empty, guard, block, tiles, walk):
        """The producer warp: wait for a free stage, declare its bytes, start the TMA load; with
        prefetching, also ask for the tile `prefetch_tiles` loads ahead to be brought into L2
        (no shared memory, no barrier: `cp.async.bulk.prefetch.tensor`)."""
        pipeline = self.pipeline
        if cutlass.const_expr(pipeline.prefetch_descriptor):
            with cute.arch.elect_one():  # `prefetch.tensormap`: the map is fetched before its first use
                cpasync.prefetch_descriptor(load_atom)
        failed = cutlass.Boolean(False)
        for step in cutlass.range(tiles, unroll=1):
            stage, failed = self.ring.acquire_free(empty, step, failed, guard, block)
            self.load_tile(load_atom, coordinate_view, ring, full, stage, block, step, tiles, walk, failed)

    @cute.jit
    def load_tile(self, load_atom, coordinate_view, ring, full, stage, block, step, tiles, walk, failed):
        """Producer: the TMA load of the `step`-th tile into `stage` (and the prefetch ahead)."""
        pipeline = self.pipeline
        global_part, shared_part = self.tile_views(
            load_atom, coordinate_view, ring[None, None, stage], walk.tile_of(block, step)
        )
        if cutlass.const_expr(pipeline.prefetch_tiles > 0):
            if step + pipeline.prefetch_tiles < tiles:
                ahead_part, _ = self.tile_views(
                    load_atom,
                    coordinate_view,
                    ring[None, None, stage],
                    walk.tile_of(block, step + pipeline.prefetch_tiles),
                )
                # Unlike the copy, the DSL does not elect a thread for a prefetch: one is enough.
                with cute.arch.elect_one():
                    cute.prefetch(load_atom, ahead_part)
        self.ring.load(load_atom, global_part, shared_part, full, stage, failed)

    @cute.jit
    def tile_views(self, atom, tensor_view, shared_tile, tile):
        """`tma_load_views` of `tile`, a (batch, row_block, column_tile) of `TileWalk.tile_of`:
        (global part, shared part), a load's source and destination or a store's destination and
        source."""
        plan = self.plan
        batch, row_block, column_tile = tile
        coordinate = tile_coordinate(row_block, column_tile, batch, len(plan.config.shape))
        return tma_load_views(atom, tensor_view, shared_tile, plan.config.tile, coordinate)


class PipelinedLoadKernel(TmaRingKernel):
    """Host side in `__call__`, device side in `kernel`; the producer is `TmaRingKernel`'s, the
    consumer warps run `consume`."""

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
        self.launch(self.kernel(load_atom, coordinate_view, out_view, guard, shared_layout), stream)

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        out_view: cute.Tensor,
        guard: cute.Tensor,
        shared_layout: cute.ComposedLayout,
    ):
        walk = self.walk(None)  # compiled for one shape: the plan's walk
        warp, block, ring, full, empty, tiles = self.begin(shared_layout, walk)
        if warp == 0:
            self.produce(load_atom, coordinate_view, ring, full, empty, guard, block, tiles, walk)
        else:
            self.consume(ring, full, empty, out_view, guard, block, tiles, walk, warp - 1)

    @cute.jit
    def consume(self, ring, full, empty, out_view, guard, block, tiles, walk, consumer):
        """A consumer warp: wait for a full stage, use its share of the tile, release the stage."""
        plan, pipeline = self.plan, self.pipeline
        tile_rows, tile_cols = plan.config.tile
        lane = cute.arch.lane_idx()
        failed = cutlass.Boolean(False)
        if cutlass.const_expr(self.consumer == "rowsum" and not plan.rows_contiguous):
            stage_rows = self.ring.physical_rows(ring)  # rows as stored, read in 16-byte chunks
            sums = cute.make_rmem_tensor(pipeline.rowsum_mapping.row_slots, cutlass.Float32)
            sums.fill(0.0)
        for step in cutlass.range(tiles, unroll=1):
            stage, failed = self.ring.wait_full(full, step, failed, guard, block)
            tile = ring[None, None, stage]
            batch, row_block, column_tile = walk.tile_of(block, step)
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
                    next_batch, next_row_block, _ = walk.tile_of(block, step + 1)
                    if step + 1 == tiles or next_row_block != row_block or next_batch != batch:
                        self.flush_rowsums(sums, out_view, row_block, batch, consumer * WARP_THREADS + lane)
            self.ring.release(empty, stage, failed)

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
