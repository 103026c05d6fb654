"""The cluster family's kernels: clusters whose CTAs share a tile (`plan.MulticastPlan`,
`plan.ClusterDotPlan`).

Multicast tile loads: every CTA of a cluster receives every tile; each issues only its slice.
The seed's schedule (one warp, one tile in flight), with three differences:
- the atom is `CopyBulkTensorTileG2SMulticastOp` and `tma_partition` is given the CTA's rank in the
  cluster and the cluster's layout, so it returns that CTA's slice of the tile;
- each CTA's barrier expects the whole tile's bytes, since every slice lands in every CTA (a
  peer's slice may land before this CTA's expect_tx: a transiently negative count is legal);
- barrier initialisation is made visible to the whole cluster (fence + cluster barrier) before
  any multicast can target it, and a cluster barrier after each tile keeps a CTA from multicasting
  into a peer that is still reading the previous tile.
With `multicast=False` (the baseline) each CTA loads the whole tile itself, cluster or not.

The cluster row dot, out[b, m] = sum_k A[b, m, k] * X[m, k] (`ClusterDotKernel`): the CTAs of a
cluster reuse a shared tile. Each CTA runs a ring (`PairRing`) whose stage holds two tiles of one
layout: its own A tile and the X tile the whole cluster shares. Warp 0 produces: it waits until
the stage is free in every CTA the X tile lands in, declares A's bytes and the whole X tile's on
the stage's full barrier (one arrival), multicasts its slice of X into every CTA of the cluster
(or, the baseline, loads the whole X tile into itself) and loads its A tile into itself only. The
consumer warps wait on the full barrier, add each row's products into fp32 accumulators, release
the stage in every CTA whose producer writes into it (`TileRing.release`), and write each row's
sum once, at the end of its strip. The producer drains the ring before the CTA exits
(`TileRing.drain`): no peer multicasts into or arrives on an exited CTA, and no final cluster
barrier is needed.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..kernels.one_stage import OneStageKernel
from ..kernels.ring import RingContext, TmaRingKernel
from ..kernels.tile_ring import PairRing, TileRing
from ..kernels.tma import (
    combine_row_shares,
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tma_load_views,
)
from ..limits import WARP_THREADS
from ..plan import DEFAULT_RELEASE
from .plan import ClusterDotPlan, MulticastPlan


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


class MulticastLoadKernel(OneStageKernel):
    """Host side in `__call__`, device side in `kernel`. Output: each CTA stores the tiles it
    received to its own copy of the padded scratch, (cluster size, padded rows, padded cols)."""

    def __init__(self, multicast: MulticastPlan):
        if len(multicast.load.config.shape) != 2:
            raise ValueError("multicast loads take 2-D tensors")
        self.multicast = multicast
        self.plan = multicast.load
        self.multicast_mask = multicast.multicast_mask if multicast.multicast else None
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

    @cute.jit
    def position(self):
        """(row block, rank in the cluster): one cluster per strip."""
        rank = cute.arch.block_idx_in_cluster()
        row_block, _, _ = cute.arch.cluster_idx()
        return row_block, rank

    @cute.jit
    def after_barrier_init(self):
        """Peers multicast into this CTA's barrier: its initialisation must be visible cluster-wide."""
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

    @cute.jit
    def tile_views(self, load_atom, coordinate_view, shared_tile, where, column_tile):
        row_block, rank = where
        return self.slice_views(load_atom, coordinate_view, shared_tile, (row_block, column_tile), rank)

    @cute.jit
    def use_tile(self, tile_ptr, shared_tile, copies, where, column_tile, thread):
        """The tile to this CTA's copy; then no CTA multicasts the next tile into a peer still
        reading this one."""
        row_block, rank = where
        out_tile = cute.local_tile(copies, self.plan.config.tile, (row_block, column_tile, rank))
        self.copy_tile_out(shared_tile, out_tile, thread)
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()


