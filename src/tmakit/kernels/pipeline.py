"""Pipelined tile loads: an N-stage ring of shared tiles, a producer warp and consumer warps.

The ring's protocol (full/empty barriers, parities, the hang guard) is `kernels.ring.TileRing`;
this module is what tmakit runs on top of it.

Consumers:
- "none": wait and release (load-only, for timing);
- "store": copy the tile to a padded scratch output (every element verified);
- "rowsum": per row of each tile, the fp32 sum of its elements, written as (rows, column tiles)
  partial sums that the host adds up;
- "copy": a TMA store of the stage to the same tile of a destination tensor (shared to global,
  `CopyBulkTensorTileS2GOp`); `PipelinePlan.stores_in_flight` stores stay in flight, a stage
  being released once its store has *read* it (bulk-group commit + wait with read=True, that
  many steps late), and the kernel waits
  for the writes before it exits. The tile
  was written by TMA (the async proxy) and is read by TMA, so no proxy fence is needed.
  With `PipelinePlan.transpose` (a layout-changing copy, e.g. column-major into row-major) the
  consumer warps first transpose the stage into one of two staging tiles stored the other way
  round (16-byte reads and writes, bank-conflict free: `TransposeMapping`), release the stage,
  fence their writes to the async proxy, meet at a named barrier, and one thread TMA-stores the
  staging tile; a staging tile is rewritten only after its store has read it.
  With `PipelinePlan.bulk` each tile is one contiguous run loaded and stored by non-tensor bulk
  copies (`cp.async.bulk`, address + byte count, no tensor map); the last run may be shorter, and
  its barrier expects exactly its bytes (nothing is zero-filled). 4.8.1's `CopyBulk*Op` atoms
  fix the byte count at compile time, hence the wrappers of `cutlass.experimental.primitives`.

`hang_guard=True` bounds every wait (see `TileRing`); the host then raises instead of hanging.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..plan import PipelinePlan
from .ring import GUARD_WORDS, TileRing
from .tma import (
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tile_coordinate,
    tma_load_views,
)

__all__ = ["CONSUMERS", "GUARD_WORDS", "PipelinedLoadKernel"]

CONSUMERS = ("none", "store", "rowsum", "copy")


class PipelinedLoadKernel:
    """Host side in `__call__`, device side in `kernel`, roles in `produce` and `consume`; the
    ring's protocol and the test-only knobs belong to `TileRing`."""

    def __init__(
        self,
        pipeline: PipelinePlan,
        consumer: str = "store",
        hang_guard: bool = False,
        expect_extra_bytes: int = 0,
        freeze_parity: bool = False,
        as_rows: bool = False,
    ):
        if consumer not in CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {CONSUMERS}")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.consumer = consumer
        self.ring = TileRing(pipeline, hang_guard, expect_extra_bytes, freeze_parity)
        # The tensors passed are compact with another shape: view their memory as the plan's
        # (compact) matrix, e.g. a copy run over rows of 256 elements whatever the tensor's shape.
        self.as_rows = as_rows

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`out`: the consumer's output ("store": padded scratch of the dtype; "rowsum": fp32
        zeros of `PipelinePlan.rowsum_shape`, (batch..., padded rows), added into; "copy": the
        destination, shape and strides of `src`; "none": ignored). `guard`: GUARD_WORDS int32 zeros."""
        plan, pipeline = self.plan, self.pipeline
        if cutlass.const_expr(self.as_rows):
            rows_layout = cute.make_layout(plan.config.shape, stride=plan.config.element_strides)
            src = cute.make_tensor(src.iterator, rows_layout)
            out = cute.make_tensor(out.iterator, rows_layout)
        if cutlass.const_expr(pipeline.bulk):
            # Runs of memory copied by address: no TMA atom and no tensor map; the kernel takes
            # the tensors themselves where the tensor-map path takes atoms and coordinate views.
            load_atom, coordinate_view = src, src
            shared_layout = shared_tile_layout(plan.config.tile)
        else:
            load_atom, coordinate_view, shared_layout = self.ring.make_load_atom(src)
        store_atom = load_atom  # only the "copy" consumer stores; the others never use it
        store_layout = shared_layout  # the tile a store reads: the stage, or a transposed staging tile
        if cutlass.const_expr(self.consumer == "copy" and pipeline.bulk):
            store_atom, out_view = out, out
        elif cutlass.const_expr(self.consumer == "copy"):
            if cutlass.const_expr(pipeline.transpose):
                store_layout = shared_tile_layout(plan.config.tile, not plan.rows_contiguous)
            store_atom, out_view = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(),
                matrix_first_view(out, len(plan.config.shape)),
                store_layout,
                plan.config.tile,
            )
        elif cutlass.const_expr(self.consumer == "rowsum"):
            padded_rows = pipeline.rowsum_shape[-1]
            out_view = cute.make_tensor(
                out.iterator, cute.make_layout((padded_rows, plan.batch_count), stride=(1, padded_rows))
            )
        else:
            out_view = padded_matrix_view(out, plan.padded_shape, plan.batch_count)
        self.kernel(
            load_atom, coordinate_view, store_atom, out_view, guard, shared_layout, store_layout
        ).launch(
            grid=(pipeline.grid, 1, 1),
            block=(pipeline.threads_per_block, 1, 1),
            smem=pipeline.smem_bytes,
            stream=stream,
            use_pdl=pipeline.pdl,
        )

    @cute.kernel
    def kernel(
        self,
        load_atom,  # a TMA atom, or with `PipelinePlan.bulk` the source tensor
        coordinate_view: cute.Tensor,
        store_atom,  # likewise: a TMA store atom or the destination tensor
        out_view: cute.Tensor,
        guard: cute.Tensor,
        shared_layout: cute.ComposedLayout,
        store_layout: cute.ComposedLayout,
    ):
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

        tiles = cutlass.Int32(pipeline.tiles_of_block(block))
        if warp == 0:
            self.produce(load_atom, coordinate_view, ring, full, empty, guard, block, tiles)
        elif cutlass.const_expr(pipeline.transpose):
            self.consume_transposing(
                ring, full, empty, store_atom, out_view, store_layout, guard, block, tiles, warp - 1
            )
        else:
            self.consume(ring, full, empty, store_atom, out_view, guard, block, tiles, warp - 1)

    @cute.jit
    def produce(self, load_atom, coordinate_view, ring, full, empty, guard, block, tiles):
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
            if cutlass.const_expr(pipeline.bulk):
                _, row_block, _ = pipeline.tile_of(block, step)
                self.load_run(load_atom, ring, full, stage, row_block, failed)
            else:
                self.load_tile(load_atom, coordinate_view, ring, full, stage, block, step, tiles, failed)

    @cute.jit
    def load_tile(self, load_atom, coordinate_view, ring, full, stage, block, step, tiles, failed):
        """Producer: the TMA load of the `step`-th tile into `stage` (and the prefetch ahead)."""
        pipeline = self.pipeline
        global_part, shared_part = self.tile_views(
            load_atom, coordinate_view, ring[None, None, stage], block, step
        )
        if cutlass.const_expr(pipeline.prefetch_tiles > 0):
            if step + pipeline.prefetch_tiles < tiles:
                ahead_part, _ = self.tile_views(
                    load_atom, coordinate_view, ring[None, None, stage], block, step + pipeline.prefetch_tiles
                )
                # Unlike the copy, the DSL does not elect a thread for a prefetch: one is enough.
                with cute.arch.elect_one():
                    cute.prefetch(load_atom, ahead_part)
        self.ring.load(load_atom, global_part, shared_part, full, stage, failed)

    @cute.jit
    def tile_views(self, atom, tensor_view, shared_tile, block, step):
        """`tma_load_views` of the `step`-th tile of block `block`: (global part, shared part),
        a load's source and destination or a store's destination and source."""
        plan = self.plan
        batch, row_block, column_tile = self.pipeline.tile_of(block, step)
        coordinate = tile_coordinate(row_block, column_tile, batch, len(plan.config.shape))
        return tma_load_views(atom, tensor_view, shared_tile, plan.config.tile, coordinate)

    @cute.jit
    def consume(self, ring, full, empty, store_atom, out_view, guard, block, tiles, consumer):
        """A consumer warp: wait for a full stage, use its share of the tile, release the stage."""
        plan, pipeline = self.plan, self.pipeline
        tile_rows, tile_cols = plan.config.tile
        lane = cute.arch.lane_idx()
        failed = cutlass.Boolean(False)
        late = pipeline.stores_in_flight - 1  # "copy": stores that may still be reading their stage
        if cutlass.const_expr(self.consumer == "copy" and not pipeline.bulk):
            self.prefetch_store_descriptor(store_atom, consumer)
        if cutlass.const_expr(self.consumer == "rowsum"):
            stage_rows = self.ring.physical_rows(ring)
            sums = cute.make_rmem_tensor(pipeline.rowsum_mapping.row_slots, cutlass.Float32)
            sums.fill(0.0)
        for step in cutlass.range(tiles, unroll=1):
            stage, failed = self.ring.wait_full(full, step, failed, guard, block)
            tile = ring[None, None, stage]
            batch, row_block, column_tile = self.pipeline.tile_of(block, step)
            if cutlass.const_expr(self.consumer == "store"):
                out_tile = cute.local_tile(out_view, plan.config.tile, (row_block, column_tile, batch))
                for row in cutlass.range(consumer, tile_rows, pipeline.consumer_warps, unroll=1):
                    for col in cutlass.range(lane, tile_cols, 32):
                        out_tile[row, col] = tile[row, col]
            if cutlass.const_expr(self.consumer == "rowsum"):
                if cutlass.const_expr(plan.rows_contiguous):
                    self.add_column_major_rowsums(tile, out_view, row_block, batch, consumer, lane)
                else:
                    self.add_rowsums(stage_rows, stage, sums, consumer * 32 + lane)
                    # Flush when the block's next tile starts another strip of rows (or at the end).
                    next_batch, next_row_block, _ = self.pipeline.tile_of(block, step + 1)
                    if step + 1 == tiles or next_row_block != row_block or next_batch != batch:
                        self.flush_rowsums(sums, out_view, row_block, batch, consumer * 32 + lane)
            if cutlass.const_expr(self.consumer == "copy"):
                if consumer == 0:  # one warp stores
                    if cutlass.const_expr(pipeline.bulk):
                        destination, staged, size = self.run_of(out_view, ring, stage, row_block)
                    else:
                        destination_part, shared_part = self.tile_views(
                            store_atom, out_view, tile, block, step
                        )
                    # Unlike a TMA load, the DSL does not elect a thread for the store (all 32 lanes
                    # would each store the tile): one thread issues, commits and waits.
                    with cute.arch.elect_one():
                        if cutlass.const_expr(pipeline.bulk):
                            prims.cp_async_bulk_global_shared_cta(
                                destination, staged, size, l2_cache_hint=pipeline.store_policy
                            )
                        else:
                            self.store(store_atom, shared_part, destination_part)
                        cute.arch.cp_async_bulk_commit_group()
                        # Every store but the newest `late` has read its stage (writes may be in flight).
                        cute.arch.cp_async_bulk_wait_group(late, read=True)
                if step >= late:  # the stage whose store is now known to have read it
                    self.ring.release(empty, (step - late) % pipeline.stages, failed)
            else:
                self.ring.release(empty, stage, failed)
        if cutlass.const_expr(self.consumer == "copy"):
            # Before the block exits (and its shared memory goes), every store must have read its
            # stage; the writes themselves complete before the grid does.
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            for step in cutlass.range(tiles - late, tiles, unroll=1):  # the stages not yet released
                if step >= 0:
                    self.ring.release(empty, step % pipeline.stages, failed)

    @cute.jit
    def run_of(self, tensor, ring, stage, row_block):
        """A bulk copy's tile `row_block`: (its address in `tensor`, its stage's shared address,
        its bytes: a whole tile's, or the rows left over for the last)."""
        tile_bytes, last_bytes = self.pipeline.bulk_tile_bytes
        size = cutlass.Int32(tile_bytes)
        if cutlass.const_expr(last_bytes != tile_bytes):
            if row_block == self.plan.row_blocks - 1:
                size = cutlass.Int32(last_bytes)
        # 64-bit: a 2 GiB tensor of bytes has 2**31 elements.
        address = tensor.iterator + cutlass.Int64(row_block) * (tile_bytes // self.plan.config.element.nbytes)
        stages = cute.recast_ptr(ring.iterator, dtype=self.ring.element_type)  # unswizzled: as stored
        staged = stages + stage * self.pipeline.stage_elements
        return address, staged, size

    @cute.jit
    def load_run(self, src, ring, full, stage, row_block, failed):
        """Producer of a bulk copy: one thread declares the run's bytes on the stage's full
        barrier and starts its bulk copy into the stage (the DSL elects no thread for these)."""
        if not failed:
            address, staged, size = self.run_of(src, ring, stage, row_block)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full + stage, size)
                prims.cp_async_bulk_shared_cluster_global(
                    staged, address, full + stage, size, l2_cache_hint=self.pipeline.load_policy
                )

    @cute.jit
    def prefetch_store_descriptor(self, store_atom, consumer):
        """The storing warp fetches the store's tensor map while the first load is in flight, so
        that the first store (a small copy's only one) does not wait for it."""
        if consumer == 0:
            with cute.arch.elect_one():
                cpasync.prefetch_descriptor(store_atom)

    @cute.jit
    def store(self, store_atom, shared_part, destination_part):
        """One thread's TMA store of a tile from shared memory (with `PipelinePlan.store_policy`'s
        L2 hint, if any)."""
        policy = self.pipeline.store_policy
        if cutlass.const_expr(policy is not None):
            cute.copy(store_atom, shared_part, destination_part, cache_policy=cutlass.Int64(policy))
        else:
            cute.copy(store_atom, shared_part, destination_part)

    @cute.jit
    def consume_transposing(
        self, ring, full, empty, store_atom, out_view, store_layout, guard, block, tiles, consumer
    ):
        """A consumer warp of a layout-changing copy: per stage, transpose its share of the blocks
        into staging tile `step % 2`, release the stage, fence the writes to the async proxy (TMA
        reads them), meet the other consumer warps at named barrier 1, and (warp 0, one thread)
        TMA-store the staging tile. Before the barrier that thread waits until the previous
        store has read the other staging tile, so after it every thread may overwrite that one."""
        pipeline = self.pipeline
        source, staging, staging_tiles = self.staging_views(ring, store_layout)
        thread = consumer * 32 + cute.arch.lane_idx()
        failed = cutlass.Boolean(False)
        self.prefetch_store_descriptor(store_atom, consumer)
        for step in cutlass.range(tiles, unroll=1):
            stage, failed = self.ring.wait_full(full, step, failed, guard, block)
            buffer = step % 2
            self.transpose_stage(source, stage, staging, buffer, thread)
            self.ring.release(empty, stage, failed)
            cute.arch.fence_proxy("async.shared", space="cta")
            if consumer == 0:
                with cute.arch.elect_one():
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.barrier(barrier_id=1, number_of_threads=32 * pipeline.consumer_warps)
            if consumer == 0:
                destination_part, shared_part = self.tile_views(
                    store_atom, out_view, staging_tiles[None, None, buffer], block, step
                )
                with cute.arch.elect_one():
                    self.store(store_atom, shared_part, destination_part)
                    cute.arch.cp_async_bulk_commit_group()
        if consumer == 0:
            with cute.arch.elect_one():
                cute.arch.cp_async_bulk_wait_group(0, read=True)  # stores read their staging tile

    def staging_views(self, ring: cute.Tensor, store_layout: cute.ComposedLayout):
        """(source stages as stored, (vector, chunk, row, stage); staging tiles as stored,
        (vector, chunk, row, buffer); staging tiles as the store sees them, (rows, cols, buffer)).
        The staging tiles start `PipelinePlan.staging_offset` bytes into shared memory."""
        pipeline = self.pipeline
        mapping = pipeline.transpose_mapping
        vector, source_rows = mapping.vector, mapping.source_rows
        source_width = mapping.source_chunks * vector
        base = cute.recast_ptr(ring.iterator, dtype=self.ring.element_type)
        staging_base = base + pipeline.staging_offset // self.plan.config.element.nbytes
        source = cute.make_tensor(
            base,
            cute.make_layout(
                (vector, mapping.source_chunks, source_rows, pipeline.stages),
                stride=(1, vector, source_width, pipeline.stage_elements),
            ),
        )
        staging = cute.make_tensor(
            staging_base,
            cute.make_layout(
                (vector, mapping.row_blocks, source_width, 2),
                stride=(1, vector, source_rows, pipeline.stage_elements),
            ),
        )
        outer = store_layout.outer
        staging_tiles = cute.make_tensor(
            staging_base,
            cute.make_layout((*outer.shape, 2), stride=(*outer.stride, pipeline.stage_elements)),
        )
        return source, staging, staging_tiles

    @cute.jit
    def transpose_stage(self, source, stage, staging, buffer, thread):
        """This thread's blocks of the stage into the staging tile: `vector` 16-byte reads of
        one chunk of consecutive source rows, `vector` 16-byte writes of one chunk of
        consecutive staging rows, the block transposed in registers in between."""
        mapping = self.pipeline.transpose_mapping
        vector = mapping.vector
        block_registers = cute.make_rmem_tensor((vector, vector), self.ring.element_type)
        for k in cutlass.range_constexpr(mapping.passes):
            index = thread + k * mapping.threads
            if index < mapping.blocks:
                row_block, chunk = mapping.block(index)
                for i in cutlass.range_constexpr(vector):
                    block_registers[None, i].store(source[None, chunk, row_block * vector + i, stage].load())
                for j in cutlass.range_constexpr(vector):
                    staging[None, row_block, chunk * vector + j, buffer].store(
                        block_registers[j, None].load()
                    )

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
            total = sums[slot]
            width = mapping.threads_per_row // 2
            while cutlass.const_expr(width > 0):
                total += cute.arch.shuffle_sync_bfly(total, width)
                width //= 2
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
            for col in cutlass.range(lane, tile_cols, 32):
                partial += tile[row, col].to(cutlass.Float32)
            partial = cute.arch.warp_reduction(partial, lambda a, b: a + b)
            if lane == 0:
                self.add_to(out_view, row_block * tile_rows + row, batch, partial)

    @cute.jit
    def add_to(self, out_view, row, batch, value):
        """out[row, batch] += value, atomically: blocks that share a strip add to the same rows."""
        target = out_view.iterator + cute.crd2idx((row, batch), out_view.layout)
        cute.arch.red(target, value, op="add", dtype="f32", sem="relaxed", scope="gpu")
