"""What a user asks for: the tensor to load and the tile to load it in. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TmaConfigError


@dataclass(frozen=True)
class DType:
    """An element type tmakit knows, with the names each layer uses for it."""

    name: str  # tmakit's name, used on the CLI
    bits: int
    torch_name: str  # attribute of the `torch` module (also numpy's name where numpy has one)
    cutlass_name: str  # attribute of the `cutlass` module

    @property
    def nbytes(self) -> int:
        return self.bits // 8


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp16", 16, "float16", "Float16"),
        DType("bf16", 16, "bfloat16", "BFloat16"),
        DType("fp32", 32, "float32", "Float32"),
        DType("fp8e4m3", 8, "float8_e4m3fn", "Float8E4M3FN"),
        DType("fp8e5m2", 8, "float8_e5m2", "Float8E5M2"),
        DType("int8", 8, "int8", "Int8"),
        DType("uint8", 8, "uint8", "Uint8"),
    )
}


def dtype_named(name: str) -> DType:
    """Look up a dtype by tmakit name; raise TmaConfigError naming the known ones otherwise."""
    try:
        return DTYPES[name]
    except KeyError:
        known = ", ".join(DTYPES)
        raise TmaConfigError(f"dtype {name!r} is not supported; tmakit knows {known}") from None


SWIZZLE_MODES = (0, 32, 64, 128)  # bytes; 0 is no swizzle (the seed's identity Swizzle(0,4,3))


@dataclass(frozen=True)
class LoadConfig:
    """A tensor loaded tile by tile: one block per strip of `tile[0]` rows (per batch index),
    walking that strip's column tiles one after another.

    `shape` and `strides` follow torch: outermost first, strides in elements. The tile covers the
    last two dims (rows, columns); leading dims (up to three: TMA's rank limit is 5) are a batch.
    `strides=None` means compact, with the columns contiguous (`major="row"`) or the rows
    (`major="col"`, e.g. a transposed view). The seed's configuration is the default.
    """

    shape: tuple[int, ...] = (8448, 1792)
    dtype: str = "fp16"
    tile: tuple[int, int] = (64, 256)
    swizzle: int = 0
    major: str = "row"
    strides: tuple[int, ...] | None = None

    @property
    def element(self) -> DType:
        return dtype_named(self.dtype)

    @property
    def element_strides(self) -> tuple[int, ...]:
        """Strides in elements, outermost first: given, or compact in the `major` order."""
        if self.strides is not None:
            return self.strides
        rows, cols = self.shape[-2:]
        inner = (cols, 1) if self.major == "row" else (1, rows)
        strides = list(inner)
        step = rows * cols
        for extent in reversed(self.shape[:-2]):
            strides.insert(0, step)
            step *= extent
        return tuple(strides)

    @property
    def contiguous_dim(self) -> str:
        """ "columns" when the last dim has stride 1 (row-major tiles), "rows" when the one before does."""
        return "rows" if self.element_strides[-1] != 1 and self.element_strides[-2] == 1 else "columns"


SEED = LoadConfig()


def parse_extents(text: str, what: str, rank: int | None = 2) -> tuple[int, ...]:
    """Parse "8448x1792" into (8448, 1792); raise TmaConfigError on anything else.

    `rank=None` accepts 2 to 5 extents (a batched shape such as 4x1000x776)."""
    parts = text.lower().replace(",", "x").split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise TmaConfigError(f"{what} {text!r} is not of the form ROWSxCOLS") from None
    if rank is not None and len(values) != rank:
        raise TmaConfigError(f"{what} {text!r} must have {rank} extents, not {len(values)}")
    return values
