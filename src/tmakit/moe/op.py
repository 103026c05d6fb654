"""Mixture-of-experts token movement as torch operators (registered when `tmakit.ops` is
imported), differentiable, with fakes (torch.compile, make_fx and CUDA graphs know every size):

    torch.ops.tmakit.moe_permute(x, row_map, rows, zero_rows=None, strict=False, sms=None) -> Tensor
    torch.ops.tmakit.moe_permute_fp8(x, row_map, rows, zero_rows=None, scale_format="fp32",
                                     strict=False, sms=None) -> (Tensor, Tensor)
    torch.ops.tmakit.moe_combine(y, row_map, probs=None, strict=False, sms=None) -> Tensor
    torch.ops.tmakit.moe_combine_grad(grad, y, row_map, probs, strict=False, sms=None)
        -> (Tensor, Tensor)

`moe_permute` writes x[t] to row row_map[t, j] of a (rows, H) output (the rows no slot names
zero, or only those `zero_rows` lists: `moe.call.permute`); its backward is a combine of the
gradient with weight 1. `moe_permute_fp8` writes x[t] quantized to e4m3 by 1 x 128 blocks and
each block's scale (`moe.call.permute_fp8`: the e4m3 rows, the scales' (H / 128, lead) memory);
it has no gradient. `moe_combine` sums each token's rows weighted by `probs` in fp32; its
backward, `moe_combine_grad` (one kernel), is the gradient permuted and scaled by the slots'
probabilities (y's) and each slot's dot product of the gradient with its row (probs').
`tmakit.moe_dispatch` and `tmakit.moe_combine` call them; they run on any device (torch's
expressions where the kernels cannot serve, unless `strict`)."""

from __future__ import annotations

import torch

from ..api.tensors import check_torch_tensor
from ..errors import TmaConfigError
from ..limits import MAX_DEVICE_INT
from ..ops_base import NAMESPACE, define, op_strict
from ..plan.budget import call_budget
from ..validate import one_of
from . import call
from .plan import QUANT_BLOCK, SCALE_FORMATS, scale_rows

SCHEMAS = {
    "moe_permute": (
        "moe_permute(Tensor x, Tensor row_map, SymInt rows, Tensor? zero_rows=None, bool strict=False, "
        "int? sms=None) -> Tensor"
    ),
    "moe_permute_fp8": (
        "moe_permute_fp8(Tensor x, Tensor row_map, SymInt rows, Tensor? zero_rows=None, "
        "str scale_format='fp32', bool strict=False, int? sms=None) -> (Tensor, Tensor)"
    ),
    "moe_combine": (
        "moe_combine(Tensor y, Tensor row_map, Tensor? probs=None, bool strict=False, int? sms=None) "
        "-> Tensor"
    ),
    "moe_combine_grad": (
        "moe_combine_grad(Tensor grad, Tensor y, Tensor row_map, Tensor probs, bool strict=False, "
        "int? sms=None) -> (Tensor, Tensor)"
    ),
}


def _check(op: str, rows: torch.Tensor, row_map: torch.Tensor) -> None:
    check_torch_tensor(rows, f"torch.ops.{NAMESPACE}.{op}", "x" if op == "moe_permute" else "y")
    check_torch_tensor(row_map, f"torch.ops.{NAMESPACE}.{op}", "row_map")
    if rows.dim() != 2 or row_map.dim() != 2 or row_map.dtype != torch.int32:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op}: rows {tuple(rows.shape)} and row_map {tuple(row_map.shape)} "
            f"{row_map.dtype}; it takes (rows, hidden) and a (tokens, topk) int32 row map"
        )
    if row_map.device != rows.device:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op}: row_map is on {row_map.device}, the rows on {rows.device}"
        )


