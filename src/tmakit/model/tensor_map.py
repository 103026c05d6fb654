"""A CPU model of one TMA tiled load (cp.async.bulk.tensor, global -> shared): which bytes land where.

Conventions (torch's): `shape`, `strides`, `box_shape` and `box_coords` list dimensions OUTERMOST
FIRST, so the last entry is the contiguous innermost dimension. Strides are in ELEMENTS (like
`torch.Tensor.stride()`); the innermost stride must be 1, because a tensor map has no innermost
stride (the hardware always reads that dimension contiguously).

Shared memory receives the box row-major (innermost dimension contiguous, outermost first), then
permuted by the swizzle mode. The swizzle is CuTe's Swizzle<B,4,3> on BYTE offsets within the
shared-memory buffer (1024-byte aligned on the hardware, so buffer offsets and address bits agree):
the 16-byte chunk bits [4, 4+B) are XORed with the 128-byte row bits [7, 7+B), B = 1, 2, 3 for the
32, 64 and 128-byte modes.

Pure NumPy: no cutlass, torch or DSL import, so it runs on any CPU machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TmaConfigError
from ..limits import (
    ELEMENT_SIZES,
    GLOBAL_STRIDE_ALIGN,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_GLOBAL_EXTENT,
    MAX_GLOBAL_STRIDE_BYTES,
    MAX_RANK,
    SMEM_PER_BLOCK,
    SWIZZLE_BITS,
    SWIZZLE_MODES,
    TMA_COORDINATE_RANGE,
)


def swizzle_bits(swizzle_bytes: int) -> int:
    """The B of Swizzle<B,4,3> for a swizzle mode given in bytes (0, 32, 64 or 128)."""
    try:
        return SWIZZLE_BITS[swizzle_bytes]
    except KeyError:
        raise TmaConfigError(
            f"swizzle mode {swizzle_bytes!r} bytes is not one TMA has; use one of {SWIZZLE_MODES}"
        ) from None


def swizzled_offset(byte_offset: int | np.ndarray, swizzle_bytes: int) -> int | np.ndarray:
    """Where the byte at dense `byte_offset` of the box physically lands in shared memory.

    The map is an involution (it only rewrites bits [4, 4+B) using bits [7, 7+B), which it leaves
    alone), so applying it twice gives back the dense offset.
    """
    bits = swizzle_bits(swizzle_bytes)
    mask = (1 << bits) - 1
    return byte_offset ^ (((byte_offset >> 7) & mask) << 4)


def swizzle(dense_bytes: np.ndarray, swizzle_bytes: int) -> np.ndarray:
    """Permute a dense (row-major) box into its shared-memory layout.

    With a swizzle, the result is padded with zero bytes to a whole number of swizzle spans: the
    XOR moves chunks only within a span-aligned group, so the permutation needs whole groups.
    """
    dense = np.asarray(dense_bytes, dtype=np.uint8).reshape(-1)
    if swizzle_bits(swizzle_bytes) == 0:
        return dense.copy()
    padded_length = -(-dense.size // swizzle_bytes) * swizzle_bytes
    smem = np.zeros(padded_length, dtype=np.uint8)
    offsets = np.arange(dense.size, dtype=np.int64)
    smem[swizzled_offset(offsets, swizzle_bytes)] = dense
    return smem


def unswizzle(smem_bytes: np.ndarray, swizzle_bytes: int) -> np.ndarray:
    """The inverse of `swizzle`: read shared memory back into dense row-major box order.

    `smem_bytes` must be a whole number of swizzle spans when swizzled (what `tma_load_box` returns);
    the result has the same length, so slice off any padding past the box's own bytes.
    """
    smem = np.asarray(smem_bytes, dtype=np.uint8).reshape(-1)
    if swizzle_bits(swizzle_bytes) == 0:
        return smem.copy()
    if smem.size % swizzle_bytes:
        raise TmaConfigError(
            f"shared-memory buffer of {smem.size} bytes is not a whole number of "
            f"{swizzle_bytes}-byte swizzle spans; the swizzle only permutes whole spans"
        )
    offsets = np.arange(smem.size, dtype=np.int64)
    return smem[swizzled_offset(offsets, swizzle_bytes)]


def check_box(
    elem_bytes: int,
    shape: Sequence[int],
    strides: Sequence[int],
    box_shape: Sequence[int],
    box_coords: Sequence[int],
    swizzle_bytes: int,
) -> None:
    """Raise TmaConfigError naming the value and the rule if TMA could not issue this load."""
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise TmaConfigError(f"tensor rank is {rank}; a TMA tensor map has rank 1..{MAX_RANK}")
    for name, values in (("strides", strides), ("box_shape", box_shape), ("box_coords", box_coords)):
        if len(values) != rank:
            raise TmaConfigError(f"{name} has {len(values)} entries but the tensor has rank {rank}")
    if elem_bytes not in ELEMENT_SIZES:
        raise TmaConfigError(f"element size is {elem_bytes} bytes; TMA elements are {ELEMENT_SIZES} bytes")
    bits = swizzle_bits(swizzle_bytes)
    for dim, extent in enumerate(shape):
        if not 1 <= extent <= MAX_GLOBAL_EXTENT:
            raise TmaConfigError(f"tensor extent of dim {dim} is {extent}; it must be 1..2^32")
    if strides[-1] != 1:
        raise TmaConfigError(
            f"innermost stride is {strides[-1]} elements; TMA reads the innermost dim contiguously "
            "(stride 1): a tensor map has no innermost stride"
        )
    for dim, stride in enumerate(strides[:-1]):
        stride_bytes = stride * elem_bytes
        if stride_bytes <= 0 or stride_bytes % GLOBAL_STRIDE_ALIGN or stride_bytes >= MAX_GLOBAL_STRIDE_BYTES:
            raise TmaConfigError(
                f"global stride of dim {dim} is {stride_bytes} bytes; TMA needs a positive multiple "
                f"of {GLOBAL_STRIDE_ALIGN} below 2^40"
            )
    for dim, extent in enumerate(box_shape):
        if not 1 <= extent <= MAX_BOX_EXTENT:
            raise TmaConfigError(
                f"box extent of dim {dim} is {extent}; a TMA box dimension must be 1..{MAX_BOX_EXTENT}"
            )
    inner_box_bytes = box_shape[-1] * elem_bytes
    if inner_box_bytes % INNER_BOX_ALIGN:
        raise TmaConfigError(
            f"box's inner extent is {box_shape[-1]} x {elem_bytes} B = {inner_box_bytes} bytes; "
            f"TMA needs a multiple of {INNER_BOX_ALIGN} bytes"
        )
    if bits and inner_box_bytes > swizzle_bytes:
        raise TmaConfigError(
            f"box's inner extent is {inner_box_bytes} bytes; with the {swizzle_bytes}B swizzle it "
            f"must be <= {swizzle_bytes} bytes (the swizzle span)"
        )
    box_bytes = int(np.prod(box_shape, dtype=np.int64)) * elem_bytes
    if box_bytes > SMEM_PER_BLOCK:
        raise TmaConfigError(
            f"box is {box_bytes} bytes; it must fit a Hopper block's {SMEM_PER_BLOCK} bytes of shared memory"
        )
    for dim, coord in enumerate(box_coords):
        if not TMA_COORDINATE_RANGE[0] <= coord <= TMA_COORDINATE_RANGE[1]:
            raise TmaConfigError(f"box coordinate of dim {dim} is {coord}; coordinates are signed 32-bit")


def tma_load_box(
    global_bytes: np.ndarray,
    elem_bytes: int,
    shape: Sequence[int],
    strides: Sequence[int],
    box_shape: Sequence[int],
    box_coords: Sequence[int],
    swizzle_bytes: int = 0,
) -> np.ndarray:
    """The bytes one TMA tiled load writes into shared memory, as a flat uint8 array.

    `global_bytes` holds the global tensor (any dtype; it is read as its raw little-endian bytes,
    element (i0, .., in) at byte (sum(i_d * strides[d])) * elem_bytes). `shape`, `strides` (in
    elements), `box_shape` and `box_coords` (element coordinates of the box's first element) are
    listed outermost first. Coordinates may be negative or run past the end: elements outside the
    tensor arrive as zero bytes (and still count towards the transaction bytes).

    The result is the box row-major, permuted by the swizzle; with a swizzle its length is the box
    bytes rounded up to the swizzle span, the extra bytes being zero.
    """
    shape = tuple(int(x) for x in shape)
    strides = tuple(int(x) for x in strides)
    box_shape = tuple(int(x) for x in box_shape)
    box_coords = tuple(int(x) for x in box_coords)
    check_box(elem_bytes, shape, strides, box_shape, box_coords, swizzle_bytes)

    buffer = np.ascontiguousarray(global_bytes).reshape(-1).view(np.uint8)
    needed_bytes = (
        sum((extent - 1) * stride for extent, stride in zip(shape, strides, strict=True)) + 1
    ) * elem_bytes
    if buffer.size < needed_bytes:
        raise TmaConfigError(
            f"global buffer has {buffer.size} bytes but a tensor of shape {shape} and strides "
            f"{strides} x {elem_bytes} B reaches byte {needed_bytes}"
        )

    rank = len(shape)
    column = (rank,) + (1,) * rank  # broadcast per-dim vectors against np.indices
    coords = np.indices(box_shape, dtype=np.int64) + np.asarray(box_coords, np.int64).reshape(column)
    in_bounds = np.all((coords >= 0) & (coords < np.asarray(shape, np.int64).reshape(column)), axis=0)
    element_offsets = np.tensordot(np.asarray(strides, np.int64), coords, axes=1)
    byte_offsets = element_offsets[..., None] * elem_bytes + np.arange(elem_bytes, dtype=np.int64)

    dense = np.zeros(box_shape + (elem_bytes,), dtype=np.uint8)  # zero fill = TMA's OOB fill
    dense[in_bounds] = buffer[byte_offsets[in_bounds]]
    return swizzle(dense.reshape(-1), swizzle_bytes)
