"""Reduce stores through the ring: TMA loads of the source into shared memory, TMA *reduce* stores
out of it into the destination (`cp.reduce.async.bulk.tensor`, `CopyReduceBulkTensorTileS2GOp`);
and the load-add-store ring (`LoadReduceKernel`), which combines in registers instead.

A reduce is the copy (`kernels.copy.CopyKernel`: the ring, the stores in flight, the release of
a stage once its store has read it, the transposing staging tiles) with a reduce store atom: the
TMA unit reads the tile from shared memory and combines each element with the destination's in
L2 (`ReducePlan.op`). The element type is the tensor map's (the instruction names none), which is
why `plan.reduce_ops.check_reduce` refuses the pairs the PTX ISA does not list before anything
compiles.

`LoadReduceKernel` (`ReducePlan.kernel` "ring") is the same copy on a `PairRing`: the producer
loads the source's tile and the destination's into one stage (one arrival declares both), the
consumer warps add them 16 bytes a thread at a time into the destination's tile (fp16 and bf16 in
fp32, rounded once), fence their writes to the async proxy and meet at named barrier 1, and one
thread TMA-stores the tile (a plain store: the sum is already made). A stage is freed once its
store has read it, as the copy's are.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..kernels.copy import CopyKernel
from ..kernels.tile_ring import PairRing
from ..limits import VECTOR_BYTES, WARP_THREADS
from .plan import ReducePlan

__all__ = ["LoadReduceKernel", "ReduceKernel"]


class ReduceKernel(CopyKernel):
    """`CopyKernel` whose TMA stores reduce into the destination with `ReducePlan.op`."""

    def __init__(
        self, reduce: ReducePlan, as_rows: bool = False, shape_generic: bool = False, **ring_options: Any
    ):
        super().__init__(reduce.copy, as_rows, shape_generic, **ring_options)
        self.reduce = reduce

    def store_operation(self) -> cpasync.TmaCopyOp:
        """The reduce store: `cute.ReductionKind` by the op's name (ADD, MIN, ..., XOR)."""
        return cpasync.CopyReduceBulkTensorTileS2GOp(cute.ReductionKind[self.reduce.op.upper()])

    @cute.jit
    def store_and_commit(self, store_atom, shared_part, destination_part, late: cutlass.Constexpr = None):
        """The storing warp's reduce store of a tile. The DSL elects the issuing thread of a reduce
        store itself (`elect.sync` over the whole warp), so the whole warp calls it: electing one
        thread around it left a full-warp `elect.sync` to a single thread, and the H200 stopped the
        kernel there. Every lane commits and waits; the other lanes' bulk groups are empty."""
        self.store(store_atom, shared_part, destination_part)
        if cutlass.const_expr(late is None):
            cute.arch.cp_async_bulk_commit_group()
        else:
            self.commit_store(late)


class LoadReduceKernel(CopyKernel):
    """The load-add-store ring: `CopyKernel` whose stage holds the destination's tile beside the
    source's (`PairRing`: sources first, then destinations), added by every consumer warp and
    stored back with a plain TMA store. The tensors share one layout (`ReducePlan` refuses a
    transposing copy)."""

    def __init__(
        self, reduce: ReducePlan, as_rows: bool = False, shape_generic: bool = False, **ring_options: Any
    ):
        ring = PairRing(reduce.copy.ring, reduce.expected_tx_bytes, **ring_options)
        super().__init__(reduce.copy, as_rows, shape_generic, ring=ring)
        self.reduce = reduce

    @property
    def smem_bytes(self) -> int:
        return self.reduce.smem_bytes

    @property
    def tile_vectors(self) -> int:
        """16-byte vectors in a tile (a TMA box is a whole number of them)."""
        return self.plan.expected_tx_bytes // VECTOR_BYTES

    @cute.jit
    def __call__(self, src: cute.Tensor, dst: cute.Tensor, guard: cute.Tensor, stream):
        """`dst`: the destination, `src`'s shape and layout; `guard`: GUARD_WORDS int32 zeros."""
        src, dst = self.rows_views(src, dst)
        load_atom, src_view, shared_layout = self.ring.make_load_atom(src)
        dst_load_atom, dst_view, _ = self.ring.make_load_atom(dst)
        store_atom, out_view = self.make_store_atom(dst, shared_layout)  # a plain store: the sum is made
        run_time = self.run_time_walk(src_view)
        source = (load_atom, src_view, dst_load_atom, dst_view)
        self.launch(source, (store_atom, out_view), guard, shared_layout, stream, run_time)

    @cute.jit
    def stage_copies(self, context, source, stage, step):
        """The source's tile and the destination's, both completing on the stage's full barrier."""
        load_atom, src_view, dst_load_atom, dst_view = source
        sources, destinations = context.stages
        tile = context.walk.tile_of(context.block, step)
        src_global, src_shared = self.tile_views(load_atom, src_view, sources[None, None, stage], tile)
        dst_shared = destinations[None, None, stage]
        dst_global, dst_shared = self.tile_views(dst_load_atom, dst_view, dst_shared, tile)
        return (load_atom, src_global, src_shared, None), (dst_load_atom, dst_global, dst_shared, None)

    @cute.jit
    def consumer_begin(self, context, sink, consumer):
        """(store atom, destination view, both rings as 16-byte vectors, this thread's index); the
        storing warp fetches the store's tensor map meanwhile."""
        store_atom, out_view = sink
        self.prefetch_store_descriptor(store_atom, consumer)
        sources, destinations = context.stages
        thread = consumer * WARP_THREADS + cute.arch.lane_idx()
        return store_atom, out_view, self.vectors(sources), self.vectors(destinations), thread

    def vectors(self, tiles: cute.Tensor) -> cute.Tensor:
        """A ring's stages as stored, (element, 16-byte vector, stage), the swizzle left out: both
        rings share it, so the same position holds the same element of each."""
        pipeline = self.pipeline
        vector = VECTOR_BYTES // self.plan.config.element.nbytes
        return cute.make_tensor(
            cute.recast_ptr(tiles.iterator, dtype=self.ring.element_type),
            cute.make_layout(
                (vector, self.tile_vectors, pipeline.stages), stride=(1, vector, pipeline.stage_elements)
            ),
        )

    @cute.jit
    def use_stage(self, context, state, stage, step, consumer):
        """Every consumer thread adds its vectors of the stage into the destination's tile; the
        writes are fenced to the async proxy (the TMA store reads them), the consumer warps meet,
        and warp 0 stores the tile (one thread)."""
        store_atom, out_view, sources, destinations, thread = state
        threads = WARP_THREADS * self.pipeline.consumer_warps
        count = self.tile_vectors
        for k in cutlass.range_constexpr((count + threads - 1) // threads):
            index = thread + k * threads
            if index < count:
                destinations[None, index, stage].store(
                    self.combine(destinations[None, index, stage].load(), sources[None, index, stage].load())
                )
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=1, number_of_threads=threads)
        if consumer == 0:
            self.store_tile(store_atom, out_view, context.stages[1][None, None, stage], context, step)

    @cute.jit
    def combine(self, old, new):
        """dst op src on one vector: 16-bit floats in fp32, rounded once, as torch's add_."""
        element = self.ring.element_type
        if cutlass.const_expr(element in (cutlass.Float16, cutlass.BFloat16)):
            return (old.to(cutlass.Float32) + new.to(cutlass.Float32)).to(element)
        return old + new
