"""`OneStageKernel`: the seed's schedule written once - one warp, one shared tile guarded by one
mbarrier, the block's strip of column tiles loaded one after another (issue, wait, flip the phase,
use the tile). The seed's tile load (`tile_load`) and the single-tile multicast load
(`multicast.MulticastLoadKernel`) are subclasses that say whose strip a block walks
(`position`), how a tile's views are made (`tile_views`), what is done with a landed tile
(`use_tile`) and what comes after the barrier's initialisation (`after_barrier_init`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .tma import allocate_tile_and_barrier, init_load_barrier, issue_tile_load


class OneStageKernel:
    """The one-stage kernel's device side; a subclass sets `plan` (a `LoadPlan`) and
    `element_type`, and launches `kernel` from its host function."""

    multicast_mask = None  # an int: every CTA of the cluster it names receives each tile

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        scratch: cute.Tensor,
        shared_layout: cute.ComposedLayout,
    ):
        plan = self.plan
        thread, _, _ = cute.arch.thread_idx()
        where = self.position()

        tile_ptr, shared_tile, barrier = allocate_tile_and_barrier(plan, shared_layout, self.element_type)
        init_load_barrier(barrier)
        self.after_barrier_init()

        column_tiles = self.column_tiles(coordinate_view)
        mask = None if cutlass.const_expr(self.multicast_mask is None) else cutlass.Int16(self.multicast_mask)
        phase = cutlass.Int32(0)
        for column_tile in cutlass.range(column_tiles, unroll=1):
            global_part, shared_part = self.tile_views(
                load_atom, coordinate_view, shared_tile, where, column_tile
            )
            # The whole tile's bytes (with multicast: this CTA's slice and every peer's land here).
            issue_tile_load(load_atom, global_part, shared_part, barrier, plan.expected_tx_bytes, mask)
            # The phase completes when the one arrival and all expected bytes are in.
            cute.arch.mbarrier_wait(barrier, phase)
            phase ^= 1
            self.use_tile(tile_ptr, shared_tile, scratch, where, column_tile, thread)

    @cute.jit
    def after_barrier_init(self):
        """After the barrier's initialisation (nothing, by default)."""

    def column_tiles(self, coordinate_view: cute.Tensor):
        """How many column tiles a block's strip has (the plan's)."""
        return self.plan.tiles_per_block

    @cute.jit
    def copy_tile_out(self, shared_tile, out_tile, thread):
        """Every thread of the block copies its share of the tile to `out_tile`, row-major so
        that a warp's stores to the (row-major) scratch are contiguous."""
        plan = self.plan
        tile_rows, tile_cols = plan.config.tile
        for index in cutlass.range(thread, tile_rows * tile_cols, plan.threads_per_block):
            row = index // tile_cols
            col = index - row * tile_cols
            out_tile[row, col] = shared_tile[row, col]
