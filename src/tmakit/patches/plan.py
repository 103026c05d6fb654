"""`tmakit.im2col`: the patch matrix of a 2-D convolution gathered by TMA im2col loads. Pure Python.

An NHWC activation (N, H, W, C) and a filter of R x S taps (stride, padding, dilation) give an
output of P x Q pixels per image and the patch matrix (M, K) = (N*P*Q, R*S*C): row m is output
pixel (n, p, q), column (r*S + s)*C + c is channel c of tap (r, s) - channels fastest, then the
filter's columns, then its rows, the order in which TMA's im2col view, (N*P*Q, (C, S, R)), walks K.

One im2col load fills a box of `tile` = (pixels, channels): `pixels` consecutive output pixels
(crossing rows and images as the hardware walks them), `channels` consecutive channels, all of
one tap. A pixel whose window reaches into the padding gets zeros from TMA's out-of-bounds fill,
and the barrier still counts the whole box. The box is then stored by a plain tiled TMA store to
out[m0:m0+pixels, k0:k0+channels]: the copy's ring (`CopyPlan`) over the patch matrix, whose
tiles are exactly these boxes, so the walk, the stages and the stores are the copy's.

The rules of an im2col tensor map and of CuTe's im2col atom are below, each checked on an
`Im2colPlan` before anything compiles, with the value, the rule and the fix in its message.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from ..config import DTYPES, LoadConfig
from ..errors import TmaConfigError
from ..limits import (
    DEFAULT_SM_COUNT,
    GLOBAL_STRIDE_ALIGN,
    IM2COL_CORNER_RANGE,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_CHANNELS_PER_PIXEL,
    MAX_ELEMENT_STRIDE,
    MAX_PIXELS_PER_COLUMN,
    MAX_SPECIALISED_ELEMENTS,
    SWIZZLE_MODES,
)
from ..plan.budget import budget_stages
from ..plan.copy import CopyPlan
from ..plan.copy_defaults import copy_stages
from ..plan.load import LoadPlan, ceil_div
from ..plan.ring import PipelinePlan
from ..validate import MAX_EXTENT, optional_whole_number, type_name, whole_number, whole_numbers

# -- the rules ------------------------------------------------------------------------------------
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


def check_window(plan: Im2colPlan) -> None:
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


def check_output_pixels(conv: Im2colConv | Im2colPlan, dim: int) -> None:
    """At least one output pixel along `dim` (0: height, 1: width): the padded input holds the
    dilated filter. A rule of the convolution itself, whatever path serves it."""
    if conv.output_shape[dim] < 1:
        name, padding = ("height", "width")[dim], conv.padding[dim]
        span = (conv.filter[dim] - 1) * conv.dilation[dim]
        raise TmaConfigError(
            f"the {name} {conv.shape[1 + dim]} with padding {padding} is smaller than the "
            f"dilated filter ({span + 1}): no output pixel; pad more or use a smaller filter"
        )


def check_size(plan: Im2colPlan) -> None:
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


def check_one_box_at_least(plan: Im2colPlan) -> None:
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


def check_tile(plan: Im2colPlan) -> None:
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


# -- the plan -------------------------------------------------------------------------------------
# 128 output pixels a box: the M extent of a Hopper GEMM tile; the store's box caps it at 256.
IM2COL_TILE_PIXELS = 128


# `Im2colPlan.parse`'s names: each an int or HxW (kernel, stride, padding, dilation), PIXELSxCHANNELS
# (tile) or an int (stages).
IM2COL_FIELDS = {"kernel": "filter", "stride": "stride", "padding": "padding", "dilation": "dilation",
                 "tile": "tile", "stages": "stages"}  # fmt: skip


def output_extent(size: int, taps: int, stride: int, padding: int, dilation: int) -> int:
    """Output pixels along one dim (torch's formula): window corners that fit, every `stride`th."""
    return (size + 2 * padding - dilation * (taps - 1) - 1) // stride + 1


@dataclass(frozen=True)
class Im2colConv:
    """A 2-D convolution over an NHWC `shape`: `filter` (R, S) taps, `stride`, `padding` and
    `dilation` as (height, width) pairs. What the patch matrix is, whichever path gathers it."""

    shape: tuple[int, int, int, int]
    filter: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    # (P, Q): output pixels per image along height and width; (M, K) = (N*P*Q, R*S*C): the patch
    # matrix `tmakit.im2col` returns. Fields set once, not cached properties: a repeated call reads
    # them, and torch.compile traces their reads (a cached property's lock it cannot).
    output_shape: tuple[int, int] = field(init=False, compare=False)
    patch_shape: tuple[int, int] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        _, height, width, _ = self.shape
        output = tuple(
            output_extent(size, self.filter[d], self.stride[d], self.padding[d], self.dilation[d])
            for d, size in enumerate((height, width))
        )
        batch, _, _, channels = self.shape
        patch = (batch * math.prod(output), self.filter[0] * self.filter[1] * channels)
        object.__setattr__(self, "output_shape", output)
        object.__setattr__(self, "patch_shape", patch)

    @property
    def run(self) -> int:
        """S*C: elements of a filter row's taps by the channels, contiguous in NHWC."""
        return self.filter[1] * self.shape[3]

    def head(self, dtype: str) -> list[str]:
        """The summary lines every kernel's plan of this convolution starts with."""
        batch, height, width, channels = self.shape
        (p, q), (m, k) = self.output_shape, self.patch_shape
        return [
            f"activation        {batch} x {height} x {width} x {channels} (NHWC) {dtype}",
            f"filter            {self.filter[0]} x {self.filter[1]}, stride {self.stride}, padding "
            f"{self.padding}, dilation {self.dilation} -> {p} x {q} output pixels per image",
            f"patch matrix      {m} x {k} (N*P*Q, R*S*C; channels fastest, then s, then r)",
        ]


WINDOWS_TILE_ROWS = 64  # the windows copy's tile: this many windows' runs of taps, each whole


@dataclass(frozen=True)
class Im2colWindows:
    """The patch matrix as a copy of overlapping windows (dilation 1): with the zero-padded input
    of `padded_shape`, output row (n, p, q)'s taps of filter row r are one run of S*C elements
    (the filter's columns and the channels, contiguous in NHWC), so the matrix viewed as
    (N, P, R, Q, S*C) is a strided view of the padded input whose windows overlap (`src_strides`)
    copied into the patch matrix's rows (`dst_strides`), the runs innermost. x enters the padded
    input as (N, H, W*C) rows, each image row one run in both (`interior_*`, the offset in
    elements). Element strides."""

    padded_shape: tuple[int, int, int, int]
    shape: tuple[int, int, int, int, int]
    src_strides: tuple[int, int, int, int, int]
    dst_strides: tuple[int, int, int, int, int]
    interior_shape: tuple[int, int, int]
    interior_strides: tuple[int, int, int]
    interior_offset: int

    @property
    def tile(self) -> tuple[int, int]:
        """The copy's tile: `WINDOWS_TILE_ROWS` runs, each whole."""
        return WINDOWS_TILE_ROWS, self.shape[-1]


def im2col_windows(conv: Im2colConv) -> Im2colWindows:
    """`conv`'s windows view (`Im2colWindows`); its dilation must be 1 each way."""
    if conv.dilation != (1, 1):
        raise ValueError(f"windows are runs of taps only without dilation, not {conv.dilation}")
    n, h, w, c = conv.shape
    r, (p, q), run = conv.filter[0], conv.output_shape, conv.run
    (stride_h, stride_w), (pad_h, pad_w) = conv.stride, conv.padding
    height, width = h + 2 * pad_h, w + 2 * pad_w
    row = width * c  # one padded image row
    return Im2colWindows(
        (n, height, width, c),
        (n, p, r, q, run),
        (height * row, stride_h * row, row, stride_w * c, 1),
        (p * q * r * run, q * r * run, run, r * run, 1),
        (n, h, w * c),
        (height * row, row, 1),
        pad_h * row + pad_w * c,
    )


def im2col_conv(
    shape: tuple[int, ...], kernel: object, stride: object = 1, padding: object = 0, dilation: object = 1
) -> Im2colConv:
    """The convolution a call asks for, its arguments checked as the convolution's own (whatever
    path serves it): each an int or a (height, width) pair of ints, kernel, stride and dilation
    >= 1, padding >= 0; an NHWC activation of rank 4; at least one output pixel each way.
    TmaConfigError names the first argument that is not."""
    extents = whole_numbers(shape, "shape", example="(1, 56, 56, 64) (N, H, W, C)")
    check_nhwc(extents)
    conv = Im2colConv(
        extents,  # type: ignore[arg-type]
        pair(kernel, "kernel", 1),
        pair(stride, "stride", 1),
        pair(padding, "padding", 0),
        pair(dilation, "dilation", 1),
    )
    for dim in (0, 1):
        check_output_pixels(conv, dim)
    return conv


@dataclass(frozen=True)
class Im2colPlan:
    """The im2col of an NHWC `shape` of `dtype` for a `filter` of (R, S) taps; `stride`, `padding`
    (both sides alike, as torch's) and `dilation` as (height, width) pairs (an int is both).
    `tile` = (pixels, channels) of each box and `stages` default to tmakit's choice. Every rule
    the hardware has for it is checked here, before anything compiles."""

    shape: tuple[int, ...]
    dtype: str
    filter: tuple[int, int] | int
    stride: tuple[int, int] | int = 1
    padding: tuple[int, int] | int = 0
    dilation: tuple[int, int] | int = 1
    tile: tuple[int, int] | None = None
    stages: int | None = None
    sm_count: int = DEFAULT_SM_COUNT
    one_block_per_sm: bool = False  # an SM budget's grid of `sm_count` blocks (`plan.budget`)

    def __post_init__(self) -> None:
        fix = object.__setattr__
        fix(self, "shape", whole_numbers(self.shape, "shape", example="(1, 56, 56, 64) (N, H, W, C)"))
        check_dtype(self.dtype)
        fix(self, "filter", pair(self.filter, "kernel", 1))
        fix(self, "stride", pair(self.stride, "stride", 1))
        fix(self, "padding", pair(self.padding, "padding", 0))
        fix(self, "dilation", pair(self.dilation, "dilation", 1))
        if self.tile is not None:
            fix(self, "tile", whole_numbers(self.tile, "tile", 2, "(128, 64): (pixels, channels)"))
        fix(self, "stages", optional_whole_number(self.stages, "stages", 1))
        fix(self, "sm_count", whole_number(self.sm_count, "sm_count", 1))
        check_activation(self.shape, self.dtype)
        check_window(self)
        check_size(self)
        check_one_box_at_least(self)
        if self.tile is None:
            fix(self, "tile", self._default_tile())
        check_tile(self)
        if self.stages is None:
            deepest = PipelinePlan(self.patch_load, 1, persistent=True, sm_count=self.sm_count).max_stages
            stages = min(copy_stages(self.expected_tx_bytes), deepest)
            if self.one_block_per_sm:
                stages = budget_stages(self.expected_tx_bytes, stages, deepest)
            fix(self, "stages", stages)
        self.copy  # noqa: B018 - the ring's and the store's own checks (stages, the patch matrix)

    @classmethod
    def parse(
        cls, shape: tuple[int, ...], dtype: str, text: str, sm_count: int = DEFAULT_SM_COUNT
    ) -> Im2colPlan:
        """ "kernel=3,padding=1" -> the plan of `shape` (N, H, W, C) and `dtype`: kernel, stride,
        padding and dilation an int or HxW, tile PIXELSxCHANNELS, stages an int; "kernel=" is
        needed. TmaConfigError names a bad item and the names."""
        fields = spec_fields(text)
        return cls(shape, dtype, sm_count=sm_count, **fields)  # type: ignore[arg-type]

    @property
    def is_reshape(self) -> bool:
        """A 1x1 filter at stride 1 with no padding: the patch matrix is the activation itself,
        x.reshape(N*H*W, C) (the dilation moves no tap)."""
        return self.filter == (1, 1) and self.stride == (1, 1) and self.padding == (0, 0)

    def small_patch_expression(self) -> str:
        """The patch matrix as a torch expression of `x`, for the small ones (one row, or a 1x1
        filter) that the im2col atom cannot gather: what to compute instead."""
        (rows, cols), (p_extent, q_extent) = self.patch_shape, self.output_shape
        if self.is_reshape:
            return f"x.reshape({rows}, {cols})"
        (pad_h, pad_w), (dil_h, dil_w), (stride_h, stride_w) = self.padding, self.dilation, self.stride
        source = f"torch.nn.functional.pad(x, (0, 0, {pad_w}, {pad_w}, {pad_h}, {pad_h}))"
        if (pad_h, pad_w) == (0, 0):
            source = "x"
        if (p_extent, q_extent) == (1, 1):  # one window: its taps
            spans = ((self.filter[0] - 1) * dil_h + 1, dil_h), ((self.filter[1] - 1) * dil_w + 1, dil_w)
        else:  # a 1x1 filter: every stride-th pixel
            spans = (stride_h * (p_extent - 1) + 1, stride_h), (stride_w * (q_extent - 1) + 1, stride_w)
        h, w = (f"0:{stop}" if step == 1 else f"0:{stop}:{step}" for stop, step in spans)
        return f"{source}[:, {h}, {w}].reshape({rows}, {cols})"

    def _default_tile(self) -> tuple[int, int]:
        """128 pixels (or fewer: two row blocks where one box would hold the whole patch matrix,
        which CuTe's im2col atom cannot tile) by the widest channel tile; a patch matrix of two
        rows and one tap splits its channels instead."""
        rows, _ = self.patch_shape
        pixels, channels = IM2COL_TILE_PIXELS, default_channel_tile(self.shape[3], self.element.nbytes)
        if channels is None or self.taps * (self.shape[3] // channels) > 1 or rows > pixels:
            return pixels, channels  # type: ignore[return-value]
        if rows >= 3:
            return ceil_div(rows, 2), channels
        # Two rows (`check_one_box_at_least` refused one chunk): the widest divisor of C below C.
        return pixels, default_channel_tile(self.shape[3], self.element.nbytes, below=channels)  # type: ignore[return-value]

    # -- the convolution ------------------------------------------------------------------------
    @property
    def element(self):
        return DTYPES[self.dtype]

    @functools.cached_property
    def conv(self) -> Im2colConv:
        """The convolution alone (its output and patch shapes), read once the fields are checked."""
        return Im2colConv(self.shape, self.filter, self.stride, self.padding, self.dilation)  # type: ignore[arg-type]

    @property
    def output_shape(self) -> tuple[int, int]:
        """(P, Q): output pixels per image along height and width."""
        return self.conv.output_shape

    @property
    def taps(self) -> int:
        return self.filter[0] * self.filter[1]

    @property
    def patch_shape(self) -> tuple[int, int]:
        """(M, K) = (N*P*Q, R*S*C): the patch matrix `tmakit.im2col` returns."""
        return self.conv.patch_shape

    @property
    def channel_tiles(self) -> int:
        """Boxes per tap along the channels (the tile divides C)."""
        return self.shape[3] // self.tile[1]

    @property
    def row_blocks(self) -> int:
        """Boxes along M (the last may be partial: its loads zero-fill, its store clips)."""
        return ceil_div(self.patch_shape[0], self.tile[0])

    @property
    def column_tiles(self) -> int:
        """Boxes along K: every tap's channel tiles."""
        return self.taps * self.channel_tiles

    @property
    def swizzle(self) -> int:
        """The shared tile's swizzle: the channel row's own width where it is a TMA swizzle mode
        (32, 64, 128 bytes), else none. Load and store share the tile, so they agree on it."""
        row_bytes = self.tile[1] * self.element.nbytes
        return row_bytes if row_bytes in SWIZZLE_MODES else 0

    # -- the descriptor -------------------------------------------------------------------------
    @property
    def descriptor(self) -> dict[str, tuple[int, ...]]:
        """The im2col tensor map's fields as `cpasync.make_im2col_tma_atom` takes them, in (w, h)
        order: the pixel box of a window's first tap (lower corner -padding, upper corner
        padding - (filter - 1) * dilation), the paddings, the conv stride (elementStrides), and
        the taps' offsets (from 0, `dilation` apart)."""
        (pad_h, pad_w), (dil_h, dil_w) = self.padding, self.dilation
        (taps_h, taps_w), (stride_h, stride_w) = self.filter, self.stride
        return {
            "lower_corner_whd": (-pad_w, -pad_h),
            "upper_corner_whd": (pad_w - (taps_w - 1) * dil_w, pad_h - (taps_h - 1) * dil_h),
            "lower_padding_whd": (pad_w, pad_h),
            "upper_padding_whd": (pad_w, pad_h),
            "stride_whd": (stride_w, stride_h),
            "lower_srt": (0, 0),
            "stride_srt": (dil_w, dil_h),
        }

    def tap_of(self, column_tile: int) -> tuple[int, int, int]:
        """(r, s, channel tile) of a box along K."""
        tap, channel_tile = divmod(column_tile, self.channel_tiles)
        r, s = divmod(tap, self.filter[1])
        return r, s, channel_tile

    def tap_offsets(self, r: int, s: int) -> tuple[int, int]:
        """The im2col offsets of tap (r, s), (w, h) as the instruction takes them."""
        return s * self.dilation[1], r * self.dilation[0]

    def pixel(self, m: int) -> tuple[int, int, int]:
        """(n, p, q) of patch-matrix row m."""
        per_image = math.prod(self.output_shape)
        n, rest = divmod(m, per_image)
        p, q = divmod(rest, self.output_shape[1])
        return n, p, q

    def window_corner(self, m: int) -> tuple[int, int, int]:
        """(n, h, w) of the input pixel tap (0, 0) of row m reads: the load's coordinates for a
        box starting at m (negative in the padding)."""
        n, p, q = self.pixel(m)
        return n, p * self.stride[0] - self.padding[0], q * self.stride[1] - self.padding[1]

    def check_tile(self, row_block: int, column_tile: int) -> None:
        if not (0 <= row_block < self.row_blocks and 0 <= column_tile < self.column_tiles):
            raise TmaConfigError(
                f"tile ({row_block}, {column_tile}) is outside the {self.row_blocks} x {self.column_tiles} "
                f"boxes of the patch matrix (row blocks 0-{self.row_blocks - 1}, column tiles "
                f"0-{self.column_tiles - 1})"
            )

    # -- the ring -------------------------------------------------------------------------------
    @property
    def patch_load(self) -> LoadPlan:
        """The patch matrix as the ring and the store see it: (M, K) row-major in boxes of `tile`
        (its checks are the tiled store's: box extents, 16-byte rows, the swizzle span)."""
        return LoadPlan(LoadConfig(self.patch_shape, self.dtype, self.tile, self.swizzle))

    @functools.cached_property
    def copy(self) -> CopyPlan:
        """The copy's ring over the patch matrix: one producer warp loading boxes, one consumer
        warp storing them, a persistent grid walking the boxes tap by tap along each row block."""
        ring = PipelinePlan(
            self.patch_load, stages=self.stages, persistent=True, sm_count=self.sm_count,
            one_block_per_sm=self.one_block_per_sm,
        )  # fmt: skip
        return CopyPlan(ring, store_depth=max(2, self.stages // 2))

    @property
    def expected_tx_bytes(self) -> int:
        """Bytes per barrier phase: the whole box, the padding's zeros and the pixels past M
        included - the patch matrix's tile, which is what the ring's barriers expect."""
        return self.patch_load.expected_tx_bytes

    @property
    def smem_bytes(self) -> int:
        return self.copy.smem_bytes

    def summary(self) -> str:
        pixels, tile_channels = self.tile
        return "\n".join(
            [
                *self.conv.head(self.dtype),
                f"box               {pixels} pixels x {tile_channels} channels ({self.expected_tx_bytes} "
                f"bytes), " + (f"{self.swizzle}B swizzle" if self.swizzle else "no swizzle"),
                f"boxes             {self.row_blocks} row blocks x {self.column_tiles} column tiles "
                f"({self.taps} taps x {self.channel_tiles} channel tiles)",
                "descriptor        " + ", ".join(f"{k} {v}" for k, v in self.descriptor.items()),
                # The ring's and the stores' lines; the patch matrix's own load summary (a one-warp
                # seed kernel's grid) is not how this runs.
                *self.copy.summary().splitlines()[len(self.patch_load.summary().splitlines()) :],
            ]
        )


def spec_fields(text: str) -> dict[str, object]:
    """ "kernel=3,padding=1" -> the `Im2colPlan` fields it names (filter, stride, padding, dilation
    an int or an (H, W) pair, tile a pair, stages an int); "kernel=" is needed. TmaConfigError
    names a bad item and the names."""
    if not isinstance(text, str):
        raise TmaConfigError(
            f"im2col spec {text!r} ({type_name(text)}) is not a string; pass e.g. 'kernel=3,padding=1'"
        )
    fields: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = (part.strip() for part in item.partition("="))
        if name not in IM2COL_FIELDS:
            raise TmaConfigError(f"im2col {item!r}: {name!r} is not one of {', '.join(IM2COL_FIELDS)}")
        try:
            numbers = tuple(int(v) for v in value.lower().split("x"))
        except ValueError:
            raise TmaConfigError(f"im2col {name}={value!r} is not an integer or HxW") from None
        wanted = {"tile": (2,), "stages": (1,)}.get(name, (1, 2))
        if len(numbers) not in wanted:
            form = {"tile": "PIXELSxCHANNELS, e.g. tile=128x64", "stages": "one integer, e.g. stages=4"}
            raise TmaConfigError(
                f"im2col {name}={value!r} has {len(numbers)} number{'s' * (len(numbers) > 1)}; "
                f"{name} takes " + form.get(name, f"an integer or HxW, e.g. {name}=3 or {name}=3x5")
            )
        fields[IM2COL_FIELDS[name]] = numbers[0] if len(numbers) == 1 and name != "tile" else numbers
    if "filter" not in fields:
        raise TmaConfigError(f"im2col {text!r} names no kernel; e.g. kernel=3,padding=1")
    return fields
