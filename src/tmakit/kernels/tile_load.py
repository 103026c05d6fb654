"""Tile loads: the seed's kernel, for any shape, dtype, layout and swizzle TMA can serve.

One warp per block; block (row_block, batch) walks its strip's column tiles one after another
into one shared tile guarded by one mbarrier. For the seed's configuration this is the seed's
kernel, instruction for instruction.

What happens to each loaded tile is the `consumer`:
- "none": nothing (the seed's load-only kernel, for timing);
- "store": copy the tile, read through its (swizzled) layout, to a scratch output - the
  correctness experiment the seed proposes;
- "raw": copy the tile's raw shared-memory bytes, as TMA placed them, to a byte scratch - to
  check the physical swizzle against an independent model.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..plan import LoadPlan
from .one_stage import OneStageKernel
from .tma import (
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tile_coordinate,
    tile_counts,
    tma_load_views,
)

CONSUMERS = ("none", "store", "raw")


class TileLoadKernel(OneStageKernel):
    """Host side in `__call__` (views, atom, launch), device side `OneStageKernel`'s.

    `tile_shift` (row_blocks, column_tiles) makes each block load a neighbouring tile instead of
    its own; it exists only so tests can prove the verifier catches a wrong tile origin.
    """

    def __init__(
        self,
        plan: LoadPlan,
        consumer: str = "store",
        tile_shift: tuple[int, int] = (0, 0),
        shape_generic: bool = False,
    ):
        if consumer not in CONSUMERS:
            raise ValueError(f"consumer {consumer!r} is not one of {CONSUMERS}")
        if shape_generic and consumer == "raw":
            raise ValueError("the raw consumer's scratch is sized per shape: it is not shape-generic")
        self.plan = plan
        self.shape_generic = shape_generic
        self.consumer = consumer
        self.tile_shift = tile_shift
        self.element_type = getattr(cutlass, plan.config.element.cutlass_name)

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        """Launch on `stream`. `src`'s layout is the tensor's own (strides read from it, never
        rebuilt around its pointer). `out` is the consumer's scratch (ignored for "none")."""
        plan = self.plan
        matrix_view = matrix_first_view(src, len(plan.config.shape))
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), matrix_view, shared_layout, plan.config.tile
        )
        row_blocks, _, batch_count = tile_counts(plan, matrix_view, self.shape_generic)
        self.kernel(load_atom, coordinate_view, self._scratch_view(out), shared_layout).launch(
            grid=(row_blocks, batch_count, 1),
            block=(plan.threads_per_block, 1, 1),
            smem=plan.smem_bytes,
            stream=stream,
        )

    def _scratch_view(self, out: cute.Tensor) -> cute.Tensor:
        """The consumer's output as (tile rows, tile cols, tile index...) coordinates."""
        plan = self.plan
        if cutlass.const_expr(self.shape_generic):  # the padded scratch's own (run-time) layout
            view = matrix_first_view(out, len(plan.config.shape))
            if cutlass.const_expr(len(plan.config.shape) == 2):  # a batch mode of one, as for 3-D
                view = cute.make_tensor(view.iterator, cute.append(view.layout, cute.make_layout(1)))
            return view
        if cutlass.const_expr(self.consumer == "raw"):
            # One row of raw bytes per tile load: (tile bytes, column tile, row block, batch).
            return cute.make_tensor(
                out.iterator,
                cute.make_layout(
                    (plan.expected_tx_bytes, plan.tiles_per_block, plan.row_blocks, plan.batch_count)
                ),
            )
        return padded_matrix_view(out, plan.padded_shape, plan.batch_count)

    @cute.jit
    def position(self):
        """(row block, batch): the block's strip."""
        row_block, batch, _ = cute.arch.block_idx()
        return row_block, batch

    def column_tiles(self, coordinate_view: cute.Tensor):
        _, column_tiles, _ = tile_counts(self.plan, coordinate_view, self.shape_generic)
        return column_tiles

    @cute.jit
    def tile_views(self, load_atom, coordinate_view, shared_tile, where, column_tile):
        plan = self.plan
        row_block, batch = where
        tile_coord = tile_coordinate(
            row_block + self.tile_shift[0],
            column_tile + self.tile_shift[1],
            batch,
            len(plan.config.shape),
        )
        return tma_load_views(load_atom, coordinate_view, shared_tile, plan.config.tile, tile_coord)

    @cute.jit
    def use_tile(self, tile_ptr, shared_tile, scratch, where, column_tile, thread):
        """The consumer: nothing, the tile to the scratch, or its raw bytes."""
        plan = self.plan
        row_block, batch = where
        if cutlass.const_expr(self.consumer == "store"):
            out_tile = cute.local_tile(scratch, plan.config.tile, (row_block, column_tile, batch))
            self.copy_tile_out(shared_tile, out_tile, thread)
        if cutlass.const_expr(self.consumer == "raw"):
            raw_tile = cute.make_tensor(
                cute.recast_ptr(tile_ptr, dtype=cutlass.Uint8), cute.make_layout(plan.expected_tx_bytes)
            )
            out_bytes = scratch[None, column_tile, row_block, batch]
            for index in cutlass.range(thread, plan.expected_tx_bytes, plan.threads_per_block):
                out_bytes[index] = raw_tile[index]
        if cutlass.const_expr(self.consumer != "none"):
            # Buffer reuse: every thread's reads of this tile finish before the next TMA
            # load (issued after this block-wide barrier) may overwrite it.
            cute.arch.barrier()
