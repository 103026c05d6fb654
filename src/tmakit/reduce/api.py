"""`reduce_into_` and `add_`: `dst = dst op src` through TMA reduce stores, on the copy's ring
and with the copy's options and layout rules, and torch's own op for the tensors TMA cannot
serve (`reduce_path` names the path a call takes and why).

Each (op, strict, reduce_by) has the copy's dispatch (`runtime.dispatch.Dispatch`), whose
planner is `reduce.call`'s: a call like one seen before (both tensors' shapes, strides, dtypes and
devices, the options) finds its launcher by a lookup, or, repeated call after call, tries it
first; what the lookup cannot hold, where the tensors lie, is checked on every call: both base
addresses 16-byte aligned, no partial overlap (torch's op serves unaligned bases and overlaps only
an element-wise check can decide). `ReducePlan` (`reduce.plan`) is exported with the functions."""

from __future__ import annotations

import functools
import numbers
from typing import TYPE_CHECKING, Any

from ..api.tensors import (
    bump_versions,
    compile_check,
    count_write,
    detached,
    out_of_the_plain_path,
    pair_facts,
    pair_guard,
    recorded_by_autograd,
    special_route,
    version_of,
)
from ..errors import TmaConfigError
from ..plan import CopyOptions, reduce_op
from ..plan.budget import with_budget
from ..plan.route import RECORDED_BY_AUTOGRAD, Route, torch_route
from ..runtime.dispatch import CallTable, Dispatch
from ..validate import flag
from .call import (
    check_reduce_arguments,
    check_reduce_options,
    reduce_decision,
    reduce_options,
    routed_reduce_launcher,
    strict_fallback,
    strict_refusal,
    torch_fallback,
    torch_reduce,
)
from .plan import TMA_KERNEL_PATHS, ReducePlan, chosen_kernel, reduce_route

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack  # typing's from Python 3.11

    from ..plan.copy import CopyKeywords

__all__ = ["ReducePlan", "add_", "reduce_into_", "reduce_path"]

# torch.compiler.is_compiling, asked first by each function: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")


def reduce_into_(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str = "add",
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    strict: bool = False,
    reduce_by: str | None = None,
    **options: Unpack[CopyKeywords],
) -> torch.Tensor:
    """Reduce `src` into `dst` element by element, dst = dst op src, with TMA reduce stores: the
    copy's ring loads `src` tile by tile and one thread reduce-stores each tile into `dst`
    (`cp.reduce.async.bulk.tensor`), so every element gets exactly one reduction (one rounding for
    floats). TMA serves one CUDA device, one shape and dtype, an (op, dtype) pair of
    `plan.REDUCE_DTYPES` (the PTX ISA's table: add takes fp32, fp16, bf16, int32, uint32, uint64),
    16-byte aligned bases and strides it addresses as laid out or on a view of the same memory.
    Everything else torch's in-place op takes runs torch's op (`TORCH_OPS`; inc and dec are PTX's
    unsigned `red.inc`/`red.dec`), and so does an add past 40% of the L2, measured faster
    there; `reduce_path` names the path and why. Tensors that require grad take torch's op where
    grad mode is on, and TMA on detached views under torch.no_grad(). `reduce_by="ring"` runs
    the load-add-store ring instead of reduce stores (`reduce.plan.REDUCE_KERNELS`): the destination's
    tiles loaded beside the source's and added in registers, for adds on fp32, fp16, bf16 and
    int32 of one layout; left out, `reduce.plan.RING_BEYOND_L2` chooses.

    Args:
        dst: the tensor reduced into.
        src: the tensor reduced from, of `dst`'s shape and dtype.
        op: one of `plan.REDUCE_OPS` ("add", "min", "max", "inc", "dec", "and", "or", "xor"), or
            torch's name for one ("sum", "amax", "amin").
        tile, stages: as `copy_`'s.
        strict: raise TmaConfigError where TMA does not serve the call, instead of torch's op.
        reduce_by: "store" (TMA reduce stores) or "ring" (the load-add-store ring); None:
            tmakit's rule. A kernel chosen that cannot serve the call raises, strict or not.
        **options: the copy's (`CopyOptions`) but `as_rows` and `bulk`; `sms` left out takes
            the enclosing `tmakit.sm_budget`'s, if any.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: in either mode for arguments wrong in themselves (not torch tensors, an
            unknown op, unknown or ill-typed options, options TMA refuses for tensors it serves,
            `dst` partly overlapping `src` on a TMA path: the very same view is allowed), for an
            error of torch's op (named); with `strict=True` for anything TMA does not serve,
            before anything compiles or launches. While torch.compile traces the call, what the
            op's fake implementation refuses, wrapped in dynamo's error."""
    options = with_budget(options)
    if is_compiling():
        return traced_reduce_into_(dst, src, op, tile, stages, strict, options, reduce_by)
    return reduced(dst, src, op, tile, stages, strict, options, reduce_by)


