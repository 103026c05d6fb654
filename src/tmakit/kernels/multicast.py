"""Multicast tile loads: every CTA of a cluster receives every tile; each issues only its slice.

The seed's schedule (one warp, one tile in flight), with three differences:
- the atom is `CopyBulkTensorTileG2SMulticastOp` and `tma_partition` is given the CTA's rank in the
  cluster and the cluster's layout, so it returns that CTA's slice of the tile;
- each CTA's barrier expects the whole tile's bytes, since every slice lands in every CTA (a
  peer's slice may land before this CTA's expect_tx: a transiently negative count is legal);
- barrier initialisation is made visible to the whole cluster (fence + cluster barrier) before
  any multicast can target it, and a cluster barrier after each tile keeps a CTA from multicasting
  into a peer that is still reading the previous tile.
With `multicast=False` (the baseline) each CTA loads the whole tile itself, cluster or not.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import pipeline as cutlass_pipeline
from cutlass.cute.nvgpu import cpasync

from ..plan import DEFAULT_RELEASE, MulticastPlan
from .tile_ring import TileRing
from .tma import (
    allocate_tile_and_barrier,
    init_load_barrier,
    issue_tile_load,
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
)


def make_cluster_load_atom(multicast: MulticastPlan, src: cute.Tensor):
    """(load atom, TMA coordinate tensor, shared tile layout) inside a @cute.jit: the multicast
    atom for `num_multicast` CTAs, or the plain one for the baseline."""
    plan = multicast.load
    shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
    if multicast.multicast:
        op = cpasync.CopyBulkTensorTileG2SMulticastOp()
    else:
        op = cpasync.CopyBulkTensorTileG2SOp()
    load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
        op, matrix_first_view(src, 2), shared_layout, plan.config.tile, num_multicast=multicast.num_multicast
    )
    return load_atom, coordinate_view, shared_layout


def cluster_slice_views(
    multicast: MulticastPlan, load_atom, coordinate_view, shared_tile, tile_coord, rank
) -> tuple[cute.Tensor, cute.Tensor]:
    """(global part, shared part) of CTA `rank`'s share of one tile, inside a kernel: with
    multicast, its slice (`tma_partition` given its rank in the cluster and the cluster's
    layout); without, the whole tile (rank 0 of a one-CTA layout)."""
    tile_coordinates = cute.local_tile(coordinate_view, multicast.load.config.tile, tile_coord)
    shared_part, global_part = cpasync.tma_partition(
        load_atom,
        rank if multicast.multicast else 0,
        cute.make_layout(multicast.num_multicast),
        cute.group_modes(shared_tile, 0, 2),
        cute.group_modes(tile_coordinates, 0, 2),
    )
    return global_part, shared_part


class MulticastLoadKernel:
    """Host side in `__call__`, device side in `kernel`. Output: each CTA stores the tiles it
    received to its own copy of the padded scratch, (cluster size, padded rows, padded cols)."""

    def __init__(self, multicast: MulticastPlan):
        if len(multicast.load.config.shape) != 2:
            raise ValueError("multicast loads take 2-D tensors")
        self.multicast = multicast
        self.plan = multicast.load
        self.element_type = getattr(cutlass, self.plan.config.element.cutlass_name)
        self.threads_per_block, self.smem_bytes = self.plan.threads_per_block, self.plan.smem_bytes

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        plan, multicast = self.plan, self.multicast
        load_atom, coordinate_view, shared_layout = make_cluster_load_atom(multicast, src)
        copies = padded_matrix_view(out, plan.padded_shape, multicast.cluster_size)  # one per CTA rank
        self.kernel(load_atom, coordinate_view, copies, shared_layout).launch(
            grid=multicast.launch_grid,
            block=(self.threads_per_block, 1, 1),
            cluster=(multicast.cluster[0], multicast.cluster[1], 1),
            smem=self.smem_bytes,
            stream=stream,
        )

    @cute.jit
    def slice_views(self, load_atom, coordinate_view, shared_tile, tile_coord, rank):
        """(global part, shared part) of this CTA's share of one tile: with multicast, its slice
        (`tma_partition` given its rank in the cluster and the cluster's layout); without, the
        whole tile (rank 0 of a one-CTA layout)."""
        return cluster_slice_views(self.multicast, load_atom, coordinate_view, shared_tile, tile_coord, rank)

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        copies: cute.Tensor,
        shared_layout: cute.ComposedLayout,
    ):
        plan, multicast = self.plan, self.multicast
        tile_rows, tile_cols = plan.config.tile
        thread, _, _ = cute.arch.thread_idx()
        rank = cute.arch.block_idx_in_cluster()
        row_block, _, _ = cute.arch.cluster_idx()  # one cluster per strip

        _, shared_tile, barrier = allocate_tile_and_barrier(plan, shared_layout, self.element_type)
        init_load_barrier(barrier)
        # Peers multicast into this CTA's barrier: its initialisation must be visible cluster-wide.
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

        mask = cutlass.Int16(multicast.multicast_mask) if cutlass.const_expr(multicast.multicast) else None
        phase = cutlass.Int32(0)
        for column_tile in cutlass.range(plan.tiles_per_block, unroll=1):
            global_part, shared_part = self.slice_views(
                load_atom, coordinate_view, shared_tile, (row_block, column_tile), rank
            )
            # The whole tile's bytes: this CTA's slice and every peer's land here.
            issue_tile_load(load_atom, global_part, shared_part, barrier, plan.expected_tx_bytes, mask)
            cute.arch.mbarrier_wait(barrier, phase)
            phase ^= 1

            out_tile = cute.local_tile(copies, plan.config.tile, (row_block, column_tile, rank))
            for index in cutlass.range(thread, tile_rows * tile_cols, plan.threads_per_block):
                row = index // tile_cols
                col = index - row * tile_cols
                out_tile[row, col] = shared_tile[row, col]
            # No CTA multicasts the next tile into a peer still reading this one.
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()


class PipelinedMulticastKernel(MulticastLoadKernel):
    """Multicast through an N-stage ring per CTA (`TileRing` with multicast peers): warp 0 of
    each CTA waits until a stage is free in *every* CTA of the cluster (its empty barrier counts
    the consumers of all of them), then multicasts its slice of the next tile into that stage of
    every CTA; warp 1 waits on its own full barrier, stores the tile to its CTA's copy of the
    padded scratch and releases the stage in every CTA (remote arrivals, as `release` says: one
    of `plan.RELEASES`). After its last load the producer drains the ring (`TileRing.drain`):
    the CTA exits only once no peer can still arrive on or multicast into it. The cluster walks
    `MulticastPlan.walk`: its strip, or with `persistent_clusters` every so-many-th tile, the ring
    running on across strips. The host side and the output are `MulticastLoadKernel`'s; with
    `store=False` the consumer only waits and releases (for timing the loads alone).

    `timeline=True` (for `scripts/multicast_timeline.py`): the host function takes a fourth
    tensor, int64 of `MulticastPlan.timeline.shape`, and lane 0 of each warp writes
    `%globaltimer` and `%clock64` around every wait, issue and release (`plan.timeline`). Off,
    the kernel has no stamp and no extra parameter: its PTX is the uninstrumented one."""

    def __init__(
        self,
        multicast: MulticastPlan,
        store: bool = True,
        timeline: bool = False,
        release: str = DEFAULT_RELEASE,
    ):
        if multicast.stages < 2:
            raise ValueError("the pipelined multicast kernel wants 2 or more stages")
        super().__init__(multicast)
        self.pipeline = multicast.pipeline
        self.threads_per_block, self.smem_bytes = self.pipeline.threads_per_block, self.pipeline.smem_bytes
        self.ring = TileRing(self.pipeline, multicast_peers=multicast.num_multicast, remote_release=release)
        self.store = store
        self.timeline = timeline
        self.layout = multicast.timeline

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream, stamps: cute.Tensor = None):
        multicast = self.multicast
        load_atom, coordinate_view, shared_layout = make_cluster_load_atom(multicast, src)
        copies = padded_matrix_view(out, self.plan.padded_shape, multicast.cluster_size)
        self.kernel(load_atom, coordinate_view, copies, shared_layout, stamps).launch(
            grid=multicast.launch_grid,
            block=(self.threads_per_block, 1, 1),
            cluster=(multicast.cluster[0], multicast.cluster[1], 1),
            smem=self.smem_bytes,
            stream=stream,
        )

    @cute.jit
    def stamp(self, stamps, cta, word, lane):
        """With the timeline on: lane 0 records the global timer and this SM's cycle counter at
        `word` of CTA `cta`'s record. Off: nothing is traced."""
        if cutlass.const_expr(self.timeline):
            now = cute.arch.globaltimer()
            cycles = cute.arch.clock64()
            if lane == 0:
                stamps[0, cta, word] = now
                stamps[1, cta, word] = cycles

    @cute.jit
    def stamp_identity(self, stamps, cta, cluster, rank, lane):
        if cutlass.const_expr(self.timeline):
            if lane == 0:
                layout = self.layout
                for plane in cutlass.range_constexpr(2):
                    stamps[plane, cta, layout.identity_word("smid")] = cutlass.Int64(cute.arch.smid())
                    stamps[plane, cta, layout.identity_word("cluster")] = cutlass.Int64(cluster)
                    stamps[plane, cta, layout.identity_word("rank")] = cutlass.Int64(rank)

    @cute.jit
    def begin(self, stamps, load_atom):
        """(warp, lane, rank in the cluster, cluster index, CTA index, the cluster's loads): who
        this thread is and how many tiles its cluster walks; warp 0 stamps the CTA's start and
        identity, and prefetches the tensor map while the barriers are set up."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        rank = cute.arch.block_idx_in_cluster()
        cluster, _, _ = cute.arch.cluster_idx()
        cta = cluster * self.multicast.cluster_size + rank
        if warp == 0:
            self.stamp(stamps, cta, self.layout.cta_word("start"), lane)
            self.stamp_identity(stamps, cta, cluster, rank, lane)
        steps = self.multicast.walk.tiles_of_block(cluster)
        if warp == 0:
            with cute.arch.elect_one():
                cpasync.prefetch_descriptor(load_atom)
        return warp, lane, rank, cluster, cta, steps

    @cute.jit
    def tile_of(self, cluster, step):
        """(row block, column tile) of the cluster's `step`-th load (`MulticastPlan.walk`)."""
        _, row_block, column_tile = self.multicast.walk.tile_of(cluster, step)
        return row_block, column_tile

    @cute.jit
    def store_tile(self, tile, copies, tile_coord, rank, lane):
        """With `store`: the consumer warp writes a received tile to this CTA's copy."""
        if cutlass.const_expr(self.store):
            tile_rows, tile_cols = self.plan.config.tile
            out_tile = cute.local_tile(copies, self.plan.config.tile, (*tile_coord, rank))
            for row in cutlass.range(tile_rows, unroll=1):
                for col in cutlass.range(lane, tile_cols, 32):
                    out_tile[row, col] = tile[row, col]

    @cute.jit
    def stamp_exit(self, stamps, warp, lane, cta, word: cutlass.Constexpr):
        if warp == 0:
            self.stamp(stamps, cta, self.layout.cta_word(word), lane)

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        copies: cute.Tensor,
        shared_layout: cute.ComposedLayout,
        stamps: cute.Tensor,
    ):
        multicast, layout = self.multicast, self.layout
        warp, lane, rank, cluster, cta, steps = self.begin(stamps, load_atom)
        ring, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)  # ends with a cluster barrier
        if warp == 0:
            self.stamp(stamps, cta, layout.cta_word("ready"), lane)

        failed = cutlass.Boolean(False)  # no hang guard here: never set
        mask = cutlass.Int16(multicast.multicast_mask) if cutlass.const_expr(multicast.multicast) else None
        for step in cutlass.range(steps, unroll=1):
            if warp == 0:
                self.stamp(stamps, cta, layout.step_word("acquire_begin", step), lane)
                stage, failed = self.ring.acquire_free(empty, step, failed)
                self.stamp(stamps, cta, layout.step_word("acquire_end", step), lane)
                global_part, shared_part = self.slice_views(
                    load_atom, coordinate_view, ring[None, None, stage], self.tile_of(cluster, step), rank
                )
                self.ring.issue(((load_atom, global_part, shared_part, mask),), full, stage, failed)
                self.stamp(stamps, cta, layout.step_word("issued", step), lane)
            else:
                self.stamp(stamps, cta, layout.step_word("wait_begin", step), lane)
                stage, failed = self.ring.wait_full(full, step, failed)
                self.stamp(stamps, cta, layout.step_word("wait_end", step), lane)
                self.store_tile(ring[None, None, stage], copies, self.tile_of(cluster, step), rank, lane)
                self.ring.release(empty, stage, failed)
                self.stamp(stamps, cta, layout.step_word("released", step), lane)
        self.stamp_exit(stamps, warp, lane, cta, "done")
        if cutlass.const_expr(multicast.num_multicast > 1):
            if warp == 0:  # no CTA exits while a peer may still multicast into it or arrive on it
                failed = self.ring.drain(empty, steps, failed)
        self.stamp_exit(stamps, warp, lane, cta, "exit")


