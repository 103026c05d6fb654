"""TMA's rules, checked in pure Python before anything compiles or launches.

The DSL checks none of these at compile time: a 2002-byte row stride or a 512-wide box compiles,
and then fails, misbehaves or is silently split on the GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import operator
import sys
from collections.abc import Hashable, Iterable

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
    check_field_types(config, "LoadConfig")  # shape, tile and strides whole numbers, tile a pair
    element = config.element
    check_rank(len(config.shape))
    check_extents(config.shape)
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


# -- the types of what a caller passes -------------------------------------------------------------
# Every public entry checks these before it reads a value, so that a float, a string or a list
# where an int is meant is named in a TmaConfigError instead of surfacing as Python's, torch's
# or the DSL's own exception far from the call.


def type_name(value: object) -> str:
    """A value's type as an error names it: `list`, `None`, `numpy.ndarray of shape (4, 4) float32`."""
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return f"numpy.ndarray of shape {value.shape} {value.dtype}"
    return name


def is_flag(value: object) -> bool:
    """Python's, numpy's and torch's (0-d) booleans, which also pass as integers, so integer
    checks refuse them."""
    kind = type(value)
    if kind.__module__ == "torch":  # a 0-d bool tensor with a value (not a meta tensor's)
        return (
            str(getattr(value, "dtype", "")) == "torch.bool"
            and getattr(value, "ndim", None) == 0
            and not getattr(value, "is_meta", True)
        )
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"))


def whole_number(value: object, what: str, low: int | None = None, high: int | None = None) -> int:
    """`value` as a Python int: an int or a numpy integer (anything with `__index__`), not a bool,
    float or string, within `low`..`high` where given. TmaConfigError names `what` otherwise."""
    if not is_flag(value):
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            number = None
        if number is not None:
            if (low is None or number >= low) and (high is None or number <= high):
                return number
            bounds = f">= {low}" if high is None else f"{low}..{high}" if low is not None else f"<= {high}"
            raise TmaConfigError(f"{what} is {number}; it must be {bounds}")
    raise TmaConfigError(f"{what} is {value!r} ({type_name(value)}); it must be a whole number, e.g. 4")


def optional_whole_number(value: object, what: str, low: int | None = None, high: int | None = None):
    """None (tmakit's choice), or `whole_number`."""
    return None if value is None else whole_number(value, what, low, high)


def flag(value: object, what: str) -> bool:
    """`value` as a bool: True or False (numpy's too); a string such as 'false' or a number is
    refused, since Python would read any non-empty one as true."""
    if is_flag(value):
        return bool(value)
    raise TmaConfigError(f"{what} is {value!r} ({type_name(value)}); it must be True or False")


def optional_flag(value: object, what: str) -> bool | None:
    """None (tmakit's choice), or `flag`."""
    return None if value is None else flag(value, what)


def one_of(value: object, what: str, choices: Iterable[object]) -> object:
    """`value` if it is one of `choices` (compared only with values of a hashable, matching type);
    TmaConfigError naming the choices otherwise."""
    choices = tuple(choices)
    if isinstance(value, str):
        value = str(value)  # a numpy string is the str it holds
    try:
        if any(type(value) is type(choice) and value == choice for choice in choices):
            return value
    except TypeError:
        pass
    kind = "" if isinstance(value, str) else f" ({type_name(value)})"
    raise TmaConfigError(f"{what} {value!r}{kind} is not one of {', '.join(map(str, choices))}")


def whole_numbers(value: object, what: str, length: int | None = None, example: str = "") -> tuple[int, ...]:
    """A tuple or list of whole numbers (numpy integers included) as a tuple of ints, of `length`
    if given; TmaConfigError naming `what` and an `example` of what to pass otherwise."""
    if isinstance(value, tuple | list) and (length is None or len(value) == length):
        try:
            return tuple(whole_number(item, what) for item in value)
        except TmaConfigError:
            pass
    wanted = f"{length} whole numbers" if length else "whole numbers"
    raise TmaConfigError(
        f"{what} is {value!r} ({type_name(value)}); it must be a tuple of {wanted}"
        + (f", e.g. {example}" if example else "")
    )


