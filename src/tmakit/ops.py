"""tmakit's copies, reduce stores, tile loads and im2col as torch operators; `import tmakit.ops`
registers them.

    torch.ops.tmakit.copy_(dst, src, options="") -> None; .typed(dst, src, *, tile=None, ...)
    torch.ops.tmakit.copy(src, options="") -> Tensor; .typed(src, *, tile=None, ...)
    torch.ops.tmakit.reduce_into_(dst, src, op="add") -> None; .typed(dst, src, op, *, tile=None, ...)
    torch.ops.tmakit.load_tiles(tensor, tile_rows=64, tile_cols=256, swizzle=0) -> Tensor
    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1) -> Tensor
    torch.ops.tmakit.gather_rows, scatter_rows_, index_add_, index_reduce_ (`tmakit.ops_rows`)
    torch.ops.tmakit.copy_many_, pack, unpack_ (`tmakit.ops_many`)

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

The real implementations are `tmakit.api`'s functions in strict mode, so what a fake checks is
what the op serves, on torch's current stream and under the tensor's GPU's guard. A CPU, meta or
fake tensor gets `TmaConfigError` (docs/api.md, "torch ops"). This module imports torch;
`import tmakit` does not."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, is_fake

from . import ops_many, ops_rows  # register the rows and many-tensor ops
from .api import check_copy_layout, check_on_gpu, check_torch_tensor, reduce_options
from .api import copy as tma_copy
from .api import copy_ as tma_copy_
from .api import im2col as tma_im2col
from .api import load_tiles as tma_load_tiles
from .api import reduce_into_ as tma_reduce_into_
from .api.tensors import dtype_name
from .config import SEED, LoadConfig, dtype_of, major_of
from .errors import TmaConfigError
from .limits import DEFAULT_SM_COUNT
from .plan import IM2COL_DTYPES, CopyOptions, Im2colFacts, LoadPlan, check_reduce, im2col_call
from .plan.im2col_rules import pair
from .plan.load import padded_extents
from .validate import check_rank

NAMESPACE = "tmakit"
TRACING = "while tracing (torch.compile, make_fx, torch.export or a FakeTensorMode)"
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
        f'reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", *, {OPTIONS}) -> ()'
    ),
    # `int`, not SymInt: a tile and a swizzle are constants of the compiled kernel
    "load_tiles": (
        f"load_tiles(Tensor tensor, int tile_rows={SEED.tile[0]}, int tile_cols={SEED.tile[1]}, "
        "int swizzle=0) -> Tensor"
    ),
    # (height, width) pairs, an int standing for both, as conv2d's schema takes them
    "im2col": (
        "im2col(Tensor x, int[2] kernel, int[2] stride=1, int[2] padding=0, int[2] dilation=1) -> Tensor"
    ),
}

increment_version = torch.autograd.graph.increment_version
BELOW_AUTOGRAD = torch._C._after_autograd_keyset
BelowAutograd = torch._C._AutoDispatchBelowAutograd
# An Autograd kernel's keysets (as raw bits) under which the next kernel would be the real
# implementation (CompositeExplicitAutograd): a dense tensor on a GPU, or on the CPU (refused there
# by tmakit.api), and no other key below autograd (no trace's mode, no functionalization, no
# conjugate or negative view). Compared whole: reading the keyset's keys one by one costs far more.
PLAIN = frozenset(
    (torch._C.DispatchKeySet(backend) | torch._C.DispatchKeySet(autograd)).raw_repr()
    for backend, autograd in (
        (torch._C.DispatchKey.CUDA, torch._C.DispatchKey.AutogradCUDA),
        (torch._C.DispatchKey.CPU, torch._C.DispatchKey.AutogradCPU),
    )
)


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


# -- tensors without memory, tensors off the GPU while tracing ---------------------------------------
def refuse_memoryless(op: str, **tensors: torch.Tensor) -> None:
    """A real implementation's check: a fake tensor (a trace's: a device, no memory) or a meta
    tensor raises TmaConfigError. Through torch's dispatcher neither arrives here (a fake
    tensor goes to its FakeTensorMode, a meta tensor to the Meta kernel), but a direct call of
    the implementation can pass one. The callers test `.is_meta` and the exact type first, which
    costs nanoseconds on the eager path."""
    for name, tensor in tensors.items():
        if isinstance(tensor, FakeTensor):
            raise TmaConfigError(
                f"torch.ops.{NAMESPACE}.{op}: {name} is a fake tensor (a shape on {tensor.device}, no "
                "memory) in the eager path; a fake tensor belongs in a trace (torch.compile, make_fx), "
                "whose fake implementation computes the output: call the op eagerly on real CUDA tensors"
            )
        check_torch_tensor(tensor, f"torch.ops.{NAMESPACE}.{op}", name)  # meta: tmakit.api's message


def check_traced(op: str, **tensors: torch.Tensor) -> None:
    """A fake implementation's check: every tensor is on a CUDA device. A CPU tensor in a trace, or a
    meta tensor (passed to the op eagerly, or traced), raises TmaConfigError. The error gives
    `tmakit.api`'s message and says what called it."""
    for name, tensor in tensors.items():
        if tensor.device.type == "cuda":
            continue
        where = TRACING if is_fake(tensor) else "called eagerly"
        try:
            check_torch_tensor(tensor, f"torch.ops.{NAMESPACE}.{op}", name)  # meta
            check_on_gpu(tensor, name)  # cpu and any other device
        except TmaConfigError as error:
            raise TmaConfigError(f"torch.ops.{NAMESPACE}.{op} {where}: {error}") from None