def _check_probs(probs, row_map: torch.Tensor) -> None:
    if probs is None:
        return
    check_torch_tensor(probs, f"torch.ops.{NAMESPACE}.moe_combine", "probs")
    if probs.shape != row_map.shape or not probs.is_floating_point() or probs.device != row_map.device:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_combine: probs is {tuple(probs.shape)} {probs.dtype} on "
            f"{probs.device}; it takes float weights {tuple(row_map.shape)} on {row_map.device} (the row "
            "map's shape)"
        )


def _check_rows(rows) -> None:
    if not 0 <= rows <= MAX_DEVICE_INT:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_permute: rows={rows}; it writes 0 to {MAX_DEVICE_INT} rows"
        )


def _check_zero_rows(zero_rows, x) -> None:
    if zero_rows is None:
        return
    check_torch_tensor(zero_rows, f"torch.ops.{NAMESPACE}.moe_permute", "zero_rows")
    if (
        zero_rows.dim() != 1
        or zero_rows.dtype not in (torch.int32, torch.int64)
        or zero_rows.device != x.device
    ):
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_permute: zero_rows is {tuple(zero_rows.shape)} {zero_rows.dtype} on "
            f"{zero_rows.device}; it takes a 1-D int32 or int64 index on {x.device}"
        )


def moe_permute_impl(x, row_map, rows, zero_rows=None, strict=False, sms=None):
    _check("moe_permute", x, row_map)
    _check_rows(rows)
    _check_zero_rows(zero_rows, x)
    return call.permute(x, row_map.contiguous(), rows, zero_rows, strict and op_strict(), call_budget(sms))


def moe_permute_fake(x, row_map, rows, zero_rows=None, strict=False, sms=None):
    _check("moe_permute", x, row_map)
    _check_zero_rows(zero_rows, x)
    torch._check(rows >= 0)
    return x.new_empty((rows, x.shape[1]))


def _check_fp8(x, scale_format) -> None:
    one_of(scale_format, f"torch.ops.{NAMESPACE}.moe_permute_fp8's scale_format", SCALE_FORMATS)
    if not x.is_floating_point() or x.shape[1] % QUANT_BLOCK:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_permute_fp8: x is {tuple(x.shape)} {x.dtype}; it quantizes float "
            f"rows of a multiple of {QUANT_BLOCK} elements (its 1 x {QUANT_BLOCK} blocks)"
        )


def moe_permute_fp8_impl(x, row_map, rows, zero_rows=None, scale_format="fp32", strict=False, sms=None):
    _check("moe_permute", x, row_map)
    _check_rows(rows)
    _check_zero_rows(zero_rows, x)
    _check_fp8(x, scale_format)
    mode = strict and op_strict(), call_budget(sms)
    return call.permute_fp8(x, row_map.contiguous(), rows, zero_rows, scale_format, *mode)


def moe_permute_fp8_fake(x, row_map, rows, zero_rows=None, scale_format="fp32", strict=False, sms=None):
    _check("moe_permute", x, row_map)
    _check_zero_rows(zero_rows, x)
    _check_fp8(x, scale_format)
    torch._check(rows >= 0)
    scales = (x.shape[1] // QUANT_BLOCK, scale_rows(rows, scale_format))
    return (
        x.new_empty((rows, x.shape[1]), dtype=torch.float8_e4m3fn),
        x.new_empty(scales, dtype=call.scale_dtype(scale_format)),
    )


def moe_combine_impl(y, row_map, probs=None, strict=False, sms=None):
    _check("moe_combine", y, row_map)
    _check_probs(probs, row_map)
    return call.combine(y, row_map.contiguous(), probs, strict and op_strict(), call_budget(sms))


def moe_combine_fake(y, row_map, probs=None, strict=False, sms=None):
    _check("moe_combine", y, row_map)
    _check_probs(probs, row_map)
    return y.new_empty((row_map.shape[0], y.shape[1]))


def _check_grad(grad, y, row_map, probs) -> None:
    _check("moe_combine", y, row_map)
    if probs is None:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_combine_grad takes probs: an unweighted combine's "
            "backward is moe_permute of the gradient"
        )
    _check_probs(probs, row_map)
    check_torch_tensor(grad, f"torch.ops.{NAMESPACE}.moe_combine_grad", "grad")
    if tuple(grad.shape) != (row_map.shape[0], y.shape[1]) or grad.device != y.device:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.moe_combine_grad: grad is {tuple(grad.shape)} on {grad.device}; it "
            f"takes the combine output's gradient ({row_map.shape[0]}, {y.shape[1]}) on {y.device}"
        )


