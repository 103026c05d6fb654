"""The small public face on real tensors: describe, check, allocate, load, copy.

Every check here runs before anything compiles or launches; a tensor TMA cannot serve raises
`TmaConfigError` naming the value and the rule.
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .config import (
    DTYPES,
    ROW_VIEW_WIDTHS,
    SEED,
    LoadConfig,
    contiguous_index,
    dtype_of,
    major_of,
    padded_strides,
    rows_view,
)
from .errors import TmaConfigError
from .limits import MAX_RANK, MAX_TENSOR_BYTES
from .plan import (
    CopyOptions,
    CopyPlan,
    Im2colPlan,
    Im2colTooSmall,
    LoadPlan,
    ReducePlan,
    check_copy_shape,
    check_reduce,
    check_run_time_extents,
    copy_class,
    copy_destination,
    reduce_class,
    stand_in_config,
)
from .runtime.compile import to_cute_tensor
from .runtime.device import current_stream
from .runtime.dispatch import CopyDispatch, Launcher, TensorFacts
from .runtime.dispatch import check_no_partial_overlap as dispatch_overlap_check
from .runtime.launch import compile_tile_load, copy_launcher, im2col_launcher, tvm_ffi_available
from .validate import check_base_address, check_outer_strides, check_rank, flag, span_bytes, type_name

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
    shape, dtype, strides = checked_tensor(tensor, flag(on_gpu, "on_gpu"))
    config = LoadConfig(shape, dtype, tile, swizzle, major_of(strides, shape), strides)
    LoadPlan(config)  # validates the strides and the tile
    return config


GPU_EXTRA = "pip install 'tmakit[gpu]'"  # torch and the fast launch path


def import_torch(what: str) -> Any:
    """torch, or an ImportError that says how to install it: a missing optional dependency, not a
    configuration TMA cannot serve."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            f"tmakit.{what} needs torch, which is not installed: {GPU_EXTRA} (or a torch build for "
            "your CUDA, then `pip install apache-tvm-ffi`)"
        ) from error
    return torch


def is_torch_tensor(value: object) -> bool:
    """Whether `value` is a torch tensor, without importing torch (no torch loaded: none is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def check_torch_tensor(tensor: object, what: str, name: str) -> None:
    """A torch tensor with memory TMA can address: dense (strided) and not on the meta device; the
    device itself is `check_on_gpu`'s."""
    if not is_torch_tensor(tensor):
        raise TmaConfigError(
            f"{what} takes torch tensors on a CUDA device; got {type_name(tensor)} as {name} "
            "(convert it with torch.as_tensor(value, device='cuda'))"
        )
    layout = str(tensor.layout)
    if layout != "torch.strided":
        raise TmaConfigError(
            f"{name} has layout {layout}; TMA loads dense strided memory: convert it with .to_dense() first"
        )
    if tensor.is_nested:
        raise TmaConfigError(
            f"{name} is a nested tensor (tensors of different shapes, no strides of its own); TMA loads "
            "one strided tensor: pass each of its tensors (.unbind()), or .to_padded_tensor(0) first"
        )
    if tensor.is_quantized:
        raise TmaConfigError(
            f"{name} is a quantized tensor ({tensor.dtype}); tmakit moves plain dtypes: pass its "
            ".int_repr() (the stored integers) or .dequantize() first"
        )
    if tensor.device.type == "meta":
        raise TmaConfigError(
            f"{name} is on the meta device (a shape and a dtype, no memory); TMA loads GPU memory: "
            "allocate it on a CUDA device"
        )


def check_on_gpu(tensor: torch.Tensor, name: str) -> None:
    if tensor.device.type != "cuda":
        raise TmaConfigError(
            f"{name} is on {tensor.device}; TMA loads from GPU memory, move it with .cuda() first"
        )


