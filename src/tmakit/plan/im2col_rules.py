"""The rules of an im2col tensor map and of CuTe's im2col atom, each checked on an `Im2colPlan`
before anything compiles, with the value, the rule and the fix in its message. Pure Python."""

from __future__ import annotations

from ..config import DTYPES
from ..errors import TmaConfigError
from ..limits import (
    GLOBAL_STRIDE_ALIGN,
    IM2COL_CORNER_RANGE,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_CHANNELS_PER_PIXEL,
    MAX_ELEMENT_STRIDE,
    MAX_PIXELS_PER_COLUMN,
    MAX_SPECIALISED_ELEMENTS,
)
from ..validate import MAX_EXTENT, type_name, whole_number
from .load import ceil_div

IM2COL_DTYPES = ("fp16", "bf16", "fp32")
IM2COL_RANK = 4  # (N, H, W, C): 2-D convolutions
# At most one 128-byte swizzle span of channels a box (64 fp16/bf16, 32 fp32).
IM2COL_TILE_CHANNEL_BYTES = 128


# What each convolution argument's message offers as an example: an int, then a (height, width) pair.
PAIR_EXAMPLES = {
    "kernel": (3, (3, 5)),
    "stride": (2, (2, 1)),
    "padding": (1, (1, 0)),
    "dilation": (2, (2, 1)),
}


