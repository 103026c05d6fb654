"""Which path serves a `tmakit.im2col` call, and why. Pure Python.

TMA im2col loads where `Im2colPlan` accepts the call and its tensors lie where TMA can address
them; else torch's expression of the same matrix (`F.pad` + `as_strided`), with the rule that
failed as the route's reason. A call's route has two parts: its layout's (`im2col_call`: the
convolution, the dtype, the plan, x's strides), looked up again by a repeated call, and where its
tensors lie (`Im2colCall.placed`: base addresses, `out`), checked on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DTYPES, is_compact
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT
from ..validate import check_base_address
from .im2col import Im2colConv, Im2colPlan, im2col_conv
from .im2col_rules import IM2COL_DTYPES, Im2colTooSmall
from .route import NOT_SM90, NOT_SM90_REASON, RECORDED_BY_AUTOGRAD, Route, lazy_reason, torch_route

IM2COL_OP = "im2col"
_IM2COL_BY_TORCH = {DTYPES[name].torch_name: name for name in IM2COL_DTYPES}


@dataclass(frozen=True)
class PatchFacts:
    """What a route reads of a caller's patch matrix `out`: its element strides and base address
    (its shape, dtype and device are the API's checks of the argument itself)."""

    strides: tuple[int, ...]
    address: int


@dataclass(frozen=True)
class Im2colFacts:
    """What an im2col call's route is a function of: x's `shape`, element `strides`, dtype by
    torch's name (`float16`), element size `nbytes`, base `address` and CUDA `device` index (-1:
    not on a CUDA device); the convolution's arguments as the caller passed them; `out`'s facts
    where one is given; the device's SM count (the plan's stages); whether autograd records the
    call (x or out requires grad, with grad mode on); a bit torch applies lazily to x or out
    ("conjugate", "negative")."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    nbytes: int
    address: int
    device: int
    kernel: object
    stride: object = 1
    padding: object = 0
    dilation: object = 1
    out: PatchFacts | None = None
    sm_count: int = DEFAULT_SM_COUNT
    records_grad: bool = False
    lazy: str | None = None


@dataclass(frozen=True)
class Im2colCall:
    """What a call's layout decides, not where its tensors lie (`placed`): the convolution, the
    route of tensors TMA can address, and the plan of its im2col loads (None on torch's path, and
    for a 1x1 stride-1 unpadded patch matrix too small for the im2col atom: x's copy as rows)."""

    conv: Im2colConv
    route: Route
    plan: Im2colPlan | None = None

    @property
    def as_rows(self) -> bool:
        """TMA serves the call as the copy of x as (N*H*W, C) rows."""
        return self.route.by_tma and self.plan is None

    def placed(
        self, address: int, out: PatchFacts | None = None, records_grad: bool = False, lazy: str | None = None
    ) -> Route:
        """The route of this call with x at `address` and `out` where given: TMA's where the
        tensors lie where TMA can address them and autograd records nothing (`records_grad`),
        else torch's with the rule that failed. (The per-call part of a route: a repeated call
        looks its `Im2colCall` up, then places it.)"""
        if not self.route.by_tma:
            return self.route
        if lazy is not None:  # a bit torch applies as it reads (`route.lazy_reason`)
            return torch_route(IM2COL_OP, lazy_reason(lazy))
        if records_grad:
            return torch_route(IM2COL_OP, RECORDED_BY_AUTOGRAD)
        broken = placement_rule(address, out, self.conv.patch_shape)
        return self.route if broken is None else torch_route(IM2COL_OP, broken)


def im2col_call(facts: Im2colFacts) -> Im2colCall:
    """The layout's part of an im2col call's route, in order:

    1. the convolution's own arguments (`im2col_conv`): TmaConfigError whatever the path;
    2. torch's expression for x not on a CUDA device, a dtype TMA im2col lacks (`IM2COL_DTYPES`),
       what `Im2colPlan` refuses (its reason: channel alignment, corners, strides, sizes, the
       small patch matrices CuTe's atom cannot build), a non-contiguous x;
    3. else TMA: im2col loads, or a 1x1 stride-1 unpadded patch matrix too small for the im2col
       atom as the copy of x's rows (`copy_` has the last word on that copy)."""
    conv = im2col_conv(facts.shape, facts.kernel, facts.stride, facts.padding, facts.dilation)

    def by_torch(reason: str) -> Im2colCall:
        return Im2colCall(conv, torch_route(IM2COL_OP, reason))

    if facts.device == NOT_SM90:
        return by_torch(f"x is on {NOT_SM90_REASON}")
    if facts.device < 0:
        return by_torch("x is not on a CUDA device; TMA loads GPU memory: move it with .cuda() first")
    dtype = _IM2COL_BY_TORCH.get(facts.dtype)
    if dtype is None:
        takes = ", ".join(DTYPES[name].torch_name for name in IM2COL_DTYPES)
        return by_torch(f"dtype {facts.dtype}; TMA im2col takes {takes}: convert x with .to() first")
    plan: Im2colPlan | None
    try:
        plan = Im2colPlan(
            conv.shape, dtype, conv.filter, conv.stride, conv.padding, conv.dilation, sm_count=facts.sm_count
        )
    except Im2colTooSmall as small:
        if not small.is_reshape:
            return by_torch(str(small))
        plan = None  # the patch matrix is x's own memory as rows
    except TmaConfigError as refused:
        return by_torch(str(refused))
    if not is_compact(conv.shape, facts.strides):
        return by_torch(
            f"x of shape {conv.shape} has strides {facts.strides}; TMA im2col takes a contiguous NHWC "
            "tensor: pass x.contiguous() (a channels_last NCHW tensor t: t.permute(0, 2, 3, 1))"
        )
    if plan is None:
        rows, channels = conv.patch_shape
        return Im2colCall(
            conv, Route(IM2COL_OP, "tma", f"a 1x1 patch matrix: x copied as {rows} x {channels} rows")
        )
    pixels, channels = plan.tile
    reason = f"im2col loads of {pixels} pixels x {channels} channels, {plan.stages} stages"
    return Im2colCall(conv, Route(IM2COL_OP, "tma", reason), plan)


def placement_rule(address: int, out: PatchFacts | None, patch_shape: tuple[int, int]) -> str | None:
    """The first rule of where the tensors lie that TMA breaks, as a reason; None when it meets
    them: x's and out's base addresses 16-byte aligned (`validate.check_base_address`), out a
    contiguous patch matrix (its TMA store's tensor map is row-major)."""
    try:
        check_base_address(address)
    except TmaConfigError as refused:
        return f"x's {refused}"
    if out is None:
        return None
    if not is_compact(patch_shape, out.strides):
        return f"out has strides {out.strides}; TMA stores a contiguous patch matrix: pass a contiguous out"
    try:
        check_base_address(out.address)
    except TmaConfigError as refused:
        return f"out's {refused}"
    return None


def im2col_route(facts: Im2colFacts) -> Route:
    """The path an im2col call takes (`route.PATHS`: "tma" or "torch") and why: `im2col_call`'s
    route, placed where `facts` says the tensors lie. Raises TmaConfigError for the convolution's
    own arguments (`im2col_conv`), which no path serves."""
    return im2col_call(facts).placed(facts.address, facts.out, facts.records_grad, facts.lazy)
