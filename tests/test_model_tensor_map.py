"""The TMA load model against plain NumPy slicing, read back through an independent un-swizzle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmakit.errors import TmaConfigError
from tmakit.model.tensor_map import swizzle, swizzled_offset, tma_load_box, unswizzle

MAX_BOX_BYTES = 2048  # keeps the per-chunk reference loop fast enough for 1,200 examples


def read_back(smem: np.ndarray, box_bytes: int, swizzle_bytes: int) -> np.ndarray:
    """Independent un-swizzle: walk the box 16-byte chunk by chunk with div/mod arithmetic.

    Within each 128-byte shared-memory row, the chunk's position inside its swizzle span
    (32/64/128 bytes = 2/4/8 chunks) is XORed with the row number modulo the chunks per span.
    """
    dense = np.zeros(box_bytes, dtype=np.uint8)
    chunks_per_span = swizzle_bytes // 16
    for chunk in range(box_bytes // 16):
        logical = chunk * 16
        if swizzle_bytes:
            row_128, within_row = divmod(logical, 128)
            span_start, chunk_in_span = divmod(within_row // 16, chunks_per_span)
            physical_chunk = chunk_in_span ^ (row_128 % chunks_per_span)
            physical = row_128 * 128 + span_start * swizzle_bytes + physical_chunk * 16
        else:
            physical = logical
        dense[logical : logical + 16] = smem[physical : physical + 16]
    return dense


def reference_box(buffer, elem_bytes, shape, strides, box_shape, box_coords) -> np.ndarray:
    """The box by NumPy slicing of a strided view, zero padded where it leaves the tensor."""
    elements = buffer.view(f"<u{elem_bytes}")
    tensor = np.lib.stride_tricks.as_strided(
        elements, shape=shape, strides=[s * elem_bytes for s in strides], writeable=False
    )
    box = np.zeros(box_shape, dtype=elements.dtype)
    source, target = [], []
    for extent, box_extent, coord in zip(shape, box_shape, box_coords, strict=True):
        low, high = max(coord, 0), min(coord + box_extent, extent)
        if high <= low:
            return box.view(np.uint8).reshape(-1)  # the box misses the tensor entirely
        source.append(slice(low, high))
        target.append(slice(low - coord, high - coord))
    box[tuple(target)] = tensor[tuple(source)]
    return box.view(np.uint8).reshape(-1)


@st.composite
def load_configs(draw):
    rank = draw(st.integers(1, 5))
    elem_bytes = draw(st.sampled_from([1, 2, 4]))
    swizzle_bytes = draw(st.sampled_from([0, 32, 64, 128]))
    max_inner_chunks = swizzle_bytes // 16 if swizzle_bytes else 8
    inner_box = draw(st.integers(1, max_inner_chunks)) * 16 // elem_bytes
    budget = MAX_BOX_BYTES // (inner_box * elem_bytes)
    outer_box = []
    for _ in range(rank - 1):
        extent = draw(st.integers(1, max(1, min(4, budget))))
        budget //= extent
        outer_box.append(extent)
    box_shape = tuple(outer_box) + (inner_box,)
    # extents around the box's so partial boxes are common; coordinates from well before the
    # start to past the end, so boxes hang off either side or miss the tensor
    shape = tuple(draw(st.integers(1, b + 3)) for b in box_shape)
    box_coords = tuple(draw(st.integers(-b - 1, s + 1)) for b, s in zip(box_shape, shape, strict=True))
    stride_unit = 16 // elem_bytes  # outer strides: multiples of 16 bytes
    strides = [1]
    for extent in reversed(shape[1:]):
        if draw(st.booleans()):  # row-major, each row padded to 16 bytes plus some slack
            packed = -(-strides[0] * extent // stride_unit) * stride_unit
            strides.insert(0, packed + stride_unit * draw(st.integers(0, 2)))
        else:  # any 16-byte multiple: transposed or overlapping layouts are legal to read
            strides.insert(0, stride_unit * draw(st.integers(1, 24)))
    strides = tuple(strides)
    span_bytes = (sum((e - 1) * s for e, s in zip(shape, strides, strict=True)) + 1) * elem_bytes
    seed = draw(st.integers(0, 2**32 - 1))
    buffer = np.random.default_rng(seed).integers(0, 256, span_bytes, dtype=np.uint8)
    return buffer, elem_bytes, shape, strides, box_shape, box_coords, swizzle_bytes


@settings(max_examples=1200, deadline=None, database=None)
@given(load_configs())
def test_load_matches_numpy_slicing(config):
    buffer, elem_bytes, shape, strides, box_shape, box_coords, swizzle_bytes = config
    smem = tma_load_box(buffer, elem_bytes, shape, strides, box_shape, box_coords, swizzle_bytes)
    expected = reference_box(buffer, elem_bytes, shape, strides, box_shape, box_coords)
    box_bytes = expected.size
    assert smem.dtype == np.uint8
    assert smem.size == (-(-box_bytes // swizzle_bytes) * swizzle_bytes if swizzle_bytes else box_bytes)
    np.testing.assert_array_equal(read_back(smem, box_bytes, swizzle_bytes), expected)
    np.testing.assert_array_equal(unswizzle(smem, swizzle_bytes)[:box_bytes], expected)
    assert not read_back(smem, smem.size, swizzle_bytes)[box_bytes:].any()  # padding to the span is zero


@settings(max_examples=200, deadline=None, database=None)
@given(st.sampled_from([0, 32, 64, 128]), st.integers(1, 96), st.integers(0, 2**32 - 1))
def test_swizzle_round_trip(swizzle_bytes, chunks, seed):
    dense = np.random.default_rng(seed).integers(0, 256, chunks * 16, dtype=np.uint8)
    if swizzle_bytes:
        dense = np.resize(dense, -(-dense.size // swizzle_bytes) * swizzle_bytes)
    smem = swizzle(dense, swizzle_bytes)
    np.testing.assert_array_equal(unswizzle(smem, swizzle_bytes), dense)
    np.testing.assert_array_equal(read_back(smem, dense.size, swizzle_bytes), dense)


def test_swizzle_128b_known_offsets():
    # row 1 of 128 bytes: chunk 0 moves to chunk 1; row 7: chunk 0 -> 7, chunk 7 -> 0
    assert swizzled_offset(128, 128) == 144
    assert swizzled_offset(7 * 128, 128) == 7 * 128 + 7 * 16
    assert swizzled_offset(7 * 128 + 7 * 16 + 3, 128) == 7 * 128 + 3
    assert swizzled_offset(8 * 128 + 5, 128) == 8 * 128 + 5  # repeats every 1024 bytes
    assert swizzled_offset(128, 32) == 144 and swizzled_offset(256, 32) == 256
    assert swizzled_offset(3 * 128 + 16, 64) == 3 * 128 + 32
    assert swizzled_offset(128 + 16, 0) == 144


def test_seed_tile_without_swizzle_is_row_major():
    rows, cols = 128, 512
    matrix = np.arange(rows * cols, dtype=np.uint16).reshape(rows, cols)
    smem = tma_load_box(matrix, 2, (rows, cols), (cols, 1), (64, 256), (64, 256), 0)
    np.testing.assert_array_equal(smem.view(np.uint16).reshape(64, 256), matrix[64:, 256:])


def test_fully_out_of_bounds_box_is_zero():
    matrix = np.ones((4, 8), dtype=np.uint16)
    smem = tma_load_box(matrix, 2, (4, 8), (8, 1), (2, 8), (-5, 0), 32)
    assert smem.size == 32 and not smem.any()


GOOD = dict(elem_bytes=2, shape=(64, 64), strides=(64, 1), box_shape=(8, 64), box_coords=(0, 0))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(shape=(1,) * 6, strides=(1,) * 6, box_shape=(1,) * 6, box_coords=(0,) * 6), "rank is 6"),
        (dict(shape=(64, 64), strides=(64,)), "strides has 1 entries"),
        (dict(elem_bytes=3), "element size is 3"),
        (dict(swizzle_bytes=16), "swizzle mode 16"),
        (dict(box_shape=(257, 64)), "box extent of dim 0 is 257"),
        (dict(box_shape=(0, 64)), "box extent of dim 0 is 0"),
        (dict(box_shape=(8, 4)), "8 bytes; TMA needs a multiple of 16"),
        (dict(box_shape=(8, 64), swizzle_bytes=64), "128 bytes; with the 64B swizzle"),
        (dict(strides=(63, 1)), "global stride of dim 0 is 126 bytes"),
        (dict(strides=(64, 2)), "innermost stride is 2"),
        (dict(shape=(0, 64)), "tensor extent of dim 0 is 0"),
        (dict(box_coords=(2**31, 0)), "box coordinate of dim 0"),
        (dict(shape=(128, 64)), "global buffer has 8192 bytes"),
    ],
)
def test_rules_raise_config_error(change, words):
    args = {**GOOD, "swizzle_bytes": 0, **change}
    with pytest.raises(TmaConfigError, match=words):
        tma_load_box(np.zeros(64 * 64, np.uint16), **args)


def test_unswizzle_needs_whole_spans():
    with pytest.raises(TmaConfigError, match="48 bytes"):
        unswizzle(np.zeros(48, np.uint8), 32)
