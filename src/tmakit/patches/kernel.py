"""im2col through the ring: TMA im2col loads of an NHWC activation into shared memory, tiled TMA
stores of each box into the patch matrix (`patches.plan.Im2colPlan`).

The kernel is the copy (`kernels.copy.CopyKernel`: the producer warp, the ring, the consumer
warp's stores in flight and its releases) with another load atom: an im2col one
(`CopyBulkTensorIm2ColG2SOp`, `cp.async.bulk.tensor.4d...im2col`), whose TMA tensor is the GEMM
view of the activation, (N*P*Q, (C, S, R)). Tiled by the plan's box (pixels, channels), box
(row_block, column_tile) of that view is exactly tile (row_block, column_tile) of the patch
matrix, so the copy's walk, tile views and stores serve unchanged.

What `make_im2col_tma_atom` needs (CuTe DSL 4.8.1): the activation as two modes ((W, H, N), C)
- the plain 4-D view aborts the process in C++ - and a composed (swizzle o layout) shared layout.
"""

from __future__ import annotations

from typing import Any

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..kernels.copy import CopyKernel
from ..kernels.tma import shared_tile_layout
from .plan import Im2colPlan

__all__ = ["Im2colKernel", "activation_view", "make_im2col_load_atom"]


def activation_view(x: cute.Tensor) -> cute.Tensor:
    """An (N, H, W, C) activation as the im2col atom takes it, ((W, H, N), C): its own strides,
    the pixel modes innermost first."""
    pixels_first = cute.select(x.layout, mode=[2, 1, 0, 3])
    return cute.make_tensor(x.iterator, cute.group_modes(pixels_first, 0, 3))


def make_im2col_load_atom(im2col: Im2colPlan, x: cute.Tensor, shared_layout: cute.ComposedLayout):
    """(load atom, TMA coordinate tensor (N*P*Q, (C, S, R))) of the plan's im2col loads of `x`,
    inside a @cute.jit. The descriptor's fields are the plan's (`Im2colPlan.descriptor`)."""
    load_atom, coordinate_view = cpasync.make_im2col_tma_atom(
        cpasync.CopyBulkTensorIm2ColG2SOp(),
        activation_view(x),
        shared_layout,
        im2col.tile,
        **im2col.descriptor,
    )
    return load_atom, coordinate_view


class Im2colKernel(CopyKernel):
    """`CopyKernel` whose loads are im2col boxes of an activation and whose stores fill the patch
    matrix: one compile per `Im2colPlan` (shape, dtype and convolution parameters)."""

    def __init__(self, im2col: Im2colPlan, **ring_options: Any):
        super().__init__(im2col.copy, **ring_options)
        self.im2col = im2col

    @cute.jit
    def __call__(self, x: cute.Tensor, out: cute.Tensor, guard: cute.Tensor, stream: cuda.CUstream):
        """`x`: the (N, H, W, C) activation, channels contiguous; `out`: the (N*P*Q, R*S*C)
        patch matrix, row-major; `guard`: GUARD_WORDS int32 zeros."""
        plan = self.plan
        # The box as stored: one row of channels per pixel, swizzled as the load and the store
        # both address it.
        shared_layout = shared_tile_layout(plan.config.tile, False, plan.swizzle_bits)
        load_atom, coordinate_view = make_im2col_load_atom(self.im2col, x, shared_layout)
        store_atom, out_view = cpasync.make_tiled_tma_atom(
            self.store_operation(), out, shared_layout, plan.config.tile
        )
        sink = (store_atom, out_view, shared_layout)
        self.launch((load_atom, coordinate_view), sink, guard, shared_layout, stream)
