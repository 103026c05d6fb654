"""The seed's kernel: one warp per block, each block loading its strip's tiles one after another.

With `store_back`, each loaded tile is copied to a scratch output (the correctness experiment the
seed proposes); without it the kernel only loads, as the seed does, for timing.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..plan import LoadPlan
from .tma import (
    init_load_barrier,
    issue_tile_load,
    row_major_view,
    shared_tile_layout,
    tma_load_views,
)


class SeedLoadKernel:
    """Host side in `__call__` (layouts, atom, launch), device side in `kernel`.

    `tile_shift` (row_blocks, column_tiles) makes each block load a neighbouring tile instead of
    its own; it exists only so tests can prove the verifier catches a wrong tile origin.
    """

    def __init__(self, plan: LoadPlan, store_back: bool = True, tile_shift: tuple[int, int] = (0, 0)):
        self.plan = plan
        self.store_back = store_back
        self.tile_shift = tile_shift
        self.element_type = getattr(cutlass, plan.config.element.cutlass_name)

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        """Launch on `stream`. Load-only kernels never touch `out` (pass `src` again)."""
        plan = self.plan
        matrix_view = row_major_view(src, plan.config.shape)
        out_view = row_major_view(out, plan.padded_shape)
        shared_layout = shared_tile_layout(plan.config.tile)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), matrix_view, shared_layout, plan.config.tile
        )
        self.kernel(load_atom, coordinate_view, out_view, shared_layout).launch(
            grid=(plan.grid, 1, 1),
            block=(plan.threads_per_block, 1, 1),
            smem=plan.smem_bytes,
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        load_atom: cute.CopyAtom,
        coordinate_view: cute.Tensor,
        out_view: cute.Tensor,
        shared_layout: cute.ComposedLayout,
    ):
        plan = self.plan
        tile_rows, tile_cols = plan.config.tile
        thread, _, _ = cute.arch.thread_idx()
        row_block, _, _ = cute.arch.block_idx()

        # Allocation order is the plan's: the tile first (TMA destinations want 128-byte
        # alignment), then the 8-byte barrier, so the launch requests exactly plan.smem_bytes.
        smem = cutlass.memory.SmemAllocator()
        shared_tile = smem.allocate_tensor(
            self.element_type, shared_layout, byte_alignment=plan.tile_alignment
        )
        barrier = smem.allocate_array(cutlass.Int64, 1)
        init_load_barrier(barrier)

        phase = cutlass.Int32(0)
        for column_tile in cutlass.range(plan.tiles_per_block, unroll=1):
            global_part, shared_part = tma_load_views(
                load_atom,
                coordinate_view,
                shared_tile,
                plan.config.tile,
                (row_block + self.tile_shift[0], column_tile + self.tile_shift[1]),
            )
            issue_tile_load(load_atom, global_part, shared_part, barrier, plan.expected_tx_bytes)
            # The phase completes when the one arrival and all expected bytes are in.
            cute.arch.mbarrier_wait(barrier, phase)
            phase ^= 1

            if cutlass.const_expr(self.store_back):
                out_tile = cute.local_tile(out_view, plan.config.tile, (row_block, column_tile))
                # Row-major walk so that a warp's stores to global memory are contiguous.
                for index in cutlass.range(thread, tile_rows * tile_cols, plan.threads_per_block):
                    row = index // tile_cols
                    col = index - row * tile_cols
                    out_tile[row, col] = shared_tile[row, col]
                # Buffer reuse: every thread's reads of this tile finish before the next TMA
                # load (issued after this block-wide barrier) may overwrite it.
                cute.arch.barrier()
