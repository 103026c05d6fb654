"""Many tensors, one launch (`many.plan`): the ring walks the steps of a chunk table, a step a
stage's worth of the tensors' bytes laid end to end, the steps dealt to a persistent grid.

Per step each producer lane takes a chunk of the step (a lane a chunk, by 32s), declares its
16-byte multiple on the stage's full barrier and bulk-copies it into the stage at its offset
(`cp.async.bulk`, no tensor map); once every lane declared its bytes, one arrival. A consumer
lane bulk-stores its chunks from the stage to their destinations; the last 1-15 bytes of an
odd-sized tensor go from global memory to global memory by the lane of its last chunk, a byte at
a time. Each lane commits its stores as a bulk group per step and the stage `late` steps back is
released once every lane's older groups have read theirs, as in `rows.kernel`.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.experimental import primitives as prims  # bulk copies with run-time byte counts

from ..kernels.ring import BulkRingKernel, RingContext, RunTimeWalk
from ..kernels.tma import shared_tile_layout
from ..limits import GLOBAL_BASE_ALIGN, WARP_THREADS
from .plan import ManyPlan

__all__ = ["RELATIVE_SIDES", "ManyKernel"]

RELATIVE_SIDES = (None, "source", "destination")


class ManyKernel(BulkRingKernel):
    """A grouped copy: per step, a bulk copy in and one out per chunk, a chunk a lane.

    `relative` ("source" or "destination"; None: neither) says which side of every chunk is an
    offset into a buffer passed per launch (`in_buffer`) rather than an address: a packed
    buffer, so that one table serves every buffer `pack` allocates or `unpack_` reads."""

    def __init__(self, many: ManyPlan, relative: str | None = None, hang_guard: bool = False):
        super().__init__(many.pipeline, shape_generic=True, hang_guard=hang_guard)
        if relative not in RELATIVE_SIDES:
            raise ValueError(f"relative is {relative!r}; one of {RELATIVE_SIDES}")
        self.many = many
        self.relative = relative
        self.late = many.stores_in_flight - 1

    @cute.jit
    def __call__(self, chunks: cute.Tensor, starts: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`chunks`: (count, 4) int64, (source, destination, bytes, offset in the stage) a chunk;
        `starts`: (steps + 1,) int64, each step's first chunk, then the count; `guard`:
        GUARD_WORDS int32 zeros. The caller launches only for one step or more."""
        self.walk_table((chunks, starts), guard, stream)

    @cute.jit
    def in_buffer(
        self,
        chunks: cute.Tensor,
        starts: cute.Tensor,
        buffer: cute.Tensor,
        guard: cute.Tensor,
        stream: cuda.CUstream,
    ):
        """As `__call__`, each chunk's `relative` side an offset into `buffer` (uint8, 1-D)."""
        self.walk_table((chunks, starts, buffer), guard, stream)

    @cute.jit
    def walk_table(self, table, guard: cute.Tensor, stream: cuda.CUstream):
        shared_layout = shared_tile_layout(self.plan.config.tile)
        steps = cutlass.Int32(cute.size(table[1], mode=[0])) - 1
        grid = cutlass.min(steps, cutlass.Int32(self.pipeline.persistent_blocks))
        divisor = cute.fast_divmod_create_divisor_v2
        run_time = RunTimeWalk(divisor(steps), divisor(cutlass.Int32(1)), divisor(steps), divisor(grid), 1)
        self.launch(table, table, guard, shared_layout, stream, run_time)

    @cute.jit
    def step_chunks(self, context: RingContext, starts, step):
        """The chunks of this block's `step`-th step: [first, stop) rows of the table."""
        _, row, _ = context.walk.tile_of(context.block, step)
        return cutlass.Int32(starts[row]), cutlass.Int32(starts[row + 1])

    @cute.jit
    def chunk(self, table, index):
        """Chunk `index`: (source, destination, its 16-byte multiple, bytes, offset in the stage)."""
        chunks = table[0]
        nbytes = cutlass.Int32(chunks[index, 2])
        source = self.address(table, chunks[index, 0], "source")
        target = self.address(table, chunks[index, 1], "destination")
        return source, target, nbytes & ~(GLOBAL_BASE_ALIGN - 1), nbytes, cutlass.Int32(chunks[index, 3])

    @cute.jit
    def address(self, table, word, side: cutlass.Constexpr):
        """A chunk's `side`: the address `word`, or the offset `word` into the launch's buffer."""
        if cutlass.const_expr(self.relative == side):
            return table[2].iterator + word
        return cute.make_ptr(cutlass.Uint8, word, cute.AddressSpace.gmem, assumed_align=GLOBAL_BASE_ALIGN)

    @cute.jit
    def load_stage(self, context: RingContext, table, stage, step, failed):
        """Each lane declares and loads its chunks' bulk bytes; then one arrival."""
        barrier = context.full + stage
        if not failed:
            first, stop = self.step_chunks(context, table[1], step)
            lane = cute.arch.lane_idx()
            for index in cutlass.range(first + lane, stop, WARP_THREADS, unroll=1):
                source, _, bulk, _, offset = self.chunk(table, index)
                if bulk > 0:
                    self.lane_load(barrier, self.staged(context, stage, offset), source, bulk)
        self.lanes_arrive(barrier, failed)

    @cute.jit
    def use_stage(self, context: RingContext, table, stage, step, consumer):
        """Each lane bulk-stores its chunks to their destinations and copies their tails byte by
        byte; then its bulk group and the wait that frees the stage `late` steps back."""
        first, stop = self.step_chunks(context, table[1], step)
        lane = cute.arch.lane_idx()
        for index in cutlass.range(first + lane, stop, WARP_THREADS, unroll=1):
            source, target, bulk, nbytes, offset = self.chunk(table, index)
            if bulk > 0:
                prims.cp_async_bulk_global_shared_cta(target, self.staged(context, stage, offset), bulk)
            tail = cute.make_layout(GLOBAL_BASE_ALIGN)  # the last 1-15 bytes: global to global
            for byte in cutlass.range(nbytes - bulk, unroll=1):
                cute.make_tensor(target + bulk, tail)[byte] = cute.make_tensor(source + bulk, tail)[byte]
        self.commit_stores()
