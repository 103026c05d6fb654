"""`load_tiles` as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.load_tiles(tensor, tile_rows=64, tile_cols=256, swizzle=0) -> Tensor

Defined in a fragment of the `tmakit` library: its real implementation (`tmakit.load_tiles`,
TMA's loads only), its fake (the output's shape, what TMA serves checked while tracing) and the Autograd
kernel of an op without a gradient (`ops_base.not_differentiable`)."""

from __future__ import annotations

from typing import Any

import torch

from ..config import SEED, LoadConfig, dtype_of, major_of
from ..ops_base import check_traced, define, not_differentiable, on_its_device, refuse_memoryless
from ..plan import LoadPlan
from ..plan.load import padded_extents
from ..validate import check_rank
from .api import load_tiles as tma_load_tiles

SCHEMAS = {
    # `int`, not SymInt: a tile and a swizzle are constants of the compiled kernel
    "load_tiles": (
        f"load_tiles(Tensor tensor, int tile_rows={SEED.tile[0]}, int tile_cols={SEED.tile[1]}, "
        "int swizzle=0) -> Tensor"
    ),
}


def load_tiles_impl(
    tensor: torch.Tensor, tile_rows: int = SEED.tile[0], tile_cols: int = SEED.tile[1], swizzle: int = 0
) -> torch.Tensor:
    """What TMA puts in shared memory, tile by tile (`tmakit.load_tiles`), as a row-major tensor
    of the padded shape."""
    if type(tensor) is not torch.Tensor or tensor.is_meta:
        refuse_memoryless("load_tiles", tensor=tensor)
    return on_its_device(tensor, tma_load_tiles, tensor, (tile_rows, tile_cols), swizzle)


def padded_shape(tensor: torch.Tensor, tile: tuple[int, int], swizzle: int) -> tuple[Any, ...]:
    """`LoadPlan.padded_shape` of `tensor` loaded with `tile`: its batch dims, then its rows and
    columns rounded up to whole tiles. A static shape gets `LoadPlan`'s whole check, so a
    configuration load_tiles would refuse is refused while tracing. A symbolic shape (dynamic shapes:
    SymInts, which the check would specialise) gets the rank and tile checks and the same
    arithmetic (`plan.load.padded_extents`)."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    if all(type(value) is int for value in (*shape, *strides)):
        config = LoadConfig(shape, dtype_of(tensor.dtype), tile, swizzle, major_of(strides, shape), strides)
        return LoadPlan(config).padded_shape
    check_rank(len(shape))
    if min(tile) < 1:
        LoadPlan(LoadConfig(tile=tile))  # raises the tile's own error
    return padded_extents(shape, tile)


def load_tiles_fake(
    tensor: torch.Tensor, tile_rows: int = SEED.tile[0], tile_cols: int = SEED.tile[1], swizzle: int = 0
) -> torch.Tensor:
    """What `tmakit.load_tiles` allocates: the padded shape, row-major and compact."""
    check_traced("load_tiles", tensor=tensor)
    shape = padded_shape(tensor, (tile_rows, tile_cols), swizzle)
    return torch.empty(shape, dtype=tensor.dtype, device=tensor.device)


LIBRARY = define(SCHEMAS, (("load_tiles", load_tiles_impl, load_tiles_fake),))
LIBRARY.impl(
    "load_tiles", not_differentiable("load_tiles", "tensor", load_tiles_impl), "Autograd", with_keyset=True
)
load_tiles = torch.ops.tmakit.load_tiles.default

__all__ = ["load_tiles"]
