"""A copy's class: everything a shape-generic kernel is compiled for (dtype, rank, contiguous dims,
tile, options), planned once, and the checks each new shape of a class gets. Pure Python."""

from __future__ import annotations

from ..config import DTYPES, LoadConfig, dtype_named, padded_strides
from ..errors import TmaConfigError
from ..limits import MAX_DEVICE_INT, MAX_RANK
from ..validate import (
    MAX_EXTENT,
    check_extents,
    check_outer_strides,
    flag,
    one_of,
    optional_whole_number,
    type_name,
    whole_number,
    whole_numbers,
)
from .copy import CopyOptions, CopyPlan
from .load import LoadPlan, check_run_time_extents


def stand_in_config(
    rank: int,
    dtype: str,
    tile: tuple[int, int],
    major: str,
    rows_width: int | None = None,
    swizzle: int = 0,
) -> LoadConfig:
    """The configuration a shape-generic kernel is planned and compiled for: the class's rank,
    dtype, tile and contiguous dim. Its shape (two tiles each way, two matrices per batch dim,
    rows padded to 16 bytes) only stands in: the kernel takes extents and strides at each call.
    A rows view's class keeps its width (`rows_width`)."""
    tile_rows, tile_cols = tile
    shape = (*(2,) * (rank - 2), 2 * tile_rows, rows_width or 2 * tile_cols)
    return LoadConfig(shape, dtype, tile, swizzle, major, padded_strides(shape, DTYPES[dtype].nbytes, major))


def copy_class(
    options: CopyOptions,
    dtype: str,
    rank: int,
    major: str,
    transpose: bool,
    tile: tuple[int, int],
    sm_count: int,
    fits_l2: bool,
    rows_width: int | None = None,
) -> CopyPlan:
    """The plan of a shape-generic copy: everything but the extents and strides, which the
    kernel takes at each call (and `check_copy_shape` checks before each new one). A copy of a
    rows view is a rank-2 row-major class of that width (`rows_width`). Planned once per class
    where a call compiles it (`copies.call`'s table of classes keeps it with its kernel);
    TmaConfigError for an argument of the wrong type or range."""
    check_class_arguments(options, dtype, rank, major, transpose, tile, sm_count, fits_l2, rows_width)
    config = stand_in_config(rank, dtype, tuple(tile), major, rows_width)
    return options.plan(LoadPlan(config), transpose, sm_count, fits_l2)


def check_class_arguments(
    options: object,
    dtype: object,
    rank: object,
    major: object,
    transpose: object,
    tile: object,
    sm_count: object,
    fits_l2: object,
    rows_width: object,
) -> None:
    """The types and ranges of a copy class's arguments (`copy_class`), each named when wrong."""
    if not isinstance(options, CopyOptions):
        raise TmaConfigError(f"options is {options!r} ({type_name(options)}); pass a tmakit.CopyOptions")
    if not isinstance(dtype, str):
        raise TmaConfigError(f"dtype is {dtype!r} ({type_name(dtype)}); pass a name such as 'fp16'")
    dtype_named(dtype)
    whole_number(rank, "rank", 2, MAX_RANK)
    one_of(major, "major", ("row", "col"))
    flag(transpose, "transpose")
    whole_numbers(tile, "tile", 2, "(64, 256)")
    whole_number(sm_count, "sm_count", 1)
    flag(fits_l2, "fits_l2")
    optional_whole_number(rows_width, "rows_width", 1)


def check_copy_shape(
    copy: CopyPlan,
    shape: tuple[int, ...],
    strides: tuple[tuple[int, ...], ...],
    contiguous: tuple[int, ...],
    nbytes: int,
    names: tuple[str, ...] = ("src", "dst"),
) -> list[tuple[int, ...] | None]:
    """What a shape-generic copy checks for each new shape, the rules that depend on extents and
    strides (the rest was checked with its class): extents TMA coordinates reach, each tensor's
    strides (`contiguous`: the index of each one's stride-1 dim; `nbytes`: the element size),
    and the tile counts. Returns each tensor's strides as the kernel is to be given them
    (`validate.check_outer_strides`: None where they are the tensor's own)."""
    # The common case in plain arithmetic (a new shape's checks are most of its host cost); any
    # doubt, and the rules' own checks run to pass it or to raise, naming the rule.
    tile_rows, tile_cols, blocks = copy.shape_check_constants
    rows, cols = shape[-2], shape[-1]
    tiles = ((rows + tile_rows - 1) // tile_rows) * ((cols + tile_cols - 1) // tile_cols)
    for extent in shape[:-2]:
        tiles *= extent
    if (
        min(shape) < 1
        or max(shape) > MAX_EXTENT
        or max(rows + tile_rows, cols + tile_cols) > MAX_DEVICE_INT
        or tiles * blocks > MAX_DEVICE_INT
    ):
        check_extents(shape)
        check_run_time_extents(shape, (tile_rows, tile_cols))
        copy.ring.check_walk_over(shape)
    fixed = [check_outer_strides(shape, strides[0], nbytes, contiguous[0], name=names[0])]
    if len(strides) > 1:  # the destination's
        fixed.append(check_outer_strides(shape, strides[1], nbytes, contiguous[1], name=names[1]))
    return fixed


def copy_destination(copy: CopyPlan) -> LoadConfig:
    """The default destination of a copy: the source's layout, or with `copy.transpose` the
    same shape stored with the other contiguous mode (pitch padded to 16 bytes)."""
    config = copy.load.config
    if not copy.transpose:
        return config
    major = "row" if copy.load.rows_contiguous else "col"
    strides = padded_strides(config.shape, config.element.nbytes, major)
    return LoadConfig(config.shape, config.dtype, config.tile, 0, major, strides)
