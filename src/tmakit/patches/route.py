"""Which path serves a `tmakit.im2col` call, and why. Pure Python.

TMA im2col loads where `Im2colPlan` accepts the call and its tensors lie where TMA can address
them; else torch's expression of the same matrix (`F.pad` + `as_strided`), with the rule that
failed as the route's reason. A call's route has two parts: its layout's (`im2col_call`: the
convolution, the dtype, the plan, x's strides), looked up again by a repeated call, and where its
tensors lie (`Im2colCall.placed`: base addresses, `out`), checked on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DTYPES, compact_strides, is_compact
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, MAX_BOX_EXTENT
from ..plan.budget import budget_grid
from ..plan.copy_layout import check_copy_layout
from ..plan.route import (
    RECORDED_BY_AUTOGRAD,
    Route,
    TensorFacts,
    device_rule,
    lazy_reason,
    torch_route,
)
from ..plan.tuning import TUNING
from ..validate import check_base_address
from .plan import (
    IM2COL_DTYPES,
    WINDOWS_TILE_ROWS,
    Im2colConv,
    Im2colPlan,
    Im2colTooSmall,
    im2col_conv,
    im2col_windows,
)

IM2COL_OP = "im2col"
# Im2col loads of pixels whose channels span at most WINDOWS_MAX_CHANNEL_BYTES move narrow columns;
# copying the padded input's overlapping windows (`plan.Im2colWindows`) instead moves runs
# of a filter row's taps by the channels, which pays where a run is at least WINDOWS_MIN_RUN_BYTES
# (both measured: `plan.tuning`).
WINDOWS_MAX_CHANNEL_BYTES: int = TUNING["WINDOWS_MAX_CHANNEL_BYTES"].value
WINDOWS_MIN_RUN_BYTES: int = TUNING["WINDOWS_MIN_RUN_BYTES"].value
# The kernels a call may choose (`im2col_by`); None: the rule above.
IM2COL_KERNELS = ("loads", "windows")
_IM2COL_BY_TORCH = {DTYPES[name].torch_name: name for name in IM2COL_DTYPES}


@dataclass(frozen=True)
class PatchFacts:
    """What a route reads of a caller's patch matrix `out`: its element strides and base address
    (its shape, dtype and device are the API's checks of the argument itself)."""

    strides: tuple[int, ...]
    address: int


@dataclass(frozen=True)
class Im2colFacts:
    """What an im2col call's route is a function of: x's facts (the NHWC activation); the
    convolution's arguments as the caller passed them; `out`'s facts where one is given; the
    device's SM count (the plan's stages); whether autograd records the call (x or out requires
    grad, with grad mode on); a bit torch applies lazily to x or out ("conjugate", "negative");
    the kernel the caller chose (`IM2COL_KERNELS`), None for the rule."""

    x: TensorFacts
    kernel: object
    stride: object = 1
    padding: object = 0
    dilation: object = 1
    out: PatchFacts | None = None
    sm_count: int = DEFAULT_SM_COUNT
    records_grad: bool = False
    lazy: str | None = None
    im2col_by: str | None = None
    sms: int | None = None  # an SM budget (`plan.budget`): TMA's grid on that many SMs


@dataclass(frozen=True)
class Im2colCall:
    """What a call's layout decides, not where its tensors lie (`placed`): the convolution, the
    route of tensors TMA can address, and the plan of its im2col loads (None on torch's path, and
    for a 1x1 stride-1 unpadded patch matrix too small for the im2col atom: x's copy as rows)."""

    conv: Im2colConv
    route: Route
    plan: Im2colPlan | None = None
    windows: bool = False  # TMA serves it as the copy of the padded input's windows
    im2col_by: str | None = None  # the kernel the caller chose: `placed` refuses to fall back

    @property
    def as_rows(self) -> bool:
        """TMA serves the call as the copy of x as (N*H*W, C) rows."""
        return self.route.by_tma and self.plan is None and not self.windows

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
            broken: str | None = lazy_reason(lazy)
        elif records_grad:
            broken = RECORDED_BY_AUTOGRAD
        else:
            broken = placement_rule(address, out, self.conv.patch_shape)
        if broken is None:
            return self.route
        if self.im2col_by is not None:  # a kernel chosen that cannot serve the call: named
            raise TmaConfigError(f"im2col_by={self.im2col_by!r}: TMA does not serve this call: {broken}")
        return torch_route(IM2COL_OP, broken)


def im2col_call(facts: Im2colFacts) -> Im2colCall:
    """The layout's part of an im2col call's route, in order:

    1. the convolution's own arguments (`im2col_conv`): TmaConfigError whatever the path;
    2. torch's expression for x not on a CUDA device, a dtype TMA im2col lacks (`IM2COL_DTYPES`),
       what `Im2colPlan` refuses (its reason: channel alignment, corners, strides, sizes, the
       small patch matrices CuTe's atom cannot build), a non-contiguous x;
    3. else TMA: im2col loads; the copy of the padded input's overlapping windows for channels of
       at most `WINDOWS_MAX_CHANNEL_BYTES` in runs of at least `WINDOWS_MIN_RUN_BYTES`
       (`windows_serve`); or a 1x1 stride-1 unpadded patch
       matrix too small for the im2col atom as the copy of x's rows (`copy_` has the last word on
       that copy). A kernel the caller chose (`facts.im2col_by`) that cannot serve the call raises
       TmaConfigError naming why, instead of taking torch's expression (here, and where the
       tensors lie: `Im2colCall.placed`)."""
    conv = im2col_conv(facts.x.shape, facts.kernel, facts.stride, facts.padding, facts.dilation)
    check_im2col_by(facts.im2col_by)

    def by_torch(reason: str) -> Im2colCall:
        if facts.im2col_by is not None:  # a kernel chosen that cannot serve the call: named
            raise TmaConfigError(f"im2col_by={facts.im2col_by!r}: TMA does not serve this call: {reason}")
        return Im2colCall(conv, torch_route(IM2COL_OP, reason))

    unserved = device_rule(facts.x.device)
    if unserved is not None:
        return by_torch(unserved)
    if facts.x.device < 0:
        return by_torch("x is not on a CUDA device; TMA loads GPU memory: move it with .cuda() first")
    dtype = _IM2COL_BY_TORCH.get(facts.x.dtype)
    if dtype is None:
        takes = ", ".join(DTYPES[name].torch_name for name in IM2COL_DTYPES)
        return by_torch(f"dtype {facts.x.dtype}; TMA im2col takes {takes}: convert x with .to() first")
    plan: Im2colPlan | None
    grid = budget_grid(facts.sms, facts.sm_count)  # a budget past the GPU: raised
    try:
        plan = Im2colPlan(conv.shape, dtype, conv.filter, conv.stride, conv.padding, conv.dilation, **grid)
    except Im2colTooSmall as small:
        if not small.is_reshape:
            return by_torch(str(small))
        plan = None  # the patch matrix is x's own memory as rows
    except TmaConfigError as refused:
        return by_torch(str(refused))
    if not is_compact(conv.shape, facts.x.strides):
        return by_torch(
            f"x of shape {conv.shape} has strides {facts.x.strides}; TMA im2col takes a contiguous NHWC "
            "tensor: pass x.contiguous() (a channels_last NCHW tensor t: t.permute(0, 2, 3, 1))"
        )
    if plan is None:
        rows, channels = conv.patch_shape
        if facts.im2col_by is not None:
            raise TmaConfigError(
                f"im2col_by={facts.im2col_by!r}: this 1x1 patch matrix is too small for either kernel; "
                f"it is x's own memory as {rows} x {channels} rows, which im2col_by=None copies by TMA"
            )
        return Im2colCall(
            conv, Route(IM2COL_OP, "tma", f"a 1x1 patch matrix: x copied as {rows} x {channels} rows")
        )
    run = conv.run
    long_run = run * facts.x.nbytes >= WINDOWS_MIN_RUN_BYTES
    chosen = facts.im2col_by == "windows" or (facts.im2col_by is None and long_run)
    windows = windows_serve(conv, dtype) if chosen else False
    if facts.im2col_by == "windows" and not windows:
        raise TmaConfigError(
            f"im2col_by='windows' cannot serve this call: the windows copy takes channels of at most "
            f"{WINDOWS_MAX_CHANNEL_BYTES} bytes, no dilation and runs of at most {MAX_BOX_EXTENT} "
            "elements (a filter row's taps by the channels): pass im2col_by='loads' or None"
        )
    if windows:
        reason = (
            f"the zero-padded input's overlapping windows copied, {WINDOWS_TILE_ROWS} runs of {run} "
            f"elements a tile (channels of {conv.shape[3] * facts.x.nbytes} bytes: im2col loads move them "
            "slower)"
        )
        return Im2colCall(conv, Route(IM2COL_OP, "tma", reason), windows=True, im2col_by=facts.im2col_by)
    return Im2colCall(conv, Route(IM2COL_OP, "tma", loads_reason(plan)), plan, im2col_by=facts.im2col_by)


def loads_reason(plan: Im2colPlan) -> str:
    """A route's reason where TMA im2col loads serve the call: `plan`'s box and ring."""
    pixels, channels = plan.tile
    return f"im2col loads of {pixels} pixels x {channels} channels, {plan.stages} stages"


def planned_route(plan: Im2colPlan, im2col_by: str | None = None) -> Im2colCall:
    """The route `tmakit.im2col` takes for `plan`'s convolution and dtype, x contiguous and
    aligned on a GPU of `plan.sm_count` SMs, with the kernel `im2col_by` chosen (None: the
    rule): what `tmakit plan` and `explain` show. TmaConfigError as `im2col_call`'s."""
    element = DTYPES[plan.dtype]
    x = TensorFacts(plan.shape, compact_strides(plan.shape), element.torch_name, element.nbytes, 0, 0)
    facts = Im2colFacts(
        x, plan.filter, plan.stride, plan.padding, plan.dilation, sm_count=plan.sm_count, im2col_by=im2col_by
    )
    return im2col_call(facts)


def windows_summary(conv: Im2colConv, dtype: str, sms: int | None = None) -> str:
    """The plan of the windows copy of `conv` on `dtype` (tmakit's name), as `Im2colPlan.summary`
    gives the loads': the runs, the padded input and x's way into it, the two views copied (on an
    SM budget of `sms`, as the call's `copy_` takes it)."""
    windows = im2col_windows(conv)
    nbytes = DTYPES[dtype].nbytes
    run = windows.shape[-1]
    padded = " x ".join(map(str, windows.padded_shape))
    entry = (
        f"zero-filled; x copied into it as {windows.interior_shape} rows (strides "
        f"{windows.interior_strides}, from element {windows.interior_offset}): whole image rows a run"
        if conv.padding != (0, 0)
        else "x itself (no padding)"
    )
    return "\n".join(
        [
            *conv.head(dtype),
            f"kernel            the windows copy: output pixel (n, p, q)'s taps of filter row r are one "
            f"run of S*C = {run} elements ({run * nbytes} bytes) of the zero-padded input",
            f"padded input      {padded}, {entry}",
            f"windows           {windows.shape} (N, P, R, Q, S*C) of the padded input, element strides "
            f"{windows.src_strides} (neighbouring windows overlap)",
            f"into              the patch matrix as {windows.shape}, element strides {windows.dst_strides}",
            f"tile              {windows.tile[0]} runs x {windows.tile[1]} elements, tmakit.copy_'s ring "
            "(strict)" + ("" if sms is None else f" on an SM budget of {sms} SMs (copy_'s sms={sms})"),
        ]
    )


def check_im2col_by(im2col_by: object) -> None:
    """A caller's kernel choice: None or one of `IM2COL_KERNELS`, else TmaConfigError."""
    if im2col_by is not None and (not isinstance(im2col_by, str) or im2col_by not in IM2COL_KERNELS):
        raise TmaConfigError(
            f"im2col_by={im2col_by!r}; im2col's kernels are {', '.join(map(repr, IM2COL_KERNELS))} "
            "(None: tmakit's rule)"
        )


def windows_serve(conv: Im2colConv, dtype: str) -> bool:
    """Whether the windows copy serves `conv` on `dtype` (tmakit's name): channels of at most
    `WINDOWS_MAX_CHANNEL_BYTES`, no dilation, a run of taps one box wide, and strides the copy
    takes (`check_copy_layout`)."""
    if conv.shape[3] * DTYPES[dtype].nbytes > WINDOWS_MAX_CHANNEL_BYTES or conv.dilation != (1, 1):
        return False
    windows = im2col_windows(conv)
    if windows.shape[-1] > MAX_BOX_EXTENT:
        return False
    try:
        check_copy_layout(windows.shape, windows.src_strides, windows.dst_strides, dtype)
    except TmaConfigError:
        return False
    return True


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
    return im2col_call(facts).placed(facts.x.address, facts.out, facts.records_grad, facts.lazy)
