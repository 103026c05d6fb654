"""tmakit's copies, reduce stores and tile loads as torch operators, and each family's (its `op`
part, `tmakit.registry`); `import tmakit.ops` registers them.

    torch.ops.tmakit.copy_(dst, src, options="") -> None; .typed(dst, src, *, tile=None, ...)
    torch.ops.tmakit.copy(src, options="") -> Tensor; .typed(src, *, tile=None, ...)
    torch.ops.tmakit.reduce_into_(dst, src, op="add") -> None; .typed(dst, src, op, *, tile=None, ...,
        reduce_by=None)
    torch.ops.tmakit.load_tiles(tensor, tile_rows=64, tile_cols=256, swizzle=0) -> Tensor
    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1) -> Tensor (`tmakit.im2col.op`)
    torch.ops.tmakit.gather_rows, scatter_rows_, index_add_, index_reduce_ (`tmakit.rows.op`)
    torch.ops.tmakit.copy_many_, pack, unpack_ (`tmakit.many.op`)

Each op is defined in a `torch.library.Library`, not as a `custom_op` (whose Python layers cost
several launches' host time), with a fake implementation that is also its Meta kernel, so
`torch.compile`, `make_fx` and `torch.export` know its output without running it; CUDA-graph
capture records its launch. `copy_` and `reduce_into_` run under CompositeExplicitAutograd, return
None (aot_autograd functionalizes them from `Tensor(a0!) dst`) and bump dst's version counter.
`copy`, `load_tiles` and `im2col` have an Autograd kernel that calls the real implementation
directly for a plain CUDA (or CPU) tensor, an autograd.Function for one that needs a gradient
(copy's is the identity; the others' backward raises), and redispatches anything else (a trace's
tensors, a conjugate view). An op's `typed` overload takes each `CopyOptions` field as a typed
keyword; `default` takes the options text `CopyOptions.parse` reads, and boxes fewer arguments.

`load_tiles`' kernels are in `tmakit.ops_tiles`; what every op module shares (the library, the
checks of tensors without memory, the device guard, the Autograd kernel of an op without a
gradient) in `tmakit.ops_base`.

One rule for every op, these and the rows and many-tensor ops alike: an op is strict. It runs
its `tmakit` function with `strict=True`, on torch's current stream and under the tensor's GPU's
guard, so it serves a call by TMA on a Hopper GPU and refuses with `TmaConfigError` anything TMA
does not serve; its fake refuses while tracing what it can tell without memory. A tensor off a
CUDA device (CPU, meta) is refused eagerly and while tracing, never handed to torch's op: the
functions (`tmakit.copy_`, `tmakit.gather_rows`, ...) are the path that serves every tensor
torch takes (docs/api.md, "torch ops"). This module imports torch; `import tmakit` does not."""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import registry
from .api import check_copy_layout, copy_dispatch, reduce_options
from .api import copy as tma_copy
from .api import copy_ as tma_copy_
from .api import reduce_into_ as tma_reduce_into_
from .api.reduce import reduce_dispatch
from .config import SEED, dtype_of, major_of
from .errors import TmaConfigError
from .ops_base import (
    BELOW_AUTOGRAD,
    NAMESPACE,
    PLAIN,
    BelowAutograd,
    check_traced,
    define,
    gpu_count,
    increment_versions,
    not_differentiable,
    on_its_device,
    refuse_memoryless,
)
from .ops_tiles import load_tiles_fake, load_tiles_impl
from .plan import CopyOptions, check_reduce
from .plan.reduce import check_ring, check_ring_layouts, chosen_kernel

OPTIONS = CopyOptions.schema_arguments()
# Each op with options has two overloads: `default`'s call boxes a few arguments, `typed`'s a
# dozen and more, given or not, which costs host time; a call's option keywords find `typed`.
SCHEMAS = {
    "copy_": 'copy_(Tensor(a0!) dst, Tensor src, str options="") -> ()',
    "copy_.typed": f"copy_.typed(Tensor(a0!) dst, Tensor src, *, {OPTIONS}) -> ()",
    "copy": 'copy(Tensor src, str options="") -> Tensor',
    "copy.typed": f"copy.typed(Tensor src, *, {OPTIONS}) -> Tensor",
    "reduce_into_": 'reduce_into_(Tensor(a0!) dst, Tensor src, str op="add") -> ()',
    "reduce_into_.typed": (
        f'reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", *, {OPTIONS}, '
        "str? reduce_by=None) -> ()"
    ),
    # `int`, not SymInt: a tile and a swizzle are constants of the compiled kernel
    "load_tiles": (
        f"load_tiles(Tensor tensor, int tile_rows={SEED.tile[0]}, int tile_cols={SEED.tile[1]}, "
        "int swizzle=0) -> Tensor"
    ),
}


@functools.lru_cache(maxsize=256)
def copy_kwargs(options: str) -> dict[str, Any]:
    """`tmakit.copy_`'s keyword arguments for an options text ("" and "default": none).
    TmaConfigError for a malformed one (`CopyOptions.parse`'s message). Cached: a repeated text
    costs a dictionary lookup. The dictionary returned is shared, so it must not be changed."""
    if not options or options == "default":
        return {}
    return CopyOptions.parse(options).changed()


