"""What a user asks for: the tensor to load and the tile to load it in. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TmaConfigError


@dataclass(frozen=True)
class DType:
    """An element type tmakit knows, with the names each layer uses for it."""

    name: str  # tmakit's name, used on the CLI
    bits: int
    numpy_name: str  # numpy dtype of the same width used to hold raw bit patterns
    cutlass_name: str  # attribute of the `cutlass` module

    @property
    def nbytes(self) -> int:
        return self.bits // 8


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp16", 16, "uint16", "Float16"),
        DType("bf16", 16, "uint16", "BFloat16"),
        DType("fp32", 32, "uint32", "Float32"),
        DType("fp8e4m3", 8, "uint8", "Float8E4M3FN"),
        DType("fp8e5m2", 8, "uint8", "Float8E5M2"),
        DType("int8", 8, "uint8", "Int8"),
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


@dataclass(frozen=True)
class LoadConfig:
    """A row-major matrix of `shape` elements loaded tile by tile, one block per strip of rows.

    The seed's configuration is the default: fp16, 8448 x 1792, 64 x 256 tiles.
    """

    shape: tuple[int, int] = (8448, 1792)
    dtype: str = "fp16"
    tile: tuple[int, int] = (64, 256)

    @property
    def element(self) -> DType:
        return dtype_named(self.dtype)


SEED = LoadConfig()


def parse_extents(text: str, what: str) -> tuple[int, int]:
    """Parse "8448x1792" into (8448, 1792); raise TmaConfigError on anything else."""
    parts = text.lower().replace(",", "x").split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise TmaConfigError(f"{what} {text!r} is not of the form ROWSxCOLS") from None
    if len(values) != 2:
        raise TmaConfigError(f"{what} {text!r} must have two extents (ROWSxCOLS), not {len(values)}")
    return values  # type: ignore[return-value]