def pair(value: object, name: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints (numpy integers too), as torch's conv arguments take them, as
    (height, width); a bool, float, string or anything else is refused naming `name`."""
    one, two = PAIR_EXAMPLES[name]
    example = f"{name}={one} or {name}={two}"
    if isinstance(value, tuple | list):
        if len(value) != 2:
            raise TmaConfigError(
                f"{name} {value!r} has {len(value)} values; a 2-D convolution takes one int or "
                f"(height, width): pass e.g. {example}"
            )
        values = value
    else:
        values = (value, value)
    try:
        height, width = (whole_number(v, name) for v in values)
    except TmaConfigError:
        raise TmaConfigError(
            f"{name} {value!r} is not an int or a pair of ints (it is a {type_name(value)}); "
            f"pass e.g. {example}"
        ) from None
    if min(height, width) < minimum:
        raise TmaConfigError(
            f"{name} {(height, width)} has a value below {minimum}; each must be >= {minimum}"
        )
    if max(height, width) > MAX_EXTENT:  # past any extent TMA or a sane tensor has
        raise TmaConfigError(
            f"{name} {(height, width)} has a value above {MAX_EXTENT}; a convolution's "
            f"{name} is at most a tensor's extent: pass e.g. {example}"
        )
    return height, width


def check_window(plan) -> None:  # an Im2colPlan (its module imports this one)
    """The descriptor's fields: conv strides and corners in their ranges, and at least one
    output pixel each way. (A tap's offset, a 16-bit field, never binds: corners in range
    keep the dilated filter within 255 pixels.)"""
    low, high = IM2COL_CORNER_RANGE[IM2COL_RANK]
    for dim, name in ((0, "height"), (1, "width")):
        stride, padding = plan.stride[dim], plan.padding[dim]
        taps, dilation = plan.filter[dim], plan.dilation[dim]
        span = (taps - 1) * dilation  # the last tap's offset
        if stride > MAX_ELEMENT_STRIDE:
            raise TmaConfigError(
                f"stride {stride} along {name}; an im2col tensor map's element stride is "
                f"1..{MAX_ELEMENT_STRIDE}: gather at stride 1 and subsample, or split the stride"
            )
        if -padding < low:
            raise TmaConfigError(
                f"im2col lower corner along {name} is {-padding} (-padding); a rank-{IM2COL_RANK} "
                f"im2col tensor map takes corners in {low}..{high}: use less padding (at most {-low}), "
                "or pad the activation yourself (torch.nn.functional.pad) and pass less"
            )
        if padding - span < low:
            widest = (padding - low) // (taps - 1)
            raise TmaConfigError(
                f"im2col upper corner along {name} is {padding - span} (padding - (kernel - 1) * "
                f"dilation): {padding} - {taps - 1} * {dilation}; a rank-{IM2COL_RANK} im2col tensor "
                f"map takes corners in {low}..{high}, so the dilated filter may reach at most "
                f"{padding - low} pixels past its first tap: use a dilation of at most {widest} "
                "here, a smaller filter, or more padding"
            )
        if padding - span > high:
            raise TmaConfigError(
                f"im2col upper corner along {name} is {padding - span} (padding - (kernel - 1) * "
                f"dilation); a rank-{IM2COL_RANK} im2col tensor map takes corners in {low}..{high}: "
                "use less padding, or pad the activation yourself (torch.nn.functional.pad)"
            )
        check_output_pixels(plan, dim)


def check_output_pixels(conv, dim: int) -> None:  # an Im2colConv or an Im2colPlan
    """At least one output pixel along `dim` (0: height, 1: width): the padded input holds the
    dilated filter. A rule of the convolution itself, whatever path serves it."""
    if conv.output_shape[dim] < 1:
        name, padding = ("height", "width")[dim], conv.padding[dim]
        span = (conv.filter[dim] - 1) * conv.dilation[dim]
        raise TmaConfigError(
            f"the {name} {conv.shape[1 + dim]} with padding {padding} is smaller than the "
            f"dilated filter ({span + 1}): no output pixel; pad more or use a smaller filter"
        )


def check_size(plan) -> None:  # an Im2colPlan (its module imports this one)
    """The patch matrix TMA addresses and the kernel compiled for its shape can take: rows and
    columns within TMA's signed 32-bit coordinates, at most 2^32 elements (activation and
    patch matrix); the fix is fewer images a call."""
    batch, height, width, channels = plan.shape
    rows, cols = plan.patch_shape
    per_image = rows // batch
    images = min(
        MAX_EXTENT // per_image,
        MAX_SPECIALISED_ELEMENTS // (per_image * cols),
        MAX_SPECIALISED_ELEMENTS // (height * width * channels),
    )
    split = (
        f"call it on at most {images} images at a time (x[i:i + {images}]); their patch "
        "matrices stack in order"
        if images >= 1
        else "one image is already too large: split the activation into bands of rows (with the "
        "filter's overlap) or the channels into groups"
    )
    if cols > MAX_EXTENT:
        raise TmaConfigError(
            f"the patch matrix has K = R*S*C = {cols} columns; TMA's coordinates are signed 32-bit, "
            f"so at most {MAX_EXTENT} (2^31): split the channels into groups and gather each"
        )
    if rows > MAX_EXTENT:
        raise TmaConfigError(
            f"the patch matrix has M = N*P*Q = {batch} * {per_image} = {rows} rows; TMA's "
            f"coordinates are signed 32-bit, so at most {MAX_EXTENT} (2^31): {split}"
        )
    elements = max(rows * cols, batch * height * width * channels)
    if elements > MAX_SPECIALISED_ELEMENTS:
        what = "patch matrix" if rows * cols >= batch * height * width * channels else "activation"
        raise TmaConfigError(
            f"the {what} has {elements} elements; tmakit.im2col compiles a kernel for one shape, "
            f"which handles at most {MAX_SPECIALISED_ELEMENTS} (2^32): {split}"
        )


def check_one_box_at_least(plan) -> None:  # an Im2colPlan (its module imports this one)
    """What CuTe's im2col atom (DSL 4.8.1) cannot build, refused before it aborts or raises:
    a box of one pixel has an empty G-basis (MLIRError "failed to compute a non-empty im2col
    TMA G-basis"), and a patch matrix that is one box aborts the process (LLVM ERROR in
    cute.crd2idx: the tiled view's static rest modes are all 1). A one-row patch matrix needs
    both: its store's box must be one row (CuTe drops the extent-1 dim from the store's map),
    its load's at least two pixels. A 1x1 filter over at most two pixels whose channels are one
    16-byte chunk cannot leave one box either. (`tmakit.im2col` serves the 1x1 stride-1
    unpadded ones as the copy they are.)"""
    rows, _ = plan.patch_shape
    one_chunk = plan.shape[3] * plan.element.nbytes <= INNER_BOX_ALIGN
    if rows == 1:
        why = "one row (N = 1 image of P x Q = 1 x 1 output pixels)"
    elif rows == 2 and plan.taps == 1 and one_chunk:
        why = (
            f"2 rows of one 16-byte chunk ({plan.shape[3]} {plan.dtype}) and one tap: a single box, "
            "which CuTe's im2col atom cannot tile"
        )
    else:
        return
    raise Im2colTooSmall(
        f"the patch matrix of {plan.shape} with kernel {plan.filter} is {plan.patch_shape}: {why}; "
        "an im2col box needs 2 or more pixels and the patch matrix 2 or more boxes (CuTe's im2col "
        f"atom builds no tensor map otherwise): compute it as {plan.small_patch_expression()}",
        plan.is_reshape,
    )


def check_tile(plan) -> None:  # an Im2colPlan (its module imports this one)
    pixels, channels = plan.tile
    nbytes, total_channels = plan.element.nbytes, plan.shape[3]
    if not 1 <= pixels <= min(MAX_BOX_EXTENT, MAX_PIXELS_PER_COLUMN):
        raise TmaConfigError(
            f"tile of {pixels} pixels; pixelsPerColumn may be up to {MAX_PIXELS_PER_COLUMN}, and "
            f"the tiled store of the same box takes at most {MAX_BOX_EXTENT} rows: "
            f"use 2..{MAX_BOX_EXTENT}"
        )
    if pixels == 1:
        raise TmaConfigError(
            "tile of 1 pixel; CuTe's im2col atom builds no tensor map for a box of one pixel "
            "(its G-basis is empty): use 2..256 pixels, or leave the tile out for tmakit's choice"
        )
    if not 1 <= channels <= MAX_CHANNELS_PER_PIXEL or channels * nbytes % INNER_BOX_ALIGN:
        raise TmaConfigError(
            f"tile of {channels} channels ({channels * nbytes} bytes); channelsPerPixel is "
            f"1..{MAX_CHANNELS_PER_PIXEL} and a multiple of {INNER_BOX_ALIGN} bytes "
            f"({INNER_BOX_ALIGN // nbytes} {plan.dtype})"
        )
    if total_channels % channels:
        raise TmaConfigError(
            f"tile of {channels} channels does not divide C = {total_channels}; a box past the "
            "last channel would store its zeros over the next tap's columns: use a divisor of C "
            f"(default {default_channel_tile(total_channels, nbytes)})"
        )
    if channels * nbytes > IM2COL_TILE_CHANNEL_BYTES:
        raise TmaConfigError(
            f"tile of {channels} channels is {channels * nbytes} bytes; tmakit's im2col boxes are "
            f"at most one {IM2COL_TILE_CHANNEL_BYTES}-byte swizzle span wide "
            f"({IM2COL_TILE_CHANNEL_BYTES // nbytes} {plan.dtype})"
        )
    if plan.row_blocks == 1 and plan.column_tiles == 1:
        rows = plan.patch_shape[0]
        raise TmaConfigError(
            f"tile {plan.tile} holds the whole {plan.patch_shape} patch matrix in one box; CuTe's "
            "im2col atom cannot tile a patch matrix of one box (the process aborts): use at most "
            f"{ceil_div(rows, 2)} pixels (two row blocks), fewer channels if C allows, or leave "
            "the tile out for tmakit's choice"
        )


def default_channel_tile(channels: int, nbytes: int, below: int | None = None) -> int | None:
    """The widest channel tile that divides C, is whole 16-byte chunks and at most one 128-byte
    swizzle span (and narrower than `below` where given); None when C has none (its rows are not
    16-byte multiples)."""
    widest = IM2COL_TILE_CHANNEL_BYTES // nbytes if below is None else below - 1
    for tile in range(widest, 0, -1):
        if channels % tile == 0 and tile * nbytes % INNER_BOX_ALIGN == 0:
            return tile
    return None


class Im2colTooSmall(TmaConfigError):
    """A patch matrix too small for CuTe's im2col atom (`check_one_box_at_least`);
    `is_reshape`: the convolution is a 1x1 stride-1 unpadded one, whose patch matrix is the
    activation reshaped, which `tmakit.im2col` copies instead."""

    def __init__(self, message: str, is_reshape: bool):
        super().__init__(message)
        self.is_reshape = is_reshape


def check_dtype(dtype: object) -> None:
    """One of `IM2COL_DTYPES`, by tmakit's name."""
    if not (isinstance(dtype, str) and dtype in IM2COL_DTYPES):
        shown = dtype if isinstance(dtype, str) else f"{dtype!r} ({type_name(dtype)})"
        raise TmaConfigError(
            f"dtype {shown}; tmakit.im2col takes {', '.join(IM2COL_DTYPES)} (tmakit's names: "
            "pass e.g. 'fp16')"
        )


