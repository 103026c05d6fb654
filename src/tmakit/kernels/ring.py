"""`TmaRingKernel`: the ring kernel written once - set-up (warp, block or cluster rank, shared
storage, barriers, PDL, descriptor prefetch, the walk), one producer loop and one consumer loop
over a `TileRing` (`kernels.tile_ring`). A family (pipeline, copy, reduce, im2col, cluster dot)
subclasses it and says what to load for a step (`stage_copies`: each a copy atom, its views and a
multicast mask) and what to do with a landed stage (`use_stage` and the consumer's hooks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..plan import PipelinePlan, TileWalk
from .tile_ring import TileRing
from .tma import (
    tile_coordinate,
    tile_counts,
    tma_load_views,
)


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


class RingContext(NamedTuple):
    """One block's ring as its role loops and its family's hooks read it (never written in a
    loop, so the DSL carries none of it round one): who this warp is, the stages
    (`stages[None, None, stage]`), the barriers, and what the block walks."""

    warp: cutlass.Int32
    block: cutlass.Int32  # whose walk: the block's, or the cluster's
    rank: cutlass.Int32  # the CTA's rank in its cluster (0 without one)
    stages: Any  # the stages' tiles (a pair ring: a tuple of them)
    full: cute.Pointer
    empty: cute.Pointer
    steps: cutlass.Int32  # the loads of the walk
    walk: TileWalk
    guard: cute.Tensor | None


class TmaRingKernel:
    """The ring kernel, once: a family is a subclass that says what to load for a step and what to
    do with a landed stage.

    `kernel` is the one device entry: `begin` sets the block up (`RingContext`), warp 0 runs
    `produce` (wait for a free stage, `load_stage`: issue the family's `stage_copies` on its full
    barrier; with multicast peers, drain the ring at the end) and the other warps run `consume`
    (wait for a full stage, `use_stage`, `release_stage`, `after_release`; `consumer_begin` and
    `consumer_end` around the loop). The family's host function (`__call__`) passes the kernel
    its `source` (what the producer reads) and `sink` (what `consumer_begin` turns into the
    consumers' state). `ring_options` (the hang guard) go to the ring a kernel builds,
    `ring_class` (a test's subclass names a faulty one)."""

    cluster_launch = None  # a cluster family's plan (`ClusterLaunch`: its grid and cluster)
    ring_class = TileRing  # the ring a kernel not given one builds

    def __init__(self, pipeline: PipelinePlan, shape_generic: bool = False, ring=None, **ring_options: Any):
        if shape_generic and not pipeline.persistent:
            raise ValueError("shape-generic kernels take persistent plans (their grid is run-time)")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.shape_generic = shape_generic
        self.ring = self.ring_class(pipeline, **ring_options) if ring is None else ring

    @property
    def smem_bytes(self) -> int:
        """The shared memory a block requests: the ring's (a copy adds its staging tiles)."""
        return self.pipeline.smem_bytes

    # -- host ---------------------------------------------------------------------------------
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

    def launch(self, source, sink, guard, shared_layout, stream: cuda.CUstream, run_time=None) -> None:
        """Trace `kernel` and launch it (`launch_options`)."""
        self.kernel(source, sink, guard, shared_layout, run_time).launch(
            **self.launch_options(stream, run_time)
        )

    def launch_options(self, stream: cuda.CUstream, run_time=None) -> dict[str, Any]:
        """What the traced kernel is launched with: the plan's grid (or `run_time`'s), block,
        shared memory and cluster (`cluster_launch`: a cluster family's plan)."""
        pipeline, cluster = self.pipeline, self.cluster_launch
        grid = (pipeline.grid if run_time is None else run_time.grid.divisor, 1, 1)
        options = {} if cluster is None else {"cluster": (*cluster.cluster, 1)}
        return {
            "grid": grid if cluster is None else cluster.launch_grid,
            "block": (pipeline.threads_per_block, 1, 1),
            "smem": pipeline.launch_smem(self.smem_bytes),
            "stream": stream,
            "use_pdl": pipeline.pdl,
            **options,
        }

    # -- device: the skeleton -----------------------------------------------------------------
    @cute.kernel
    def kernel(self, source, sink, guard: cute.Tensor, shared_layout: cute.ComposedLayout, run_time):
        context = self.begin(shared_layout, self.walk(run_time), guard)
        if context.warp == 0:
            self.produce(context, source)
        else:
            self.consume(context, sink, context.warp - 1)

    def walk(self, run_time: RunTimeWalk | None) -> TileWalk:
        """Which tiles this block loads (`PipelinePlan.walk`, or the same walk over
        `run_time_walk`'s counts)."""
        if not self.shape_generic:
            return self.pipeline.walk
        return self.pipeline.walk_of(
            run_time.row_blocks.divisor,
            run_time.column_tiles.divisor,
            run_time.batch_count,
            run_time.grid.divisor,
            run_time,
        )

    @cute.jit
    def begin(self, shared_layout: cute.ComposedLayout, walk: TileWalk, guard) -> RingContext:
        """The block's set-up: its warp, the stages and barriers (initialised), PDL's wait, and
        how many tiles it loads."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block, rank = self.position()
        if cutlass.const_expr(self.cluster_launch is not None):  # a cluster's walk: counted first
            steps = cutlass.Int32(walk.tiles_of_block(block))
        stages, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)
        if cutlass.const_expr(self.pipeline.pdl):
            # Nothing above touched global memory; everything below may read what the previous
            # kernel wrote or overwrite what it reads.
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        if cutlass.const_expr(self.cluster_launch is None):
            steps = cutlass.Int32(walk.tiles_of_block(block))
        return RingContext(warp, block, rank, stages, full, empty, steps, walk, guard)

    @cute.jit
    def position(self):
        """(whose walk this block runs, its rank in the cluster): the block's, 0; in a cluster
        family, the cluster's (every CTA of it runs its walk) and the CTA's rank in it."""
        if cutlass.const_expr(self.cluster_launch is not None):
            rank = cute.arch.block_idx_in_cluster()
            cluster, _, _ = cute.arch.cluster_idx()
            return cluster, rank
        block, _, _ = cute.arch.block_idx()
        return block, 0

    @cute.jit
    def produce(self, context: RingContext, source):
        """The producer warp: per step, a free stage, then the family's loads into it; with
        multicast peers, the drain (`TileRing.drain`) before the CTA may exit."""
        self.prefetch_descriptors(source)
        failed = cutlass.Boolean(False)  # set only by the hang guard
        for step in cutlass.range(context.steps, unroll=1):
            stage, failed = self.acquire_stage(context, step, failed)
            self.load_stage(context, source, stage, step, failed)
        self.producer_end(context, failed)

    @cute.jit
    def consume(self, context: RingContext, sink, consumer):
        """A consumer warp: per step, a full stage, handed to the family, then released."""
        state = self.consumer_begin(context, sink, consumer)
        failed = cutlass.Boolean(False)  # set only by the hang guard
        for step in cutlass.range(context.steps, unroll=1):
            stage, failed = self.wait_stage(context, step, failed)
            self.use_stage(context, state, stage, step, consumer)
            self.release_stage(context, stage, step, failed)
            self.after_release(context, state, stage, step, consumer)
        self.consumer_end(context, state, consumer, failed)

    # -- device: the ring's waits ---------------------------------------------------------------
    @cute.jit
    def acquire_stage(self, context: RingContext, step, failed):
        """Producer: the `step`-th load's stage, once free (`TileRing.acquire_free`): (stage, failed)."""
        return self.ring.acquire_free(context.empty, step, failed, context.guard, context.block)

    @cute.jit
    def wait_stage(self, context: RingContext, step, failed):
        """Consumer: the `step`-th load's stage, once landed (`TileRing.wait_full`): (stage, failed)."""
        return self.ring.wait_full(context.full, step, failed, context.guard, context.block)

    @cute.jit
    def producer_end(self, context: RingContext, failed):
        """After the producer's loop: with multicast peers, the drain (`TileRing.drain`)."""
        if cutlass.const_expr(self.ring.multicast_peers > 1):
            failed = self.ring.drain(context.empty, context.steps, failed, context.guard, context.block)

    # -- device: what a family supplies (the defaults: one TMA tile load per step) ------------
    @cute.jit
    def prefetch_descriptors(self, source):
        """Before the first load (`PipelinePlan.prefetch_descriptor`): `prefetch.tensormap`, so
        the map is fetched before its first use."""
        if cutlass.const_expr(self.pipeline.prefetch_descriptor):
            with cute.arch.elect_one():
                cpasync.prefetch_descriptor(source[0])

    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Producer: the `step`-th load into `stage`: the family's copies, one arrival for all."""
        self.ring.issue(self.stage_copies(context, source, stage, step), context.full, stage, failed)

    @cute.jit
    def stage_copies(self, context: RingContext, source, stage, step):
        """The copies of the `step`-th tile of the walk, (atom, global part, shared part, mask):
        one TMA load of `source`, (load atom, coordinate view); with prefetching, also ask for
        the tile `prefetch_tiles` loads ahead to be brought into L2 (no shared memory, no
        barrier: `cp.async.bulk.prefetch.tensor`)."""
        pipeline = self.pipeline
        load_atom, coordinate_view = source
        shared_tile = context.stages[None, None, stage]
        global_part, shared_part = self.tile_views(
            load_atom, coordinate_view, shared_tile, context.walk.tile_of(context.block, step)
        )
        if cutlass.const_expr(pipeline.prefetch_tiles > 0):
            if step + pipeline.prefetch_tiles < context.steps:
                self.prefetch_ahead(context, source, shared_tile, step + pipeline.prefetch_tiles)
        return ((load_atom, global_part, shared_part, None),)

    @cute.jit
    def prefetch_ahead(self, context: RingContext, source, shared_tile, step):
        """The `step`-th tile of the walk brought into L2 (`cp.async.bulk.prefetch.tensor`)."""
        load_atom, coordinate_view = source
        ahead_part, _ = self.tile_views(
            load_atom, coordinate_view, shared_tile, context.walk.tile_of(context.block, step)
        )
        # Unlike the copy, the DSL does not elect a thread for a prefetch: one is enough.
        with cute.arch.elect_one():
            cute.prefetch(load_atom, ahead_part)

    @cute.jit
    def consumer_begin(self, context: RingContext, sink, consumer):
        """A consumer warp's state before its loop (what `use_stage` reads): here the sink."""
        return sink

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """A consumer warp's use of the landed `stage`, the `step`-th tile of the walk."""

    @cute.jit
    def release_stage(self, context: RingContext, stage, step, failed):
        """Free the stage for the producer (`TileRing.release`)."""
        self.ring.release(context.empty, stage, failed)

    @cute.jit
    def after_release(self, context: RingContext, state, stage, step, consumer):
        """What a consumer warp does once the stage is released (nothing, by default)."""

    @cute.jit
    def consumer_end(self, context: RingContext, state, consumer, failed):
        """After the consumer warp's loop (nothing, by default)."""

    @cute.jit
    def tile_views(self, atom, tensor_view, shared_tile, tile):
        """`tma_load_views` of `tile`, a (batch, row_block, column_tile) of `TileWalk.tile_of`:
        (global part, shared part), a load's source and destination or a store's destination and
        source."""
        plan = self.plan
        batch, row_block, column_tile = tile
        coordinate = tile_coordinate(row_block, column_tile, batch, len(plan.config.shape))
        return tma_load_views(atom, tensor_view, shared_tile, plan.config.tile, coordinate)


class LateRelease:
    """The consumer's release for kernels that store each stage by bulk copies, committed as one
    bulk group a step per storing thread (`self.late`: the groups that may still be reading their
    stage beside the newest): the stage `late` steps back is freed once every storing thread
    waited for its older groups; at the end, every group has read its stage and the stages not
    yet freed are freed."""

    @cute.jit
    def release_stage(self, context: RingContext, stage, step, failed):
        """Free the stage whose stores every lane now knows have read it, `late` steps back."""
        if step >= self.late:
            self.ring.release(context.empty, (step - self.late) % self.pipeline.stages, failed)

    @cute.jit
    def consumer_end(self, context: RingContext, state, consumer, failed):
        """Before the block exits: every store has read its stage; the stages not yet released
        are released. The writes complete before the grid does."""
        cute.arch.cp_async_bulk_wait_group(0, read=True)
        for step in cutlass.range(context.steps - self.late, context.steps, unroll=1):
            if step >= 0:
                self.ring.release(context.empty, step % self.pipeline.stages, failed)


class BulkLoadRing(TmaRingKernel):
    """A ring filled by non-tensor bulk copies (`cp.async.bulk`: an address and a byte count, no
    tensor map), a lane per copy: each lane declares its own bytes on the stage's full barrier,
    then the warp meets and one lane arrives. Its consumers read the stages themselves and free
    each as they leave it (`TmaRingKernel.release_stage`)."""

    @cute.jit
    def prefetch_descriptors(self, source):
        """Bulk copies have no tensor map to prefetch."""

    @cute.jit
    def staged(self, context: RingContext, stage, offset):
        """The shared address `offset` bytes into `stage`."""
        stages = cute.recast_ptr(context.stages.iterator, dtype=cutlass.Uint8)
        return stages + stage * self.pipeline.stage_bytes + offset

    @cute.jit
    def lane_load(self, barrier, shared, source, nbytes):
        """This lane's bulk copy of `nbytes` from `source` into `shared`, its bytes declared on
        `barrier` first."""
        cute.arch.mbarrier_expect_tx(barrier, nbytes)
        prims.cp_async_bulk_shared_cluster_global(shared, source, barrier, nbytes)

    @cute.jit
    def lanes_arrive(self, barrier, failed):
        """After the lanes' loads: the warp meets, so that every lane's bytes are declared before
        the phase may complete, then one lane arrives (none after a guard timeout; lanes a hang
        guard timed out may differ, so the whole warp meets first)."""
        cute.arch.sync_warp()
        if not failed:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(barrier)


class BulkRingKernel(LateRelease, BulkLoadRing):
    """A ring filled and emptied by bulk copies (`BulkLoadRing`): each lane commits its stores of
    a step as one bulk group, and a stage is freed `late` steps on (`LateRelease`)."""

    @cute.jit
    def commit_stores(self):
        """This lane's stores of the step as one bulk group; then the wait until all its groups
        but the newest `late` have read their stage, so that the stage `late` steps back may be
        freed."""
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(self.late, read=True)
