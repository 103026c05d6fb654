"""The launchers around a copy's route: the TMA launch on the views the route moves (extent-1
strides TMA takes, a dtype as a same-size one, a canonical view, a compact run's tail), torch's
`copy_` (the fallback) and the driver's rule's launcher, and a kernel compiled for one exact shape
(the benchmarks' comparison). What `copies.call` hands the dispatch, beside its planned kernels
(the empty copy's launcher is the core's, `runtime.launch.NOTHING`: a reduce's too)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from ..api.load import config_for
from ..api.tensors import checked_tensor, import_torch, lazy_bit
from ..config import LoadConfig
from ..errors import TmaConfigError, TorchOpError
from ..plan import CopyOptions, LoadPlan
from ..plan.route import lazy_reason
from ..runtime.launch import Launcher, copy_launcher
from .plan import GRAPH_MEMCPY_MOST_BYTES

if TYPE_CHECKING:
    import torch


def viewed(tensor: torch.Tensor, dtype: object, shape: tuple | None, strides: tuple | None) -> torch.Tensor:
    """`tensor` as a route moves it: as `dtype` (same size), then as (`shape`, `strides`)."""
    if dtype is not None:
        tensor = tensor.view(dtype)
    return tensor if shape is None else tensor.as_strided(shape, strides)


def viewed_launcher(
    launcher: Launcher, dtype: object, view: tuple | None, tail: int = 0, strict: bool = False
) -> Launcher:
    """`launcher` called on the views the route moves (the same memory), then torch's copy_ of a
    compact run's `tail` (its last elements, past the view's rows). A dtype moved as another
    checks each call for a bit torch applies lazily (a conjugate view: the dispatch's signature
    does not hold it), which torch's copy_ then applies (`strict`: TmaConfigError instead)."""
    shape, src_strides, dst_strides = view if view is not None else (None, None, None)
    body = math.prod(shape) if tail else 0
    kernel = launcher.launch

    def launch(dst: torch.Tensor, src: torch.Tensor) -> None:
        if dtype is not None:
            lazy = lazy_bit(dst, src)
            if lazy is not None:
                if strict:
                    raise TmaConfigError(f"copy_ with strict=True: no TMA path, {lazy_reason(lazy)}")
                copy_by_torch(dst, src)
                return
            dst, src = dst.view(dtype), src.view(dtype)
        if shape is not None:
            kernel(dst.as_strided(shape, dst_strides), src.as_strided(shape, src_strides))
        else:
            kernel(dst, src)
        if tail:
            end = (tail,), (1,)
            dst.as_strided(*end, dst.storage_offset() + body).copy_(
                src.as_strided(*end, src.storage_offset() + body)
            )

    # Claims nothing: the views and the dtype are this pair's alone (another pair of the same call
    # key could be viewed wrong before the kernel's own checks), so it is never tried first and
    # every call's addresses are checked.
    return Launcher(launch)


def restrided(
    launcher: Launcher, shape: tuple[int, ...], src_strides: tuple | None, dst_strides: tuple | None
) -> Launcher:
    """`launcher` called with views whose extent-1 dims have the strides TMA accepts
    (`validate.check_outer_strides`): the same memory, addressed the same way."""
    kernel = launcher.launch

    def launch(dst: torch.Tensor, src: torch.Tensor) -> None:
        kernel(
            dst if dst_strides is None else dst.as_strided(shape, dst_strides),
            src if src_strides is None else src.as_strided(shape, src_strides),
        )

    return replace(launcher, launch=launch, shape_generic=True)


def copy_by_torch(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> None:
    """torch's own `copy_`, `non_blocking` as torch's (its refusals as TorchOpError; a list's pair
    `i` is `many.call.torch_copy_pair`'s)."""
    try:
        dst.copy_(src, non_blocking=non_blocking)
    except RuntimeError as error:
        raise TorchOpError(f"torch's copy_, the fallback for this pair, refused it: {error}") from None


TORCH_COPY = Launcher(copy_by_torch, any_address=True)  # the fallback: torch's copy_ takes any address


def driver_launcher(nbytes: int) -> Launcher:
    """`copies.plan.BY_THE_DRIVER`'s launcher of a copy of `nbytes`: torch's copy_ (the driver's
    memcpy), but inside a CUDA-graph capture of a copy past `GRAPH_MEMCPY_MOST_BYTES`, where
    torch's would be a memcpy node, torch's element-wise kernel moving the same bits (a view
    whose bits torch applies lazily, conjugate or negative, takes torch's copy_ either way)."""
    if nbytes <= GRAPH_MEMCPY_MOST_BYTES:
        return TORCH_COPY
    torch = import_torch("copy_")

    def launch(dst: torch.Tensor, src: torch.Tensor) -> None:
        if torch.cuda.is_current_stream_capturing() and lazy_bit(dst, src) is None:
            same_bits(dst, src)
        else:
            copy_by_torch(dst, src)

    return Launcher(launch, any_address=True)  # both ways take any base address


def same_bits(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst` = `src` bit for bit through torch's element-wise kernel, not the memcpy: `bitwise_or`
    with 0 on row-major views of both as the widest integer that divides the bytes and both
    addresses (a later call of the same signature may start anywhere); a pair it cannot view so
    (tensors that meet) takes torch's copy_, which decides."""
    torch = import_torch("copy_")
    spread = src.numel() * src.element_size() | src.data_ptr() | dst.data_ptr()
    bits = getattr(torch, next(name for width, name in _INTEGERS.items() if spread % width == 0))
    try:
        torch.bitwise_or(src.view(-1).view(bits), 0, out=dst.view(-1).view(bits))
    except RuntimeError:
        copy_by_torch(dst, src)


_INTEGERS = {8: "int64", 4: "int32", 2: "int16", 1: "uint8"}  # the widest first: fewer, wider loads


def specialised_copy_launcher(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    dtype: str,
    view: tuple[int, int] | None,
    tile: tuple[int, int],
    transpose: bool,
    sm_count: int,
    fits_l2: bool,
    compiled: bool = True,
) -> Launcher | None:
    """The launcher of a kernel compiled for this exact shape and these strides (`compiled=False`:
    None, once everything is checked)."""
    if view is not None:
        checked_tensor(src, any_rank=True)  # device, dtype, alignment (the view's tile comes next)
        checked_tensor(dst, any_rank=True)
        source, destination = LoadConfig(view, dtype, tile), None
    else:
        source = config_for(src, tile)
        destination = config_for(dst, tile)
        if source.element_strides == destination.element_strides:
            destination = None  # the default destination: the source's own layout
    copy = options.plan(LoadPlan(source), transpose, sm_count, fits_l2)
    if not compiled:
        return None
    tensor_shape = tuple(src.shape) if view is not None else None
    return copy_launcher(copy, destination, tensor_shape, str(src.device))
