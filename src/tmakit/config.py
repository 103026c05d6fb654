"""What a user asks for: the tensor to load and the tile to load it in. Pure Python."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import TmaConfigError
from .limits import GLOBAL_STRIDE_ALIGN


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
        # The integer types of TMA reduce stores (`plan.reduce_ops`); torch's unsigned ones have few ops.
        DType("int32", 32, "int32", "Int32"),
        DType("uint32", 32, "uint32", "Uint32"),
        DType("int64", 64, "int64", "Int64"),
        DType("uint64", 64, "uint64", "Uint64"),
    )
}


RAW_BYTE = DTYPES["uint8"]  # element type of raw shared-memory dumps

# Names torch and numpy give the dtypes tmakit knows.
_DTYPE_BY_FRAMEWORK_NAME = {element.torch_name: name for name, element in DTYPES.items()}


def dtype_of(dtype: object) -> str:
    """tmakit's name for a torch or numpy dtype (or a tmakit name); TmaConfigError for one TMA
    loads cannot take."""
    name = str(dtype).removeprefix("torch.")
    if name in DTYPES:
        return name
    if name not in _DTYPE_BY_FRAMEWORK_NAME:
        raise TmaConfigError(
            f"dtype {name} is not supported; tmakit loads {', '.join(_DTYPE_BY_FRAMEWORK_NAME)}"
        )
    return _DTYPE_BY_FRAMEWORK_NAME[name]


def dtype_named(name: str) -> DType:
    """Look up a dtype by tmakit's name or torch's ("fp16", "float16" or "torch.float16"); raise
    TmaConfigError naming the known ones otherwise."""
    try:
        return DTYPES[_DTYPE_BY_FRAMEWORK_NAME.get(name.removeprefix("torch."), name)]
    except KeyError:
        raise TmaConfigError(
            f"dtype {name!r} is not supported; tmakit knows {', '.join(DTYPES)} "
            f"(torch's names: {', '.join(_DTYPE_BY_FRAMEWORK_NAME)})"
        ) from None


# torch dtype name -> the same-size tmakit dtype a copy moves it as (a copy moves bits, no values).
MOVED_AS: dict[str, str] = {
    "bool": "uint8",
    "int16": "fp16",
    "uint16": "fp16",
    "float64": "int64",
    "complex32": "int32",
    "complex64": "int64",
    "float8_e4m3fnuz": "uint8",
    "float8_e5m2fnuz": "uint8",
    "float8_e8m0fnu": "uint8",
}
# torch's short names of its dtypes (`torch.half` is `torch.float16`), for text a user types.
TORCH_DTYPE_ALIASES = {
    "half": "float16",
    "float": "float32",
    "int": "int32",
    "long": "int64",
    "double": "float64",
    "short": "int16",
    "chalf": "complex32",
    "cfloat": "complex64",
}


def dtype_from_text(text: str) -> DType:
    """The dtype a user names on a command line, in any case: tmakit's name ("fp16", "BF16"),
    torch's ("float16", "torch.float16", "Float16") or torch's short alias ("half");
    TmaConfigError naming the known ones."""
    name = text.strip().lower().removeprefix("torch.")  # every name above is lower case
    name = TORCH_DTYPE_ALIASES.get(name, name)
    if name in MOVED_AS:
        raise TmaConfigError(
            f"dtype {text!r} ({name}) has no TMA type; tmakit's copies move its bits as the same-size "
            f"{MOVED_AS[name]} (name {MOVED_AS[name]} to plan a load or copy of that size; a reduce "
            "of it is torch's op)"
        )
    if name not in DTYPES and name not in _DTYPE_BY_FRAMEWORK_NAME:
        return dtype_named(text)  # refused, naming the text as it was typed
    return dtype_named(name)


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

    def __post_init__(self) -> None:
        # Lists are taken for tuples (a plan is a dictionary key); anything else is `validate`'s
        # (`check_field_types`, which also takes numpy integers for ints).
        for name in ("shape", "tile", "strides"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

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
        return "rows" if major_of(self.element_strides, self.shape) == "col" else "columns"

    @property
    def contiguous_index(self) -> int:
        """The index of the dim with stride 1: the last, or the one before (`contiguous_dim`)."""
        return contiguous_index(major_of(self.element_strides, self.shape), len(self.shape))


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


# -- layouts ----------------------------------------------------------------------------------------
def major_of(strides: tuple[int, ...], shape: tuple[int, ...] | None = None) -> str:
    """ "col" when the rows are the contiguous dim (e.g. a transposed view), else "row". A last dim
    of extent 1 (a column vector, `shape` given) does not make the columns contiguous: its stride
    is never used."""
    if len(strides) < 2:  # a vector: its one dim is the contiguous one
        return "row"
    if strides[-2] == 1 and (strides[-1] != 1 or (shape is not None and shape[-1] == 1 and shape[-2] > 1)):
        return "col"
    return "row"


def contiguous_index(major: str, rank: int) -> int:
    """The index of the stride-1 dim of a tensor of `rank` dims and this major (`major_of`)."""
    return rank - 2 if major == "col" else rank - 1


def padded_strides(shape: tuple[int, ...], itemsize: int, major: str = "row") -> tuple[int, ...]:
    """Element strides for `shape` with the contiguous dim's pitch rounded up to 16 bytes, so
    that every outer stride is one TMA accepts (compact where it already is)."""
    rows, cols = shape[-2:]
    contiguous_extent = cols if major == "row" else rows
    pitch_elems = -(-contiguous_extent * itemsize // GLOBAL_STRIDE_ALIGN) * GLOBAL_STRIDE_ALIGN // itemsize
    strides = [pitch_elems, 1] if major == "row" else [1, pitch_elems]
    step = pitch_elems * (rows if major == "row" else cols)
    for extent in reversed(shape[:-2]):
        strides.insert(0, step)
        step *= extent
    return tuple(strides)


ROW_VIEW_WIDTHS = (256, 128, 64, 32, 16)  # a compact tensor's memory viewed as rows, widest first


def compact_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major element strides without gaps, as torch gives a contiguous tensor of `shape`."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def is_compact(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Row-major without gaps, as torch's `is_contiguous` reads it: an extent-1 dim's stride is
    never used, and an empty tensor is compact."""
    if 0 in shape:
        return True
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def rows_view(numel: int, nbytes: int) -> tuple[int, int] | None:
    """(rows, width): a compact tensor's memory as rows of the widest `ROW_VIEW_WIDTHS` that
    divides its elements and is a whole number of 16-byte chunks; None if none does."""
    for width in ROW_VIEW_WIDTHS:
        if numel % width == 0 and width * nbytes % GLOBAL_STRIDE_ALIGN == 0 and numel >= width:
            return numel // width, width
    return None