class PipelineTmaAsyncMulticastKernel(PipelinedMulticastKernel):
    """The same cluster ring written with CUTLASS's own pipeline, `cutlass.pipeline.PipelineTmaAsync`,
    for comparison (`scripts/multicast_timeline.py`): the same tiles, slices, multicast mask, shared
    memory, host side and time stamps as `PipelinedMulticastKernel`; only the
    protocol is the DSL's - its barrier set-up (a relaxed cluster barrier), the producer's acquire
    (wait on empty, then arrive with expect_tx on its own full barrier), the consumer's release
    (lane i of the warp arrives on CTA i's empty barrier at CTA scope) and its phase bookkeeping
    (`PipelineState`) and its exit (`producer_tail`). The cluster is given to the pipeline as one
    row of CTAs, (1, 1, size, 1), multicasting along it, since every CTA here multicasts to every
    other (a GEMM's A operand)."""

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        copies: cute.Tensor,
        shared_layout: cute.ComposedLayout,
        stamps: cute.Tensor,
    ):
        multicast, layout = self.multicast, self.layout
        stages = self.pipeline.stages
        warp, lane, rank, cluster, cta, steps = self.begin(stamps, load_atom)
        # TileRing's allocation: the stages, then full[stages] and empty[stages] back to back -
        # the barrier storage PipelineTmaAsync expects (its empty barriers at storage + stages).
        ring, full, _ = self.ring.allocate(shared_layout)
        tma_pipeline = cutlass_pipeline.PipelineTmaAsync.create(
            num_stages=stages,
            producer_group=cutlass_pipeline.CooperativeGroup(cutlass_pipeline.Agent.Thread),
            consumer_group=cutlass_pipeline.CooperativeGroup(cutlass_pipeline.Agent.Thread, 32),
            tx_count=self.plan.expected_tx_bytes,
            barrier_storage=full,
            cta_layout_vmnk=cute.make_layout((1, 1, multicast.num_multicast, 1)),
            tidx=lane,
            mcast_mode_mn=(1, 0),
            enable_multicast_signaling=True,
        )
        if warp == 0:
            self.stamp(stamps, cta, layout.cta_word("ready"), lane)

        mask = cutlass.Int16(multicast.multicast_mask) if cutlass.const_expr(multicast.multicast) else None
        if warp == 0:
            state = cutlass_pipeline.make_pipeline_state(cutlass_pipeline.PipelineUserType.Producer, stages)
            for step in cutlass.range(steps, unroll=1):
                self.stamp(stamps, cta, layout.step_word("acquire_begin", step), lane)
                tma_pipeline.producer_acquire(state)
                self.stamp(stamps, cta, layout.step_word("acquire_end", step), lane)
                tile_coord = self.tile_of(cluster, step)
                global_part, shared_part = self.slice_views(
                    load_atom, coordinate_view, ring[None, None, state.index], tile_coord, rank
                )
                barrier = tma_pipeline.producer_get_barrier(state)
                if cutlass.const_expr(mask is None):
                    cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier)
                else:
                    cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier, mcast_mask=mask)
                tma_pipeline.producer_commit(state)
                self.stamp(stamps, cta, layout.step_word("issued", step), lane)
                state.advance()
            self.stamp(stamps, cta, layout.cta_word("done"), lane)
            if cutlass.const_expr(multicast.num_multicast > 1):
                tma_pipeline.producer_tail(state)
        else:
            state = cutlass_pipeline.make_pipeline_state(cutlass_pipeline.PipelineUserType.Consumer, stages)
            for step in cutlass.range(steps, unroll=1):
                self.stamp(stamps, cta, layout.step_word("wait_begin", step), lane)
                tma_pipeline.consumer_wait(state)
                self.stamp(stamps, cta, layout.step_word("wait_end", step), lane)
                tile_coord = self.tile_of(cluster, step)
                self.store_tile(ring[None, None, state.index], copies, tile_coord, rank, lane)
                if cutlass.const_expr(self.store):
                    cute.arch.sync_warp()  # every lane's reads before any lane's release
                tma_pipeline.consumer_release(state)
                self.stamp(stamps, cta, layout.step_word("released", step), lane)
                state.advance()
        self.stamp_exit(stamps, warp, lane, cta, "exit")