def checked_tensor(
    tensor: torch.Tensor | np.ndarray, on_gpu: bool = True, any_rank: bool = False, name: str = "tensor"
) -> tuple[tuple[int, ...], str, tuple[int, ...]]:
    """(shape, tmakit dtype, element strides) of a torch tensor or numpy array, after the checks
    that need no tile: what it is (a dense torch tensor with memory, or a numpy array), device
    (when `on_gpu`), rank (unless `any_rank`: a compact copy's rows view reads memory, not dims),
    elements, dtype and 16-byte base address (the strides are `validate`'s, with the tile)."""
    numpy = sys.modules.get("numpy")
    if is_torch_tensor(tensor):
        check_torch_tensor(tensor, "config_for", name)
        if on_gpu:
            check_on_gpu(tensor, name)
        strides = tuple(int(s) for s in tensor.stride())
        address = tensor.data_ptr()
    elif numpy is not None and isinstance(tensor, numpy.ndarray):  # strides in bytes, host memory
        if on_gpu:
            raise TmaConfigError(
                f"{name} is on cpu; TMA loads from GPU memory, move it with "
                "torch.as_tensor(array, device='cuda') first (a numpy array is host memory)"
            )
        strides = tuple(int(s) // tensor.itemsize for s in tensor.strides)
        address = tensor.__array_interface__["data"][0]
    else:
        raise TmaConfigError(
            f"config_for takes a torch tensor or a numpy array; got {type_name(tensor)} "
            "(convert it with torch.as_tensor(value) or numpy.asarray(value))"
        )
    shape = tuple(int(e) for e in tensor.shape)
    if not any_rank:
        check_rank(len(shape))
        if 0 in shape:
            raise TmaConfigError(
                f"{name} of shape {shape} has no elements (dim {shape.index(0)} is 0); a TMA load "
                "needs every extent >= 1: skip the load of an empty tensor"
            )
    dtype = dtype_of(tensor.dtype)
    check_base_address(address)
    return shape, dtype, strides


def padded_empty(
    shape: tuple[int, ...], dtype: torch.dtype | str, major: str = "row", device: str = "cuda"
) -> torch.Tensor:
    """An uninitialised torch tensor of `shape` whose contiguous dim is padded to a multiple of
    16 bytes, so TMA can load it: e.g. a 1000 x 777 bf16 matrix gets 784-element rows. This is how
    odd and prime extents are reached; the view has exactly the wanted shape. `major`: "row" (each
    row contiguous) or "col" (each column contiguous). TmaConfigError for a shape of a rank
    outside 2..5 or with a negative extent, an unknown major or a dtype TMA does not load."""
    torch = import_torch("padded_empty")
    shape = checked_shape(shape)
    if major not in ("row", "col"):
        raise TmaConfigError(
            f"major {major!r} is not a layout; use 'row' (rows contiguous) or 'col' (columns contiguous)"
        )
    element = DTYPES[dtype_of(dtype)]
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, element.torch_name)
    strides = padded_strides(shape, element.nbytes, major)
    if 0 not in shape:
        span = span_bytes(shape, strides, element.nbytes)
        if span > MAX_TENSOR_BYTES:
            raise TmaConfigError(
                f"shape {shape} {element.name} with padded rows spans {span} bytes; a tensor can span at "
                f"most {MAX_TENSOR_BYTES} (2^63 - 1): split it"
            )
    try:
        return torch.empty_strided(shape, strides, dtype=torch_dtype, device=device)
    except (AssertionError, RuntimeError, TypeError) as error:  # no such device, or this torch lacks it
        raise TmaConfigError(
            f"padded_empty cannot allocate on device {device!r}: {str(error).splitlines()[0]} (pass a device "
            "this torch has, e.g. 'cuda' with a CUDA build of torch)"
        ) from None


def checked_shape(shape: object) -> tuple[int, ...]:
    """`shape` as a tuple of ints: a sequence of 2 to 5 whole numbers >= 0."""
    try:
        extents = tuple(operator.index(extent) for extent in shape)  # type: ignore[attr-defined]
    except TypeError:
        raise TmaConfigError(
            f"shape {shape!r} is not a tuple of whole numbers; pass e.g. (1000, 777)"
        ) from None
    if not 2 <= len(extents) <= MAX_RANK:
        fix = "a vector of N elements is the matrix (1, N)" if len(extents) < 2 else "merge batch dims"
        raise TmaConfigError(
            f"shape {extents} has rank {len(extents)}; tmakit allocates and loads ranks 2 to {MAX_RANK} "
            f"(TMA's limit is {MAX_RANK}): {fix}"
        )
    negative = [dim for dim, extent in enumerate(extents) if extent < 0]
    if negative:
        raise TmaConfigError(f"shape {extents} has a negative extent in dim {negative[0]}; extents are >= 0")
    return extents


