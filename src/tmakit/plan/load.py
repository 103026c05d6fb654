"""The seed's arithmetic for any configuration: the single source of every number. Pure Python.

The kernel launch, `tmakit plan`, the verifier and the tests all read grid, tile bytes and
shared-memory size from a `LoadPlan`; none of them recomputes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import LoadConfig
from ..errors import TmaConfigError
from ..limits import (
    MAX_DEVICE_INT,
    MAX_SPECIALISED_ELEMENTS,
    MBARRIER_BYTES,
    SHARED_TILE_ALIGN,
    SWIZZLE_BITS,
    SWIZZLE_DESTINATION_ALIGN,
    SWIZZLED_TILE_ALIGN,
    WARP_THREADS,
)
from ..validate import check_field_types, check_load_config


def ceil_div(a, b):
    """Ceiling of a / b for a >= 0, b > 0; plain `//`, `+`, `-`, so it also runs on the DSL's
    device integers (whose `//` truncates, which is the floor for non-negative operands)."""
    return (a + b - 1) // b


def matrix_tile_counts(shape: tuple, tile: tuple[int, int]) -> tuple:
    """(row blocks, column tiles) of each matrix of `shape` (its last two dims) cut into `tile`s:
    ceilings, so a partial strip or tile counts whole (plain or symbolic extents)."""
    return ceil_div(shape[-2], tile[0]), ceil_div(shape[-1], tile[1])


def padded_extents(shape: tuple, tile: tuple[int, int]) -> tuple:
    """`shape` with its rows and columns rounded up to whole tiles (plain or symbolic extents)."""
    row_blocks, column_tiles = matrix_tile_counts(shape, tile)
    return (*shape[:-2], row_blocks * tile[0], column_tiles * tile[1])


def check_tile_count(tiles: int) -> None:
    """The kernels count tiles in 32-bit device integers."""
    if tiles > MAX_DEVICE_INT:
        raise TmaConfigError(
            f"{tiles} tile loads; tmakit's kernels count tiles in 32-bit integers "
            f"(at most {MAX_DEVICE_INT}): use larger tiles or split the tensor"
        )


def check_run_time_extents(shape: tuple[int, ...], tile: tuple[int, int]) -> None:
    """A shape-generic kernel counts its tiles in 32-bit device integers from the extents
    (`ceil_div(rows, tile_rows)`): the rows and columns, plus a tile less one, fit in them."""
    for name, extent, tile_extent in (("rows", shape[-2], tile[0]), ("columns", shape[-1], tile[1])):
        if extent + tile_extent - 1 > MAX_DEVICE_INT:
            raise TmaConfigError(
                f"tensor {name} extent is {extent}; a kernel compiled for every shape counts tiles in "
                f"32-bit integers, so it takes at most {MAX_DEVICE_INT + 1 - tile_extent} with a tile "
                f"extent of {tile_extent}: split the tensor"
            )


@dataclass(frozen=True)
class LoadPlan:
    """How a `LoadConfig` is split: one block (one warp) per strip of `tile[0]` rows of each
    matrix, loading that strip's column tiles one after another into one shared tile."""

    config: LoadConfig

    def __post_init__(self) -> None:
        check_field_types(self)
        check_load_config(self.config)
        check_tile_count(self.total_tile_loads)

    def check_specialised(self) -> None:
        """Refuse this tensor (or its padded scratch) for a kernel compiled for its exact shape
        past `MAX_SPECIALISED_ELEMENTS`."""
        elements = max(math.prod(self.config.shape), math.prod(self.padded_shape))
        if elements > MAX_SPECIALISED_ELEMENTS:
            raise TmaConfigError(
                f"{elements} elements; a kernel compiled for one shape handles at most "
                f"{MAX_SPECIALISED_ELEMENTS} (2^32): use tmakit.copy_ / tmakit.load_tiles with "
                "apache-tvm-ffi installed (pip install 'tmakit[gpu]'), whose shape-generic kernels take "
                "more, or split the tensor"
            )

    @property
    def threads_per_block(self) -> int:
        return WARP_THREADS  # one warp, as in the seed

    # -- the decomposition ------------------------------------------------------------------
    @property
    def matrix_shape(self) -> tuple[int, int]:
        """(rows, columns): the last two dims, which the tile covers."""
        rows, cols = self.config.shape[-2:]
        return rows, cols

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading dims; each index is a separate matrix with its own blocks."""
        return tuple(self.config.shape[:-2])

    @property
    def batch_count(self) -> int:
        return math.prod(self.batch_shape)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of the tensor's elements (padding between rows not counted): what a load reads."""
        return math.prod(self.config.shape) * self.config.element.nbytes

    @property
    def tile_counts(self) -> tuple[int, int]:
        """(row blocks, column tiles) of each matrix (`matrix_tile_counts`)."""
        return matrix_tile_counts(self.config.shape, self.config.tile)

    @property
    def row_blocks(self) -> int:
        """Strips of rows per matrix (ceiling: a partial strip still gets a block)."""
        return self.tile_counts[0]

    @property
    def grid(self) -> int:
        """Blocks launched: one per strip of rows of each matrix in the batch."""
        return self.row_blocks * self.batch_count

    @property
    def tiles_per_block(self) -> int:
        """Column tiles each block loads in sequence."""
        return self.tile_counts[1]

    @property
    def total_tile_loads(self) -> int:
        """Every tile of every matrix (as `TileWalk.total_tiles` counts them)."""
        return math.prod(self.tile_counts) * self.batch_count

    @property
    def has_partial_tiles(self) -> bool:
        rows, cols = self.matrix_shape
        return rows % self.config.tile[0] != 0 or cols % self.config.tile[1] != 0

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """The extent covered by whole tiles; the verifying kernel's scratch output has this
        shape (row-major, compact, whatever the input's layout)."""
        return padded_extents(self.config.shape, self.config.tile)

    @property
    def rows_contiguous(self) -> bool:
        """True when the rows dim has stride 1 (a column-major matrix, e.g. a transposed view):
        the shared tile is then column-major too, so TMA's inner box dim is the rows."""
        return self.config.contiguous_dim == "rows"

    def tile_origin(self, row_block: int, column_tile: int) -> tuple[int, int]:
        """Element coordinates of the tile's first element: (64, 512) for tile (1, 2) of the seed."""
        return (row_block * self.config.tile[0], column_tile * self.config.tile[1])

    # -- bytes ----------------------------------------------------------------------------------
    @property
    def expected_tx_bytes(self) -> int:
        """Bytes the barrier expects per phase: the whole box, even for a partial edge tile
        (TMA zero-fills the out-of-bounds part and still counts it). The barrier's own 8 bytes
        are storage, not transferred data, so they are not part of the transaction."""
        tile_rows, tile_cols = self.config.tile
        return tile_rows * tile_cols * self.config.element.nbytes

    @property
    def barrier_bytes(self) -> int:
        return MBARRIER_BYTES

    @property
    def swizzle_bits(self) -> int:
        """B of CuTe's Swizzle(B, 4, 3) on byte addresses: 0 (none), 1 (32B), 2 (64B), 3 (128B)."""
        return SWIZZLE_BITS[self.config.swizzle]

    @property
    def tile_alignment(self) -> int:
        """Byte alignment tmakit gives the shared tile: 128 (a TMA destination's), swizzled
        1024 whatever the mode (the largest repeat of a swizzle pattern)."""
        return SWIZZLED_TILE_ALIGN if self.config.swizzle else SHARED_TILE_ALIGN

    @property
    def destination_alignment(self) -> int:
        """The alignment TMA itself asks of a shared destination in this tile's layout: 128 bytes,
        or the swizzle's repeat (256, 512, 1024 bytes for 32B, 64B, 128B). A part of the tile
        that TMA writes on its own (a multicast slice) must start at a multiple of it."""
        return SWIZZLE_DESTINATION_ALIGN[self.config.swizzle]

    @property
    def smem_bytes(self) -> int:
        """Shared memory the launch requests: the tile at offset 0 of the dynamic shared memory
        (which the DSL aligns to 1024 bytes, so no padding precedes it), then the 8-byte barrier
        (tile sizes are multiples of 16, so none follows it either). 32776 for the seed."""
        return self.expected_tx_bytes + self.barrier_bytes

    def phase_parity(self, column_tile: int) -> int:
        """The parity a block waits on for its `column_tile`-th load: 0, 1, 0, 1, ..."""
        return column_tile % 2

    # -- text -------------------------------------------------------------------------------------
    def summary(self, grid: str | None = None) -> str:
        """The plan's numbers, a line each; `grid` replaces the grid line (a cluster launch's)."""
        cfg = self.config
        layout = "column-major" if self.rows_contiguous else "row-major"
        shape = " x ".join(map(str, cfg.shape))
        lines = [
            f"tensor            {shape} {cfg.dtype}, {layout}, strides {cfg.element_strides} "
            f"({self.tensor_bytes} bytes)",
            f"tile              {cfg.tile[0]} x {cfg.tile[1]} ({self.expected_tx_bytes} bytes), "
            + (f"{cfg.swizzle}B swizzle" if cfg.swizzle else "no swizzle (Swizzle(0,4,3))"),
            grid
            or f"grid              {self.grid} blocks x {self.threads_per_block} threads (one warp)"
            + (f" = {self.row_blocks} row blocks x {self.batch_count} batch" if self.batch_shape else ""),
            f"tiles per block   {self.tiles_per_block}",
            f"total tile loads  {self.total_tile_loads}",
            f"shared memory     {self.smem_bytes} bytes requested "
            f"(tile {self.expected_tx_bytes} + barrier {self.barrier_bytes})",
            f"expect_tx         {self.expected_tx_bytes} bytes per barrier phase",
            "phase parity      "
            + ", ".join(str(self.phase_parity(j)) for j in range(min(self.tiles_per_block, 8)))
            + (", ..." if self.tiles_per_block > 8 else ""),
        ]
        if self.has_partial_tiles:
            lines.append("partial tiles     yes: edge boxes are zero-filled by TMA past the tensor's end")
        return "\n".join(lines)

    def check_tile(self, row_block: int, column_tile: int, what: str = "tile") -> None:
        """Refuse a tile outside the plan's grid, naming the grid."""
        if not (0 <= row_block < self.row_blocks and 0 <= column_tile < self.tiles_per_block):
            raise TmaConfigError(
                f"{what} ({row_block}, {column_tile}) is outside the {self.row_blocks} x "
                f"{self.tiles_per_block} tile grid (row blocks 0-{self.row_blocks - 1}, "
                f"column tiles 0-{self.tiles_per_block - 1})"
            )

    def diagram(
        self, highlight: tuple[int, int] | None = None, max_blocks: int = 3, max_tiles: int = 12
    ) -> str:
        """The seed's tile diagram: a row per block, a box per column tile, X at `highlight`. Past
        `max_blocks` rows and `max_tiles` columns only the first, the highlighted and the last are
        drawn ("..." between), so a diagram of any accepted shape stays a few lines."""
        if highlight is not None:
            self.check_tile(*highlight)
        row_blocks = _shown(self.row_blocks, max_blocks, highlight[0] if highlight else None)
        column_tiles = _shown(self.tiles_per_block, max_tiles, highlight[1] if highlight else None)
        gap = " ... "
        header, previous = f"{'':11}", -1
        for column_tile in column_tiles:
            header += (gap if column_tile != previous + 1 else "") + f"{column_tile:^5}"
            previous = column_tile
        lines = [header]
        previous_block = -1
        for row_block in row_blocks:
            if row_block != previous_block + 1:
                lines.append("   ...")
            boxes, previous = "", -1
            for column_tile in column_tiles:
                boxes += (gap if column_tile != previous + 1 else "") + (
                    "[ X ]" if highlight == (row_block, column_tile) else "[   ]"
                )
                previous = column_tile
            lines.append(f"block {row_block:<4} {boxes}")
            previous_block = row_block
        if highlight is not None:
            row_block, column_tile = highlight
            r0, c0 = self.tile_origin(row_block, column_tile)
            r1 = min(r0 + self.config.tile[0], self.matrix_shape[0]) - 1
            c1 = min(c0 + self.config.tile[1], self.matrix_shape[1]) - 1
            lines.append(
                f"tile ({row_block}, {column_tile}): element origin ({r0}, {c0}); "
                f"rows {r0}-{r1}, columns {c0}-{c1}"
            )
        return "\n".join(lines)


def _shown(count: int, first: int, also: int | None) -> list[int]:
    """The indices a diagram draws of `count`: all when they are few, else the first `first`,
    `also` and the last."""
    if count <= first + 2:
        return list(range(count))
    return sorted(set(range(first)) | ({also} if also is not None else set()) | {count - 1})