def op_kwargs(options: str, typed: dict[str, Any]) -> dict[str, Any]:
    """`tmakit.copy_`'s keyword arguments from the `default` overload's options text or the
    `typed` overload's arguments (the dispatcher passes those given, and may pass defaults too:
    those are left out). The text's dictionary is cached and shared."""
    return CopyOptions.keywords(typed) if typed else copy_kwargs(options)


# -- copy_ --------------------------------------------------------------------------------------
def run_in_place(
    op: str, dst: torch.Tensor, src: torch.Tensor, launch: Any, *args: Any, **kwargs: Any
) -> None:
    """`launch(dst, src, ...)`, one of tmakit's API functions, under dst's GPU's guard; the API
    bumps dst's version counter (what an in-place torch op's ADInplaceOrView kernel does). A
    tensor without memory is refused first."""
    if type(dst) is not torch.Tensor or type(src) is not torch.Tensor or dst.is_meta or src.is_meta:
        refuse_memoryless(op, dst=dst, src=src)
    on_its_device(dst, launch, dst, src, *args, **kwargs)


Tensor = torch.Tensor
STRICT_COPIES = copy_dispatch(strict=True)
NO_OPTIONS: dict[str, Any] = {}  # read, never written, by the dispatch


def plain_pair(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether an in-place op's call needs none of its API function's steps around the dispatch:
    one GPU (no device guard), real dense tensors (not fake, meta or a subclass: those are
    refused there) that autograd does not see. A negative or conjugate view never reaches an
    op's kernel: the dispatcher's fallbacks resolve it first."""
    return not (
        type(dst) is not Tensor
        or type(src) is not Tensor
        or dst.requires_grad
        or src.requires_grad
        or dst.is_meta
        or src.is_meta
        or gpu_count() > 1
    )


def copy__impl(dst: torch.Tensor, src: torch.Tensor, options: str = "") -> None:
    """Copy `src` into `dst` through TMA (`tmakit.copy_` with `options`, strict). The call without
    options, on one GPU, of tensors that need no autograd check (`plain_pair`), goes straight to
    the strict copy's dispatch: it is the op's repeated call."""
    if options or not plain_pair(dst, src):
        run_in_place("copy_", dst, src, tma_copy_, strict=True, **copy_kwargs(options))
        return
    STRICT_COPIES.copy_(dst, src, None, None, NO_OPTIONS)
    increment_versions((dst,))


def copy__typed_impl(dst: torch.Tensor, src: torch.Tensor, **typed: Any) -> None:
    """The typed overload's kernel: `tmakit.copy_` with the typed options given, strict."""
    run_in_place("copy_", dst, src, tma_copy_, strict=True, **op_kwargs("", typed))


def check_traced_pair(
    op: str, dst: torch.Tensor, src: torch.Tensor, kwargs: dict[str, Any], ring: bool = False
) -> None:
    """A fake implementation's check of a copy's or reduce's pair: both on a CUDA device, one
    shape and dtype, a dtype TMA moves and, where the strides are static, their layout rules
    (`api.check_copy_layout`; a rows view's or bulk copy's compact tensors are planned apart) and,
    for the load-add-store `ring`, one layout (`plan.reduce.check_ring_layouts`)."""
    check_traced(op, dst=dst, src=src)
    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op}: destination is {tuple(dst.shape)} {dst.dtype}, source "
            f"{tuple(src.shape)} {src.dtype}; they must match"
        )
    dtype = dtype_of(src.dtype)
    shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    if all(type(value) is int for value in (*shape, *src_strides, *dst_strides)):  # static
        same_major = major_of(src_strides, shape) == major_of(dst_strides, shape)
        if ring:
            check_ring_layouts(not same_major)
        compact = same_major and src.is_contiguous() and dst.is_contiguous()
        check_copy_layout(shape, src_strides, dst_strides, dtype, CopyOptions.of(**kwargs), compact)


def copy__fake(dst: torch.Tensor, src: torch.Tensor, options: str = "", **typed: Any) -> None:
    check_traced_pair("copy_", dst, src, op_kwargs(options, typed))


# -- reduce_into_ -------------------------------------------------------------------------------
def reduce_into__impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add") -> None:
    """dst = dst op src through TMA (`tmakit.reduce_into_`, strict: the fake refuses what TMA does
    not serve, so the eager op does not fall back to torch's either), as copy_'s kernel runs."""
    if not plain_pair(dst, src):
        run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=True)
        return
    reduce_dispatch(op, True, NO_OPTIONS).copy_(dst, src, None, None, NO_OPTIONS)
    increment_versions((dst,))


def reduce_into__typed_impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """The typed overload's kernel: `tmakit.reduce_into_` with the typed options given, strict."""
    run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=True, **op_kwargs("", typed))