def load_tiles(tensor: torch.Tensor, tile: tuple[int, int] = SEED.tile, swizzle: int = 0) -> torch.Tensor:
    """Load `tensor` tile by tile with TMA and return what arrived in shared memory, tile by tile,
    as a row-major tensor of the padded shape (past the tensor's edge: TMA's zeros). TmaConfigError
    before anything compiles for what TMA cannot load (`config_for`'s checks). Compiled once per
    dtype, rank, layout, tile and swizzle where TVM-FFI is installed (else once per shape)."""
    torch = import_torch("load_tiles")
    check_torch_tensor(tensor, "load_tiles", "tensor")
    config = config_for(tensor, tile, swizzle)
    plan = LoadPlan(config)
    out = torch.empty(plan.padded_shape, dtype=tensor.dtype, device=tensor.device)
    if not tvm_ffi_available():
        compiled = compile_tile_load(plan, consumer="store")
        compiled(to_cute_tensor(tensor), to_cute_tensor(out), current_stream())
        return out
    check_run_time_extents(config.shape, config.tile)
    rank = len(config.shape)
    stand_in = stand_in_config(rank, config.dtype, config.tile, config.major, swizzle=swizzle)
    compiled = compile_tile_load(LoadPlan(stand_in), consumer="store", tvm_ffi=True, shape_generic=True)
    nbytes, contiguous = config.element.nbytes, config.contiguous_index
    fixed = check_outer_strides(config.shape, config.element_strides, nbytes, contiguous)
    with torch.cuda.device(tensor.device):
        compiled.function(tensor if fixed is None else tensor.as_strided(config.shape, fixed), out)
    return out


