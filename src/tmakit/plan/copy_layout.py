"""The layout rules of a copy's (or reduce's) tensors that hold whatever the tile: a rows view's,
or the strided path's. Pure Python: what the copy family plans a pair with, and what the torch
ops' fake implementations (and im2col's windows) check while tracing, on static strides."""

from __future__ import annotations

import math

from ..config import DTYPES, ROW_VIEW_WIDTHS, contiguous_index, major_of, rows_view
from ..errors import TmaConfigError
from ..validate import check_outer_strides, check_rank
from .copy import CopyOptions


def copy_rows_view(
    options: CopyOptions, shape: tuple[int, ...], dtype: str, strides: tuple[tuple, tuple], compact: bool
) -> tuple[int, int] | None:
    """The rows view (`config.rows_view`) a copy of `compact` tensors (both contiguous, one layout)
    takes with `as_rows` or `bulk`; None: the strided path. TmaConfigError for a bulk copy that
    has none."""
    numel = math.prod(shape)
    view = rows_view(numel, DTYPES[dtype].nbytes) if compact and (options.as_rows or options.bulk) else None
    if options.bulk and view is None:
        raise TmaConfigError(
            f"bulk copy of {shape} {dtype} with strides {strides[0]} into {strides[1]}: it needs both "
            f"tensors compact (contiguous) and a number of elements that {min(ROW_VIEW_WIDTHS)} divides"
        )
    return view


def check_copy_layout(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    dtype: str,
    options: CopyOptions | None = None,
    compact: bool = False,
) -> None:
    """The layout rules a copy's (or reduce's) tensors of `shape` meet whatever the tile: a rows
    view's (`copy_rows_view`, with `options` and `compact`), or the strided path's: rank 2..5, a
    stride-1 dim among the last two, outer strides TMA takes (what a trace's fake implementation
    can check on static strides; the copy's planner checks them with the class)."""
    if 0 in shape:
        return
    if options is not None and copy_rows_view(options, shape, dtype, (src_strides, dst_strides), compact):
        return
    nbytes = DTYPES[dtype].nbytes
    check_rank(len(shape))
    for name, strides in (("src", src_strides), ("dst", dst_strides)):
        contiguous = contiguous_index(major_of(strides, shape), len(shape))
        check_outer_strides(shape, strides, nbytes, contiguous, name=name)
