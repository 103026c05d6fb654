"""A copy's defaults, chosen from the tensors and the device where a call leaves an option out:
the tile, the ring's depth, the small transposes' tiles, the rows view's tile and when a compact
copy takes it. Pure Python; `plan.copy` holds the options and the plan that read them."""

from __future__ import annotations

from ..config import DTYPES, ROW_VIEW_WIDTHS, rows_view
from ..limits import MAX_BOX_EXTENT
from .tuning import TUNING

# A copy of one layout: tiles of `COPY_TILE_ROWS` rows (measured: `plan.tuning`), each row
# `COPY_TILE_ROW_BYTES` (the box limit caps the columns). The row bytes are not in the committed
# results: only fp16 tiles were compared, whose 512-byte rows are also the box's 256 elements
# (benchmarks/probes/copy_defaults.py compares 4-byte types' rows).
COPY_TILE_ROWS: int = TUNING["COPY_TILE_ROWS"].value
COPY_TILE_ROW_BYTES = 512
# A layout-changing copy: tiles of `TRANSPOSE_TILE_BYTES` (measured: `plan.tuning`), their rows by
# element size. 1-byte types take 128, the fewest a layout change allows (both extents whole
# 128-byte multiples: `CopyPlan`); 2-byte types 128 and wider ones 64, never compared with other
# rows of the same bytes (benchmarks/probes/copy_defaults.py does).
TRANSPOSE_TILE_BYTES: int = TUNING["TRANSPOSE_TILE_BYTES"].value
TRANSPOSE_TILE_ROWS = {1: 128, 2: 128, 4: 64, 8: 64}
# The ring: about `BYTES_IN_FLIGHT` of loads in flight per block, at least `MIN_STAGES` stages, and
# half as many TMA stores in flight, at least `MIN_STORES_IN_FLIGHT` (the newest store may still
# read its stage while the consumer moves on). Chosen on earlier H200 runs that the committed
# results no longer hold (benchmarks/probes/copy_defaults.py measures them).
BYTES_IN_FLIGHT = 64 * 1024
MIN_STAGES = 4
MIN_STORES_IN_FLIGHT = 2
# A ring of tiny tiles stays this deep: each stage is unrolled at compile time, and past this many
# the loads in flight are bounded by their count, not their bytes.
MAX_DEFAULT_STAGES = 32
# The warps that transpose each stage: the mapping serves any count (`TransposeMapping`); four is a
# choice no run has compared, and no copy option reaches it.
TRANSPOSE_CONSUMER_WARPS = 4
# A layout-changing copy of fewer default tiles than SMs takes smaller ones, by element size where
# measured (`plan.tuning`).
SMALL_TRANSPOSE_TILES: dict[int, tuple[int, int]] = TUNING["SMALL_TRANSPOSE_TILES"].value
# A compact copy's rows view: tiles of 32 KiB while that leaves at least 4 tiles per SM, else
# halved down to 4 KiB, so that small copies still reach every SM. Not in the committed results
# (the view was measured at these tiles only, against the tensors' own: `ROWS_BEYOND_L2`);
# benchmarks/probes/copy_defaults.py measures them.
ROWS_VIEW_TILE_BYTES = 32 * 1024
ROWS_VIEW_MIN_TILE_BYTES = 4 * 1024
ROWS_VIEW_TILES_PER_SM = 4


# Compact tensors of one layout that do not fit the L2 are copied as rows of their memory when a
# call gives no options (`as_rows`; any option given is taken as it is), as measured (`plan.tuning`).
ROWS_BEYOND_L2: bool = TUNING["ROWS_BEYOND_L2"].value


def rows_beyond_l2(transpose: bool, compact: bool, in_l2: bool, numel: int, nbytes: int) -> bool:
    """Whether a copy given no options takes the rows view (`ROWS_BEYOND_L2`): compact tensors of
    one layout that do not fit the L2, whose elements fill rows of the widest view (one class a
    dtype, not one a width)."""
    if not (ROWS_BEYOND_L2 and compact and not transpose and not in_l2):
        return False
    view = rows_view(numel, nbytes)
    return view is not None and view[1] == ROW_VIEW_WIDTHS[0]


def fits_l2(tensor_bytes: int, l2_bytes: int) -> bool:
    """Whether a copy's source and destination together fit in the L2 (its evict-first default
    and its class follow it)."""
    return 2 * tensor_bytes <= l2_bytes


def small_transpose(nbytes: int, transpose: bool, tensor_bytes: int | None, sm_count: int) -> bool:
    """Whether a copy takes `SMALL_TRANSPOSE_TILES`' tile: it changes the layout, of an element size
    the table has, and its tensor is smaller than one default 32 KiB tile per SM."""
    return (
        transpose
        and tensor_bytes is not None
        and nbytes in SMALL_TRANSPOSE_TILES
        and tensor_bytes < sm_count * TRANSPOSE_TILE_BYTES
    )


def copy_tile(dtype_name: str, transpose: bool = False) -> tuple[int, int]:
    """The copy's default tile for a strided tensor (the box limit caps the columns)."""
    nbytes = DTYPES[dtype_name].nbytes
    if transpose:
        rows = TRANSPOSE_TILE_ROWS[nbytes]
        return rows, min(MAX_BOX_EXTENT, TRANSPOSE_TILE_BYTES // (rows * nbytes))
    return COPY_TILE_ROWS, min(MAX_BOX_EXTENT, COPY_TILE_ROW_BYTES // nbytes)


def rows_view_tile(rows: int, width: int, nbytes: int, sm_count: int) -> tuple[int, int]:
    """The tile of a compact copy's rows view; each tile is one contiguous run of memory."""
    tile_rows = max(1, ROWS_VIEW_TILE_BYTES // (width * nbytes))
    while (
        tile_rows * width * nbytes > ROWS_VIEW_MIN_TILE_BYTES
        and -(-rows // tile_rows) < ROWS_VIEW_TILES_PER_SM * sm_count
    ):
        tile_rows //= 2
    return min(tile_rows, MAX_BOX_EXTENT, rows), width


def copy_stages(tile_bytes: int) -> int:
    """Default ring depth: about `BYTES_IN_FLIGHT` of loads in flight per block, at most
    `MAX_DEFAULT_STAGES` stages."""
    return min(MAX_DEFAULT_STAGES, max(MIN_STAGES, BYTES_IN_FLIGHT // tile_bytes))