def copy_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    _specialised: bool = False,
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

    Compiled once per class - dtype, rank, which dims are contiguous, tile and options, not the
    extents or strides (`plan.copy_class`) - and kept in memory and on disk (`runtime.compile.
    cache_dir`): a new shape costs its own checks, no compile. A configuration seen before costs a
    dictionary lookup and an alignment check before the launch, and one repeated call after call
    less (`runtime.dispatch`). Raises TmaConfigError before anything compiles or launches (see
    `check_copy_tensors`); an empty tensor's copy passes those checks and launches nothing.
    `_specialised` (private, for benchmarks): a kernel compiled for each exact shape instead."""
    return (_SPECIALISED_COPIES if _specialised else _COPIES).copy_(dst, src, tile, stages, options)


def copy(
    src: torch.Tensor, tile: tuple[int, int] | None = None, stages: int | None = None, **options: Any
) -> torch.Tensor:
    """A new tensor with `src`'s shape, strides and values, copied through TMA (`copy_`, which
    takes the same options)."""
    torch = import_torch("copy")
    check_torch_tensor(src, "copy", "src")
    check_on_gpu(src, "src")
    dst = torch.empty_strided(tuple(src.shape), tuple(src.stride()), dtype=src.dtype, device=src.device)
    return copy_(dst, src, tile, stages, **options)


def plan_copy(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    facts: TensorFacts | None = None,
    shape_generic: bool | None = None,
) -> Launcher:
    """Check a copy's configuration in full and return its (compiled) launcher; an empty copy's
    launcher does nothing. `facts`: what the caller has read off the tensors already
    (`runtime.dispatch.TensorFacts`).

    Shape-generic (the default where TVM-FFI is installed): the launcher of the copy's class
    (`plan.copy_class`: dtype, rank, contiguous dims, tile and options, compiled once), after
    this shape's own checks (`plan.check_copy_shape`). `shape_generic=False` compiles a kernel for
    this exact shape and these strides (the benchmark's comparison)."""
    if shape_generic is None:
        shape_generic = tvm_ffi_available()
    if shape_generic:
        if facts is None:
            facts = (src.shape, src.stride(), dst.shape, dst.stride(), src.dtype, dst.dtype,
                     src.get_device(), dst.get_device())  # fmt: skip
        known = known_class(src, options, facts)
        if known is not None:
            return known.launcher_for(facts[0], facts[1], facts[3])
    import_torch("copy_")
    check_copy_tensors(dst, src)
    if src.numel() == 0:
        return copy_nothing
    dtype = dtype_of(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    sm_count, l2_bytes = device_facts(src.device)
    shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    src_major, dst_major = major_of(src_strides, shape), major_of(dst_strides, shape)
    transpose = src_major != dst_major
    wants_rows = options.as_rows or options.bulk
    compact = wants_rows and not transpose and src.is_contiguous() and dst.is_contiguous()
    view = rows_view(src.numel(), nbytes) if compact else None
    if options.bulk and view is None:
        raise TmaConfigError(
            f"bulk copy of {shape} {dtype} with strides {src_strides} into {dst_strides}: it needs both "
            f"tensors compact (contiguous) and a number of elements that {min(ROW_VIEW_WIDTHS)} divides"
        )
    tile = options.default_tile(dtype, transpose, view, sm_count)
    fits_l2 = 2 * src.numel() * nbytes <= l2_bytes
    if not shape_generic:
        return specialised_copy_launcher(src, dst, options, dtype, view, tile, transpose, sm_count, fits_l2)
    device = str(src.device)
    if view is not None:
        copy = copy_class(options, dtype, 2, "row", False, tile, sm_count, fits_l2, rows_width=view[1])
        check_copy_shape(copy, view, ((view[1], 1),), (1,), nbytes)
        return class_launcher(copy, None, len(shape), device)
    check_rank(len(shape))
    contiguous = (contiguous_index(src_major, len(shape)), contiguous_index(dst_major, len(shape)))
    copy = copy_class(options, dtype, len(shape), src_major, transpose, tile, sm_count, fits_l2)
    check_copy_shape(copy, shape, (src_strides, dst_strides), contiguous, nbytes)  # before compiling
    destination = copy_destination(copy) if transpose else None
    known = CopyClass(copy, class_launcher(copy, destination, None, device), contiguous, nbytes)
    key = class_key(options, src.dtype, src.get_device(), shape, src_major, dst_major, fits_l2)
    _CLASSES[key] = known  # `known_class` finds it for the next new shape
    _L2_BYTES[src.get_device()] = l2_bytes
    return known.launcher_for(shape, src_strides, dst_strides)


@dataclass(frozen=True)
class CopyClass:
    """A compiled shape-generic copy class (not a rows view's) and what a new shape's checks need:
    the stride-1 dims of source and destination and the element size."""

    copy: CopyPlan
    launcher: Launcher
    contiguous: tuple[int, int]
    nbytes: int

    def launcher_for(self, shape: tuple[int, ...], src_strides: tuple, dst_strides: tuple) -> Launcher:
        """The launcher for tensors of this shape and these strides, after their checks
        (`plan.check_copy_shape`); extent-1 strides TMA would refuse replaced (`restrided`)."""
        fixed_src, fixed_dst = check_copy_shape(
            self.copy, shape, (src_strides, dst_strides), self.contiguous, self.nbytes
        )
        if fixed_src is None and fixed_dst is None:
            return self.launcher
        return restrided(self.launcher, shape, fixed_src, fixed_dst)


# (options, torch dtype, device index, rank, source major, destination major, fits L2) -> class;
# device index -> its L2 bytes. Filled by `plan_copy`'s full path, read by `known_class`.
_CLASSES: dict[tuple, CopyClass] = {}
_L2_BYTES: dict[int, int] = {}


def class_key(
    options: CopyOptions,
    dtype: object,
    device: int,
    shape: tuple,
    src_major: str,
    dst_major: str,
    fits_l2: bool,
) -> tuple:
    """What picks a copy's class besides what the options fix (the tile follows the dtype and
    whether the copy transposes; the SM count, the device)."""
    return (options, dtype, device, len(shape), src_major, dst_major, fits_l2)


def known_class(src: torch.Tensor, options: CopyOptions, facts: TensorFacts) -> CopyClass | None:
    """The compiled class of a copy whose class was seen before, read off the tensors cheaply (a
    new shape's lookup; `facts`: `runtime.dispatch.TensorFacts`); None for anything else - other
    tensors, other classes, rows views, empty tensors - which then takes `plan_copy`'s full path.
    Equal dtypes, one CUDA device and equal shapes are checked here; what a class key fixes was
    checked when the class was made."""
    if options.as_rows or options.bulk:
        return None
    shape, dtype, device = facts[0], facts[4], facts[6]
    if device < 0 or facts[7] != device or facts[2] != shape or facts[5] != dtype:
        return None
    l2_bytes = _L2_BYTES.get(device)
    numel = src.numel()
    if l2_bytes is None or numel == 0:
        return None
    src_major, dst_major = major_of(facts[1], shape), major_of(facts[3], shape)
    fits_l2 = 2 * numel * src.element_size() <= l2_bytes
    return _CLASSES.get(class_key(options, dtype, device, shape, src_major, dst_major, fits_l2))


@functools.lru_cache(maxsize=64)
def device_facts(device: torch.device) -> tuple[int, int]:
    """(SM count, L2 bytes) of a CUDA device, read once per process."""
    torch = import_torch("copy_")
    properties = torch.cuda.get_device_properties(device)
    return properties.multi_processor_count, properties.L2_cache_size


@functools.lru_cache(maxsize=1024)
def class_launcher(
    copy: CopyPlan | ReducePlan, destination: LoadConfig | None, rows_rank: int | None, device: str
) -> Launcher:
    """The launcher of a shape-generic copy (or reduce) class on one device (`rows_rank`: the
    rank of the compact tensors a rows view copies), compiled or loaded from the disk cache once."""
    tensor_shape = None if rows_rank is None else (1,) * (rows_rank - 1) + (copy.load.config.shape[-1],)
    return copy_launcher(copy, destination, tensor_shape, device, shape_generic=True)


def restrided(
    launcher: Launcher, shape: tuple[int, ...], src_strides: tuple | None, dst_strides: tuple | None
) -> Launcher:
    """`launcher` called with views whose extent-1 dims have the strides TMA accepts
    (`validate.check_outer_strides`): the same memory, addressed the same way."""

    def launch(src: torch.Tensor, dst: torch.Tensor) -> None:
        launcher(
            src if src_strides is None else src.as_strided(shape, src_strides),
            dst if dst_strides is None else dst.as_strided(shape, dst_strides),
        )

    launch.checks_arguments = launcher.checks_arguments
    launch.shape_generic = True
    return launch


def specialised_copy_launcher(
    src: torch.Tensor,
    dst: torch.Tensor,
    options: CopyOptions,
    dtype: str,
    view: tuple[int, int] | None,
    tile: tuple[int, int],
    transpose: bool,
    sm_count: int,
    fits_l2: bool,
) -> Launcher:
    """The launcher of a kernel compiled for this exact shape and these strides."""
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
    tensor_shape = tuple(src.shape) if view is not None else None
    return copy_launcher(copy, destination, tensor_shape, str(src.device))


def check_copy_tensors(dst: object, src: object) -> None:
    """What a copy's tensors must be before anything else is read off them: torch tensors with
    memory, of one shape and dtype, both on one CUDA device, of a dtype TMA moves (the layout and
    the tile are `plan_copy`'s). Raises TmaConfigError naming the first that is not (ImportError
    without torch)."""
    import_torch("copy_")
    check_tensor_pair(
        dst, src, "copy_", "they must match (tmakit.copy(src) allocates a matching destination)"
    )
    dtype_of(src.dtype)


def check_tensor_pair(dst: object, src: object, what: str, why: str, dtype_rule=None) -> None:
    """Two torch tensors with memory of one shape and dtype (`why` ends the message when not),
    then `dtype_rule(dtype)` if given, then both on one CUDA device: `what` names the call."""
    check_torch_tensor(dst, what, "dst")
    check_torch_tensor(src, what, "src")
    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"destination is {tuple(dst.shape)} {dst.dtype}, source {tuple(src.shape)} {src.dtype}; {why}"
        )
    if dtype_rule is not None:
        dtype_rule(src.dtype)
    check_on_gpu(dst, "dst")
    check_on_gpu(src, "src")
    if dst.device != src.device:
        raise TmaConfigError(f"destination is on {dst.device}, source on {src.device}; {what} within one GPU")


def check_copy_layout(
    shape: tuple[int, ...], src_strides: tuple[int, ...], dst_strides: tuple[int, ...], nbytes: int
) -> None:
    """The layout rules a copy's (or reduce's) strided tensors of `shape` meet whatever the tile:
    rank 2..5, a stride-1 dim among the last two, outer strides TMA takes (what a trace's fake
    implementation can check on static strides; `plan_copy` checks them with the class)."""
    if 0 in shape:
        return
    check_rank(len(shape))
    for name, strides in (("src", src_strides), ("dst", dst_strides)):
        contiguous = contiguous_index(major_of(strides, shape), len(shape))
        check_outer_strides(shape, strides, nbytes, contiguous, name=name)


def copy_nothing(src: torch.Tensor, dst: torch.Tensor) -> None:
    """The launcher of an empty copy: no element to move (as torch's copy_ of empty tensors)."""


copy_nothing.moves_nothing = True  # type: ignore[attr-defined]  # its tensors' addresses do not matter

# Every copy_ call's launcher, and the fast path's state (and the same for the shape-specialised
# kernels, which only benchmarks ask for).
_COPIES = CopyDispatch(plan_copy, check_copy_tensors)
_SPECIALISED_COPIES = CopyDispatch(functools.partial(plan_copy, shape_generic=False), check_copy_tensors)


def copy_dispatch() -> CopyDispatch:
    """The dispatch behind `copy_` (its launchers and fast-path state, for tests and tools)."""
    return _COPIES


# -- reduce stores --------------------------------------------------------------------------------
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


# -- im2col ---------------------------------------------------------------------------------------
def im2col(
    x: torch.Tensor,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The patch matrix of a 2-D convolution over the NHWC activation `x`, gathered by TMA im2col
    loads: a new (N*P*Q, R*S*C) tensor of `x`'s dtype whose row n*P*Q + p*Q + q holds output
    pixel (n, p, q)'s window, channels fastest, then the filter's columns s, then its rows r
    (column (r*S + s)*C + c); the padding reads as zeros. `kernel`, `stride`, `padding` and
    `dilation` are an int or a (height, width) pair, as torch's conv2d takes them.

    `x` is a contiguous (N, H, W, C) CUDA tensor of fp16, bf16 or fp32 (a channels_last NCHW
    tensor `t` is `t.permute(0, 2, 3, 1)`), with C * element size a multiple of 16 bytes. Raises
    TmaConfigError before anything compiles for what im2col TMA cannot serve (`plan.Im2colPlan`:
    channel counts, corner and stride ranges, an empty output, a patch matrix of one row or one
    box, which CuTe's im2col atom cannot build); a 1x1 stride-1 unpadded one that small is
    x.reshape(N*H*W, C), copied by TMA (`copy_`). Compiled once per shape, dtype and
    convolution parameters. `out`: write into this contiguous (N*P*Q, R*S*C) tensor of
    `x`'s dtype on its device instead of a new one."""
    torch = import_torch("im2col")
    check_torch_tensor(x, "im2col", "x")
    check_on_gpu(x, "x")
    shape = tuple(int(e) for e in x.shape)
    dtype = dtype_of(x.dtype)
    try:
        plan = Im2colPlan(shape, dtype, kernel, stride, padding, dilation, sm_count=device_facts(x.device)[0])
    except Im2colTooSmall as small:
        if not small.is_reshape:
            raise
        plan = None  # a 1x1 stride-1 unpadded im2col too small for the im2col atom: x as rows
    if not x.is_contiguous():
        raise TmaConfigError(
            f"x of shape {shape} has strides {tuple(x.stride())}; tmakit.im2col takes a contiguous NHWC "
            "tensor: pass x.contiguous() (a channels_last NCHW tensor t: t.permute(0, 2, 3, 1))"
        )
    check_base_address(x.data_ptr())
    patch_shape = plan.patch_shape if plan is not None else (math.prod(shape[:3]), shape[3])
    if out is None:
        out = torch.empty(patch_shape, dtype=x.dtype, device=x.device)
    else:
        check_im2col_out(out, x, patch_shape)
    if plan is None:
        # The patch matrix is x's own memory as (N*H*W, C) rows: the TMA copy of it.
        copy_(out.view(shape), x)
        return out
    with torch.cuda.device(x.device):
        im2col_launcher(plan, str(x.device))(x, out)
    return out


def check_im2col_out(out: object, x: torch.Tensor, patch_shape: tuple[int, int]) -> None:
    """A caller's patch matrix: a contiguous (M, K) tensor of `x`'s dtype on `x`'s device."""
    check_torch_tensor(out, "im2col", "out")
    if tuple(out.shape) != patch_shape or out.dtype != x.dtype or out.device != x.device:
        raise TmaConfigError(
            f"out is {tuple(out.shape)} {out.dtype} on {out.device}; this im2col writes a "
            f"{patch_shape} {x.dtype} patch matrix on {x.device}: pass one of those, or no out"
        )
    if not out.is_contiguous():
        raise TmaConfigError(f"out has strides {tuple(out.stride())}; pass a contiguous patch matrix")
    check_base_address(out.data_ptr())
