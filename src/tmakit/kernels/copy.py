"""Copies through the ring: TMA loads into shared memory, TMA stores out of it.

- `CopyKernel`: a TMA store of each stage to the same tile of the destination (shared to global,
  `CopyBulkTensorTileS2GOp`). `CopyPlan.stores_in_flight` stores stay in flight, a stage being
  released once its store has *read* it (bulk-group commit + wait with read=True, that many steps
  late), and the kernel waits for the reads before it exits. The tile was written by TMA (the
  async proxy) and is read by TMA, so no proxy fence is needed.
  With `CopyPlan.transpose` (a layout-changing copy, e.g. column-major into row-major) the
  consumer warps first transpose the stage into one of two staging tiles stored the other way
  round (16-byte reads and writes, bank-conflict free: `TransposeMapping`), release the stage,
  fence their writes to the async proxy, meet at a named barrier, and one thread TMA-stores the
  staging tile; a staging tile is rewritten only after its store has read it.
- `BulkCopyKernel` (`CopyPlan.bulk`): each tile is one contiguous run loaded and stored by
  non-tensor bulk copies (`cp.async.bulk`, address + byte count, no tensor map); the last run may
  be shorter, and its barrier expects exactly its bytes (nothing is zero-filled). 4.8.1's
  `CopyBulk*Op` atoms fix the byte count at compile time, hence the wrappers of
  `cutlass.experimental.primitives`.

Both can view compact tensors of another shape as the plan's compact matrix (`as_rows`): a copy
run over rows of 256 elements whatever the tensor's shape.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..limits import WARP_THREADS
from ..plan import CopyPlan
from .ring import LateRelease, RingContext, TmaRingKernel
from .tma import matrix_first_view, shared_tile_layout

__all__ = ["BulkCopyKernel", "CopyKernel"]


class _CopyCommon(LateRelease):
    """What both copies share: the plan's shared memory, the rows view of compact tensors, and
    the end of the stores."""

    @property
    def smem_bytes(self) -> int:
        return self.copy.smem_bytes

    @property
    def late(self) -> int:
        """Stores that may still be reading their stage beside the newest (`LateRelease`)."""
        return self.copy.stores_in_flight - 1

    def rows_views(self, src: cute.Tensor, dst: cute.Tensor):
        """With `as_rows`, the tensors' memory viewed as the plan's compact matrix (shape-generic:
        its width, and as many rows as the tensor's run-time size fills)."""
        if cutlass.const_expr(self.as_rows):
            config = self.plan.config
            rows_layout = cute.make_layout(config.shape, stride=config.element_strides)
            if cutlass.const_expr(self.shape_generic):
                width = config.shape[1]
                rows = cutlass.Int32(cute.size(src) // width)
                rows_layout = cute.make_layout((rows, width), stride=(width, 1))
            return cute.make_tensor(src.iterator, rows_layout), cute.make_tensor(dst.iterator, rows_layout)
        return src, dst

    @cute.jit
    def commit_store(self, late: cutlass.Constexpr):
        """After the issuing thread's store of a stage: commit it, then wait until every store
        but the newest `late` has read its stage (their writes may still be in flight)."""
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(late, read=True)

    @cute.jit
    def release_stage(self, context: RingContext, stage, step, failed):
        """A transposing copy frees the stage once it is transposed; a storing copy the stage
        whose store is now known to have read it, `late` steps back."""
        if cutlass.const_expr(self.copy.transpose):
            self.ring.release(context.empty, stage, failed)
        else:
            LateRelease.release_stage(self, context, stage, step, failed)

    @cute.jit
    def consumer_end(self, context: RingContext, state, consumer, failed):
        """Before the block exits (and its shared memory goes), every store must have read its
        stage (a transposing copy's: its staging tile); then a storing copy releases the stages
        not yet released. The writes complete before the grid does."""
        if cutlass.const_expr(self.copy.transpose):
            if consumer == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)  # stores read their staging tile
        else:
            LateRelease.consumer_end(self, context, state, consumer, failed)


class CopyKernel(_CopyCommon, TmaRingKernel):
    """A copy by TMA loads and TMA stores, transposing each stage when the layouts differ."""

    def __init__(
        self, copy: CopyPlan, as_rows: bool = False, shape_generic: bool = False, **ring_options: Any
    ):
        super().__init__(copy.ring, shape_generic, **ring_options)
        self.copy = copy
        self.as_rows = as_rows

    @cute.jit
    def __call__(self, src: cute.Tensor, dst: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`dst`: the destination, `src`'s shape; `guard`: GUARD_WORDS int32 zeros."""
        plan = self.plan
        src, dst = self.rows_views(src, dst)
        load_atom, coordinate_view, shared_layout = self.ring.make_load_atom(src)
        store_layout = shared_layout  # the tile a store reads: the stage, or a transposed staging tile
        if cutlass.const_expr(self.copy.transpose):
            store_layout = shared_tile_layout(plan.config.tile, not plan.rows_contiguous)
        store_atom, out_view = self.make_store_atom(dst, store_layout)
        run_time = self.run_time_walk(coordinate_view)
        sink = (store_atom, out_view, store_layout)
        self.launch((load_atom, coordinate_view), sink, guard, shared_layout, stream, run_time)

    def make_store_atom(self, dst: cute.Tensor, store_layout):
        """(store atom, destination view) of the TMA stores of tiles laid out as `store_layout`
        into `dst` (`store_operation`'s: plain or reducing), inside a @cute.jit."""
        plan = self.plan
        return cpasync.make_tiled_tma_atom(
            self.store_operation(),
            matrix_first_view(dst, len(plan.config.shape)),
            store_layout,
            plan.config.tile,
        )

    def store_operation(self) -> cpasync.TmaCopyOp:
        """The TMA store's operation: a plain store (shared to global); a reduce (`tmakit.reduce`) stores
        with a reduction instead."""
        return cpasync.CopyBulkTensorTileS2GOp()

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """(store atom, destination view, and for a transposing copy: the stages as stored, the
        staging tiles as stored and as the store sees them, this thread's index); the storing
        warp fetches the store's tensor map meanwhile."""
        store_atom, out_view, store_layout = sink
        transposing = ()
        if cutlass.const_expr(self.copy.transpose):
            views = self.staging_views(context.stages, store_layout)
            transposing = (*views, consumer * WARP_THREADS + cute.arch.lane_idx())
        self.prefetch_store_descriptor(store_atom, consumer)
        return store_atom, out_view, transposing

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """A storing copy's warp 0 TMA-stores the stage (one thread); a transposing copy's warps
        transpose their share of it into staging tile `step % 2`."""
        store_atom, out_view, transposing = state
        if cutlass.const_expr(self.copy.transpose):
            source, staging, staging_tiles, thread = transposing
            self.transpose_stage(source, stage, staging, step % 2, thread)
        elif consumer == 0:  # one warp stores
            self.store_tile(store_atom, out_view, context.stages[None, None, stage], context, step)

    @cute.jit
    def after_release(self, context: RingContext, state, stage, step, consumer):
        """A transposing copy, the stage released: fence the staging writes to the async proxy
        (TMA reads them), meet the other consumer warps at named barrier 1, and (warp 0, one
        thread) TMA-store the staging tile. Before the barrier warp 0 waits until the previous
        store has read the other staging tile, so after it every thread may overwrite that one."""
        if cutlass.const_expr(self.copy.transpose):
            store_atom, out_view, transposing = state
            staging_tiles = transposing[2]
            cute.arch.fence_proxy("async.shared", space="cta")
            if consumer == 0:  # every lane waits: only the issuing lane's bulk groups are not empty
                cute.arch.cp_async_bulk_wait_group(0, read=True)
            threads = WARP_THREADS * self.pipeline.consumer_warps
            cute.arch.barrier(barrier_id=1, number_of_threads=threads)
            if consumer == 0:
                self.store_tile(
                    store_atom, out_view, staging_tiles[None, None, step % 2], context, step, None
                )

    @cute.jit
    def store_tile(self, store_atom, out_view, shared_tile, context: RingContext, step, late=-1):
        """The storing warp's TMA store of `shared_tile` to the `step`-th tile of the walk; `late`:
        as `store_and_commit`'s, by default the stores the plan keeps in flight beside the newest."""
        tile = context.walk.tile_of(context.block, step)
        destination_part, shared_part = self.tile_views(store_atom, out_view, shared_tile, tile)
        late = self.copy.stores_in_flight - 1 if cutlass.const_expr(late == -1) else late
        self.store_and_commit(store_atom, shared_part, destination_part, late)

    @cute.jit
    def prefetch_store_descriptor(self, store_atom, consumer):
        """The storing warp fetches the store's tensor map while the first load is in flight, so
        that the first store (a small copy's only one) does not wait for it."""
        if consumer == 0:
            with cute.arch.elect_one():
                cpasync.prefetch_descriptor(store_atom)

    @cute.jit
    def store_and_commit(self, store_atom, shared_part, destination_part, late: cutlass.Constexpr = None):
        """The storing warp's TMA store of a tile: one thread issues it and commits its bulk group,
        then, with `late`, waits until all but the newest `late` stores have read their shared
        memory. Unlike a TMA load, the DSL elects no thread for a plain store (all 32 lanes would
        each store the tile), so one is elected here."""
        with cute.arch.elect_one():
            self.store(store_atom, shared_part, destination_part)
            if cutlass.const_expr(late is None):
                cute.arch.cp_async_bulk_commit_group()
            else:
                self.commit_store(late)

    @cute.jit
    def store(self, store_atom, shared_part, destination_part):
        """One thread's TMA store of a tile from shared memory (with `CopyPlan.store_policy`'s
        L2 hint, if any)."""
        policy = self.copy.store_policy
        if cutlass.const_expr(policy is not None):
            cute.copy(store_atom, shared_part, destination_part, cache_policy=cutlass.Int64(policy))
        else:
            cute.copy(store_atom, shared_part, destination_part)

    def staging_views(self, ring: cute.Tensor, store_layout: cute.ComposedLayout):
        """(source stages as stored, (vector, chunk, row, stage); staging tiles as stored,
        (vector, chunk, row, buffer); staging tiles as the store sees them, (rows, cols, buffer)).
        The staging tiles start `CopyPlan.staging_offset` bytes into shared memory."""
        pipeline = self.pipeline
        mapping = self.copy.transpose_mapping
        vector, source_rows = mapping.vector, mapping.source_rows
        source_width = mapping.source_chunks * vector
        base = cute.recast_ptr(ring.iterator, dtype=self.ring.element_type)
        staging_base = base + self.copy.staging_offset // self.plan.config.element.nbytes
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
        mapping = self.copy.transpose_mapping
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


class BulkCopyKernel(_CopyCommon, TmaRingKernel):
    """A compact copy as contiguous runs: non-tensor bulk copies in and out, no tensor maps."""

    def __init__(
        self, copy: CopyPlan, as_rows: bool = False, shape_generic: bool = False, hang_guard: bool = False
    ):
        super().__init__(copy.ring, shape_generic, hang_guard=hang_guard)
        self.copy = copy
        self.as_rows = as_rows

    @cute.jit
    def __call__(self, src: cute.Tensor, dst: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`dst`: the destination, `src`'s shape; `guard`: GUARD_WORDS int32 zeros."""
        src, dst = self.rows_views(src, dst)
        shared_layout = shared_tile_layout(self.plan.config.tile)
        run_time = self.run_time_walk(src)
        self.launch(src, dst, guard, shared_layout, stream, run_time)

    @cute.jit
    def prefetch_descriptors(self, source):
        """Bulk copies have no tensor map to prefetch."""

    @cute.jit
    def load_stage(self, context: RingContext, src, stage, step, failed):
        """Producer: one thread declares the run's bytes on the stage's full barrier and starts
        its bulk copy into the stage (the DSL elects no thread for these). After a guard
        timeout, nothing more."""
        _, row_block, _ = context.walk.tile_of(context.block, step)
        if not failed:
            address, staged, size = self.run_of(src, context, stage, row_block)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(context.full + stage, size)
                prims.cp_async_bulk_shared_cluster_global(
                    staged, address, context.full + stage, size, l2_cache_hint=self.pipeline.load_policy
                )

    @cute.jit
    def use_stage(self, context: RingContext, dst, stage, step, consumer):
        """Warp 0 bulk-stores the run (one thread)."""
        _, row_block, _ = context.walk.tile_of(context.block, step)
        if consumer == 0:  # one warp stores
            destination, staged, size = self.run_of(dst, context, stage, row_block)
            with cute.arch.elect_one():  # the DSL elects no thread for bulk copies
                prims.cp_async_bulk_global_shared_cta(
                    destination, staged, size, l2_cache_hint=self.copy.store_policy
                )
                self.commit_store(self.copy.stores_in_flight - 1)

    @cute.jit
    def run_of(self, tensor, context: RingContext, stage, row_block):
        """A bulk copy's tile `row_block`: (its address in `tensor`, its stage's shared address,
        its bytes: a whole tile's, or the rows left over for the last)."""
        tile_bytes, last_bytes = self.copy.bulk_tile_bytes
        size = cutlass.Int32(tile_bytes)
        if cutlass.const_expr(self.shape_generic):
            if row_block == context.walk.row_blocks - 1:  # the rows left: run-time
                tile_rows, cols = self.plan.config.tile
                rows = cutlass.Int32(cute.size(tensor, mode=[0]))
                size = (rows - row_block * tile_rows) * (cols * self.plan.config.element.nbytes)
        elif cutlass.const_expr(last_bytes != tile_bytes):
            if row_block == self.plan.row_blocks - 1:
                size = cutlass.Int32(last_bytes)
        # 64-bit: a 2 GiB tensor of bytes has 2**31 elements.
        address = tensor.iterator + cutlass.Int64(row_block) * (tile_bytes // self.plan.config.element.nbytes)
        stages = cute.recast_ptr(context.stages.iterator, dtype=self.ring.element_type)  # as stored
        staged = stages + stage * self.pipeline.stage_elements
        return address, staged, size
