"""Pipelined tile loads: an N-stage ring of shared tiles, a producer warp and consumer warps.

Which barrier guards what:
- `full[s]` (1 arrival + the tile's bytes): "stage s holds the tile the consumers wait for".
  The producer arrives with expect_tx; TMA completes the bytes; consumers wait on it.
- `empty[s]` (one arrival per consumer warp): "every consumer warp is done reading stage s".
  Consumers arrive after their reads; the producer waits on it before the next load into s.
Each barrier completes once per trip round the ring, so the parity a waiter names is the trip
number mod 2 (`PipelinePlan.stage_and_parity`). The producer's first trip waits on the empty
barriers with parity 1, which a fresh barrier reports as already complete: all stages start free.

Consumers:
- "none": wait and release (load-only, for timing);
- "store": copy the tile to a padded scratch output (every element verified);
- "rowsum": per row of each tile, the fp32 sum of its elements, written as (rows, column tiles)
  partial sums that the host adds up;
- "copy": a TMA store of the stage to the same tile of a destination tensor (shared to global,
  `CopyBulkTensorTileS2GOp`); the stage is released once the store has *read* it (bulk-group
  commit + wait with read=True), and the kernel waits for the writes before it exits. The tile
  was written by TMA (the async proxy) and is read by TMA, so no proxy fence is needed.

`hang_guard=True` bounds every wait: a wait that runs out records (block, stage, parity,
expected bytes, role) in a small device buffer, and that thread skips its remaining waits so the
kernel ends; the host then raises instead of hanging.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..plan import PipelinePlan
from .tma import (
    issue_tile_load,
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tile_coordinate,
    tma_load_views,
)

CONSUMERS = ("none", "store", "rowsum", "copy")
# Polls before a guarded wait gives up. Non-blocking `test_wait` polls (a blocking try_wait may
# suspend for a system-defined time each round, so a count of those bounds nothing): about 0.1-1 s,
# far past any real wait for one tile.
GUARD_SPINS = 1 << 22
# One record per role, [timed out, block, stage, parity, expected bytes, step, 0, 0]: the producer's
# at words 0-7, the consumers' at 8-15. Separate, because when a full barrier never completes the
# producer soon times out too (nobody frees a stage) and would overwrite the root cause.
GUARD_RECORD = 8
GUARD_WORDS = 2 * GUARD_RECORD


class PipelinedLoadKernel:
    """Host side in `__call__`, device side in `kernel`, roles in `produce` and `consume`.

    Test-only knobs: `expect_extra_bytes` adds to the byte count the producer declares (too many
    hangs; too few completes the phase early), `freeze_parity` makes consumers wait on parity 0
    every trip (a missing phase flip)."""

    def __init__(
        self,
        pipeline: PipelinePlan,
        consumer: str = "store",
        hang_guard: bool = False,
        expect_extra_bytes: int = 0,
        freeze_parity: bool = False,
    ):
        if consumer not in CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {CONSUMERS}")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.consumer = consumer
        self.hang_guard = hang_guard
        self.expect_extra_bytes = expect_extra_bytes
        self.freeze_parity = freeze_parity
        self.element_type = getattr(cutlass, self.plan.config.element.cutlass_name)

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`out`: the consumer's output ("store": padded scratch of the dtype; "rowsum": fp32
        (batch, padded rows, column tiles); "copy": the destination, shape and strides of `src`;
        "none": ignored). `guard`: GUARD_WORDS int32 zeros."""
        plan, pipeline = self.plan, self.pipeline
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            matrix_first_view(src, len(plan.config.shape)),
            shared_layout,
            plan.config.tile,
        )
        store_atom = load_atom  # only the "copy" consumer stores; the others never use it
        if cutlass.const_expr(self.consumer == "copy"):
            store_atom, out_view = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(),
                matrix_first_view(out, len(plan.config.shape)),
                shared_layout,
                plan.config.tile,
            )
        elif cutlass.const_expr(self.consumer == "rowsum"):
            padded_rows = plan.padded_shape[-2]
            out_view = cute.make_tensor(
                out.iterator,
                cute.make_layout(
                    (padded_rows, plan.tiles_per_block, plan.batch_count),
                    stride=(plan.tiles_per_block, 1, padded_rows * plan.tiles_per_block),
                ),
            )
        else:
            out_view = padded_matrix_view(out, plan.padded_shape, plan.batch_count)
        self.kernel(load_atom, coordinate_view, store_atom, out_view, guard, shared_layout).launch(
            grid=(pipeline.grid, 1, 1),
            block=(pipeline.threads_per_block, 1, 1),
            smem=pipeline.smem_bytes,
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        store_atom: cute.CopyAtom,
        out_view: cute.Tensor,
        guard: cute.Tensor,
        shared_layout: cute.ComposedLayout,
    ):
        plan, pipeline = self.plan, self.pipeline
        stages = pipeline.stages
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block, _, _ = cute.arch.block_idx()

        # Stages first, at offset 0 of the 1024-aligned dynamic shared memory, each
        # `stage_bytes` apart (a multiple of the TMA alignment); then full[], then empty[].
        smem = cutlass.memory.SmemAllocator()
        ring_ptr = smem.allocate(stages * pipeline.stage_bytes, byte_alignment=plan.tile_alignment)
        stage_elements = pipeline.stage_bytes // plan.config.element.nbytes
        outer = shared_layout.outer
        ring = cute.make_tensor(
            cute.recast_ptr(ring_ptr, shared_layout.inner, dtype=self.element_type),
            cute.make_layout((*outer.shape, stages), stride=(*outer.stride, stage_elements)),
        )
        full = smem.allocate_array(cutlass.Int64, stages)
        empty = smem.allocate_array(cutlass.Int64, stages)

        # Each barrier initialised exactly once per block: elect_one elects one thread *per warp*,
        # so the election is inside the producer warp's branch.
        if warp == 0:
            with cute.arch.elect_one():
                for stage in cutlass.range_constexpr(stages):
                    cute.arch.mbarrier_init(full + stage, 1)
                    cute.arch.mbarrier_init(empty + stage, pipeline.consumer_warps)
        cute.arch.mbarrier_init_fence()
        cute.arch.barrier()

        tiles = cutlass.Int32(pipeline.tiles_of_block(block))
        if warp == 0:
            self.produce(load_atom, coordinate_view, ring, full, empty, guard, block, tiles)
        else:
            self.consume(ring, full, empty, store_atom, out_view, guard, block, tiles, warp - 1)

    @cute.jit
    def wait(self, barrier, parity, guard, block, stage, step, role: cutlass.Constexpr, failed):
        """mbarrier wait; with the hang guard, bounded, recording what timed out. Returns the
        (possibly newly set) `failed` flag; a failed thread waits no more."""
        if cutlass.const_expr(not self.hang_guard):
            cute.arch.mbarrier_wait(barrier, parity)
        else:
            done = failed
            spins = cutlass.Int32(0)
            while not done and spins < GUARD_SPINS:
                done = cute.arch.mbarrier_test_wait(barrier, parity)
                spins += 1
            if not done:
                failed = cutlass.Boolean(True)
                record = role * GUARD_RECORD
                # The first thread to time out (of any block) claims the record; the rest leave it,
                # so one report never mixes fields from different waits.
                if cute.arch.atomic_add((guard.iterator + record).llvm_ptr, cutlass.Int32(1)) == 0:
                    guard[record + 1] = block
                    guard[record + 2] = stage
                    guard[record + 3] = parity
                    guard[record + 4] = self.plan.expected_tx_bytes + self.expect_extra_bytes
                    guard[record + 5] = step
        return failed

    @cute.jit
    def produce(self, load_atom, coordinate_view, ring, full, empty, guard, block, tiles):
        """The producer warp: wait for a free stage, declare its bytes, start the TMA load; with
        prefetching, also ask for the tile `prefetch_tiles` loads ahead to be brought into L2
        (no shared memory, no barrier: `cp.async.bulk.prefetch.tensor`)."""
        plan, pipeline = self.plan, self.pipeline
        if cutlass.const_expr(pipeline.prefetch_descriptor):
            with cute.arch.elect_one():  # `prefetch.tensormap`: the map is fetched before its first use
                cpasync.prefetch_descriptor(load_atom)
        failed = cutlass.Boolean(False)
        for step in cutlass.range(tiles, unroll=1):
            stage, trip_parity = pipeline.stage_and_parity(step)
            # Free when every consumer warp released it one trip ago (parity 1 on trip 0: free).
            failed = self.wait(empty + stage, trip_parity ^ 1, guard, block, stage, step, 0, failed)
            batch, row_block, column_tile = self.pipeline.tile_of(block, step)
            global_part, shared_part = tma_load_views(
                load_atom,
                coordinate_view,
                ring[None, None, stage],
                plan.config.tile,
                tile_coordinate(row_block, column_tile, batch, len(plan.config.shape)),
            )
            if cutlass.const_expr(pipeline.prefetch_tiles > 0):
                if step + pipeline.prefetch_tiles < tiles:
                    ahead_batch, ahead_row_block, ahead_column_tile = self.pipeline.tile_of(
                        block, step + pipeline.prefetch_tiles
                    )
                    ahead_part, _ = tma_load_views(
                        load_atom,
                        coordinate_view,
                        ring[None, None, stage],
                        plan.config.tile,
                        tile_coordinate(
                            ahead_row_block, ahead_column_tile, ahead_batch, len(plan.config.shape)
                        ),
                    )
                    # Unlike the copy, the DSL does not elect a thread for a prefetch: one is enough.
                    with cute.arch.elect_one():
                        cute.prefetch(load_atom, ahead_part)
            # After a guard timeout, issue nothing more: a block must not exit with loads in flight.
            if not failed:
                issue_tile_load(
                    load_atom,
                    global_part,
                    shared_part,
                    full + stage,
                    plan.expected_tx_bytes + self.expect_extra_bytes,
                )

    @cute.jit
    def consume(self, ring, full, empty, store_atom, out_view, guard, block, tiles, consumer):
        """A consumer warp: wait for a full stage, use its share of the tile, release the stage."""
        plan, pipeline = self.plan, self.pipeline
        tile_rows, tile_cols = plan.config.tile
        lane = cute.arch.lane_idx()
        failed = cutlass.Boolean(False)
        for step in cutlass.range(tiles, unroll=1):
            stage, parity = pipeline.stage_and_parity(step)
            if cutlass.const_expr(self.freeze_parity):
                parity = 0
            failed = self.wait(full + stage, parity, guard, block, stage, step, 1, failed)
            tile = ring[None, None, stage]
            batch, row_block, column_tile = self.pipeline.tile_of(block, step)
            if cutlass.const_expr(self.consumer == "store"):
                out_tile = cute.local_tile(out_view, plan.config.tile, (row_block, column_tile, batch))
                for row in cutlass.range(consumer, tile_rows, pipeline.consumer_warps, unroll=1):
                    for col in cutlass.range(lane, tile_cols, 32):
                        out_tile[row, col] = tile[row, col]
            if cutlass.const_expr(self.consumer == "rowsum"):
                for row in cutlass.range(consumer, tile_rows, pipeline.consumer_warps, unroll=1):
                    partial = cutlass.Float32(0.0)
                    for col in cutlass.range(lane, tile_cols, 32):
                        partial += tile[row, col].to(cutlass.Float32)
                    partial = cute.arch.warp_reduction(partial, lambda a, b: a + b)
                    if lane == 0:
                        out_view[row_block * tile_rows + row, column_tile, batch] = partial
            if cutlass.const_expr(self.consumer == "copy"):
                if consumer == 0:  # one warp stores
                    destination_part, shared_part = tma_load_views(
                        store_atom,
                        out_view,
                        tile,
                        plan.config.tile,
                        tile_coordinate(row_block, column_tile, batch, len(plan.config.shape)),
                    )
                    # Unlike a TMA load, the DSL does not elect a thread for the store (all 32 lanes
                    # would each store the tile): one thread issues, commits and waits.
                    with cute.arch.elect_one():
                        cute.copy(store_atom, shared_part, destination_part)
                        cute.arch.cp_async_bulk_commit_group()
                        # The store has read the stage (its writes may be in flight): free to reuse.
                        cute.arch.cp_async_bulk_wait_group(0, read=True)
            # Every lane's reads of the stage are done before the warp's one arrival frees it. A
            # consumer whose guarded wait gave up frees nothing more: the producer then times out
            # too and stops issuing, so the block never exits with loads still landing.
            cute.arch.sync_warp()
            if not failed:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive(empty + stage)
        if cutlass.const_expr(self.consumer == "copy"):
            cute.arch.cp_async_bulk_wait_group(0)  # every store written before the block exits
