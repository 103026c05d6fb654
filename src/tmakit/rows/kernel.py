"""Rows by index through the ring (`plan.rows`): non-tensor bulk copies, one per row, addressed
from the index the warps read; no tensor maps.

- gather (`out = table[index]`): the producer warp's lanes read the step's index entries and each
  starts the bulk copy of its entries' rows into the stage (`cp.async.bulk`, completing on the
  stage's full barrier, whose bytes each lane declares for its own rows before one lane arrives);
  the consumer stores the stage to `out` in one bulk copy, or row by row when an entry was skipped.
- scatter, add, min, max (`table[index] op= compact`): one bulk copy loads the step's rows of the
  compact tensor; the consumer warp's lanes store (or reduce: `cp.reduce.async.bulk`, the type
  in the instruction) each row to the table row its entry names.

An entry outside [0, rows) moves nothing: each lane checks it before it forms an address, so no
copy reaches outside the table. Every consumer lane commits its stores as one bulk group per step
and waits for its groups but the newest `RowsPlan.stores_in_flight - 1` to have read their stage
before the warp releases the stage that far back (bulk groups are per thread). Every tensor is
viewed as bytes, (rows, row_bytes), so one kernel serves every dtype of a row size; a reduce's
type is the plan's.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..kernels.ring import BulkRingKernel, RingContext, RunTimeWalk
from ..kernels.tma import shared_tile_layout
from ..limits import WARP_THREADS
from ..plan.reduce_ops import PTX_TYPES
from .plan import RowsPlan

__all__ = ["RowsKernel"]


class RowsKernel(BulkRingKernel):
    """Gather, scatter or reduce rows by index: bulk copies on the ring, one step per stage."""

    def __init__(self, rows: RowsPlan, hang_guard: bool = False):
        super().__init__(rows.pipeline, shape_generic=True, hang_guard=hang_guard)
        self.rows = rows
        self.gather = rows.op == "gather"
        self.late = rows.stores_in_flight - 1  # store groups that may still be reading their stage

    @cute.jit
    def __call__(
        self,
        table: cute.Tensor,
        index: cute.Tensor,
        compact: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """`table`: the indexed rows, (rows, row_bytes) uint8; `index`: (count,) int32 or int64;
        `compact`: (count, row_bytes) uint8, compact; `guard`: GUARD_WORDS int32 zeros. The
        caller launches only for a count of one or more."""
        shared_layout = shared_tile_layout(self.plan.config.tile)
        per_stage = self.rows.full_stage_rows
        count = cutlass.Int32(cute.size(index, mode=[0]))
        steps = (count + (per_stage - 1)) // per_stage
        grid = cutlass.min(steps, cutlass.Int32(self.pipeline.persistent_blocks))
        divisor = cute.fast_divmod_create_divisor_v2
        one = divisor(cutlass.Int32(1))
        run_time = RunTimeWalk(divisor(steps), one, divisor(steps), divisor(grid), cutlass.Int32(1))
        tensors = (table, index, compact)
        self.launch(tensors, tensors, guard, shared_layout, stream, run_time)

    # -- what both roles read ------------------------------------------------------------------
    @cute.jit
    def step_rows(self, context: RingContext, index, step):
        """The `step`-th step of this block: (its first index entry, how many it moves)."""
        _, row_block, _ = context.walk.tile_of(context.block, step)
        per_stage = self.rows.full_stage_rows
        first = row_block * per_stage
        left = cutlass.Int32(cute.size(index, mode=[0])) - first
        return first, cutlass.min(left, cutlass.Int32(per_stage))

    @cute.jit
    def row_staged(self, context: RingContext, stage, slot):
        """The shared address of row `slot` of `stage`."""
        return self.staged(context, stage, slot * self.rows.row_bytes)

    @cute.jit
    def table_row(self, table, index, entry):
        """(whether index entry `entry` names a row of `table`, that row's address)."""
        row = cutlass.Int64(index[entry])
        inside = row >= 0 and row < cutlass.Int64(cute.size(table, mode=[0]))
        safe = row if inside else cutlass.Int64(0)  # an address formed only for a row that exists
        return inside, table.iterator + safe * cutlass.Int64(table.stride[0])

    @cute.jit
    def compact_row(self, compact, entry):
        return compact.iterator + cutlass.Int64(entry) * self.rows.row_bytes

    # -- producer ------------------------------------------------------------------------------
    @cute.jit
    def load_stage(self, context: RingContext, source, stage, step, failed):
        """Gather: each lane declares and loads its entries' rows; then one arrival. Otherwise
        one thread declares and loads the step's compact rows. After a guard timeout, nothing."""
        table, index, compact = source
        barrier = context.full + stage
        row_bytes = self.rows.row_bytes
        if cutlass.const_expr(self.gather):
            if not failed:
                first, moved = self.step_rows(context, index, step)
                lane = cute.arch.lane_idx()
                for slot in cutlass.range(lane, moved, WARP_THREADS, unroll=1):
                    inside, address = self.table_row(table, index, first + slot)
                    if inside:
                        self.lane_load(barrier, self.row_staged(context, stage, slot), address, row_bytes)
            self.lanes_arrive(barrier, failed)
        else:
            if not failed:
                first, moved = self.step_rows(context, index, step)
                with cute.arch.elect_one():
                    size = moved * row_bytes
                    cute.arch.mbarrier_arrive_and_expect_tx(barrier, size)
                    prims.cp_async_bulk_shared_cluster_global(
                        self.staged(context, stage, 0), self.compact_row(compact, first), barrier, size
                    )

    # -- consumer ------------------------------------------------------------------------------
    @cute.jit
    def use_stage(self, context: RingContext, state, stage, step, consumer):
        """Store the landed stage: a gather's to its compact rows, the others' row by row to the
        table; then this lane's stores as one bulk group, and the wait that lets the stage
        `late` steps back be released."""
        table, index, compact = state
        row_bytes = self.rows.row_bytes
        first, moved = self.step_rows(context, index, step)
        lane = cute.arch.lane_idx()
        if cutlass.const_expr(self.gather):
            whole = cutlass.Boolean(True)
            for slot in cutlass.range(lane, moved, WARP_THREADS, unroll=1):
                inside, _ = self.table_row(table, index, first + slot)
                whole = whole and inside
            if cute.arch.vote_all_sync(whole):
                with cute.arch.elect_one():
                    prims.cp_async_bulk_global_shared_cta(
                        self.compact_row(compact, first), self.staged(context, stage, 0), moved * row_bytes
                    )
            else:  # a skipped entry's row of `out` is left as it was
                for slot in cutlass.range(lane, moved, WARP_THREADS, unroll=1):
                    inside, _ = self.table_row(table, index, first + slot)
                    if inside:
                        prims.cp_async_bulk_global_shared_cta(
                            self.compact_row(compact, first + slot),
                            self.row_staged(context, stage, slot),
                            row_bytes,
                        )
        else:
            for slot in cutlass.range(lane, moved, WARP_THREADS, unroll=1):
                inside, address = self.table_row(table, index, first + slot)
                if inside:
                    self.store_row(address, self.row_staged(context, stage, slot))
        self.commit_stores()

    @cute.jit
    def store_row(self, address, staged):
        """One row out of the stage: a bulk copy, or the plan's bulk reduce."""
        row_bytes = self.rows.row_bytes
        if cutlass.const_expr(self.rows.op == "scatter"):
            prims.cp_async_bulk_global_shared_cta(address, staged, row_bytes)
        else:
            reduce_type = PTX_TYPES[self.rows.reduce_dtype]
            noftz = self.rows.op == "add" and reduce_type in ("f16", "bf16")
            prims.cp_reduce_async_bulk_global_shared_cta(
                address, staged, row_bytes, op=self.rows.op, type=reduce_type, noftz=noftz
            )
