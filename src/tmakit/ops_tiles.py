"""`load_tiles` and `im2col` as torch operators, defined with the copies in `tmakit.ops`: their
real implementations (`tmakit.api`'s, strict), their fakes (the output's shape, what TMA serves
checked while tracing) and the Autograd kernel of an op without a gradient."""

from __future__ import annotations

from typing import Any

import torch

from .api import im2col as tma_im2col
from .api import load_tiles as tma_load_tiles
from .api.tensors import dtype_name
from .config import SEED, LoadConfig, dtype_of, major_of
from .errors import TmaConfigError
from .limits import DEFAULT_SM_COUNT
from .ops_base import (
    BELOW_AUTOGRAD,
    NAMESPACE,
    PLAIN,
    TRACING,
    BelowAutograd,
    check_traced,
    on_its_device,
    refuse_memoryless,
)
from .plan import IM2COL_DTYPES, Im2colFacts, LoadPlan, im2col_call
from .plan.im2col_rules import pair
from .plan.load import padded_extents
from .plan.route import TensorFacts
from .validate import check_rank


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
        read = TensorFacts(shape, strides, dtype_name(x.dtype), x.element_size(), 0, x.device.index or 0)
        facts = Im2colFacts(read, *pairs, sm_count=DEFAULT_SM_COUNT)
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
