"""TMA's rules, checked in pure Python before anything compiles or launches.

The DSL checks none of these at compile time: a 2002-byte row stride or a 512-wide box compiles,
and then fails, misbehaves or is silently split on the GPU.
"""

from __future__ import annotations

from .config import LoadConfig
from .errors import TmaConfigError
from .limits import (
    GLOBAL_BASE_ALIGN,
    GLOBAL_STRIDE_ALIGN,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_GLOBAL_STRIDE_BYTES,
    MAX_GRID_Y,
    MAX_RANK,
    MBARRIER_BYTES,
    SMEM_PER_BLOCK,
    SWIZZLE_MODES,
    TMA_COORDINATE_RANGE,
)

# The largest extent a tile origin can reach: TMA coordinates are signed 32-bit
# (cuTensorMapEncodeTiled itself takes extents up to 2^32).
MAX_EXTENT = TMA_COORDINATE_RANGE[1] + 1

# How a library user gets rows TMA accepts; a caller with its own remedy names it instead
# (`tmakit plan --pad`).
PADDED_ROWS_FIX = "tmakit.padded_empty allocates padded rows with the wanted shape"


def check_load_config(config: LoadConfig, stride_fix: str = PADDED_ROWS_FIX) -> None:
    """Raise TmaConfigError if TMA cannot load `config` as tmakit's kernels issue it; a stride
    error names `stride_fix` as the remedy."""
    element = config.element
    check_integers(config.shape, "shape")
    check_rank(len(config.shape))
    check_extents(config.shape)
    check_integers(config.tile, "tile", length=2)
    if config.strides is not None:
        check_integers(config.strides, "strides")
    if config.swizzle not in SWIZZLE_MODES:
        raise TmaConfigError(
            f"swizzle {config.swizzle} is not a TMA swizzle mode; use one of {SWIZZLE_MODES} (bytes)"
        )
    if config.major not in ("row", "col"):
        raise TmaConfigError(f"major {config.major!r} must be 'row' or 'col'")
    strides = config.element_strides
    if len(strides) != len(config.shape):
        raise TmaConfigError(f"{len(strides)} strides given for a rank-{len(config.shape)} shape")

    tile_rows, tile_cols = config.tile
    # CuTe drops a static extent of 1 from the TMA tensor map; with a box wider than 1 there the
    # copy no longer matches the shared tile: an illegal-instruction fault on the H200
    # (e.g. 1 x 384 int8 with a 16 x 128 tile, 132 x 1 fp8 with 32 x 32).
    for name, extent, tile_extent in (
        ("rows", config.shape[-2], tile_rows),
        ("columns", config.shape[-1], tile_cols),
    ):
        if extent == 1 and tile_extent != 1:
            raise TmaConfigError(
                f"tensor {name} extent is 1 but the tile's is {tile_extent}; tmakit needs a tile extent "
                f"of 1 there (CuTe drops extent-1 dims from the TMA map), or a view without that dim"
            )
    for name, extent in (("rows", tile_rows), ("columns", tile_cols)):
        if not 1 <= extent <= MAX_BOX_EXTENT:
            raise TmaConfigError(
                f"tile {name} is {extent}; a TMA box dimension must be 1..{MAX_BOX_EXTENT} elements "
                "(the DSL would silently split a larger tile into many small copies)"
            )

    # The innermost stride must be 1: TMA walks memory contiguously along one dim of the box.
    contiguous = config.contiguous_index
    if strides[contiguous] != 1:
        raise TmaConfigError(
            f"strides {strides} have no stride 1 in the last two dims; TMA needs the innermost "
            "stride to be 1 (rows or columns contiguous)"
        )
    check_outer_strides(config.shape, strides, element.nbytes, contiguous, stride_fix)
    batch = 1
    for extent in config.shape[:-2]:
        batch *= extent
    if batch > MAX_GRID_Y:
        raise TmaConfigError(
            f"{batch} batch matrices; tmakit launches one grid row each, at most {MAX_GRID_Y}"
        )

    inner_extent = tile_cols if contiguous == len(strides) - 1 else tile_rows
    inner_box_bytes = inner_extent * element.nbytes
    if inner_box_bytes % INNER_BOX_ALIGN:
        raise TmaConfigError(
            f"tile's contiguous extent is {inner_extent} {config.dtype} = {inner_box_bytes} bytes; "
            f"TMA needs a multiple of {INNER_BOX_ALIGN} bytes"
        )
    # TMA allows a swizzled box at most one span wide. tmakit asks for exactly one span: a
    # narrower box's swizzled bytes can land past the tile (the XOR acts on address bits the
    # box does not fill), which is how CUTLASS's swizzle atoms are always one span wide too.
    if config.swizzle and inner_box_bytes != config.swizzle:
        raise TmaConfigError(
            f"tile's contiguous extent is {inner_box_bytes} bytes; with the {config.swizzle}B swizzle "
            f"it must be exactly {config.swizzle} bytes ({config.swizzle // element.nbytes} {config.dtype})"
        )
    tile_bytes = tile_rows * tile_cols * element.nbytes
    if tile_bytes + MBARRIER_BYTES > SMEM_PER_BLOCK:
        raise TmaConfigError(
            f"tile {tile_rows}x{tile_cols} {config.dtype} needs {tile_bytes + MBARRIER_BYTES} bytes "
            f"of shared memory; a Hopper block may have at most {SMEM_PER_BLOCK}"
        )