def check_nhwc(shape: tuple[int, ...]) -> None:
    """An activation of rank 4, (N, H, W, C): a rule of the convolution itself, whatever path
    serves it."""
    if len(shape) != IM2COL_RANK:
        raise TmaConfigError(
            f"activation of shape {shape} has rank {len(shape)}; tmakit.im2col takes a 2-D convolution's "
            "NHWC activation (N, H, W, C): add a batch dim of 1, or permute an NCHW tensor with "
            ".permute(0, 2, 3, 1).contiguous()"
        )


def check_activation(shape: tuple[int, ...], dtype: str) -> None:
    """What the activation itself must be: NHWC of rank 4, fp16/bf16/fp32, every extent >= 1,
    each pixel's channels a whole number of 16-byte chunks (the W stride, C elements, is a global
    stride of the tensor map)."""
    check_dtype(dtype)
    check_nhwc(shape)
    if min(shape) < 1:
        raise TmaConfigError(f"activation of shape {shape} has an extent below 1; every extent must be >= 1")
    channels, nbytes = shape[3], DTYPES[dtype].nbytes
    if channels * nbytes % GLOBAL_STRIDE_ALIGN:
        multiple = GLOBAL_STRIDE_ALIGN // nbytes
        raise TmaConfigError(
            f"C = {channels} channels of {dtype} is {channels * nbytes} bytes per pixel; the im2col "
            f"tensor map's pixel stride must be a multiple of {GLOBAL_STRIDE_ALIGN} bytes: pad the "
            f"channels to a multiple of {multiple} (zeros, e.g. F.pad(x, (0, {-channels % multiple})))"
        )
