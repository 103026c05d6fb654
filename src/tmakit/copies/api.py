"""`copy_`, `copy` and `copy_path`: a copy through TMA, torch's `copy_` where TMA does not serve
the pair (`copy_path` names the path a call takes and why).

Each mode (plain, strict, and the shape-specialised kernels the benchmarks time) has one dispatch
(`runtime.dispatch.Dispatch`), whose planner is `copies.call`'s: a call like one seen before
(both tensors' shapes, strides, dtypes and devices, the options) finds its launcher by a lookup
or, repeated call after call, behind one guard; a new one is routed and planned for its class
there. `plan_copy` and `specialised_copy_` are the building blocks the host-cost study reads
beside the functions (`registry.exporting`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..api.tensors import (
    bump_versions,
    check_gpu_tensor,
    check_torch_tensor,
    compile_check,
    count_write,
    detached,
    import_torch,
    out_of_the_plain_path,
    pair_facts,
    pair_guard,
    recorded_by_autograd,
    special_route,
    version_of,
)
from ..errors import TmaConfigError
from ..plan import CopyOptions
from ..plan.budget import with_budget
from ..plan.route import RECORDED_BY_AUTOGRAD, Route
from ..runtime.dispatch import Dispatch
from ..validate import flag
from .call import (
    check_copy_tensors,
    check_options,
    copy_decision,
    plan_copy,
    routed_copy_launcher,
)
from .views import TORCH_COPY, copy_by_torch

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack  # typing's from Python 3.11

    from ..plan.copy import CopyKeywords

__all__ = ["copy", "copy_", "copy_path"]

# torch.compiler.is_compiling, asked first by each function: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")


def copy_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    non_blocking: bool = False,
    strict: bool = False,
    **options: Unpack[CopyKeywords],
) -> torch.Tensor:
    """Copy `src` into `dst` (`dst.copy_(src)`) through TMA: pipelined loads into shared memory,
    TMA stores out. Every pair torch's `copy_` takes is served (`copies.plan`): by TMA as the
    tensors are laid out (a column-major source into a row-major destination is transposed tile
    by tile in shared memory), on a view of the same memory (dims permuted together, runs merged,
    a compact run as rows), a dtype TMA has no type for moved as a same-size one; else by torch's
    `copy_`, the fallback `copy_path` names with its reason. Compiled once per class (dtype, rank,
    contiguous dims, tile, options; not the extents), kept in memory and on disk.

    Args:
        dst: the tensor written, of `src`'s shape and dtype.
        src: the tensor read; an empty one launches nothing.
        tile: (rows, columns) of each TMA box; None: tmakit's default for the class.
        stages: the ring's depth; None: tmakit's default.
        non_blocking: torch's `copy_`'s (keyword-only here: the third place is `tile`): where
            torch's copy_ serves a pair on two devices (a host tensor and a GPU's), it copies
            asynchronously with respect to the host where it can (pinned host memory); a copy on
            one device, TMA's or torch's, never waits for the GPU anyway.
        strict: raise TmaConfigError where TMA does not serve the pair, instead of torch's copy_.
        **options: the other fields of `CopyOptions` (store_depth, blocks_per_sm, as_rows,
            evict_first, pdl, load_hint, store_hint, tile_order, bulk, sms); each left out takes
            the default, the fastest measured; `sms` left out takes the enclosing
            `tmakit.sm_budget`'s, if any.

    Returns:
        `dst`.
    Raises:
        TmaConfigError: before anything compiles or launches, for arguments wrong in themselves
            (not tensors, shapes or dtypes that differ, `dst` partly overlapping `src`, unknown or
            ill-typed options, options the planner refuses for a pair TMA serves), and with
            `strict=True` for a pair TMA does not serve; a `non_blocking` that is not a bool. While
            torch.compile traces the call, what the op's fake implementation refuses, wrapped in
            dynamo's error."""
    options = with_budget(options)
    if is_compiling():
        return traced_copy_(dst, src, tile, stages, strict, options, non_blocking)
    if (
        strict is False
        and non_blocking is False
        and tile is None
        and stages is None
        and not options
        and _COPIES.guarded(dst, src)
    ):
        bump_versions((dst,))  # the repeated default call: its guard stands for every read below
        return dst
    if non_blocking is not False and flag(non_blocking, "copy_'s non_blocking"):
        return copy_non_blocking(dst, src, tile, stages, strict, options)
    if out_of_the_plain_path(dst, src):
        return copy_special(dst, src, tile, stages, strict, options)
    before = version_of(dst)
    if strict is False:
        _COPIES.call(dst, src, tile, stages, options)
    elif strict is True:
        _STRICT_COPIES.call(dst, src, tile, stages, options)
    else:
        (_STRICT_COPIES if flag(strict, "copy_'s strict") else _COPIES).call(dst, src, tile, stages, options)
    count_write(dst, before)  # as torch's in-place ops: a dst saved for backward is caught there
    return dst