def reduce_into__fake(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """A trace's check: both tensors on a CUDA device, a pair TMA reduces (`plan.check_reduce`, or
    with `reduce_by="ring"` `plan.reduce.check_ring` and, where the strides are static, one
    layout) and options a reduce takes (`api.reduce_options`)."""
    kwargs = dict(op_kwargs("", typed))
    kernel = chosen_kernel(kwargs.pop("reduce_by", None))
    (check_ring if kernel == "ring" else check_reduce)(op, dtype_of(src.dtype))
    reduce_options(kwargs.pop("tile", None), kwargs.pop("stages", None), kwargs)
    check_traced_pair("reduce_into_", dst, src, {}, ring=kernel == "ring")


# -- copy ---------------------------------------------------------------------------------------
def copy_impl(src: torch.Tensor, options: str = "", **typed: Any) -> torch.Tensor:
    """A new tensor with `src`'s shape, strides and values (`tmakit.copy` with the options)."""
    if type(src) is not Tensor or src.is_meta:
        refuse_memoryless("copy", src=src)
    if typed or options or gpu_count() > 1:
        return on_its_device(src, tma_copy, src, strict=True, **op_kwargs(options, typed))
    return tma_copy(src, strict=True)  # the repeated call without options, on one GPU


def copy_fake(src: torch.Tensor, options: str = "", **typed: Any) -> torch.Tensor:
    """What `tmakit.copy` allocates: `src`'s shape and strides, dtype and device."""
    check_traced("copy", src=src)
    check_traced_pair("copy", src, src, op_kwargs(options, typed))
    return torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=src.device)


class CopyFunction(torch.autograd.Function):
    """copy's autograd rule. The forward is the op below autograd (`below`: the Autograd kernel's
    keyset past autograd); the derivative of copy(src) with respect to src is the identity, so
    the gradient is the incoming one. `below`, `options` and `typed` (the typed options) get none."""

    @staticmethod
    def forward(
        ctx: Any, below: torch._C.DispatchKeySet, src: torch.Tensor, options: str, typed: dict[str, Any]
    ) -> torch.Tensor:
        with BelowAutograd():
            return copy_below(below, src, options, typed)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None, None]:
        return None, grad, None, None


def copy_autograd(
    keyset: torch._C.DispatchKeySet, src: torch.Tensor, options: str = "", **typed: Any
) -> torch.Tensor:
    """copy's Autograd kernel: the autograd.Function when src needs a gradient, else the real
    implementation called directly (plain tensors) or the kernels below autograd."""
    if src is None:  # the dispatcher passes None for a Tensor argument
        refuse_memoryless("copy", src=src)
    if src.requires_grad and torch.is_grad_enabled():
        return CopyFunction.apply(keyset & BELOW_AUTOGRAD, src, options, typed)
    if keyset.raw_repr() in PLAIN:
        return copy_impl(src, options, **typed)
    with BelowAutograd():
        return copy_below(keyset & BELOW_AUTOGRAD, src, options, typed)


def copy_below(below: torch._C.DispatchKeySet, src: torch.Tensor, options: str, typed: dict[str, Any]) -> Any:
    """copy redispatched below autograd: the overload it was called as (`typed` given: the typed
    one, which has no options text)."""
    if typed:
        return torch.ops.tmakit.copy.typed.redispatch(below, src, **typed)
    return torch.ops.tmakit.copy.default.redispatch(below, src, options)


# -- registration, on import ----------------------------------------------------------------------
def register() -> torch.library.Library:
    """Define the ops and register their kernels; the library returned must live as long as
    the process (dropping it unregisters the ops). pt2_compliant_tag: what custom_op gives its ops
    (dynamo's check for operators it may put in a graph)."""
    library = define(
        "DEF",
        SCHEMAS,
        (
            ("copy_", copy__impl, copy__fake),
            ("copy_.typed", copy__typed_impl, copy__fake),
            ("copy", copy_impl, copy_fake),
            ("copy.typed", copy_impl, copy_fake),
            ("reduce_into_", reduce_into__impl, reduce_into__fake),
            ("reduce_into_.typed", reduce_into__typed_impl, reduce_into__fake),
            ("load_tiles", load_tiles_impl, load_tiles_fake),
        ),
    )
    library.impl("copy", copy_autograd, "Autograd", with_keyset=True)
    library.impl("copy.typed", copy_autograd, "Autograd", with_keyset=True)
    load_tiles_autograd = not_differentiable("load_tiles", "tensor", load_tiles_impl)
    library.impl("load_tiles", load_tiles_autograd, "Autograd", with_keyset=True)
    return library


LIBRARY = register()
copy_ = torch.ops.tmakit.copy_.default
copy = torch.ops.tmakit.copy.default
reduce_into_ = torch.ops.tmakit.reduce_into_.default
load_tiles = torch.ops.tmakit.load_tiles.default


__all__ = [
    "copy",
    "copy_",
    "copy_kwargs",
    "load_tiles",
    "reduce_into_",
]
# Each family's ops: importing its op module registers them, its `__all__` names them here.
_family_ops = {name: getattr(module, name) for module in registry.parts("op") for name in module.__all__}
globals().update(_family_ops)
__all__ += list(_family_ops)
del _family_ops
