"""im2col as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.im2col(x, kernel, stride=1, padding=0, dilation=1, *, im2col_by=None,
                            sms=None, strict=True) -> Tensor
    torch.ops.tmakit.im2col.out(x, kernel, stride=1, padding=0, dilation=1, *, out,
                                im2col_by=None, sms=None, strict=True) -> None

Defined in a fragment of the `tmakit` library with a fake implementation that is also its Meta
kernel (the patch matrix's shape; strict, what TMA serves checked while tracing), and run as every
tmakit op runs (`tmakit.ops`): `tmakit.im2col` with the options given, strict by default, on the
tensor's GPU; `strict=False` is the function's call, torch's expression where TMA does not serve
and on any device (what `tmakit.im2col` records while torch.compile traces it). Not
differentiable: its Autograd kernel (`ops_base.not_differentiable`) calls the implementation
directly for a plain tensor, raises in backward for one that needs a gradient, and redispatches
anything else."""

from __future__ import annotations

import torch

from ..api.tensors import dtype_name
from ..config import dtype_of
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT
from ..ops_base import (
    NAMESPACE,
    STRICT,
    TRACING,
    check_traced,
    define,
    not_differentiable,
    on_its_device,
    op_options,
    refuse_grad,
    refuse_memoryless,
)
from ..plan.route import TensorFacts
from .api import im2col as tma_im2col
from .plan import IM2COL_DTYPES, im2col_conv, pair
from .route import Im2colFacts, im2col_call

# (height, width) pairs, an int standing for both, as conv2d's schema takes them
CONV = "Tensor x, int[2] kernel, int[2] stride=1, int[2] padding=0, int[2] dilation=1"
IM2COL_MODE = f"str? im2col_by=None, int? sms=None, {STRICT}"  # the options the function takes
SCHEMAS = {
    "im2col": f"im2col({CONV}, *, {IM2COL_MODE}) -> Tensor",
    "im2col.out": f"im2col.out({CONV}, *, Tensor(a!) out, {IM2COL_MODE}) -> ()",
}

IM2COL_DEFAULTS = ((1, 1), (0, 0), (1, 1))  # the schema's stride, padding and dilation


def im2col_pairs(conv: tuple[list[int], ...]) -> tuple[tuple[int, ...], ...]:
    """(kernel, stride, padding, dilation) as the op's kernels get them (the dispatcher leaves out
    the trailing defaults): each as a tuple, the defaults filled in."""
    return tuple(tuple(pair) for pair in (*conv, *IM2COL_DEFAULTS[len(conv) - 1 :]))


def im2col_impl(x: torch.Tensor, *conv: list[int], **options: object) -> torch.Tensor:
    """The patch matrix of a 2-D convolution over the NHWC activation `x` (`tmakit.im2col` with
    the options given, `im2col_by` and `strict`; strict: TMA's path only, as the fake says);
    `conv`: `im2col_pairs`'."""
    if type(x) is not torch.Tensor or x.is_meta:
        refuse_memoryless("im2col", x=x)
    return on_its_device(x, tma_im2col, x, *im2col_pairs(conv), **op_options(options))


def im2col_out_impl(x: torch.Tensor, *conv: list[int], out: torch.Tensor, **options: object) -> None:
    """`im2col_impl` into the caller's `out`."""
    if type(x) is not torch.Tensor or x.is_meta:
        refuse_memoryless("im2col", x=x)
    refuse_grad("im2col", x, out)
    on_its_device(x, tma_im2col, x, *im2col_pairs(conv), out=out, **op_options(options))


def im2col_fake(
    x: torch.Tensor,
    *conv: list[int],
    im2col_by: str | None = None,
    sms: int | None = None,
    strict: bool = True,
) -> torch.Tensor:
    """What `tmakit.im2col` allocates: the (N*P*Q, R*S*C) patch matrix, row-major. A static shape
    gets the convolution's checks and, strict, the route's whole check (what TMA serves); a
    symbolic one every rule that does not read its extents, then the same arithmetic."""
    if strict:
        check_traced("im2col", x=x)
    pairs = im2col_pairs(conv)
    shape, strides = tuple(x.shape), tuple(x.stride())
    where = f"torch.ops.{NAMESPACE}.im2col {TRACING}"
    if all(type(value) is int for value in (*shape, *strides)):
        if not strict:
            return torch.empty(im2col_conv(shape, *pairs).patch_shape, dtype=x.dtype, device=x.device)
        read = TensorFacts(shape, strides, dtype_name(x.dtype), x.element_size(), 0, x.device.index or 0)
        facts = Im2colFacts(read, *pairs, sm_count=DEFAULT_SM_COUNT, im2col_by=im2col_by, sms=sms)
        call = im2col_call(facts)
        if not call.route.by_tma:
            raise TmaConfigError(f"{where}: {call.route.reason}")
        return torch.empty(call.conv.patch_shape, dtype=x.dtype, device=x.device)
    # Symbolic extents: every rule that does not read them, then the output's arithmetic.
    if len(shape) != 4:
        raise TmaConfigError(f"{where}: x has {len(shape)} dims; im2col takes an NHWC activation (rank 4)")
    try:
        (r, s), (stride_h, stride_w) = pair(pairs[0], "kernel", 1), pair(pairs[1], "stride", 1)
        (pad_h, pad_w), (dil_h, dil_w) = pair(pairs[2], "padding", 0), pair(pairs[3], "dilation", 1)
        if strict and dtype_of(x.dtype) not in IM2COL_DTYPES:
            raise TmaConfigError(f"TMA im2col loads {', '.join(IM2COL_DTYPES)}, not {x.dtype}")
    except TmaConfigError as refused:
        raise TmaConfigError(f"{where}: {refused}") from None
    n, h, w, c = shape
    p = (h + 2 * pad_h - dil_h * (r - 1) - 1) // stride_h + 1
    q = (w + 2 * pad_w - dil_w * (s - 1) - 1) // stride_w + 1
    if p < 1 or q < 1:  # a guard on the symbolic extents
        raise TmaConfigError(f"{where}: the filter is larger than the padded input: no output pixel")
    return torch.empty((n * p * q, r * s * c), dtype=x.dtype, device=x.device)


def im2col_out_fake(
    x: torch.Tensor,
    *conv: list[int],
    out: torch.Tensor,
    im2col_by: str | None = None,
    sms: int | None = None,
    strict: bool = True,
) -> None:
    """`im2col_fake`'s checks, and `out` of the patch matrix's shape, dtype and device."""
    if strict:
        check_traced("im2col", out=out)
    patches = im2col_fake(x, *conv, im2col_by=im2col_by, sms=sms, strict=strict)
    if out.shape != patches.shape or out.dtype != x.dtype or out.device != x.device:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.im2col: out is {tuple(out.shape)} {out.dtype} on {out.device}; this "
            f"im2col writes a {tuple(patches.shape)} {x.dtype} patch matrix on {x.device}"
        )


LIBRARY = define(
    SCHEMAS,
    (("im2col", im2col_impl, im2col_fake), ("im2col.out", im2col_out_impl, im2col_out_fake)),
)
LIBRARY.impl("im2col", not_differentiable("im2col", "x", im2col_impl), "Autograd", with_keyset=True)
im2col = torch.ops.tmakit.im2col.default

__all__ = ["im2col"]
