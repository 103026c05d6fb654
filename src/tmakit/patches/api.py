"""`im2col`: the patch matrix of a 2-D convolution gathered by TMA im2col loads (narrow channels:
the padded input's overlapping windows copied by TMA; the small 1x1 ones that are a reshape of
the activation: its TMA copy), or, where TMA cannot serve the call, by torch's expression of the
same matrix (`torch_im2col`); `im2col_path` names which and why."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import registry
from ..api.tensors import (
    bump_versions,
    check_budget,
    check_torch_tensor,
    check_written,
    compile_check,
    detached,
    device_facts,
    import_torch,
    lazy_bit,
    recorded_by_autograd,
    tensor_facts,
)
from ..errors import TmaConfigError, TorchOpError
from ..limits import DEFAULT_SM_COUNT
from ..plan.budget import call_budget
from ..plan.route import RECORDED_BY_AUTOGRAD, Route
from ..runtime.dispatch import CallTable
from ..validate import flag, span_bytes, typed
from .launch import im2col_launcher
from .plan import Im2colConv, Im2colPlan, im2col_conv, im2col_windows
from .route import Im2colCall, Im2colFacts, PatchFacts, im2col_call

if TYPE_CHECKING:
    import torch

# What `tmakit` exports: the functions and the plan (`tmakit.Im2colPlan`, for a kernel of one's own).
__all__ = ["Im2colPlan", "im2col", "im2col_path"]

# The copy family's `copy_`, bound at its first call (`registry.bound_on_first_call`: a family
# imports no other): then each call reads one global, as an imported name's.
copy_ = registry.bound_on_first_call("copy_", globals())
# torch.compiler.is_compiling, asked first by `im2col`: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")

Launch = Callable[["torch.Tensor", "torch.Tensor"], None]


def im2col(
    x: torch.Tensor,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    *,
    out: torch.Tensor | None = None,
    strict: bool = False,
    im2col_by: str | None = None,
    sms: int | None = None,
) -> torch.Tensor:
    """The patch matrix of a 2-D convolution over the NHWC activation `x`, gathered by TMA im2col
    loads: a new (N*P*Q, R*S*C) tensor of `x`'s dtype whose row n*P*Q + p*Q + q holds output
    pixel (n, p, q)'s window, channels fastest, then the filter's columns s, then its rows r
    (column (r*S + s)*C + c); the padding reads as zeros. `kernel`, `stride`, `padding` and
    `dilation` are an int or a (height, width) pair, as torch's conv2d takes them.

    TMA serves a contiguous (N, H, W, C) CUDA tensor of fp16, bf16 or fp32 (a channels_last NCHW
    tensor `t` is `t.permute(0, 2, 3, 1)`), with C * element size a multiple of 16 bytes, that
    `patches.plan.Im2colPlan` accepts (channel counts, corner and stride ranges, sizes, no patch matrix
    of one row or one box, which CuTe's im2col atom cannot build); a 1x1 stride-1 unpadded one
    that small is x.reshape(N*H*W, C), copied by TMA (`copy_`); narrow channels in long filter
    rows (`patches.route`'s rule) are the zero-padded input's overlapping windows copied by
    TMA (`im2col_by`). Any other 4-D tensor torch can
    pad and view - on the CPU, of another dtype, strided, misaligned - takes torch's expression
    of the same matrix (`torch_im2col`); `im2col_path` names the path a call takes and why.
    `strict=True` raises TmaConfigError instead, before anything compiles, naming the rule TMA's
    path breaks. Arguments no path serves (not a tensor, not rank 4, a kernel of 0, a negative
    padding, a filter larger than the padded input, an `out` of another shape, dtype or device)
    raise TmaConfigError either way.

    Compiled once per shape, dtype and convolution parameters; a call like one seen before (x's
    shape, strides, dtype and device, the same convolution) skips the planning and its route,
    not the checks of where x and out lie.

    Args:
        x: the (N, H, W, C) activation.
        kernel, stride, padding, dilation: an int or a (height, width) pair each, as conv2d's.
        out: write into this (N*P*Q, R*S*C) tensor of `x`'s dtype on its device instead of a new
            one (contiguous and 16-byte aligned for TMA).
        strict: raise TmaConfigError where TMA does not serve the call, instead of torch's
            expression.
        im2col_by: "loads" (TMA im2col loads) or "windows" (the padded input's overlapping
            windows copied by TMA); None: tmakit's rule (`patches.route`: windows for
            narrow channels in long filter rows). A kernel chosen that cannot serve the call raises.
        sms: an SM budget (`tmakit.sm_budget`): TMA's persistent grid takes this many SMs, one
            block each; None: the enclosing budget's, else the whole GPU.

    Returns:
        The (N*P*Q, R*S*C) patch matrix (`out` if given).

    Raises:
        TmaConfigError: as above: in either mode for arguments no path serves, with `strict=True`
            for what TMA's path does not serve; an `sms` past the GPU's SM count. While
            torch.compile traces the call, what the op's fake implementation refuses, wrapped in
            dynamo's error."""
    sms = call_budget(sms)
    check_budget(sms, x)
    if is_compiling():
        return traced_im2col(x, (kernel, stride, padding, dilation), out, strict, im2col_by, sms)
    torch = import_torch("im2col")
    if strict is not False and strict is not True:
        strict = flag(strict, "strict")  # a string such as 'false' would read as true
    call, launch = _CALLS.known(
        lambda: (
            x.shape,
            x.stride(),
            x.dtype,
            x.device,
            typed((kernel, stride, padding, dilation, im2col_by, sms)),
        ),
        lambda: plan_im2col(x, kernel, stride, padding, dilation, im2col_by, sms),
    )
    patch_shape = call.conv.patch_shape
    if out is not None:
        check_im2col_out(out, x, patch_shape)
    # Every call: where the tensors lie and whether autograd records them are not in the key.
    route = call.route
    if route.by_tma:
        tensors = (x,) if out is None else (x, out)
        grad, lazy = recorded_by_autograd(*tensors), lazy_bit(*tensors)
        route = call.placed(x.data_ptr(), patch_facts(out), grad, lazy)
    if not route.by_tma:
        if strict:
            raise TmaConfigError(f"{route.reason} (strict=False computes it with torch's expression instead)")
        return gathered(x, call.conv, out)
    given = out is not None
    if out is None:
        out = torch.empty(patch_shape, dtype=x.dtype, device=x.device)
    if launch is None:  # a 1x1 patch matrix: x's own memory as (N*H*W, C) rows
        copy_(out.view(call.conv.shape), x, strict=strict, sms=sms)
    else:
        launch(detached(x), detached(out))  # under torch.no_grad(): the same memory, no autograd
        if given and not call.windows:  # a caller's out, counted as an out= op counts it (the
            bump_versions((out,))  # windows copy's `copy_` calls count it through out's views)
    return out


def traced_im2col(
    x: torch.Tensor,
    conv: tuple[object, object, object, object],
    out: torch.Tensor | None,
    strict: object,
    im2col_by: str | None,
    sms: int | None = None,
) -> torch.Tensor:
    """`im2col` while torch.compile or torch.export traces it: `torch.ops.tmakit.im2col` (or its
    `out` overload) with the call's `strict`, which the trace records as one op and which runs
    `im2col` at run time (TMA, or torch's expression where TMA does not serve and the call is not
    strict). A call autograd records is torch's expression, traced as such, as outside a trace
    (strict: refused). `conv`: (kernel, stride, padding, dilation)."""
    strict = flag(strict, "strict")
    if recorded_by_autograd(*((x,) if out is None else (x, out))):
        if strict:
            raise TmaConfigError(
                f"{RECORDED_BY_AUTOGRAD} (strict=False computes it with torch's expression instead)"
            )
        return torch_im2col(x, *conv, out=out)
    mode = {"im2col_by": im2col_by, "sms": sms, "strict": strict}
    if out is None:
        return _ops().im2col.default(x, *conv, **mode)
    if strict or out.is_contiguous():
        _ops().im2col.out(x, *conv, out=out, **mode)
    else:  # dynamo takes no out= of other strides (strict, TMA's path refuses one): copied into it
        out.copy_(_ops().im2col.default(x, *conv, **mode))
    return out


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


def im2col_path(
    x: torch.Tensor,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    *,
    out: torch.Tensor | None = None,
    im2col_by: str | None = None,
    sms: int | None = None,
) -> Route:
    """The path `im2col` takes for these arguments, and why; nothing compiles or launches.

    Args:
        x: the NHWC activation, as `im2col` takes it.
        kernel, stride, padding, dilation: the convolution, each an int or a (height, width) pair.
        out: the patch matrix `im2col` would write into, where one is given.
        im2col_by, sms: as `im2col` takes them.

    Returns:
        A `plan.route.Route` of op "im2col": path "tma" (TMA im2col loads, the padded input's
        windows copied by TMA, or a 1x1 patch matrix as x's rows copied by TMA) or "torch"
        (torch's expression, `torch_im2col`), with the rule that failed as its reason.

    Raises:
        TmaConfigError: for arguments no path serves (`im2col`'s docstring lists them).
    """
    import_torch("im2col_path")
    sms = call_budget(sms)
    check_budget(sms, x)
    call = im2col_call(im2col_facts(x, kernel, stride, padding, dilation, im2col_by, sms))
    if out is not None:
        check_im2col_out(out, x, call.conv.patch_shape)
    tensors = (x,) if out is None else (x, out)
    return call.placed(x.data_ptr(), patch_facts(out), recorded_by_autograd(*tensors), lazy_bit(*tensors))


def torch_im2col(
    x: torch.Tensor,
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`im2col`'s patch matrix by torch's ops alone, for any 4-D tensor torch can pad (the path
    `im2col` takes where TMA cannot serve the call; the drop-in study's torch baseline): the
    arguments and `out` as `im2col` takes them, `out` of any strides."""
    import_torch("torch_im2col")
    check_torch_tensor(x, "im2col", "x")
    conv = im2col_conv(tuple(x.shape), kernel, stride, padding, dilation)
    if out is not None:
        check_im2col_out(out, x, conv.patch_shape)
    return gathered(x, conv, out)


def gathered(x: torch.Tensor, conv: Im2colConv, out: torch.Tensor | None) -> torch.Tensor:
    """`strided_patches`, with torch's RuntimeError (a dtype it cannot pad or copy) as
    TmaConfigError: the path `im2col` takes where TMA cannot serve the call."""
    try:
        return strided_patches(x, conv, out)
    except (RuntimeError, TypeError, ValueError) as error:
        if isinstance(error, import_torch("im2col").OutOfMemoryError):
            raise  # the machine's memory, not a rule of the call's
        raise TorchOpError(
            f"torch's im2col expression (F.pad + as_strided) of x {tuple(x.shape)} {x.dtype} on "
            f"{x.device} failed: {error}"
        ) from error


def strided_patches(x: torch.Tensor, conv: Im2colConv, out: torch.Tensor | None = None) -> torch.Tensor:
    """The patch matrix of `conv` over `x` in torch's ops alone: `F.pad`, the windows as one
    `as_strided` view of the padded tensor, and a copy into `out`'s rows (a new tensor when
    None). Nothing but torch ops, so that `torch.compile` traces it whole (the drop-in study's
    inductor baseline)."""
    torch = import_torch("im2col")
    (pad_h, pad_w), (stride_h, stride_w), (dil_h, dil_w) = conv.padding, conv.stride, conv.dilation
    (r, s), (p, q) = conv.filter, conv.output_shape
    # No padding: x's own strides, so a strided x is viewed, not copied first.
    padded = torch.nn.functional.pad(x, (0, 0, pad_w, pad_w, pad_h, pad_h)) if pad_h or pad_w else x
    n, _, _, c = padded.shape
    step_n, step_h, step_w, step_c = padded.stride()
    windows = padded.as_strided(
        (n, p, q, r, s, c),
        (step_n, step_h * stride_h, step_w * stride_w, step_h * dil_h, step_w * dil_w, step_c),
    )
    if out is None:
        out = torch.empty(conv.patch_shape, dtype=x.dtype, device=x.device)
    if out.is_contiguous():
        out.view(n, p, q, r, s, c).copy_(windows)
    else:
        out.copy_(windows.reshape(conv.patch_shape))
    return out


# The calls seen (`runtime.dispatch.CallTable`): (the call's layout and route, launch) by x's shape,
# strides, dtype and device and the convolution's arguments; x's address and out are checked on
# every call.
_CALLS: CallTable = CallTable()


def im2col_facts(
    x: object,
    kernel: object,
    stride: object,
    padding: object,
    dilation: object,
    im2col_by: object = None,
    sms: int | None = None,
) -> Im2colFacts:
    """What `patches.route.im2col_call` reads off x (a dense torch tensor, or TmaConfigError) and the
    device; x's address is this call's."""
    check_torch_tensor(x, "im2col", "x")
    read = tensor_facts(x)
    return Im2colFacts(
        read,
        kernel,
        stride,
        padding,
        dilation,
        sm_count=device_facts(x.device)[0] if read.device >= 0 else DEFAULT_SM_COUNT,
        im2col_by=im2col_by,  # type: ignore[arg-type]  # checked by the route
        sms=sms,
    )


def plan_im2col(
    x: torch.Tensor,
    kernel: object,
    stride: object,
    padding: object,
    dilation: object,
    im2col_by: object = None,
    sms: int | None = None,
) -> tuple[Im2colCall, Launch | None]:
    """A new call's checks in full: its layout's route (`patches.route.im2col_call`) and how TMA's im2col
    loads launch it (None on torch's path and for x's rows). TmaConfigError for arguments no
    path serves."""
    import_torch("im2col")
    call = im2col_call(im2col_facts(x, kernel, stride, padding, dilation, im2col_by, sms))
    if not call.route.by_tma or call.as_rows:
        return call, None  # torch's expression, or x's rows copied by `copy_`
    if call.windows:
        return call, functools.partial(copy_windows, call.conv, sms=sms)
    plan, device, launchers = call.plan, str(x.device), []

    def launch(x: torch.Tensor, out: torch.Tensor) -> None:
        if not launchers:  # compiled at the first launch: after out's checks
            launchers.append(im2col_launcher(plan, device).launch)
        launchers[0](x, out)

    return call, launch


def copy_windows(conv: Im2colConv, x: torch.Tensor, out: torch.Tensor, sms: int | None = None) -> None:
    """The patch matrix as TMA copies (`patches.plan.Im2colWindows`): x into the interior of a
    zero-filled padded input (x itself without padding), then the padded input's overlapping
    windows into `out`'s rows, a run of taps a tile row."""
    torch = import_torch("im2col")
    windows = im2col_windows(conv)
    padded = x
    if conv.padding != (0, 0):
        padded = torch.zeros(windows.padded_shape, dtype=x.dtype, device=x.device)
        # Whole image rows a run (a box per pixel's C channels would move 16- or 32-byte columns).
        rows = windows.interior_shape
        interior = padded.as_strided(rows, windows.interior_strides, windows.interior_offset)
        copy_(interior, x.view(rows), strict=True, sms=sms)
    copy_(
        out.as_strided(windows.shape, windows.dst_strides),
        padded.as_strided(windows.shape, windows.src_strides),
        windows.tile,
        strict=True,
        sms=sms,
    )


def check_im2col_out(out: object, x: torch.Tensor, patch_shape: tuple[int, int]) -> None:
    """A caller's patch matrix: a dense (M, K) tensor of `x`'s dtype on `x`'s device, sharing no
    memory with `x` (every path reads x while it writes out). What TMA needs besides, contiguity
    and alignment, is the route's: `patches.route.placement_rule`."""
    check_torch_tensor(out, "im2col", "out")
    check_written(out, "im2col", "out")
    if out.shape != patch_shape or out.dtype != x.dtype or out.device != x.device:
        raise TmaConfigError(
            f"out is {tuple(out.shape)} {out.dtype} on {out.device}; this im2col writes a "
            f"{patch_shape} {x.dtype} patch matrix on {x.device}: pass one of those, or no out"
        )
    nbytes, x_address, out_address = x.element_size(), x.data_ptr(), out.data_ptr()
    x_end = x_address + tensor_span(x, nbytes)
    out_end = out_address + tensor_span(out, nbytes)
    if x.numel() and out.numel() and x_address < out_end and out_address < x_end:
        raise TmaConfigError(
            f"out (bytes {out_address:#x}..{out_end:#x}) shares memory with x ({x_address:#x}..{x_end:#x}); "
            "im2col reads x while it writes out: pass an out of its own memory, or no out"
        )


def tensor_span(tensor: torch.Tensor, nbytes: int) -> int:
    """Bytes from `tensor`'s first element to the end of its last (`validate.span_bytes`): its
    size where it is contiguous, the usual case, read without a loop."""
    if tensor.is_contiguous():
        return tensor.numel() * nbytes
    return span_bytes(tuple(tensor.shape), tuple(tensor.stride()), nbytes)


def patch_facts(out: torch.Tensor | None) -> PatchFacts | None:
    """What the route reads of a caller's (checked) patch matrix: its strides and address."""
    return None if out is None else PatchFacts(tuple(out.stride()), out.data_ptr())