class PipelinedMulticastKernel(TmaRingKernel):
    """Multicast through an N-stage ring per CTA (`TileRing` with multicast peers), on
    `TmaRingKernel`: warp 0 of each CTA waits until a stage is free in *every* CTA of the cluster
    (its empty barrier counts the consumers of all of them), then multicasts its slice of the next
    tile into that stage of every CTA (`stage_copies`: one copy with the cluster's mask); warp 1
    waits on its own full barrier, stores the tile to its CTA's copy of the padded scratch and
    releases the stage in every CTA (remote arrivals, as `release` says: one of `plan.RELEASES`).
    After its last load the producer drains the ring (`TileRing.drain`): the CTA exits only once
    no peer can still arrive on or multicast into it. The cluster walks `MulticastPlan.walk`: its
    strip, or with `persistent_clusters` every so-many-th tile, the ring running on across strips.
    The host side and the output are `MulticastLoadKernel`'s; with `store=False` the consumer
    only waits and releases (for timing the loads alone)."""

    def __init__(self, multicast: MulticastPlan, store: bool = True, release: str = DEFAULT_RELEASE):
        if multicast.stages < 2:
            raise ValueError("the pipelined multicast kernel wants 2 or more stages")
        if len(multicast.load.config.shape) != 2:
            raise ValueError("multicast loads take 2-D tensors")
        ring = TileRing(multicast.pipeline, multicast_peers=multicast.num_multicast, remote_release=release)
        super().__init__(multicast.pipeline, ring=ring)
        self.multicast = self.cluster_launch = multicast
        self.store = store

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        source, copies, shared_layout = self.ring_arguments(src, out)
        self.launch(source, copies, None, shared_layout, stream)

    def ring_arguments(self, src: cute.Tensor, out: cute.Tensor) -> tuple:
        """In the host function: the kernel's source (the cluster's atom and coordinates), each
        CTA's copy of the scratch and the shared tile layout."""
        multicast = self.multicast
        load_atom, coordinate_view, shared_layout = make_cluster_load_atom(multicast, src)
        copies = padded_matrix_view(out, self.plan.padded_shape, multicast.cluster_size)
        return (load_atom, coordinate_view), copies, shared_layout

    def walk(self, run_time):
        return self.multicast.walk

    @cute.jit
    def tile_of(self, cluster, step):
        """(row block, column tile) of the cluster's `step`-th load (`MulticastPlan.walk`)."""
        _, row_block, column_tile = self.multicast.walk.tile_of(cluster, step)
        return row_block, column_tile

    @cute.jit
    def prefetch_descriptors(self, source):
        """The tensor map is always prefetched (`prefetch.tensormap`) before the first load."""
        with cute.arch.elect_one():
            cpasync.prefetch_descriptor(source[0])

    @cute.jit
    def stage_copies(self, context: RingContext, source, stage, step):
        """This CTA's slice of the tile, multicast into every CTA of the cluster (the baseline:
        the whole tile into itself)."""
        multicast = self.multicast
        load_atom, coordinate_view = source
        mask = cutlass.Int16(multicast.multicast_mask) if cutlass.const_expr(multicast.multicast) else None
        global_part, shared_part = cluster_slice_views(
            multicast,
            load_atom,
            coordinate_view,
            context.stages[None, None, stage],
            self.tile_of(context.block, step),
            context.rank,
        )
        return ((load_atom, global_part, shared_part, mask),)

    @cute.jit
    def consumer_begin(self, context: RingContext, copies, consumer):
        """(this CTA's copies of the scratch, the lane)."""
        return copies, cute.arch.lane_idx()

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        copies, lane = state
        self.store_tile(
            context.stages[None, None, stage], copies, self.tile_of(context.block, step), context.rank, lane
        )

    @cute.jit
    def store_tile(self, tile, copies, tile_coord, rank, lane):
        """With `store`: the consumer warp writes a received tile to this CTA's copy."""
        if cutlass.const_expr(self.store):
            tile_rows, tile_cols = self.plan.config.tile
            out_tile = cute.local_tile(copies, self.plan.config.tile, (*tile_coord, rank))
            for row in cutlass.range(tile_rows, unroll=1):
                for col in cutlass.range(lane, tile_cols, 32):
                    out_tile[row, col] = tile[row, col]