def moe_combine_grad_impl(grad, y, row_map, probs, strict=False, sms=None):
    _check_grad(grad, y, row_map, probs)
    mode = strict and op_strict(), call_budget(sms)
    return call.combine_grad(grad.contiguous(), y, row_map.contiguous(), probs, *mode)


def moe_combine_grad_fake(grad, y, row_map, probs, strict=False, sms=None):
    _check_grad(grad, y, row_map, probs)
    return y.new_empty(y.shape), probs.new_empty(probs.shape)


LIBRARY = define(
    SCHEMAS,
    (
        ("moe_permute", moe_permute_impl, moe_permute_fake),
        ("moe_permute_fp8", moe_permute_fp8_impl, moe_permute_fp8_fake),
        ("moe_combine", moe_combine_impl, moe_combine_fake),
        ("moe_combine_grad", moe_combine_grad_impl, moe_combine_grad_fake),
    ),
)
moe_permute = torch.ops.tmakit.moe_permute.default
moe_permute_fp8 = torch.ops.tmakit.moe_permute_fp8.default
moe_combine = torch.ops.tmakit.moe_combine.default
moe_combine_grad = torch.ops.tmakit.moe_combine_grad.default


# -- autograd -------------------------------------------------------------------------------------
def _permute_context(ctx, inputs, output) -> None:
    x, row_map, _, _, _, sms = _filled(inputs, 6)
    ctx.sms = call_budget(sms)  # the backward (another thread) on the forward's SM budget
    ctx.save_for_backward(row_map)


def _filled(inputs: tuple, count: int) -> tuple:
    """An op's inputs as the autograd context gets them, the trailing defaults filled in (None)."""
    return (*inputs, *(None,) * (count - len(inputs)))


def _permute_backward(ctx, grad):
    (row_map,) = ctx.saved_tensors
    return moe_combine(grad.contiguous(), row_map, None, False, ctx.sms), None, None, None, None, None


def _combine_context(ctx, inputs, output) -> None:
    y, row_map, probs, _, sms = _filled(inputs, 5)
    ctx.sms = call_budget(sms)  # the backward (another thread) on the forward's SM budget
    ctx.rows = y.shape[0]
    ctx.weighted = probs is not None
    ctx.save_for_backward(y, row_map, probs if probs is not None else row_map)


def _combine_backward(ctx, grad):
    y, row_map, probs = ctx.saved_tensors
    grad = grad.contiguous()
    if not ctx.weighted:  # every row no slot names: zero
        return moe_permute(grad, row_map, ctx.rows, None, False, ctx.sms), None, None, None, None
    if torch.is_grad_enabled():  # create_graph: a second backward reads these gradients' graph
        grad_y, grad_probs = call.combine_grad_by_torch(grad, y, row_map, probs)
    else:
        grad_y, grad_probs = moe_combine_grad(grad, y, row_map, probs, False, ctx.sms)
    needs = ctx.needs_input_grad
    return grad_y if needs[0] else None, None, grad_probs if needs[2] else None, None, None


torch.library.register_autograd(
    f"{NAMESPACE}::moe_permute", _permute_backward, setup_context=_permute_context, lib=LIBRARY
)
torch.library.register_autograd(
    f"{NAMESPACE}::moe_combine", _combine_backward, setup_context=_combine_context, lib=LIBRARY
)

__all__ = ["moe_combine", "moe_combine_grad", "moe_permute", "moe_permute_fp8"]
