"""`TileRing`: an N-stage ring of shared-memory tiles filled by TMA, and `TmaRingKernel`, the
skeleton every tmakit ring kernel (pipeline, copy, reduce, im2col, cluster dot) is written on.

Which barrier guards what:
- `full[s]` (1 arrival + the tile's bytes): "stage s holds the tile the consumers wait for".
  The producer arrives with expect_tx; TMA completes the bytes; consumers wait on it.
- `empty[s]` (one arrival per consumer warp): "every consumer warp is done reading stage s".
  Consumers arrive after their reads; the producer waits on it before the next load into s.
Each barrier completes once per trip round the ring, so the parity a waiter names is the trip
number mod 2 (`PipelinePlan.stage_and_parity`). The producer's first trip waits on the empty
barriers with parity 1, which a fresh barrier reports as already complete: all stages start free.

`TmaRingKernel` is the ring kernel written once (set-up, producer loop, consumer loop); a family
subclasses it and says what to load for a step and what to do with a landed stage. A kernel of
your own may also use `TileRing` directly (`examples/ring_rowmax.py`: `allocate`, `init_barriers`,
then `acquire_free`/`load` per step on the producer warp and `wait_full`/`release` on the
consumers). Keep the ring an attribute (`self.ring`): the DSL carries no plain Python object
through a device loop.

`hang_guard=True` bounds every wait (also pass `guard=`, a GUARD_WORDS int32 tensor, and `block=`): a wait
that runs out records (block, stage, parity, expected bytes, step) and that thread waits no more,
so the kernel ends and the host can raise instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import cpasync

from ..plan import DEFAULT_RELEASE, RELEASES, PipelinePlan, TileWalk
from ..plan.ring import CONSUMER, GUARD_RECORD, PRODUCER
from .tma import (
    issue_tile_copy,
    matrix_first_view,
    shared_tile_layout,
    tile_coordinate,
    tile_counts,
    tma_load_views,
)

# Polls before a guarded wait gives up. Non-blocking `test_wait` polls (a blocking try_wait may
# suspend for a system-defined time each round, so a count of those bounds nothing): about 0.1-1 s,
# far past any real wait for one tile.
GUARD_SPINS = 1 << 22


class TileRing:
    """The ring's host-side construction and device-side protocol for one `PipelinePlan`.

    `multicast_peers` > 1: the ring of one CTA in a cluster whose producers multicast every slice
    into every CTA's stage (`kernels.multicast`). A stage is then free only when the consumers of
    *every* CTA released it: each CTA's empty barrier expects consumer_warps x peers arrivals and
    a consumer warp releases a stage by arriving on that barrier in every CTA of the cluster.

    Test-only knobs: `expect_extra_bytes` adds to the byte count the producer declares (too many
    hangs; too few completes the phase early or, as seen on the H200, hangs too), `freeze_parity`
    makes consumers wait on parity 0 every trip (a missing phase flip).

    `remote_release` (multicast peers only): how a consumer warp's arrivals reach the peers'
    empty barriers, one of `plan.RELEASES`."""

    def __init__(
        self,
        pipeline: PipelinePlan,
        hang_guard: bool = False,
        expect_extra_bytes: int = 0,
        freeze_parity: bool = False,
        multicast_peers: int = 1,
        remote_release: str = DEFAULT_RELEASE,
    ):
        if remote_release not in RELEASES:
            raise ValueError(f"remote release {remote_release!r} is not one of {RELEASES}")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.hang_guard = hang_guard
        self.expect_extra_bytes = expect_extra_bytes
        self.freeze_parity = freeze_parity
        self.multicast_peers = multicast_peers
        self.remote_release = remote_release
        self.element_type = getattr(cutlass, self.plan.config.element.cutlass_name)

    @property
    def declared_bytes(self) -> int:
        """What the producer declares per tile: the plan's expected bytes (plus a test's error)."""
        return self.plan.expected_tx_bytes + self.expect_extra_bytes

    # -- host ---------------------------------------------------------------------------------
    def make_load_atom(self, src: cute.Tensor):
        """(load atom, TMA coordinate tensor, shared tile layout) for `src`, inside a @cute.jit."""
        plan = self.plan
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            matrix_first_view(src, len(plan.config.shape)),
            shared_layout,
            plan.config.tile,
        )
        return load_atom, coordinate_view, shared_layout

    # -- device -------------------------------------------------------------------------------
    def allocate(self, shared_layout: cute.ComposedLayout):
        """(tiles, full, empty): the stages first, at offset 0 of the 1024-aligned dynamic shared
        memory, each `stage_bytes` apart (a multiple of the TMA alignment); then full[], empty[].
        `tiles[None, None, stage]` is one stage's tile."""
        pipeline = self.pipeline
        smem = cutlass.memory.SmemAllocator()
        tiles = self.allocate_stages(smem, shared_layout)
        full = smem.allocate_array(cutlass.Int64, pipeline.stages)
        empty = smem.allocate_array(cutlass.Int64, pipeline.stages)
        return tiles, full, empty

    def allocate_stages(self, smem, shared_layout: cute.ComposedLayout) -> cute.Tensor:
        """The stages' tiles from `smem` (an `SmemAllocator`), tile-aligned, each `stage_bytes`
        apart, as one tensor whose last mode is the stage. A kernel whose stage holds more than
        one tile calls it once per tile."""
        plan, pipeline = self.plan, self.pipeline
        ring_ptr = smem.allocate(pipeline.ring_bytes, byte_alignment=plan.tile_alignment)
        outer = shared_layout.outer
        return cute.make_tensor(
            cute.recast_ptr(ring_ptr, shared_layout.inner, dtype=self.element_type),
            cute.make_layout(
                (*outer.shape, pipeline.stages), stride=(*outer.stride, pipeline.stage_elements)
            ),
        )

    def physical_rows(self, tiles: cute.Tensor) -> cute.Tensor:
        """The stages of a row-major ring as stored, (row, 16-byte chunk, element, stage), the
        swizzle left out: for reads whose order within a row does not matter (a row sum). A
        swizzled tile is one span wide, so the swizzle only permutes chunks within each row."""
        plan, pipeline = self.plan, self.pipeline
        tile_rows, tile_cols = plan.config.tile
        mapping = pipeline.rowsum_mapping
        return cute.make_tensor(
            cute.recast_ptr(tiles.iterator, dtype=self.element_type),  # no swizzle: as stored
            cute.make_layout(
                (tile_rows, mapping.chunks, mapping.vector, pipeline.stages),
                stride=(tile_cols, mapping.vector, 1, pipeline.stage_elements),
            ),
        )

    @cute.jit
    def init_barriers(self, full: cute.Pointer, empty: cute.Pointer, warp):
        """Each barrier initialised exactly once per block: elect_one elects one thread *per
        warp*, so the election is inside warp 0's branch. Then the fence and a block barrier - a
        cluster barrier with multicast peers, whose loads and arrivals target these barriers. The
        fence already releases the initialisation to the cluster, so the arrive is relaxed (no
        second memory barrier), as CUTLASS's pipelines do."""
        pipeline = self.pipeline
        if warp == 0:
            with cute.arch.elect_one():
                for stage in cutlass.range_constexpr(pipeline.stages):
                    cute.arch.mbarrier_init(full + stage, 1)
                    cute.arch.mbarrier_init(empty + stage, pipeline.consumer_warps * self.multicast_peers)
        cute.arch.mbarrier_init_fence()
        if cutlass.const_expr(self.multicast_peers > 1):
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.barrier()

    @cute.jit
    def wait(self, barrier, parity, failed, guard, where):
        """mbarrier wait; with the hang guard, bounded, recording what timed out, `where`: (block,
        stage, step, role). Returns the (possibly newly set) `failed` flag; a failed thread waits
        no more."""
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
                block, stage, step, role = where
                record = role * GUARD_RECORD
                # The first thread to time out (of any block) claims the record; the rest leave it,
                # so one report never mixes fields from different waits.
                if cute.arch.atomic_add((guard.iterator + record).llvm_ptr, cutlass.Int32(1)) == 0:
                    guard[record + 1] = block
                    guard[record + 2] = stage
                    guard[record + 3] = parity
                    guard[record + 4] = self.declared_bytes
                    guard[record + 5] = step
        return failed

    @cute.jit
    def acquire_free(self, empty, step, failed, guard=None, block=0):
        """Producer: the stage of the `step`-th load, once every consumer warp released it one
        trip ago (parity 1 on trip 0: free). Returns (stage, failed)."""
        stage, trip_parity = self.pipeline.stage_and_parity(step)
        failed = self.wait(empty + stage, trip_parity ^ 1, failed, guard, (block, stage, step, PRODUCER))
        return stage, failed

    @cute.jit
    def load(self, load_atom, global_part, shared_part, full, stage, failed):
        """Producer: declare the stage's bytes on its full barrier and start the TMA load. After a
        guard timeout, issue nothing more: a block must not exit with loads in flight."""
        self.issue(((load_atom, global_part, shared_part, None),), full, stage, failed)

    @cute.jit
    def issue(self, copies, full, stage, failed):
        """Producer: one arrival declaring the stage's bytes (`declared_bytes`: every copy's),
        then each copy, (atom, global part, shared part, multicast mask or None), completing on
        the stage's full barrier. A multicast copy moves this CTA's slice into every CTA its mask
        names; the declared bytes stay the whole tile's, since every peer's slice lands here too.
        A second arrival would complete the phase early, so there is one for all the copies."""
        if not failed:
            barrier = full + stage
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(barrier, self.declared_bytes)
            for index in cutlass.range_constexpr(len(copies)):
                atom, global_part, shared_part, mask = copies[index]
                issue_tile_copy(atom, global_part, shared_part, barrier, mask, self.pipeline.load_policy)

    @cute.jit
    def drain(self, empty, steps, failed, guard=None, block=0):
        """Producer, after its `steps` loads, with multicast peers: wait until the consumers of
        every CTA released each stage's last tile (one more acquire per stage; a stage never used
        is free at once). Then no peer arrives on this CTA's barriers or multicasts into its
        stages any more, and the CTA may exit - without a cluster barrier, whose arrive would
        also wait for all of the CTA's memory operations (CUTLASS's `producer_tail`).

        Every CTA of the cluster must run the same `steps` over the same stages: a CTA that ran
        fewer would find its last trips' phases already complete and exit while a peer still
        multicasts into it. (Both cluster kernels give every CTA its cluster's walk.) A GPU run
        cannot show an early exit, so the CPU tests count the drain's waits in the PTX."""
        for extra in cutlass.range_constexpr(self.pipeline.stages):
            _, failed = self.acquire_free(empty, steps + extra, failed, guard, block)
        return failed

    @cute.jit
    def wait_full(self, full, step, failed, guard=None, block=0):
        """Consumer: the stage of the `step`-th load, once its bytes have landed. Returns
        (stage, failed)."""
        stage, parity = self.pipeline.stage_and_parity(step)
        if cutlass.const_expr(self.freeze_parity):
            parity = 0
        failed = self.wait(full + stage, parity, failed, guard, (block, stage, step, CONSUMER))
        return stage, failed

    @cute.jit
    def release(self, empty, stage, failed):
        """Consumer warp: every lane's reads of the stage are done before the warp's one arrival
        frees it. A consumer whose guarded wait gave up frees nothing more: the producer then
        times out too and stops issuing, so the block never exits with loads still landing."""
        cute.arch.sync_warp()
        if not failed:
            if cutlass.const_expr(self.multicast_peers > 1 and self.remote_release == "lanes"):
                # Every peer's producer multicasts into this stage: lane i frees it in CTA i.
                lane = cute.arch.lane_idx()
                if lane < self.multicast_peers:
                    cute.arch.mbarrier_arrive(empty + stage, lane)
            else:
                with cute.arch.elect_one():
                    if cutlass.const_expr(self.multicast_peers > 1):
                        # Every peer's producer multicasts into this stage: free it in each of them.
                        scope = {"elected-cluster": nvvm.MemScopeKind.CLUSTER, "elected-cta": None}
                        for peer in cutlass.range_constexpr(self.multicast_peers):
                            cute.arch.mbarrier_arrive(empty + stage, peer, scope=scope[self.remote_release])
                    else:
                        cute.arch.mbarrier_arrive(empty + stage)


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
    consumers' state). `ring_options` go to `TileRing` (the hang guard and the test-only
    mistakes)."""

    cluster_launch = None  # a cluster family's plan (`ClusterLaunch`: its grid and cluster)

    def __init__(self, pipeline: PipelinePlan, shape_generic: bool = False, ring=None, **ring_options: Any):
        if shape_generic and not pipeline.persistent:
            raise ValueError("shape-generic kernels take persistent plans (their grid is run-time)")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.shape_generic = shape_generic
        self.ring = TileRing(pipeline, **ring_options) if ring is None else ring

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
        """Trace `kernel` and launch it with the plan's grid (or `run_time`'s), block, shared
        memory and cluster (`cluster_launch`: a cluster family's plan)."""
        pipeline, cluster = self.pipeline, self.cluster_launch
        grid = (pipeline.grid if run_time is None else run_time.grid.divisor, 1, 1)
        options = {} if cluster is None else {"cluster": (*cluster.cluster, 1)}
        self.kernel(source, sink, guard, shared_layout, run_time).launch(
            grid=grid if cluster is None else cluster.launch_grid,
            block=(pipeline.threads_per_block, 1, 1),
            smem=self.smem_bytes,
            stream=stream,
            use_pdl=pipeline.pdl,
            **options,
        )

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
        """(whose walk this block runs, its rank in the cluster): the block's, 0."""
        block, _, _ = cute.arch.block_idx()
        return block, 0

    @cute.jit
    def produce(self, context: RingContext, source):
        """The producer warp: per step, a free stage, then the family's loads into it; with
        multicast peers, the drain (`TileRing.drain`) before the CTA may exit."""
        self.prefetch_descriptors(source)
        failed = cutlass.Boolean(False)  # set only by the hang guard
        for step in cutlass.range(context.steps, unroll=1):
            stage, failed = self.ring.acquire_free(context.empty, step, failed, context.guard, context.block)
            self.load_stage(context, source, stage, step, failed)
        if cutlass.const_expr(self.ring.multicast_peers > 1):
            failed = self.ring.drain(context.empty, context.steps, failed, context.guard, context.block)

    @cute.jit
    def consume(self, context: RingContext, sink, consumer):
        """A consumer warp: per step, a full stage, handed to the family, then released."""
        state = self.consumer_begin(context, sink, consumer)
        failed = cutlass.Boolean(False)  # set only by the hang guard
        for step in cutlass.range(context.steps, unroll=1):
            stage, failed = self.ring.wait_full(context.full, step, failed, context.guard, context.block)
            self.use_stage(context, state, stage, step, consumer)
            self.release_stage(context, stage, step, failed)
            self.after_release(context, state, stage, step, consumer)
        self.consumer_end(context, state, consumer, failed)

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