# -- options given by name (`tmakit bench --copy tile=16x256,stages=8`) -------------------------------
def parse_fields(cls: type, text: str, what: str) -> dict[str, object]:
    """ "name=value,..." -> {name: value} for fields of the dataclass `cls`, each value read by
    its field's type: ROWSxCOLS for a tuple, an integer, true/false (a bare name: true), a name;
    "default" for None (tmakit's choice). "default" or "" alone gives {}. TmaConfigError names a
    bad item and the fields."""
    if not isinstance(text, str):
        raise TmaConfigError(
            f"{what}s {text!r} ({type(text).__name__}) must be text such as 'tile=16x256,stages=8'"
        )
    types = {field.name: str(field.type) for field in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    if text.strip() == "default":
        return values
    for item in filter(None, text.split(",")):
        name, equals, value = (part.strip() for part in item.partition("="))
        if name not in types:
            raise TmaConfigError(f"{what} {item!r}: {name!r} is not one of {', '.join(types)}")
        values[name] = _parse_value(types[name], f"{what} {name}", value if equals else "true")
    return values


def changed_fields(instance: object) -> dict[str, object]:
    """The fields of a dataclass instance that differ from their defaults, by name."""
    return {
        field.name: getattr(instance, field.name)
        for field in dataclasses.fields(instance)
        if getattr(instance, field.name) != field.default
    }


def describe_fields(instance: object) -> str:
    """The fields of a dataclass instance that differ from their defaults, as `parse_fields`
    reads them ("default" if none do)."""
    parts = [f"{name}={_format_value(value)}" for name, value in changed_fields(instance).items()]
    return ",".join(parts) or "default"


def _parse_value(kind: str, what: str, text: str) -> object:
    if text == "default" and "None" in kind:
        return None
    try:
        if kind.startswith("tuple"):
            return parse_extents(text, what)
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("bool"):
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
    except (ValueError, KeyError):
        wanted = {"tuple": "ROWSxCOLS", "int": "an integer", "bool": "true or false"}[
            kind[: kind.find("[")] if kind.startswith("tuple") else kind.split(" ")[0]
        ]
        raise TmaConfigError(f"{what}={text!r} is not {wanted}") from None
    return text


def _format_value(value: object) -> str:
    if value is None:
        return "default"
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