def check_field_types(instance: object, what: str | None = None) -> None:
    """Check (and normalise: numpy integers to ints, lists to tuples) every field of a frozen
    dataclass against its own annotation, so that a plan or option class states its types once:
    `int`, `bool`, `str`, `tuple[int, int]`, `tuple[int, ...]`, each `| None`, or a class name
    (the value's type, or a base of it, must have it). `what` names the instance in a message
    (default: its class's name). Ranges and meanings stay the class's own checks."""
    what = what or type(instance).__name__
    for name, kind, optional in _field_kinds(type(instance)):
        value = getattr(instance, name)
        if value is None and optional:
            continue
        label = f"{what} {name}"
        if kind == "int":
            checked = whole_number(value, label)
        elif kind == "bool":
            checked = flag(value, label)
        elif kind == "str":
            if not isinstance(value, str):
                raise TmaConfigError(f"{label} is {value!r} ({type_name(value)}); it must be a name (a str)")
            checked = value
        elif kind.startswith("tuple[int"):
            length = None if kind.endswith("...]") else kind.count("int")
            checked = whole_numbers(value, label, length, "(64, 256)" if length == 2 else "")
        else:  # a class: the plan a plan is built on
            if kind not in {klass.__name__ for klass in type(value).__mro__}:
                raise TmaConfigError(f"{label} is {value!r} ({type_name(value)}); it must be a {kind}")
            continue
        if checked is not value:
            object.__setattr__(instance, name, checked)


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """(name, annotation without `| None`, whether None is allowed) of each field of a dataclass
    that `check_field_types` checks (an `object` field is anyone's)."""
    kinds = []
    for field in dataclasses.fields(cls):
        annotation = str(field.type).replace(" ", "")
        kind = annotation.removesuffix("|None")
        if kind != "object":
            kinds.append((field.name, kind, annotation != kind))
    return tuple(kinds)


# -- overlap of two views -------------------------------------------------------------------------
def span_bytes(shape: tuple[int, ...], strides: tuple[int, ...], nbytes: int) -> int:
    """Bytes from a view's first element to the end of its last (0 for an empty view; strides
    are taken as they are, so a negative one is the caller's to refuse)."""
    if 0 in shape:
        return 0
    return (
        sum((extent - 1) * abs(stride) for extent, stride in zip(shape, strides, strict=True)) + 1
    ) * nbytes


def overlap_verdict(
    shape: tuple[int, ...],
    first: tuple[tuple[int, ...], int],
    second: tuple[tuple[int, ...], int],
    nbytes: int,
) -> str:
    """Whether two views of `shape` (each (element strides, base address in bytes)) share an
    element's memory without being the very same view: "disjoint" (no element's memory shared, or
    the very same view), "shared" (proven: two slices of one layout that meet), or "unknown"
    (the spans meet, but the layouts differ, one is shifted by part of an element, walks
    backwards or overlaps itself: only an element-by-element check could tell)."""
    (strides_a, address_a), (strides_b, address_b) = first, second
    if address_a == address_b and strides_a == strides_b:
        return "disjoint"  # the very same view: each element is read before it is written
    span_a, span_b = span_bytes(shape, strides_a, nbytes), span_bytes(shape, strides_b, nbytes)
    if not (address_a < address_b + span_b and address_b < address_a + span_a):
        return "disjoint"
    delta, misaligned = divmod(address_b - address_a, nbytes)
    if strides_a != strides_b or misaligned or min(strides_a, default=0) < 0:
        return "unknown"
    if overlaps_itself(shape, strides_a):
        return "unknown"
    dims = sorted(
        ((stride, extent) for stride, extent in zip(strides_a, shape, strict=True) if extent > 1),
        reverse=True,
    )
    return "shared" if _lattice_reaches(delta, dims) else "disjoint"


def overlaps_itself(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a view may map two elements to one address (conservative: an expanded dim, a
    negative stride, or a stride within what the smaller dims reach together)."""
    dims = sorted(
        (abs(stride), extent, stride) for stride, extent in zip(strides, shape, strict=True) if extent > 1
    )
    reach = 0  # how far the smaller dims reach: below the next stride when the layout never overlaps itself
    for size, extent, stride in dims:
        if stride <= 0 or size <= reach:
            return True
        reach += (extent - 1) * size
    return False


def _lattice_reaches(delta: int, dims: list[tuple[int, int]]) -> bool:
    """Whether `delta` is sum k_i * stride_i with |k_i| < extent_i (strides largest first, each
    above what the smaller ones reach together: only floor and ceiling are candidates)."""
    if not dims:
        return delta == 0
    (stride, extent), rest = dims[0], dims[1:]
    low = delta // stride
    return any(abs(k) < extent and _lattice_reaches(delta - k * stride, rest) for k in (low, low + 1))


# What a lookup key may hold as it is: numpy's scalars are numbers too.
_IMMUTABLE = (numbers.Number, str, bytes, type(None))


def typed(value: object) -> Hashable:
    """`value` with its type, and each item's of a tuple, so that (64.0, 256) does not find the
    key of (64, 256), nor True that of 1. TypeError (a key that cannot be read) for anything but
    numbers, text, None and tuples of them: a 0-d tensor passes as an int, hashes by identity
    and can change in place, so a call with one is planned in full each time."""
    if type(value) is tuple:
        if all(type(item) is int for item in value):
            return value  # ints alone (the usual arguments): no other value's key is such a tuple
        return tuple, tuple(typed(item) for item in value)
    if isinstance(value, tuple):  # a named tuple: its type is part of its key
        return type(value), tuple(typed(item) for item in value)
    if not isinstance(value, _IMMUTABLE):
        raise TypeError(f"{type(value).__name__} is no key")
    return type(value), value