def copy_non_blocking(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
) -> torch.Tensor:
    """`copy_` with `non_blocking=True`: a pair on two devices, whose path is torch's copy_, after
    every check a copy makes (`copy_path`: the options on TMA's route, strict refused), by torch's
    `copy_(src, non_blocking=True)`; a pair on one device, the plain call."""
    check_torch_tensor(dst, "copy_", "dst")
    check_torch_tensor(src, "copy_", "src")
    if dst.device == src.device:
        return copy_(dst, src, tile, stages, strict=strict, **options)
    copy_path(dst, src, tile, stages, strict=strict, **options)
    copy_by_torch(dst, src, non_blocking=True)  # counts its write, as torch's in-place ops do
    return dst


def traced_copy_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
    non_blocking: object = False,
) -> torch.Tensor:
    """`copy_` while torch.compile or torch.export traces it: `torch.ops.tmakit.copy_` with the
    call's `strict` and `non_blocking`, which the trace records as one op and which runs this
    function at run time (TMA, or torch's copy_ where TMA does not serve and the call is not
    strict). A call autograd records is torch's copy_, traced as such, as outside a trace (strict:
    refused)."""
    strict = flag(strict, "copy_'s strict")
    mode = {"non_blocking": True} if flag(non_blocking, "copy_'s non_blocking") else {}
    if recorded_by_autograd(dst, src):
        if strict:
            raise TmaConfigError(f"copy_ with strict=True: no TMA path, {RECORDED_BY_AUTOGRAD}")
        dst.copy_(src, **mode)
        return dst
    if tile is None and stages is None and not options:
        _ops().copy_.default(dst, src, strict=strict, **mode)
    else:
        _ops().copy_.typed(dst, src, tile=tile, stages=stages, strict=strict, **mode, **options)
    return dst


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


def specialised_copy_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    **options: Any,
) -> torch.Tensor:
    """`copy_` (TMA only) through a kernel compiled for this exact shape, not its class's: what the
    benchmarks set beside `copy_` to price shape-generic kernels."""
    return _SPECIALISED_COPIES.call(dst, src, tile, stages, options)


def copy_special(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
) -> torch.Tensor:
    """A copy out of the plain path (`tensors.out_of_the_plain_path`): torch's copy_ for a
    negative view and where autograd records the call (it records the graph and refuses a leaf;
    strict: TmaConfigError), else the plain copy on detached views of the same memory (an
    update under torch.no_grad()), dst's version bumped as torch's in-place ops do."""
    strict = flag(strict, "copy_'s strict")
    chosen = CopyOptions.of(tile=tile, stages=stages, **options)  # named if wrong, on every path
    reason = special_route(dst, src, "copy_")
    if reason is not None:
        if chosen != _DEFAULT_OPTIONS:  # checked as on TMA's path, whose dispatch checks its own
            check_options(detached(dst), detached(src), chosen, pair_facts(dst, src))
        if strict:
            raise TmaConfigError(f"copy_ with strict=True: no TMA path, {reason}")
        copy_by_torch(dst, src)
        return dst
    before = version_of(dst)
    (_STRICT_COPIES if strict else _COPIES).call(detached(dst), detached(src), tile, stages, options)
    count_write(dst, before)
    return dst


