"""TMA's rules, checked in pure Python before anything compiles or launches.

The DSL checks none of these at compile time: a 2002-byte row stride or a 512-wide box compiles,
and then fails, misbehaves or is silently split on the GPU.
"""

from __future__ import annotations

from .config import LoadConfig, dtype_named
from .errors import TmaConfigError

MAX_BOX_EXTENT = 256  # elements per box dimension (cuTensorMapEncodeTiled's boxDim limit)
GLOBAL_STRIDE_ALIGN = 16  # bytes: every global stride but the innermost
GLOBAL_BASE_ALIGN = 16  # bytes: the tensor's base address
INNER_BOX_ALIGN = 16  # bytes: the box's innermost extent
SMEM_PER_BLOCK = 227 * 1024  # bytes of shared memory one block may request on Hopper (sm_90)
MBARRIER_BYTES = 8  # one 64-bit mbarrier


def check_load_config(config: LoadConfig) -> None:
    """Raise TmaConfigError if TMA cannot load `config` as tmakit's kernels issue it."""
    element = dtype_named(config.dtype)
    rows, cols = config.shape
    tile_rows, tile_cols = config.tile
    for name, extent in (("rows", rows), ("columns", cols)):
        if extent < 1:
            raise TmaConfigError(f"tensor {name} is {extent}; every extent must be >= 1")
    for name, extent in (("rows", tile_rows), ("columns", tile_cols)):
        if not 1 <= extent <= MAX_BOX_EXTENT:
            raise TmaConfigError(
                f"tile {name} is {extent}; a TMA box dimension must be 1..{MAX_BOX_EXTENT} elements "
                "(the DSL would silently split a larger tile into many small copies)"
            )
    inner_box_bytes = tile_cols * element.nbytes
    if inner_box_bytes % INNER_BOX_ALIGN:
        raise TmaConfigError(
            f"tile's inner extent is {tile_cols} {config.dtype} = {inner_box_bytes} bytes; "
            f"TMA needs a multiple of {INNER_BOX_ALIGN} bytes"
        )
    check_global_strides((cols * element.nbytes,), dims=(0,))
    tile_bytes = tile_rows * tile_cols * element.nbytes
    if tile_bytes + MBARRIER_BYTES > SMEM_PER_BLOCK:
        raise TmaConfigError(
            f"tile {tile_rows}x{tile_cols} {config.dtype} needs {tile_bytes + MBARRIER_BYTES} bytes "
            f"of shared memory; a Hopper block may have at most {SMEM_PER_BLOCK}"
        )


def check_global_strides(stride_bytes: tuple[int, ...], dims: tuple[int, ...]) -> None:
    """Each outer global stride (in bytes) must be a multiple of 16."""
    for dim, stride in zip(dims, stride_bytes, strict=True):
        if stride % GLOBAL_STRIDE_ALIGN:
            raise TmaConfigError(
                f"global stride of dim {dim} is {stride} bytes; TMA needs a multiple of "
                f"{GLOBAL_STRIDE_ALIGN} (pad each row to a multiple of 16 bytes)"
            )


def check_base_address(address: int) -> None:
    """The global tensor's base address must be 16-byte aligned."""
    if address % GLOBAL_BASE_ALIGN:
        raise TmaConfigError(
            f"tensor base address {address:#x} is not {GLOBAL_BASE_ALIGN}-byte aligned; TMA needs it"
        )
