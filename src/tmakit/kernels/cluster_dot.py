"""The cluster row dot, out[b, m] = sum_k A[b, m, k] * X[m, k] (`plan.ClusterDotPlan`): the CTAs
of a cluster reuse a shared tile.

Each CTA runs a ring (`PairRing`) whose stage holds two tiles of one layout: its own A tile and
the X tile the whole cluster shares. Warp 0 produces: it waits until the stage is free in every
CTA the X tile lands in, declares A's bytes and the whole X tile's on the stage's full barrier
(one arrival), multicasts its slice of X into every CTA of the cluster (or, the baseline, loads
the whole X tile into itself) and loads its A tile into itself only. The consumer warps wait on
the full barrier, add each row's products into fp32 accumulators, release the stage in every
CTA whose producer writes into it (`TileRing.release`), and write each row's sum once, at the
end of its strip. The producer drains the ring before the CTA exits (`TileRing.drain`): no peer
multicasts into or arrives on an exited CTA, and no final cluster barrier is needed.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..limits import WARP_THREADS
from ..plan import ClusterDotPlan
from .multicast import cluster_slice_views, make_cluster_load_atom
from .ring import RingContext, TmaRingKernel
from .tile_ring import PairRing
from .tma import combine_row_shares, matrix_first_view, tma_load_views


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