def check_extents(shape: tuple[int, ...]) -> None:
    """Every extent 1..MAX_EXTENT (an empty tensor is the caller's to skip or refuse)."""
    for dim, extent in enumerate(shape):
        if extent < 1:
            raise TmaConfigError(f"tensor extent of dim {dim} is {extent}; every extent must be >= 1")
        if extent > MAX_EXTENT:
            raise TmaConfigError(
                f"tensor extent of dim {dim} is {extent}; TMA's coordinates are signed 32-bit, so an "
                f"extent may be at most {MAX_EXTENT} (2^31): split the tensor"
            )


def check_outer_strides(
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    nbytes: int,
    contiguous: int,
    fix: str = PADDED_ROWS_FIX,
    name: str = "",
) -> tuple[int, ...] | None:
    """The strides of every dim but the contiguous one (`contiguous`, stride 1): positive,
    multiples of 16 bytes, below 2^40 bytes. `name` ("src", "dst") starts the message when there
    are two tensors; a stride error names `fix`.

    A dim of extent 1 is never stepped along, so its stride is not checked; a tensor map still
    takes one (a contiguous 1 x 777 fp16 row has a 1554-byte row stride). Returns the strides
    with each such stride TMA would refuse replaced by 16 bytes' worth (the memory addressed is
    the same), or None when every stride is one TMA accepts: what a shape-generic kernel is
    given."""
    fixed = None
    for d in range(len(shape)):
        if d == contiguous:
            if strides[d] != 1:  # TMA walks memory contiguously along this dim
                if shape[d] > 1:
                    raise TmaConfigError(
                        f"{name + ': ' if name else ''}strides {tuple(strides)} have no stride 1 in the "
                        "last two dims; TMA needs the innermost stride to be 1 (rows or columns "
                        "contiguous): copy it with .contiguous() first"
                    )
                fixed = fixed or list(strides)
                fixed[d] = 1
            continue
        stride_bytes = strides[d] * nbytes
        if 0 < stride_bytes < MAX_GLOBAL_STRIDE_BYTES and not stride_bytes % GLOBAL_STRIDE_ALIGN:
            continue
        if shape[d] == 1:
            fixed = fixed or list(strides)
            fixed[d] = max(1, GLOBAL_STRIDE_ALIGN // nbytes)
        else:
            raise stride_error(d, strides[d], nbytes, fix, f"{name}: " if name else "")
    return tuple(fixed) if fixed is not None else None


def stride_error(dim: int, stride: int, nbytes: int, fix: str, prefix: str) -> TmaConfigError:
    """The rule a stride TMA cannot take breaks, with its fix."""
    if stride == 0:
        return TmaConfigError(
            f"{prefix}stride of dim {dim} is 0 (a broadcast view); TMA loads real storage: "
            "copy it with .contiguous() first"
        )
    if stride < 0:
        return TmaConfigError(
            f"{prefix}stride of dim {dim} is {stride} (a reversed view); TMA walks memory forwards: "
            "copy it with .contiguous() (torch) or numpy.ascontiguousarray first"
        )
    if stride * nbytes >= MAX_GLOBAL_STRIDE_BYTES:
        return TmaConfigError(
            f"{prefix}stride of dim {dim} is {stride * nbytes} bytes; a TMA tensor map's strides "
            f"must be below {MAX_GLOBAL_STRIDE_BYTES} bytes (2^40)"
        )
    return TmaConfigError(
        f"{prefix}global stride of dim {dim} is {stride * nbytes} bytes; TMA needs a multiple of "
        f"{GLOBAL_STRIDE_ALIGN} ({fix})"
    )


def check_integers(values: object, what: str, length: int | None = None) -> None:
    """A shape, tile or strides: a tuple (or list) of integers, of `length` if given."""
    ok = isinstance(values, tuple | list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    )
    if not ok or (length is not None and len(values) != length):
        wanted = f"{length} integers" if length else "integers"
        example = " such as (64, 256)" if what == "tile" else ""
        raise TmaConfigError(f"{what} {values!r} must be {wanted}{example}")


def check_rank(rank: int) -> None:
    if not 2 <= rank <= MAX_RANK:
        raise TmaConfigError(
            f"tensor has {rank} dimensions; tmakit loads 2 to {MAX_RANK} (TMA's limit is {MAX_RANK})"
        )


def check_base_address(address: int) -> None:
    """The global tensor's base address must be 16-byte aligned."""
    if address % GLOBAL_BASE_ALIGN:
        raise TmaConfigError(
            f"tensor base address {address:#x} is not {GLOBAL_BASE_ALIGN}-byte aligned; TMA needs it"
        )