def add_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    alpha: int | float = 1,
    strict: bool = False,
    reduce_by: str | None = None,
    **options: Unpack[CopyKeywords],
) -> torch.Tensor:
    """dst += alpha * src, as torch's `dst.add_(src, alpha=alpha)`: with `alpha` 1,
    `reduce_into_(dst, src, "add", ...)`; another `alpha` is torch's `add_` (TMA's adds take `src`
    as it is), after the checks every path makes.

    Args:
        dst, src, tile, stages, strict, reduce_by, **options: as `reduce_into_`'s.
        alpha: the multiplier of `src` (keyword-only, as torch's): a number; other than 1, torch's
            `add_` serves the call (`strict=True` and a `reduce_by` refuse it).

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `reduce_into_`; an `alpha` that is not a number; an `alpha` other than 1
            with `strict=True` or a `reduce_by`."""
    options = with_budget(options)
    if is_compiling():
        return traced_reduce_into_(dst, src, "add", tile, stages, strict, options, reduce_by, alpha)
    if type(alpha) is not int or alpha != 1:
        return scaled_add(dst, src, alpha, tile, stages, strict, options, reduce_by)
    if strict is False and reduce_by is None and not options:  # the plain call: its dispatch, once made
        dispatch = _DISPATCHES.get(_PLAIN_ADD)
        if tile is None and stages is None and dispatch is not None and dispatch.guarded(dst, src):
            bump_versions((dst,))  # the repeated default call: its guard stands for every read
            return dst
        return reduced(dst, src, "add", tile, stages, False, options, None, dispatch)
    return reduced(dst, src, "add", tile, stages, strict, options, reduce_by)


def scaled_add(
    dst: torch.Tensor,
    src: torch.Tensor,
    alpha: object,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
    reduce_by: object,
) -> torch.Tensor:
    """`add_` with an `alpha` other than 1: torch's `dst.add_(src, alpha=alpha)`, TMA's adds taking
    `src` as it is. First what every path checks: `alpha` a number, the tensors, the options (on
    the route TMA would take, `check_reduce_options`), a kernel named; then refused where the
    call asks for TMA (strict, or a `reduce_by`). An `alpha` equal to 1 (1.0) is `add_`'s own,
    but a float one on integers, which torch's add_ refuses."""
    check_reduce_arguments(dst, src)
    if checked_alpha(alpha) == 1 and (isinstance(alpha, numbers.Integral) or dst.is_floating_point()):
        return add_(dst, src, tile, stages, strict=strict, reduce_by=reduce_by, **options)
    strict, kernel = flag(strict, "strict"), chosen_kernel(reduce_by)
    chosen = reduce_options(tile, stages, options)
    if chosen != CopyOptions():
        check_reduce_options(detached(dst), detached(src), "add", chosen, kernel)
    reason = f"alpha={alpha}: TMA's adds take src as it is"
    if strict:
        raise strict_refusal(torch_route("add", reason))
    if kernel is not None:
        raise TmaConfigError(
            f"add_ with reduce_by={kernel!r} and {reason}: torch's add_ serves an alpha other than 1; "
            "leave reduce_by out (or scale src first)"
        )
    torch_reduce(dst, src, "add", reason, alpha)
    return dst