@functools.cache
def gpu_count() -> int:
    """CUDA devices torch sees; fixed for the process once CUDA is initialised."""
    return torch.cuda.device_count()


def foreign_device(tensor: torch.Tensor) -> int | None:
    """The index of `tensor`'s GPU when it is not the current device (its launch then needs that
    device's guard), else None. On a one-GPU machine this is always None, at the cost of a
    cached call."""
    if gpu_count() < 2:
        return None
    index = tensor.get_device()
    return index if index >= 0 and index != torch.cuda.current_device() else None


def on_its_device(tensor: torch.Tensor, launch: Any, *args: Any, **kwargs: Any) -> Any:
    """`launch(*args, **kwargs)`, under the guard of `tensor`'s GPU where it is not the current
    device (`foreign_device`)."""
    device = foreign_device(tensor)
    if device is None:
        return launch(*args, **kwargs)
    with torch.cuda.device(device):
        return launch(*args, **kwargs)


# -- copy_ --------------------------------------------------------------------------------------
def run_in_place(
    op: str, dst: torch.Tensor, src: torch.Tensor, launch: Any, *args: Any, **kwargs: Any
) -> None:
    """`launch(dst, src, ...)` under dst's GPU's guard, then bump dst's version counter (what an
    in-place torch op's ADInplaceOrView kernel does). A tensor without memory is refused first."""
    if type(dst) is not torch.Tensor or type(src) is not torch.Tensor or dst.is_meta or src.is_meta:
        refuse_memoryless(op, dst=dst, src=src)
    on_its_device(dst, launch, dst, src, *args, **kwargs)
    increment_version(dst)


def copy__impl(dst: torch.Tensor, src: torch.Tensor, options: str = "", **typed: Any) -> None:
    """Copy `src` into `dst` through TMA (`tmakit.copy_` with `options` and the typed options)."""
    run_in_place("copy_", dst, src, tma_copy_, strict=True, **op_kwargs(options, typed))