def copy(
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    strict: bool = False,
    **options: Unpack[CopyKeywords],
) -> torch.Tensor:
    """`src.clone()` by `copy_`: a new tensor with `src`'s shape, strides (compact for an expanded
    source) and values.

    Args:
        src: the tensor copied. tile, stages, strict, **options: as `copy_`'s.
    Returns:
        The new tensor, on `src`'s device.
    Raises:
        TmaConfigError: as `copy_`'s (strict: also for a `src` not on a CUDA device)."""
    options = with_budget(options)
    if is_compiling():
        return traced_copy(src, tile, stages, strict, options)
    import_torch("copy")
    (check_gpu_tensor if strict else check_torch_tensor)(src, "copy", "src")
    return copy_(new_destination(src), src, tile, stages, strict=strict, **options)


def new_destination(src: torch.Tensor) -> torch.Tensor:
    """The tensor `copy` allocates for `src` (what `torch.ops.tmakit.copy`'s fake returns too):
    `src`'s shape, dtype, device and strides, compact for an expanded source."""
    torch = import_torch("copy")
    if src.is_contiguous():  # the usual source: its row-major strides, allocated the cheapest way
        return torch.empty_like(src)
    if any(stride <= 0 for stride, extent in zip(src.stride(), src.shape, strict=True) if extent > 1):
        return torch.empty_like(src)  # an expanded source's strides would make dst overlap itself
    return torch.empty_strided(tuple(src.shape), tuple(src.stride()), dtype=src.dtype, device=src.device)


def traced_copy(
    src: torch.Tensor,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
) -> torch.Tensor:
    """`copy` while torch.compile or torch.export traces it: `torch.ops.tmakit.copy` with the
    call's `strict` (differentiable: the identity's gradient, as torch's copy_ records outside a
    trace; strict refuses a call autograd records, as outside a trace)."""
    strict = flag(strict, "copy's strict")
    if strict and recorded_by_autograd(src):
        raise TmaConfigError(f"copy_ with strict=True: no TMA path, {RECORDED_BY_AUTOGRAD}")
    if tile is None and stages is None and not options:
        return _ops().copy.default(src, strict=strict)
    return _ops().copy.typed(src, tile=tile, stages=stages, strict=strict, **options)


def copy_path(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    strict: bool = False,
    **options: Unpack[CopyKeywords],
) -> Route:
    """The path `copy_(dst, src, ...)` takes and why, without copying (`copies.plan.copy_route`).

    Args:
        dst, src: the tensors `copy_` would take.
        tile, stages, options: `copy_`'s options (`CopyOptions`).
        strict: the path of `copy_(..., strict=True)`, which takes TMA's or refuses.
    Returns:
        The `plan.route.Route`: its `path` ("tma", "tma-view", "tma-rows", "empty" or "torch"),
        its `reason`, the dtype the data moves as where not its own.
    Raises:
        TmaConfigError: what `copy_` refuses in the same mode (not tensors, unknown options, a
        TMA-served pair's planner refusing the options given; strict: a pair TMA does not serve)."""
    strict = flag(strict, "copy_path's strict")
    chosen = CopyOptions.of(tile=tile, stages=stages, **with_budget(options))
    if out_of_the_plain_path(dst, src):
        reason = special_route(dst, src, "copy_")
        if reason is not None:
            if strict:
                raise TmaConfigError(f"copy_ with strict=True: no TMA path, {reason}")
            return Route("copy_", "torch", reason)
    return copy_decision(detached(dst), detached(src), chosen, strict).route


def copy_dispatch(strict: bool = False) -> Dispatch:
    """The dispatch behind `copy_` (its launchers and fast-path state, for tests and tools)."""
    return _STRICT_COPIES if strict else _COPIES


_DEFAULT_OPTIONS = CopyOptions()
# Every copy_ call's launcher and fast-path state (the shape-specialised kernels: benchmarks only).
# `runtime.dispatch.forget_calls` forgets them with the tables of known calls.
_COPIES = Dispatch(routed_copy_launcher, check_copy_tensors, fallback=TORCH_COPY, guard_of=pair_guard)
_STRICT_COPIES = Dispatch(functools.partial(routed_copy_launcher, strict=True), check_copy_tensors)
_SPECIALISED_COPIES = Dispatch(functools.partial(plan_copy, shape_generic=False), check_copy_tensors)
