"""The small public face on real tensors: describe, check, allocate, load, copy.

Every check here runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import DTYPES, ROW_VIEW_WIDTHS, SEED, LoadConfig, dtype_of, major_of, padded_strides, rows_view
from .errors import TmaConfigError
from .plan import CopyOptions, LoadPlan
from .runtime.compile import to_cute_tensor
from .runtime.device import current_stream
from .runtime.dispatch import CopyDispatch, Launcher
from .runtime.launch import compile_tile_load, copy_launcher
from .validate import check_base_address, check_rank

if TYPE_CHECKING:
    import numpy as np
    import torch


def config_for(
    tensor: torch.Tensor | np.ndarray,
    tile: tuple[int, int] = SEED.tile,
    swizzle: int = 0,
    *,
    on_gpu: bool = True,
) -> LoadConfig:
    """The load configuration of a torch tensor (or numpy array): shape, dtype and strides read
    from the tensor itself - a transposed view stays column-major, never reinterpreted.

    Raises TmaConfigError for a tensor TMA cannot serve: unsupported dtype, rank outside 2..5,
    no stride-1 dim, strides not multiples of 16 bytes, a base address not 16-byte aligned, or a
    tensor that is not on a CUDA device when `on_gpu`."""
    shape, dtype, strides = checked_tensor(tensor, on_gpu)
    config = LoadConfig(shape, dtype, tuple(tile), swizzle, major_of(strides), strides)
    LoadPlan(config)  # validates the strides and the tile
    return config


def checked_tensor(
    tensor: torch.Tensor | np.ndarray, on_gpu: bool = True, any_rank: bool = False
) -> tuple[tuple[int, ...], str, tuple[int, ...]]:
    """(shape, tmakit dtype, element strides) of a torch tensor or numpy array, after the checks
    that need no tile: rank (unless `any_rank`: a compact copy's rows view reads memory, not
    dims), dtype, device (when `on_gpu`) and 16-byte base address."""
    shape = tuple(int(e) for e in tensor.shape)
    if not any_rank:
        check_rank(len(shape))
    dtype = dtype_of(tensor.dtype)
    if hasattr(tensor, "data_ptr"):  # torch
        strides = tuple(int(s) for s in tensor.stride())
        address = tensor.data_ptr()
        device = tensor.device.type
    else:  # numpy: strides in bytes, always host memory
        strides = tuple(int(s) // tensor.itemsize for s in tensor.strides)
        address = tensor.__array_interface__["data"][0]
        device = "cpu"
    if on_gpu and device != "cuda":
        raise TmaConfigError(f"tensor is on {device}; TMA loads from GPU memory, move it with .cuda() first")
    check_base_address(address)
    return shape, dtype, strides


def padded_empty(
    shape: tuple[int, ...], dtype: torch.dtype | str, major: str = "row", device: str = "cuda"
) -> torch.Tensor:
    """An uninitialised torch tensor of `shape` whose contiguous dim is padded to a multiple of
    16 bytes, so TMA can load it: e.g. a 1000 x 777 bf16 matrix gets 784-element rows. This is how
    odd and prime extents are reached; the view has exactly the wanted shape."""
    import torch

    element = DTYPES[dtype_of(dtype)]
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, element.torch_name)
    strides = padded_strides(tuple(shape), element.nbytes, major)
    return torch.empty_strided(tuple(shape), strides, dtype=torch_dtype, device=device)


def load_tiles(tensor: torch.Tensor, tile: tuple[int, int] = SEED.tile, swizzle: int = 0) -> torch.Tensor:
    """Load `tensor` tile by tile with TMA and return what arrived in shared memory, tile by tile,
    as a row-major tensor of the padded shape (past the tensor's edge: TMA's zeros)."""
    import torch

    plan = LoadPlan(config_for(tensor, tile, swizzle))
    compiled = compile_tile_load(plan, consumer="store")
    out = torch.empty(plan.padded_shape, dtype=tensor.dtype, device=tensor.device)
    compiled(to_cute_tensor(tensor), to_cute_tensor(out), current_stream())
    return out


def copy_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    **options: Any,
) -> torch.Tensor:
    """Copy `src` into `dst` through TMA: pipelined loads into shared memory, TMA stores out;
    returns `dst`. `dst` has `src`'s shape and dtype and any layout TMA can address: the same
    strides, other strides with the same contiguous dim, or the other contiguous dim (a
    column-major source into a row-major destination or back: each tile is transposed in shared
    memory).

    `tile`, `stages` and the keyword `options` are the fields of `CopyOptions` (store_depth,
    blocks_per_sm, as_rows, evict_first, pdl, load_hint, store_hint, tile_order, bulk); each left
    out takes tmakit's default, the fastest measured.

    Compiled once per configuration (kept in memory and, through TVM-FFI, on disk: see
    `runtime.compile.cache_dir`); a configuration seen before costs a dictionary lookup and an
    alignment check before the launch, and one repeated call after call not even that
    (`runtime.dispatch`). Raises TmaConfigError before anything launches."""
    return _COPIES.copy_(dst, src, tile, stages, options)


def copy(
    src: torch.Tensor, tile: tuple[int, int] | None = None, stages: int | None = None, **options: Any
) -> torch.Tensor:
    """A new tensor with `src`'s shape, strides and values, copied through TMA (`copy_`, which
    takes the same options)."""
    import torch

    dst = torch.empty_strided(tuple(src.shape), tuple(src.stride()), dtype=src.dtype, device=src.device)
    return copy_(dst, src, tile, stages, **options)


def plan_copy(dst: torch.Tensor, src: torch.Tensor, options: CopyOptions) -> Launcher:
    """Check a copy's configuration in full and return its (compiled) launcher."""
    import torch

    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"destination is {tuple(dst.shape)} {dst.dtype}, source {tuple(src.shape)} {src.dtype}; "
            "they must match"
        )
    if dst.device != src.device:
        raise TmaConfigError(f"destination is on {dst.device}, source on {src.device}; copy within one GPU")
    dtype = dtype_of(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    properties = torch.cuda.get_device_properties(src.device)
    transpose = major_of(tuple(src.stride())) != major_of(tuple(dst.stride()))
    compact = src.is_contiguous() and dst.is_contiguous()
    wants_rows = options.as_rows or options.bulk
    view = rows_view(src.numel(), nbytes) if wants_rows and compact and not transpose else None
    if options.bulk and view is None:
        raise TmaConfigError(
            f"bulk copy of {tuple(src.shape)} {dtype} with strides {tuple(src.stride())} into "
            f"{tuple(dst.stride())}: it needs both tensors compact (contiguous) and a number of "
            f"elements that {min(ROW_VIEW_WIDTHS)} divides"
        )
    tile = options.default_tile(dtype, transpose, view, properties.multi_processor_count)
    if view is not None:
        checked_tensor(src, any_rank=True)  # device, dtype, alignment (the view's tile comes next)
        checked_tensor(dst, any_rank=True)
        source, destination = LoadConfig(view, dtype, tile), None
    else:
        source = config_for(src, tile)
        destination = config_for(dst, tile)
        if source.element_strides == destination.element_strides:
            destination = None  # the default destination: the source's own layout
    fits_l2 = 2 * src.numel() * nbytes <= properties.L2_cache_size
    copy = options.plan(LoadPlan(source), transpose, properties.multi_processor_count, fits_l2)
    tensor_shape = tuple(src.shape) if view is not None else None
    return copy_launcher(copy, destination, tensor_shape, str(src.device))


_COPIES = CopyDispatch(plan_copy)  # every copy_ call's launcher, and the fast path's state


def copy_dispatch() -> CopyDispatch:
    """The dispatch behind `copy_` (its launchers and fast-path state, for tests and tools)."""
    return _COPIES
