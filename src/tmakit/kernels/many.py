"""Many tensors, one launch (`plan.many`): the ring walks a table of chunks, each a source
address, a destination address and a byte count (at most a stage), dealt to a persistent grid.

Per step the producer's elected thread reads its chunk's row, declares the chunk's 16-byte
multiple on the stage's full barrier and bulk-copies it into the stage (`cp.async.bulk`, no tensor
map); a chunk of fewer than 16 bytes declares none and only arrives. The consumer's elected thread
bulk-stores the stage to the destination; the last 1-15 bytes of an odd-sized tensor go from
global memory to global memory by as many lanes, one byte each. Each lane commits its stores as a
bulk group per step and the stage `late` steps back is released once every lane's older groups
have read theirs, as in `kernels.rows`.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..limits import GLOBAL_BASE_ALIGN
from ..plan.many import ManyPlan
from .ring import RingContext, RunTimeWalk, TmaRingKernel
from .rows import LateRelease
from .tma import shared_tile_layout

__all__ = ["ManyKernel"]


class ManyKernel(LateRelease, TmaRingKernel):
    """A grouped copy: one bulk copy in and one out per chunk of the table."""

    def __init__(self, many: ManyPlan, hang_guard: bool = False):
        super().__init__(many.pipeline, shape_generic=True, hang_guard=hang_guard)
        self.many = many
        self.late = many.stores_in_flight - 1

    @cute.jit
    def __call__(self, table: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`table`: (chunks, 3) int64, (source, destination, bytes) a chunk; `guard`: GUARD_WORDS
        int32 zeros. The caller launches only for one chunk or more."""
        shared_layout = shared_tile_layout(self.plan.config.tile)
        chunks = cutlass.Int32(cute.size(table, mode=[0]))
        grid = cutlass.min(chunks, cutlass.Int32(self.pipeline.persistent_blocks))
        divisor = cute.fast_divmod_create_divisor_v2
        run_time = RunTimeWalk(divisor(chunks), divisor(cutlass.Int32(1)), divisor(chunks), divisor(grid), 1)
        self.launch(table, table, guard, shared_layout, stream, run_time)

    @cute.jit
    def chunk(self, context: RingContext, table, step):
        """The `step`-th chunk of this block: (source, destination, its 16-byte multiple, bytes)."""
        _, row, _ = context.walk.tile_of(context.block, step)
        nbytes = cutlass.Int32(table[row, 2])
        source = cute.make_ptr(
            cutlass.Uint8, table[row, 0], cute.AddressSpace.gmem, assumed_align=GLOBAL_BASE_ALIGN
        )
        target = cute.make_ptr(
            cutlass.Uint8, table[row, 1], cute.AddressSpace.gmem, assumed_align=GLOBAL_BASE_ALIGN
        )
        return source, target, nbytes & ~(GLOBAL_BASE_ALIGN - 1), nbytes

    @cute.jit
    def staged(self, context: RingContext, stage):
        stages = cute.recast_ptr(context.stages.iterator, dtype=cutlass.Uint8)
        return stages + stage * self.many.chunk_bytes

    @cute.jit
    def prefetch_descriptors(self, source):
        """Bulk copies have no tensor map to prefetch."""

    @cute.jit
    def load_stage(self, context: RingContext, table, stage, step, failed):
        """The elected thread declares the chunk's bulk bytes and loads them (none: it arrives)."""
        if not failed:
            source, _, bulk, _ = self.chunk(context, table, step)
            barrier = context.full + stage
            with cute.arch.elect_one():
                if bulk > 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(barrier, bulk)
                    prims.cp_async_bulk_shared_cluster_global(
                        self.staged(context, stage), source, barrier, bulk
                    )
                else:
                    cute.arch.mbarrier_arrive(barrier)

    @cute.jit
    def use_stage(self, context: RingContext, table, stage, step, consumer):
        """The stage bulk-stored to the destination, the tail copied byte by byte by the lanes;
        then this lane's bulk group and the wait that frees the stage `late` steps back."""
        source, target, bulk, nbytes = self.chunk(context, table, step)
        with cute.arch.elect_one():
            if bulk > 0:
                prims.cp_async_bulk_global_shared_cta(target, self.staged(context, stage), bulk)
        lane = cute.arch.lane_idx()
        if lane < nbytes - bulk:  # the last 1-15 bytes: global to global, a byte a lane
            tail = cute.make_layout(GLOBAL_BASE_ALIGN)
            cute.make_tensor(target + bulk, tail)[lane] = cute.make_tensor(source + bulk, tail)[lane]
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(self.late, read=True)