def checked_alpha(alpha: object) -> object:
    """`add_`'s `alpha`: a number (not a bool), or TmaConfigError naming it."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Number):
        raise TmaConfigError(
            f"add_'s alpha is {alpha!r} ({type(alpha).__name__}); it takes a number, as torch's add_ "
            "(1, the default, is TMA's add)"
        )
    return alpha


def traced_reduce_into_(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: object,
    options: dict[str, Any],
    reduce_by: str | None,
    alpha: object = 1,
) -> torch.Tensor:
    """`reduce_into_` (and `add_`, with its `alpha`) while torch.compile or torch.export traces
    it: `torch.ops.tmakit.reduce_into_` with the call's `strict`, which the trace records as one op
    and which runs the function at run time (TMA, or torch's op where TMA does not serve and the
    call is not strict). A call autograd records is torch's op, traced as such, as outside a trace
    (strict: refused)."""
    strict, alpha = flag(strict, "strict"), checked_alpha(alpha)
    if recorded_by_autograd(dst, src):
        route = torch_route(reduce_op(op), RECORDED_BY_AUTOGRAD)
        if strict:
            raise strict_refusal(route)
        reduce_options(tile, stages, options)  # named if wrong, as on every path
        torch_reduce(dst, src, route.op, route.reason, alpha)
        return dst
    scaled = {} if alpha == 1 else {"alpha": alpha}  # the op's default: the cheaper call
    if tile is None and stages is None and not options and reduce_by is None:
        _ops().reduce_into_.default(dst, src, op, strict=strict, **scaled)
    else:
        _ops().reduce_into_.typed(
            dst, src, op, tile=tile, stages=stages, reduce_by=reduce_by, strict=strict, **options, **scaled
        )
    return dst


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


def reduced(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: bool,
    options: dict[str, Any],
    reduce_by: str | None = None,
    dispatch: Dispatch | None = None,
) -> torch.Tensor:
    """`reduce_into_`'s call: its (op, strict, reduce_by) dispatch (`dispatch`, where the caller
    knows it) on the tensors; out of the plain path
    (`tensors.out_of_the_plain_path`), torch's op for a negative view and where autograd records
    the call (strict: TmaConfigError), else the dispatch on detached views of the same memory
    (under torch.no_grad()), dst's version bumped as torch's in-place ops do."""
    if dispatch is None:
        dispatch = reduce_dispatch(op, strict, options, reduce_by)
    if not out_of_the_plain_path(dst, src):
        before = version_of(dst)
        dispatch.call(dst, src, tile, stages, options)
        count_write(dst, before)  # as torch's in-place ops: a dst saved for backward is caught there
        return dst
    chosen = reduce_options(tile, stages, options)  # named if wrong, on every path
    op = reduce_op(op)
    reason = special_route(dst, src, "reduce_into_")
    if reason is not None and chosen != CopyOptions():  # as on TMA's path, whose dispatch checks its own
        check_reduce_options(detached(dst), detached(src), op, chosen, reduce_by)
    if reason is None:
        before = version_of(dst)
        dispatch.call(detached(dst), detached(src), tile, stages, options)
        count_write(dst, before)
    elif flag(strict, "strict"):
        raise strict_refusal(torch_route(op, reason))
    else:
        torch_reduce(dst, src, op, reason)
    return dst


def reduce_dispatch(
    op: object, strict: object, options: dict[str, Any], reduce_by: object = None
) -> Dispatch:
    """The dispatch of `op`'s calls, strict or not, by the kernel chosen (made at its first call):
    TmaConfigError for an op not in `plan.REDUCE_OPS`, a `strict` that is no flag, a `reduce_by`
    not in `reduce.plan.REDUCE_KERNELS`, and the copy options a reduce does not take (`reduce_options`)."""
    if options and ("as_rows" in options or "bulk" in options):
        reduce_options(None, None, options)
    if type(op) is str and type(strict) is bool and (reduce_by is None or type(reduce_by) is str):
        found = _DISPATCHES.get((op, strict, reduce_by))
        if found is not None:
            return found
    strict = flag(strict, "strict")
    name, kernel = reduce_op(op), chosen_kernel(reduce_by)
    dispatch = _DISPATCHES.get((name, strict, kernel))
    if dispatch is None:
        fallback = (strict_fallback if strict else torch_fallback)(name)
        planner = functools.partial(routed_reduce_launcher, op=name, strict=strict, reduce_by=kernel)
        dispatch = _DISPATCHES.setdefault(
            (name, strict, kernel),
            Dispatch(planner, check_reduce_arguments, fallback, None if strict else pair_guard),
        )
    if type(op) is str:  # torch's name: its next call finds the dispatch at once
        _DISPATCHES[(op, strict, kernel)] = dispatch
    return dispatch


def reduce_path(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", **options: Unpack[CopyKeywords]
) -> Route:
    """The path `reduce_into_(dst, src, op, **options)` takes and why, planned as the call is
    but compiling and launching nothing: the pure decision (`reduce.plan.decide_reduce`, through
    `reduce.call.reduce_decision`) on the tensors' facts, then the route of their own addresses.

    Args:
        dst: the tensor reduced into.
        src: the tensor reduced from.
        op: one of `plan.REDUCE_OPS`, or torch's name for one (`plan.REDUCE_OP_ALIASES`).
        **options: `reduce_into_`'s: tile, stages, strict and the copy's options.

    Returns:
        A `plan.route.Route`: its `path` one of `plan.route.PATHS` ("tma", "tma-view", "empty",
        "torch"), its `reason` the rule that chose it, its `view` the (shape, src strides, dst
        strides) a "tma-view" reduce moves.

    Raises:
        TmaConfigError: what the call itself raises before it launches (wrong arguments, options
        TMA refuses for tensors it serves with its defaults, with `strict=True` anything TMA does
        not serve)."""
    options = dict(with_budget(options))
    tile, stages = options.pop("tile", None), options.pop("stages", None)
    strict = flag(options.pop("strict", False), "strict")
    reduce_by = chosen_kernel(options.pop("reduce_by", None))
    op = reduce_op(op)
    copy_options = reduce_options(tile, stages, options)
    if copy_options != CopyOptions():
        check_reduce_arguments(dst, src)
        check_reduce_options(detached(dst), detached(src), op, copy_options, reduce_by)
    if out_of_the_plain_path(dst, src):
        reason = special_route(dst, src, "reduce_into_")
        if reason is not None:
            return torch_route(op, reason)
        dst, src = detached(dst), detached(src)
    route = reduce_decision(dst, src, op, copy_options, strict, reduce_by).route
    if route.path in TMA_KERNEL_PATHS:  # planned for aligned bases: the route of these addresses
        placed = reduce_route(pair_facts(dst, src), op, reduce_by=reduce_by)
        if not placed.by_tma:
            if strict:
                raise strict_refusal(placed)
            return placed
    return route


# Each (op, strict, reduce_by)'s calls (`reduce_dispatch`); `runtime.dispatch.forget_calls` empties it too.
_DISPATCHES: dict[tuple[str, bool, str | None], Dispatch] = CallTable()
_PLAIN_ADD = ("add", False, None)  # add_'s key with every option left out
