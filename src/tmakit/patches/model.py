"""Which input element each element of a TMA im2col box reads, and the whole patch matrix, in
NumPy: the CPU model and reference of `tmakit.im2col` (`patches.plan.Im2colPlan`).

An im2col load of box (row_block, column_tile) starts at patch-matrix row m0 = row_block * pixels
and covers one tap (r, s) and the channels c0..c0 + channels - 1 of it. Its pixel i is output
pixel (n, p, q) of row m0 + i, whose window's tap reads input pixel
    (n, p * stride_h - padding_h + r * dilation_h, q * stride_w - padding_w + s * dilation_w);
a pixel outside the image (the padding) or a row past M (past the last image) reads as zero:
TMA's out-of-bounds fill, still counted in the barrier's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import Im2colPlan


@dataclass(frozen=True)
class Im2colBox:
    """Where each element of one box comes from: `n`, `h`, `w`, `c` are (pixels, channels)
    arrays of input coordinates; `inside` is False where the element is TMA's zero fill."""

    row_block: int
    column_tile: int
    tap: tuple[int, int]
    n: np.ndarray
    h: np.ndarray
    w: np.ndarray
    c: np.ndarray
    inside: np.ndarray

    @property
    def zero_filled(self) -> int:
        """Elements of the box TMA fills with zeros."""
        return int((~self.inside).sum())


def im2col_box(plan: Im2colPlan, row_block: int, column_tile: int) -> Im2colBox:
    """The input coordinates each element of box (row_block, column_tile) reads."""
    plan.check_tile(row_block, column_tile)
    pixels, channels = plan.tile
    batch, height, width, _ = plan.shape
    (p_extent, q_extent), (rows, _) = plan.output_shape, plan.patch_shape
    r, s, channel_tile = plan.tap_of(column_tile)
    m = row_block * pixels + np.arange(pixels)
    n, rest = np.divmod(m, p_extent * q_extent)
    p, q = np.divmod(rest, q_extent)
    h = p * plan.stride[0] - plan.padding[0] + r * plan.dilation[0]
    w = q * plan.stride[1] - plan.padding[1] + s * plan.dilation[1]
    inside_pixel = (m < rows) & (n < batch) & (0 <= h) & (h < height) & (0 <= w) & (w < width)
    c = channel_tile * channels + np.arange(channels)
    shape = (pixels, channels)
    return Im2colBox(
        row_block,
        column_tile,
        (r, s),
        np.broadcast_to(n[:, None], shape),
        np.broadcast_to(h[:, None], shape),
        np.broadcast_to(w[:, None], shape),
        np.broadcast_to(c[None, :], shape),
        np.broadcast_to(inside_pixel[:, None], shape),
    )


def box_values(plan: Im2colPlan, x: np.ndarray, row_block: int, column_tile: int) -> np.ndarray:
    """What box (row_block, column_tile) holds once loaded: `x` (N, H, W, C) gathered through
    `im2col_box`, zeros where TMA fills them."""
    box = im2col_box(plan, row_block, column_tile)
    clip = [
        np.clip(a, 0, extent - 1) for a, extent in zip((box.n, box.h, box.w, box.c), x.shape, strict=True)
    ]
    return np.where(box.inside, x[tuple(clip)], np.zeros((), dtype=x.dtype))


def patch_matrix(plan: Im2colPlan, x: np.ndarray) -> np.ndarray:
    """The (N*P*Q, R*S*C) patch matrix of `x` (N, H, W, C), column (r*S + s)*C + c: each tap's
    strided slab of the zero-padded activation. Any dtype (bf16 as raw uint16 bits: it is a
    gather, no arithmetic)."""
    (pad_h, pad_w), (dil_h, dil_w), (stride_h, stride_w) = plan.padding, plan.dilation, plan.stride
    p_extent, q_extent = plan.output_shape
    rows, _ = plan.patch_shape
    channels = x.shape[3]
    padded = np.pad(x, ((0, 0), (pad_h, pad_h), (pad_w, pad_w), (0, 0)))
    out = np.empty(plan.patch_shape, dtype=x.dtype)
    for r in range(plan.filter[0]):
        for s in range(plan.filter[1]):
            h0, w0 = r * dil_h, s * dil_w
            slab = padded[
                :,
                h0 : h0 + stride_h * (p_extent - 1) + 1 : stride_h,
                w0 : w0 + stride_w * (q_extent - 1) + 1 : stride_w,
            ]
            tap = r * plan.filter[1] + s
            out[:, tap * channels : (tap + 1) * channels] = slab.reshape(rows, channels)
    return out