def check_traced_pair(op: str, dst: torch.Tensor, src: torch.Tensor, kwargs: dict[str, Any]) -> None:
    """A fake implementation's check of a copy's or reduce's pair: both on a CUDA device, one
    shape and dtype, a dtype TMA moves and, where the strides are static, their layout rules
    (`api.check_copy_layout`; a rows view's or bulk copy's compact tensors are planned apart)."""
    check_traced(op, dst=dst, src=src)
    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op}: destination is {tuple(dst.shape)} {dst.dtype}, source "
            f"{tuple(src.shape)} {src.dtype}; they must match"
        )
    dtype = dtype_of(src.dtype)
    shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    if all(type(value) is int for value in (*shape, *src_strides, *dst_strides)):  # static
        compact = major_of(src_strides, shape) == major_of(dst_strides, shape) and (
            src.is_contiguous() and dst.is_contiguous()
        )
        check_copy_layout(shape, src_strides, dst_strides, dtype, CopyOptions.of(**kwargs), compact)


def copy__fake(dst: torch.Tensor, src: torch.Tensor, options: str = "", **typed: Any) -> None:
    check_traced_pair("copy_", dst, src, op_kwargs(options, typed))


# -- reduce_into_ -------------------------------------------------------------------------------
def reduce_into__impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """dst = dst op src through TMA reduce stores (`tmakit.reduce_into_` with the typed options),
    as copy_ runs. Strict: the fake refuses what TMA does not serve, so the eager op does not fall
    back to torch's either."""
    run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=True, **op_kwargs("", typed))


