"""im2col as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1) -> Tensor

Defined in a fragment of the `tmakit` library with a fake implementation that is also its Meta
kernel (the patch matrix's shape; what TMA serves checked while tracing), and run as every tmakit
op runs (`tmakit.ops`): `tmakit.im2col` strictly, on the tensor's GPU. Not differentiable: its
Autograd kernel (`ops_base.not_differentiable`) calls the implementation directly for a plain
tensor, raises in backward for one that needs a gradient, and redispatches anything else."""

from __future__ import annotations

import torch

from ..api.tensors import dtype_name
from ..config import dtype_of
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT
from ..ops_base import (
    NAMESPACE,
    TRACING,
    check_traced,
    define,
    not_differentiable,
    on_its_device,
    op_strict,
    refuse_memoryless,
)
from ..plan.route import TensorFacts
from .api import im2col as tma_im2col
from .plan import IM2COL_DTYPES, pair
from .route import Im2colFacts, im2col_call

SCHEMAS = {
    # (height, width) pairs, an int standing for both, as conv2d's schema takes them
    "im2col": (
        "im2col(Tensor x, int[2] kernel, int[2] stride=1, int[2] padding=0, int[2] dilation=1) -> Tensor"
    ),
}

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
    return on_its_device(x, tma_im2col, x, *im2col_pairs(conv), strict=op_strict())


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


LIBRARY = define(SCHEMAS, (("im2col", im2col_impl, im2col_fake),))
LIBRARY.impl("im2col", not_differentiable("im2col", "x", im2col_impl), "Autograd", with_keyset=True)
im2col = torch.ops.tmakit.im2col.default

__all__ = ["im2col"]
