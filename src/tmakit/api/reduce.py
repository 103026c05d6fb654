"""`reduce_into_` and `add_`: `dst = dst op src` through TMA reduce stores, on the copy's ring
and with the copy's options and layout rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import DTYPES, contiguous_index, dtype_of, major_of
from ..errors import TmaConfigError
from ..plan import (
    CopyOptions,
    LoadPlan,
    ReducePlan,
    check_copy_shape,
    check_reduce,
    copy_destination,
    reduce_class,
)
from ..runtime.dispatch import Launcher
from ..runtime.dispatch import check_no_partial_overlap as dispatch_overlap_check
from ..runtime.launch import copy_launcher, tvm_ffi_available
from ..validate import check_base_address, check_rank
from .copy import class_launcher, restrided
from .load import config_for
from .tensors import check_tensor_pair, device_facts, import_torch

if TYPE_CHECKING:
    import torch


def reduce_into_(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str = "add",
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    **options: Any,
) -> torch.Tensor:
    """Reduce `src` into `dst` element by element through TMA reduce stores, dst = dst op src;
    returns `dst`. `op` is one of `plan.REDUCE_OPS` ("add", "min", "max", "inc", "dec", "and",
    "or", "xor") and must take the tensors' dtype (`plan.REDUCE_DTYPES`, the PTX ISA's table for
    `cp.reduce.async.bulk.tensor`: e.g. add takes fp32, fp16, bf16, int32, uint32 and uint64, not
    int64). `dst` has `src`'s shape and dtype and any layout TMA can address, as for `copy_`.

    The copy's ring loads `src` tile by tile and one thread reduce-stores each tile into `dst`,
    so every element of `dst` gets exactly one reduction (one rounding for floats). Compiled once
    per class (dtype, rank, contiguous dims, op) where TVM-FFI is installed. Raises
    TmaConfigError before anything compiles or launches: a pair the table lacks, mismatched
    shapes or dtypes, tensors not on one CUDA device, strides TMA cannot take, or `dst` partly
    overlapping `src` (the very same view is allowed: each tile is loaded before it is stored).

    `tile`, `stages` and the keyword `options` are the copy's (`CopyOptions`: store_depth,
    blocks_per_sm, evict_first, pdl, load_hint, store_hint, tile_order), each left out taking
    the copy's default; `as_rows` and `bulk` are a copy's only (`reduce_options`)."""
    import_torch("reduce_into_")
    copy_options = reduce_options(tile, stages, options)
    check_reduce_tensors(dst, src, op)
    if src.numel() == 0:
        return dst
    launcher = plan_reduce(dst, src, op, copy_options)
    check_base_address(src.data_ptr())
    check_base_address(dst.data_ptr())
    launcher(src, dst)
    return dst


def add_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    **options: Any,
) -> torch.Tensor:
    """dst += src through TMA reduce stores (`reduce_into_(dst, src, "add", ...)`, which takes
    the same options); returns `dst`."""
    return reduce_into_(dst, src, "add", tile, stages, **options)


_DEFAULT_REDUCE_OPTIONS = CopyOptions()


def reduce_options(tile: tuple[int, int] | None, stages: int | None, options: dict[str, Any]) -> CopyOptions:
    """A reduce's `CopyOptions` (the defaults, built once, when none is given). TmaConfigError for
    an unknown name, and for `as_rows`/`bulk`: a reduce stores through the tensors' own tensor
    maps (`ReducePlan`), not a rows view's or plain bulk copies."""
    if tile is None and stages is None and not options:
        return _DEFAULT_REDUCE_OPTIONS
    chosen = CopyOptions.of(**{"tile": tile, "stages": stages, **options})
    if chosen.as_rows or chosen.bulk:
        raise TmaConfigError(
            "reduce_into_ takes the copy's options but as_rows and bulk: a reduce stores through "
            "the tensors' own tensor maps"
        )
    return chosen


def check_reduce_tensors(dst: object, src: object, op: str) -> None:
    """What a reduce's tensors must be before their layouts are read: torch tensors with memory,
    of one shape and a dtype `op` reduces, on one CUDA device, not partly overlapping."""
    check_tensor_pair(
        dst,
        src,
        "reduce_into_",
        "a reduce combines elements of one shape and dtype",
        lambda dtype: check_reduce(op, dtype_of(dtype)),
    )
    check_no_partial_overlap(dst, src)


def check_no_partial_overlap(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Refuse a `dst` that shares memory with `src` other than as the very same view
    (`runtime.dispatch.check_no_partial_overlap`); disjoint slices of one tensor pass."""
    if dst.numel():
        dispatch_overlap_check(dst, src, tuple(src.shape), src.stride(), dst.stride())


def plan_reduce(
    dst: torch.Tensor, src: torch.Tensor, op: str, options: CopyOptions = _DEFAULT_REDUCE_OPTIONS
) -> Launcher:
    """Check a reduce's layouts (the copy's rules) and return its compiled launcher: the
    shape-generic class's where TVM-FFI is installed (`plan.reduce_class`, this shape checked by
    `plan.check_copy_shape`), else a kernel compiled for this shape. `options`: `reduce_options`."""
    dtype = dtype_of(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    sm_count, l2_bytes = device_facts(src.device)
    shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    check_rank(len(shape))
    src_major, dst_major = major_of(src_strides, shape), major_of(dst_strides, shape)
    transpose = src_major != dst_major
    tile = options.default_tile(dtype, transpose, None, sm_count)
    fits_l2 = 2 * src.numel() * nbytes <= l2_bytes
    device = str(src.device)
    if not tvm_ffi_available():
        source, destination = config_for(src, tile), config_for(dst, tile)
        copy = options.plan(LoadPlan(source), transpose, sm_count, fits_l2)
        same_layout = source.element_strides == destination.element_strides
        return copy_launcher(ReducePlan(copy, op), None if same_layout else destination, None, device)
    rank = len(shape)
    reduce = reduce_class(options, op, dtype, rank, src_major, transpose, tile, sm_count, fits_l2)
    contiguous = (contiguous_index(src_major, rank), contiguous_index(dst_major, rank))
    strides = (src_strides, dst_strides)
    fixed_src, fixed_dst = check_copy_shape(reduce.copy, shape, strides, contiguous, nbytes)
    launcher = class_launcher(reduce, copy_destination(reduce.copy) if transpose else None, None, device)
    if fixed_src is None and fixed_dst is None:
        return launcher
    return restrided(launcher, shape, fixed_src, fixed_dst)
