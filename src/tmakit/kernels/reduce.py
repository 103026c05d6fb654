"""Reduce stores through the ring: TMA loads of the source into shared memory, TMA *reduce* stores
out of it into the destination (`cp.reduce.async.bulk.tensor`, `CopyReduceBulkTensorTileS2GOp`).

A reduce is the copy (`kernels.copy.CopyKernel`: the ring, the stores in flight, the release of
a stage once its store has read it, the transposing staging tiles) with a reduce store atom: the
TMA unit reads the tile from shared memory and combines each element with the destination's in
L2 (`ReducePlan.op`). The element type is the tensor map's (the instruction names none), which is
why `plan.check_reduce` refuses the pairs the PTX ISA does not list before anything compiles.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..plan import ReducePlan
from .copy import CopyKernel

__all__ = ["ReduceKernel"]


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
