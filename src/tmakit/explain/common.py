"""What every mode of `tmakit explain` shares: the tile it marks and the configuration's numbers."""

from typing import Any

from ..plan import LoadPlan

SEED_HIGHLIGHT = (1, 2)  # the tile the seed walkthrough marks


def seed_tile(row_blocks: int, column_tiles: int) -> tuple[int, int]:
    """The seed's tile (1, 2), moved into a grid of `row_blocks` x `column_tiles` that lacks it."""
    return min(SEED_HIGHLIGHT[0], row_blocks - 1), min(SEED_HIGHLIGHT[1], column_tiles - 1)


def highlight_tile(plan: LoadPlan, highlight: tuple[int, ...] | None = None) -> tuple[int, int]:
    """The tile to mark: `highlight` if it is one of the plan's tiles (TmaConfigError naming the
    grid if not); by default the seed's tile (1, 2), moved into a smaller grid."""
    if highlight is None:
        return seed_tile(plan.row_blocks, plan.tiles_per_block)
    row_block, column_tile = highlight
    plan.check_tile(row_block, column_tile, "highlight")
    return row_block, column_tile


def configuration(plan: LoadPlan) -> dict[str, Any]:
    """The load's configuration as `plan --json` and `explain --json` name it."""
    config = plan.config
    return {
        "shape": list(config.shape),
        "dtype": config.dtype,
        "strides": list(config.element_strides),
        "tile": list(config.tile),
        "swizzle_bytes": config.swizzle,
    }