def reduce_into__fake(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """A trace's check: both tensors on a CUDA device, a pair TMA reduces (`plan.check_reduce`)
    and options a reduce takes (`api.reduce_options`)."""
    check_reduce(op, dtype_of(src.dtype))
    kwargs = dict(op_kwargs("", typed))
    reduce_options(kwargs.pop("tile", None), kwargs.pop("stages", None), kwargs)
    check_traced_pair("reduce_into_", dst, src, {})


# -- copy ---------------------------------------------------------------------------------------
def copy_impl(src: torch.Tensor, options: str = "", **typed: Any) -> torch.Tensor:
    """A new tensor with `src`'s shape, strides and values (`tmakit.copy` with the options)."""
    if type(src) is not torch.Tensor or src.is_meta:
        refuse_memoryless("copy", src=src)
    return on_its_device(src, tma_copy, src, strict=True, **op_kwargs(options, typed))


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


# -- load_tiles ---------------------------------------------------------------------------------
def load_tiles_impl(
    tensor: torch.Tensor, tile_rows: int = SEED.tile[0], tile_cols: int = SEED.tile[1], swizzle: int = 0
) -> torch.Tensor:
    """What TMA puts in shared memory, tile by tile (`tmakit.load_tiles`), as a row-major tensor
    of the padded shape."""
    if type(tensor) is not torch.Tensor or tensor.is_meta:
        refuse_memoryless("load_tiles", tensor=tensor)
    return on_its_device(tensor, tma_load_tiles, tensor, (tile_rows, tile_cols), swizzle)


def padded_shape(tensor: torch.Tensor, tile: tuple[int, int], swizzle: int) -> tuple[Any, ...]:
    """`LoadPlan.padded_shape` of `tensor` loaded with `tile`: its batch dims, then its rows and
    columns rounded up to whole tiles. A static shape gets `LoadPlan`'s whole check, so a
    configuration load_tiles would refuse is refused while tracing. A symbolic shape (dynamic shapes:
    SymInts, which the check would specialise) gets the rank and tile checks and the same
    arithmetic (`plan.load.padded_extents`)."""
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    if all(type(value) is int for value in (*shape, *strides)):
        config = LoadConfig(shape, dtype_of(tensor.dtype), tile, swizzle, major_of(strides, shape), strides)
        return LoadPlan(config).padded_shape
    check_rank(len(shape))
    if min(tile) < 1:
        LoadPlan(LoadConfig(tile=tile))  # raises the tile's own error
    return padded_extents(shape, tile)


def load_tiles_fake(
    tensor: torch.Tensor, tile_rows: int = SEED.tile[0], tile_cols: int = SEED.tile[1], swizzle: int = 0
) -> torch.Tensor:
    """What `tmakit.load_tiles` allocates: the padded shape, row-major and compact."""
    check_traced("load_tiles", tensor=tensor)
    shape = padded_shape(tensor, (tile_rows, tile_cols), swizzle)
    return torch.empty(shape, dtype=tensor.dtype, device=tensor.device)


class NotDifferentiable(torch.autograd.Function):
    """load_tiles or im2col under autograd: the op below autograd, and a backward that raises
    (what TMA put in shared memory, or a patch matrix, has no gradient defined here)."""

    @staticmethod
    def forward(
        ctx: Any, op: str, below: torch._C.DispatchKeySet, tensor: torch.Tensor, *args: Any
    ) -> torch.Tensor:
        ctx.op = op
        with BelowAutograd():
            return getattr(torch.ops.tmakit, op).default.redispatch(below, tensor, *args)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> None:
        raise RuntimeError(
            f"torch.ops.{NAMESPACE}.{ctx.op} is not differentiable: backward reached it through a tensor "
            "that requires grad (detach the input, or call the op under torch.no_grad())"
        )


def not_differentiable(op: str, name: str, impl: Any) -> Any:
    """The Autograd kernel of an op without a gradient, as copy's: `NotDifferentiable` where its
    tensor (the argument `name`) needs a gradient, else `impl` called directly (plain tensors) or
    the kernels below autograd."""

    def autograd_kernel(keyset: torch._C.DispatchKeySet, tensor: torch.Tensor, *args: Any) -> torch.Tensor:
        if tensor is None:  # the dispatcher passes None for a Tensor argument
            refuse_memoryless(op, **{name: tensor})
        if tensor.requires_grad and torch.is_grad_enabled():
            return NotDifferentiable.apply(op, keyset & BELOW_AUTOGRAD, tensor, *args)
        if keyset.raw_repr() in PLAIN:
            return impl(tensor, *args)
        with BelowAutograd():
            return getattr(torch.ops.tmakit, op).default.redispatch(keyset & BELOW_AUTOGRAD, tensor, *args)

    return autograd_kernel


# -- im2col -------------------------------------------------------------------------------------
IM2COL_DEFAULTS = ((1, 1), (0, 0), (1, 1))  # the schema's stride, padding and dilation


def im2col_pairs(conv: tuple[list[int], ...]) -> tuple[tuple[int, ...], ...]:
    """(kernel, stride, padding, dilation) as the op's kernels get them (the dispatcher leaves out
    the trailing defaults): each as a tuple, the defaults filled in."""
    return tuple(tuple(pair) for pair in (*conv, *IM2COL_DEFAULTS[len(conv) - 1 :]))


def im2col_impl(x: torch.Tensor, *conv: list[int]) -> torch.Tensor:
    """The patch matrix of a 2-D convolution over the NHWC activation `x` (`tmakit.im2col`,
    strict: TMA's path only, as the fake says); `conv`: `im2col_pairs`'."""
    if type(x) is not torch.Tensor or x.is_meta:
        refuse_memoryless("im2col", x=x)
    return on_its_device(x, tma_im2col, x, *im2col_pairs(conv), strict=True)


def im2col_fake(x: torch.Tensor, *conv: list[int]) -> torch.Tensor:
    """What `tmakit.im2col` allocates: the (N*P*Q, R*S*C) patch matrix, row-major. A static shape
    gets the route's whole check (what TMA serves); a symbolic one every rule that does not read
    its extents, then the same arithmetic."""
    check_traced("im2col", x=x)
    pairs = im2col_pairs(conv)
    shape, strides = tuple(x.shape), tuple(x.stride())
    if all(type(value) is int for value in (*shape, *strides)):
        facts = Im2colFacts(
            shape, strides, dtype_name(x.dtype), x.element_size(), 0, x.device.index or 0, *pairs,
            sm_count=DEFAULT_SM_COUNT,
        )  # fmt: skip
        call = im2col_call(facts)
        if not call.route.by_tma:
            raise TmaConfigError(f"torch.ops.{NAMESPACE}.im2col {TRACING}: {call.route.reason}")
        return torch.empty(call.conv.patch_shape, dtype=x.dtype, device=x.device)
    # Symbolic extents: every rule that does not read them, then the output's arithmetic.
    where = f"torch.ops.{NAMESPACE}.im2col {TRACING}"
    if len(shape) != 4:
        raise TmaConfigError(f"{where}: x has {len(shape)} dims; im2col takes an NHWC activation (rank 4)")
    try:
        (r, s), (stride_h, stride_w) = pair(pairs[0], "kernel", 1), pair(pairs[1], "stride", 1)
        (pad_h, pad_w), (dil_h, dil_w) = pair(pairs[2], "padding", 0), pair(pairs[3], "dilation", 1)
        if dtype_of(x.dtype) not in IM2COL_DTYPES:
            raise TmaConfigError(f"TMA im2col loads {', '.join(IM2COL_DTYPES)}, not {x.dtype}")
    except TmaConfigError as refused:
        raise TmaConfigError(f"{where}: {refused}") from None
    n, h, w, c = shape
    p = (h + 2 * pad_h - dil_h * (r - 1) - 1) // stride_h + 1
    q = (w + 2 * pad_w - dil_w * (s - 1) - 1) // stride_w + 1
    if p < 1 or q < 1:  # a guard on the symbolic extents
        raise TmaConfigError(f"{where}: the filter is larger than the padded input: no output pixel")
    return torch.empty((n * p * q, r * s * c), dtype=x.dtype, device=x.device)


# -- registration, on import ----------------------------------------------------------------------
def register() -> torch.library.Library:
    """Define the ops and register their kernels; the library returned must live as long as
    the process (dropping it unregisters the ops). pt2_compliant_tag: what custom_op gives its ops
    (dynamo's check for operators it may put in a graph)."""
    library = ops_rows.define(
        "DEF",
        SCHEMAS,
        (
            ("copy_", copy__impl, copy__fake),
            ("copy_.typed", copy__impl, copy__fake),  # the same kernels: the options come as keywords
            ("copy", copy_impl, copy_fake),
            ("copy.typed", copy_impl, copy_fake),
            ("reduce_into_", reduce_into__impl, reduce_into__fake),
            ("reduce_into_.typed", reduce_into__impl, reduce_into__fake),
            ("load_tiles", load_tiles_impl, load_tiles_fake),
            ("im2col", im2col_impl, im2col_fake),
        ),
    )
    library.impl("copy", copy_autograd, "Autograd", with_keyset=True)
    library.impl("copy.typed", copy_autograd, "Autograd", with_keyset=True)
    for op, name, impl in (("load_tiles", "tensor", load_tiles_impl), ("im2col", "x", im2col_impl)):
        library.impl(op, not_differentiable(op, name, impl), "Autograd", with_keyset=True)
    return library


LIBRARY = register()
copy_ = torch.ops.tmakit.copy_.default
copy = torch.ops.tmakit.copy.default
reduce_into_ = torch.ops.tmakit.reduce_into_.default
load_tiles = torch.ops.tmakit.load_tiles.default
im2col = torch.ops.tmakit.im2col.default

gather_rows = ops_rows.gather_rows
scatter_rows_ = ops_rows.scatter_rows_
index_add_ = ops_rows.index_add_
index_reduce_ = ops_rows.index_reduce_
copy_many_ = ops_many.copy_many_
pack = ops_many.pack
unpack_ = ops_many.unpack_

__all__ = [
    "copy",
    "copy_",
    "copy_kwargs",
    "copy_many_",
    "gather_rows",
    "im2col",
    "index_add_",
    "index_reduce_",
    "load_tiles",
    "pack",
    "reduce_into_",
    "scatter_rows_",
    "unpack_",
]
