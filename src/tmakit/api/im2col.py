"""`im2col`: the patch matrix of a 2-D convolution gathered by TMA im2col loads (the small 1x1
ones that are a reshape of the activation: its TMA copy)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import dtype_of
from ..errors import TmaConfigError
from ..plan import Im2colPlan, Im2colTooSmall
from ..runtime.launch import im2col_launcher
from ..validate import check_base_address
from .copy import copy_
from .known import calls_table, known_call, typed
from .tensors import check_gpu_tensor, check_torch_tensor, device_facts, import_torch

if TYPE_CHECKING:
    import torch


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
    convolution parameters; a call like one seen before (x's shape, strides, dtype and device,
    the same convolution) skips the planning, not the checks of where x and out lie. `out`:
    write into this contiguous (N*P*Q, R*S*C) tensor of `x`'s dtype on its device instead of a
    new one."""
    torch = import_torch("im2col")
    patch_shape, launch = known_call(
        _CALLS,
        lambda: (x.shape, x.stride(), x.dtype, x.device, typed((kernel, stride, padding, dilation))),
        lambda: plan_im2col(x, kernel, stride, padding, dilation),
    )
    check_base_address(x.data_ptr())  # every call: where the tensor lies is not in the key
    if out is None:
        out = torch.empty(patch_shape, dtype=x.dtype, device=x.device)
    else:
        check_im2col_out(out, x, patch_shape)
    launch(x, out)
    return out


# The calls seen (`known.known_call`): (patch shape, launch) by x's shape, strides, dtype and
# device and the convolution's arguments; x's address and out are checked on every call.
_CALLS: dict[tuple, tuple[tuple[int, int], Callable[[torch.Tensor, torch.Tensor], None]]] = calls_table()


def plan_im2col(
    x: torch.Tensor, kernel: object, stride: object, padding: object, dilation: object
) -> tuple[tuple[int, int], Callable[[torch.Tensor, torch.Tensor], None]]:
    """A new call's checks in full: its patch shape and how to launch it (TmaConfigError for what
    TMA's im2col cannot serve, before anything compiles)."""
    torch = import_torch("im2col")
    check_gpu_tensor(x, "im2col", "x")
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
    if plan is None:

        def copy_rows(x: torch.Tensor, out: torch.Tensor) -> None:
            copy_(out.view(shape), x)  # the patch matrix is x's own memory as (N*H*W, C) rows

        return (math.prod(shape[:3]), shape[3]), copy_rows
    device, launchers = str(x.device), []

    def launch(x: torch.Tensor, out: torch.Tensor) -> None:
        if not launchers:  # compiled at the first launch: after out's checks
            launchers.append(im2col_launcher(plan, device))
        with torch.cuda.device(x.device):
            launchers[0](x, out)

    return plan.patch_shape, launch


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