class ClusterDotKernel(TmaRingKernel):
    """Host side in `__call__` (A (B, M, K), X (M, K), out (B, M) fp32, stream); the device side
    is `TmaRingKernel`'s, each step loading X's slice (multicast) and the A tile, the consumer
    warps adding the products. With `plan.multicast` False: the same kernel, cluster and launch,
    each CTA loading the whole X tile itself; its empty barriers then count only its own
    consumers and nothing is remote."""

    def __init__(self, plan: ClusterDotPlan):
        # X's ring first, then A's: the order `ClusterDotPlan.smem_bytes` counts them.
        ring = PairRing(plan.pipeline, plan.expected_tx_bytes, multicast_peers=plan.x_multicast.num_multicast)
        super().__init__(plan.pipeline, ring=ring)
        self.dot = self.cluster_launch = plan
        self.multicast = plan.x_multicast

    @property
    def smem_bytes(self) -> int:
        return self.dot.smem_bytes

    @cute.jit
    def __call__(self, a: cute.Tensor, x: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        dot = self.dot
        x_atom, x_coordinates, shared_layout = make_cluster_load_atom(self.multicast, x)
        a_atom, a_coordinates = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), matrix_first_view(a, 3), shared_layout, dot.tile
        )
        self.launch((x_atom, x_coordinates, a_atom, a_coordinates), out, None, shared_layout, stream)

    def walk(self, run_time):
        return self.dot.walk

    @cute.jit
    def stage_copies(self, context: RingContext, source, stage, step):
        """The X copy (this CTA's slice into every CTA of the cluster, or the whole tile) and the
        A copy (this CTA only), both completing on the stage's full barrier."""
        dot = self.dot
        x_atom, x_coordinates, a_atom, a_coordinates = source
        x_tiles, a_tiles = context.stages
        mask = cutlass.Int16(self.multicast.multicast_mask) if cutlass.const_expr(dot.multicast) else None
        group, row_block, column_tile = dot.walk.tile_of(context.block, step)
        x_global, x_shared = cluster_slice_views(
            self.multicast,
            x_atom,
            x_coordinates,
            x_tiles[None, None, stage],
            (row_block, column_tile),
            context.rank,
        )
        a_global, a_shared = tma_load_views(
            a_atom,
            a_coordinates,
            a_tiles[None, None, stage],
            dot.tile,
            (row_block, column_tile, dot.batch_of(group, context.rank)),
        )
        return (x_atom, x_global, x_shared, mask), (a_atom, a_global, a_shared, None)

    @cute.jit
    def consumer_begin(self, context: RingContext, out, consumer):
        """(out, this thread's index, both rings' rows as stored, fp32 row sums)."""
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        x_tiles, a_tiles = context.stages
        x_rows = self.ring.physical_rows(x_tiles)
        a_rows = self.ring.physical_rows(a_tiles)
        sums = cute.make_rmem_tensor(self.pipeline.rowsum_mapping.row_slots, cutlass.Float32)
        sums.fill(0.0)
        return out, thread, x_rows, a_rows, sums

    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Each thread's rows' products into its fp32 accumulators (16-byte reads in
        `RowSumMapping`'s bank-conflict-free order, both tiles through the same physical
        positions: a row's sum does not mind the swizzle's chunk order)."""
        out, thread, x_rows, a_rows, sums = state
        self.add_products(x_rows, a_rows, stage, sums, thread)

    @cute.jit
    def after_release(self, context: RingContext, state, stage, step, consumer):
        """At a strip's last column tile, the row sums to `out`."""
        dot = self.dot
        out, thread, x_rows, a_rows, sums = state
        group, row_block, column_tile = dot.walk.tile_of(context.block, step)
        if column_tile == dot.x_load.tiles_per_block - 1:
            self.write_sums(sums, out, row_block, dot.batch_of(group, context.rank), thread)

    @cute.jit
    def add_products(self, x_rows, a_rows, stage, sums, thread):
        """sum over this thread's chunks of A * X, per row slot, into `sums` (fp32)."""
        mapping = self.pipeline.rowsum_mapping
        tile_rows = self.dot.tile[0]
        for slot in cutlass.range_constexpr(mapping.row_slots):
            row, part = mapping.row_and_part(thread, slot)
            if row < tile_rows:
                total = cutlass.Float32(0.0)
                for j in cutlass.range_constexpr(mapping.chunks // mapping.threads_per_row):
                    chunk = mapping.chunk(row, part, j)
                    a_values = a_rows[row, chunk, None, stage].load().to(cutlass.Float32)
                    x_values = x_rows[row, chunk, None, stage].load().to(cutlass.Float32)
                    total += (a_values * x_values).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
                sums[slot] += total

    @cute.jit
    def write_sums(self, sums, out, row_block, batch, thread):
        """Combine the lanes that share a row, write each row of the tensor once, restart."""
        mapping = self.pipeline.rowsum_mapping
        tile_rows = self.dot.tile[0]
        rows = self.dot.shape[1]
        for slot in cutlass.range_constexpr(mapping.row_slots):
            row, part = mapping.row_and_part(thread, slot)
            total = combine_row_shares(sums[slot], mapping.threads_per_row)
            global_row = row_block * tile_rows + row
            if part == 0 and row < tile_rows and global_row < rows:  # a partial strip's rows past M
                out[batch, global_row] = total
            sums[slot] = cutlass.Float32(0.0)
