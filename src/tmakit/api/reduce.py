"""`reduce_into_` and `add_`: `dst = dst op src` through TMA reduce stores, on the copy's ring
and with the copy's options and layout rules, and torch's own op for the tensors TMA cannot
serve (`reduce_path` names the path a call takes and why).

Each (op, strict) pair has the copy's dispatch (`runtime.dispatch.CopyDispatch`): a call like one
seen before (both tensors' shapes, strides, dtypes and devices, the options) finds its launcher
by a lookup, or, repeated call after call, tries it first; what the lookup cannot hold, where the
tensors lie, is checked on every call: both base addresses 16-byte aligned, no partial overlap
(torch's op serves unaligned bases and overlaps only an element-wise check can decide)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..config import DTYPES, LoadConfig, contiguous_index, dtype_of, major_of
from ..errors import TmaConfigError
from ..plan import (
    CopyOptions,
    LoadPlan,
    ReducePlan,
    check_copy_shape,
    check_reduce,
    copy_destination,
    reduce_class,
    reduce_op,
    reduce_route,
)
from ..plan.copy_defaults import fits_l2 as copy_fits_l2
from ..plan.reduce import RING_REASON, chosen_kernel, reduce_kernel, reduce_plan
from ..plan.route import Route, torch_route
from ..runtime.dispatch import CopyDispatch, Launcher, TensorFacts
from ..runtime.dispatch import check_no_partial_overlap as dispatch_overlap_check
from ..runtime.launch import copy_launcher, tvm_ffi_available
from ..validate import check_rank, flag
from .copy import class_launcher
from .copy_views import copy_nothing
from .known import calls_table
from .reduce_torch import TORCH_OPS, torch_reduce
from .tensors import (
    bump_version,
    check_tensor_pair,
    check_torch_tensor,
    detached,
    device_facts,
    import_torch,
    out_of_the_plain_path,
    pair_facts,
    special_route,
)

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack  # typing's from Python 3.11

    from ..plan.copy import CopyKeywords


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
    the load-add-store ring instead of reduce stores (`plan.reduce.REDUCE_KERNELS`): the destination's
    tiles loaded beside the source's and added in registers, for adds on fp32, fp16, bf16 and
    int32 of one layout; left out, `plan.reduce.RING_BEYOND_L2` chooses.

    Args:
        dst: the tensor reduced into.
        src: the tensor reduced from, of `dst`'s shape and dtype.
        op: one of `plan.REDUCE_OPS` ("add", "min", "max", "inc", "dec", "and", "or", "xor"), or
            torch's name for one ("sum", "amax", "amin").
        tile, stages: as `copy_`'s.
        strict: raise TmaConfigError where TMA does not serve the call, instead of torch's op.
        reduce_by: "store" (TMA reduce stores) or "ring" (the load-add-store ring); None:
            tmakit's rule. A kernel chosen that cannot serve the call raises, strict or not.
        **options: the copy's (`CopyOptions`) but `as_rows` and `bulk`.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: in either mode for arguments wrong in themselves (not torch tensors, an
            unknown op, unknown or ill-typed options, options TMA refuses for tensors it serves,
            `dst` partly overlapping `src` on a TMA path: the very same view is allowed), for an
            error of torch's op (named); with `strict=True` for anything TMA does not serve,
            before anything compiles or launches."""
    return reduced(dst, src, op, tile, stages, strict, options, reduce_by)


def add_(
    dst: torch.Tensor,
    src: torch.Tensor,
    tile: tuple[int, int] | None = None,
    stages: int | None = None,
    *,
    strict: bool = False,
    reduce_by: str | None = None,
    **options: Unpack[CopyKeywords],
) -> torch.Tensor:
    """dst += src: `reduce_into_(dst, src, "add", ...)`.

    Args:
        dst, src, tile, stages, strict, reduce_by, **options: as `reduce_into_`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `reduce_into_`."""
    return reduced(dst, src, "add", tile, stages, strict, options, reduce_by)


def reduced(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    tile: tuple[int, int] | None,
    stages: int | None,
    strict: bool,
    options: dict[str, Any],
    reduce_by: str | None = None,
) -> torch.Tensor:
    """`reduce_into_`'s call: its (op, strict) dispatch on the tensors; out of the plain path
    (`tensors.out_of_the_plain_path`), torch's op for a negative view and where autograd records
    the call (strict: TmaConfigError), else the dispatch on detached views of the same memory
    (under torch.no_grad()), dst's version bumped as torch's in-place ops do."""
    dispatch = reduce_dispatch(op, strict, options, reduce_by)
    if not out_of_the_plain_path(dst, src):
        dispatch.copy_(dst, src, tile, stages, options)
        return dst
    reduce_options(tile, stages, options)  # named if wrong, on every path
    op = reduce_op(op)
    reason = special_route(dst, src, "reduce_into_")
    if reason is None:
        dispatch.copy_(detached(dst), detached(src), tile, stages, options)
        bump_version(dst)
    elif flag(strict, "strict"):
        raise strict_refusal(torch_route(op, reason))
    else:
        torch_reduce(dst, src, op, reason)
    return dst


def reduce_dispatch(
    op: object, strict: object, options: dict[str, Any], reduce_by: object = None
) -> CopyDispatch:
    """The dispatch of `op`'s calls, strict or not, by the kernel chosen (made at its first call):
    TmaConfigError for an op not in `plan.REDUCE_OPS`, a `strict` that is no flag, a `reduce_by`
    not in `plan.reduce.REDUCE_KERNELS`, and the copy options a reduce does not take (`reduce_options`)."""
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
        fallback = functools.partial(strict_fallback if strict else torch_fallback, name)
        planner = functools.partial(routed_reduce_launcher, op=name, strict=strict, reduce_by=kernel)
        dispatch = _DISPATCHES.setdefault(
            (name, strict, kernel), CopyDispatch(planner, check_reduce_arguments, fallback)
        )
    if type(op) is str:  # torch's name: its next call finds the dispatch at once
        _DISPATCHES[(op, strict, kernel)] = dispatch
    return dispatch


def reduce_path(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", **options: Unpack[CopyKeywords]
) -> Route:
    """The path `reduce_into_(dst, src, op, **options)` takes and why, planned as the call is
    but compiling and launching nothing.

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
    tile, stages = options.pop("tile", None), options.pop("stages", None)
    strict = flag(options.pop("strict", False), "strict")
    reduce_by = chosen_kernel(options.pop("reduce_by", None))
    op = reduce_op(op)
    copy_options = reduce_options(tile, stages, options)
    if out_of_the_plain_path(dst, src):
        reason = special_route(dst, src, "reduce_into_")
        if reason is not None:
            return torch_route(op, reason)
        dst, src = detached(dst), detached(src)
    route, _ = plan_reduce_call(dst, src, op, copy_options, strict, reduce_by)
    if route.path in TMA_KERNEL_PATHS:  # planned for aligned bases: the route of these addresses
        placed = reduce_route(pair_facts(dst, src), op, reduce_by=reduce_by)
        if not placed.by_tma:
            if strict:
                raise strict_refusal(placed)
            return placed
    return route


TMA_KERNEL_PATHS = ("tma", "tma-view")  # the paths that launch a reduce kernel
FALLBACK_REASON = (
    "TMA cannot take a base address, or dst and src meet in memory in layouts only an element-wise "
    "check tells apart"
)


@dataclass(frozen=True)
class ReduceKernel:
    """A planned TMA reduce, not yet compiled: its plan, the destination's layout where it is not
    the source's, and the view each tensor is launched as (element strides on `shape`; None:
    the tensor as it is)."""

    plan: ReducePlan
    destination: LoadConfig | None
    shape_generic: bool
    device: str
    shape: tuple[int, ...]
    src_strides: tuple[int, ...] | None
    dst_strides: tuple[int, ...] | None

    def launcher(self) -> Launcher:
        """The compiled launcher (src, dst), on the views TMA takes."""
        if self.shape_generic:
            compiled = class_launcher(self.plan, self.destination, None, self.device)
        else:
            compiled = copy_launcher(self.plan, self.destination, None, self.device)
        shape, src_strides, dst_strides = self.shape, self.src_strides, self.dst_strides
        if src_strides is None and dst_strides is None:
            return compiled

        def launch(src: torch.Tensor, dst: torch.Tensor) -> None:
            compiled(
                src if src_strides is None else src.as_strided(shape, src_strides),
                dst if dst_strides is None else dst.as_strided(shape, dst_strides),
            )

        # Views of fixed strides: pinned to the shape and strides they were planned for, and only
        # where the compiled function checks the rest (dtype, device, alignment) itself.
        launch.checks_arguments = getattr(compiled, "checks_arguments", False)
        launch.shape_generic = launch.checks_arguments
        return launch


def routed_reduce_launcher(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    facts: TensorFacts,
    op: str,
    strict: bool,
    reduce_by: str | None = None,
) -> Launcher:
    """`CopyDispatch`'s planner of a new reduce configuration: the launcher of its route (the
    kernel compiled here, at its first launch; `reduce_path` plans and never compiles). The
    options' `as_rows`/`bulk` were refused before (`reduce_dispatch`)."""
    route, kernel = plan_reduce_call(dst, src, op, options, strict, reduce_by)
    if route.path == "empty":
        return copy_nothing
    if kernel is None:
        return torch_launcher(op, route.reason)
    return kernel.launcher()


def torch_launcher(op: str, reason: str) -> Launcher:
    """A launcher (src, dst) of torch's op, for any address."""

    def launch(src: torch.Tensor, dst: torch.Tensor) -> None:
        torch_reduce(dst, src, op, reason)

    launch.any_address = True
    return launch


def torch_fallback(op: str, src: torch.Tensor, dst: torch.Tensor) -> None:
    """torch's op on a call whose addresses TMA cannot take (`CopyDispatch`'s fallback)."""
    torch_reduce(dst, src, op, FALLBACK_REASON)


def strict_fallback(op: str, src: torch.Tensor, dst: torch.Tensor) -> None:
    """A strict call's `CopyDispatch` fallback: TmaConfigError naming the base TMA cannot take,
    or the overlap only an element-wise check could decide."""
    route = reduce_route(pair_facts(dst, src), op)
    if not route.by_tma:
        raise strict_refusal(route)
    check_no_partial_overlap(dst, src)
    raise strict_refusal(torch_route(op, FALLBACK_REASON))


def check_reduce_arguments(dst: object, src: object) -> None:
    """What a call whose shapes and strides cannot be read is: TmaConfigError naming it."""
    check_torch_tensor(dst, "reduce_into_", "dst")
    check_torch_tensor(src, "reduce_into_", "src")


# Each (op, strict) pair's calls (`reduce_dispatch`); `known.forget_calls` empties it too.
_DISPATCHES: dict[tuple[str, bool, str | None], CopyDispatch] = calls_table()


def plan_reduce_call(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    copy_options: CopyOptions,
    strict: bool,
    reduce_by: str | None = None,
) -> tuple[Route, ReduceKernel | None]:
    """A new call's checks in full: the tensors, the route (for 16-byte aligned bases: each call
    checks its own) and a TMA route's kernel (None on torch's and the empty path) on the kernel
    `reduce_by` chose or the rule gives (`plan.reduce.reduce_kernel`). A TMA route the planner
    refuses becomes torch's, with the planner's reason, unless the refusal is of options the
    caller chose (a `reduce_by` among them). Where the rule's ring cannot take the call, reduce
    stores do."""
    import_torch("reduce_into_")
    check_torch_tensor(dst, "reduce_into_", "dst")
    check_torch_tensor(src, "reduce_into_", "src")
    if strict:
        check_reduce_tensors(dst, src, op)
    facts = replace(pair_facts(dst, src), src_address=0, dst_address=0)
    l2_bytes = None if facts.src_device < 0 else device_facts(dst.device)[1]
    route = reduce_route(facts, op, l2_bytes, reduce_by, strict)
    kernel = None
    if route.path in TMA_KERNEL_PATHS:
        moved = 3 * src.numel() * facts.nbytes
        by = reduce_kernel(reduce_by, reduce_op(op), facts.src_dtype, moved, l2_bytes)
        kernel, error = planned_or_refused(dst, src, route, op, copy_options, by)
        if kernel is None and reduce_by is None and by == "ring":
            # the rule's ring cannot take the call (layouts that differ, a depth for one tile a
            # stage): reduce stores serve it
            route, by = replace(route, reason=route.reason.removesuffix(RING_REASON)), "store"
            kernel, error = planned_or_refused(dst, src, route, op, copy_options, by)
        if kernel is None:
            if strict or reduce_by is not None:  # what the call asked for is refused, naming why
                raise error
            if copy_options != _DEFAULT_REDUCE_OPTIONS and serves_by_default(dst, src, route, op, by):
                raise TmaConfigError(
                    f"{error} (with the default options TMA serves these tensors: leave the options out)"
                ) from error
            route = torch_route(op, str(error))
    if route.path == "torch" and strict:
        raise strict_refusal(route)
    return route, kernel


def planned_or_refused(
    dst: torch.Tensor, src: torch.Tensor, route: Route, op: str, options: CopyOptions, kernel: str
) -> tuple[ReduceKernel | None, TmaConfigError | None]:
    """(the planned kernel, None), or (None, the planner's refusal)."""
    try:
        return plan_reduce(dst, src, route, op, options, kernel), None
    except TmaConfigError as error:
        return None, error


def serves_by_default(
    dst: torch.Tensor, src: torch.Tensor, route: Route, op: str, kernel: str = "store"
) -> bool:
    """Whether the planner takes this TMA route with the default options, on `kernel`."""
    try:
        plan_reduce(dst, src, route, op, _DEFAULT_REDUCE_OPTIONS, kernel)
    except TmaConfigError:
        return False
    return True


def strict_refusal(route: Route) -> TmaConfigError:
    """The error of a `strict=True` call whose route is torch's: the rule, and the way out."""
    return TmaConfigError(
        f"reduce_into_ {route.op} with strict=True: TMA cannot serve these tensors: {route.reason}; "
        f"without strict=True torch's {TORCH_OPS[route.op]} serves them"
    )


_DEFAULT_REDUCE_OPTIONS = CopyOptions()


def reduce_options(tile: tuple[int, int] | None, stages: int | None, options: dict[str, Any]) -> CopyOptions:
    """A reduce's `CopyOptions` (the defaults, built once, when none is given). TmaConfigError for
    an unknown name, and for `as_rows`/`bulk`: a reduce stores through the tensors' own tensor
    maps (`ReducePlan`), not a rows view's or plain bulk copies."""
    if tile is None and stages is None and not options:
        return _DEFAULT_REDUCE_OPTIONS
    chosen = CopyOptions.of(**{"tile": tile, "stages": stages, **options})
    if chosen.as_rows or chosen.bulk:
        raise TmaConfigError(
            "reduce_into_ takes the copy's options but as_rows and bulk: a reduce stores through "
            "the tensors' own tensor maps"
        )
    return chosen


def check_reduce_tensors(dst: object, src: object, op: str) -> None:
    """What a strict reduce's tensors must be before their layouts are read: torch tensors with
    memory, of one shape and a dtype `op` reduces, on one CUDA device, not partly overlapping."""
    check_tensor_pair(
        dst,
        src,
        "reduce_into_",
        "a reduce combines elements of one shape and dtype",
        lambda dtype: check_reduce(op, dtype_of(dtype)),
    )
    check_no_partial_overlap(dst, src)


def check_no_partial_overlap(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Refuse a `dst` that shares memory with `src` other than as the very same view
    (`runtime.dispatch.check_no_partial_overlap`); disjoint slices of one tensor pass."""
    if dst.numel():
        dispatch_overlap_check(dst, src, tuple(src.shape), src.stride(), dst.stride())


def plan_reduce(
    dst: torch.Tensor,
    src: torch.Tensor,
    route: Route,
    op: str,
    options: CopyOptions = _DEFAULT_REDUCE_OPTIONS,
    kernel: str = "store",
) -> ReduceKernel:
    """Check a TMA route's layouts (the copy's rules, on the route's view where it has one) and
    plan its kernel: the shape-generic class's where TVM-FFI is installed (`plan.reduce_class`,
    this shape checked by `plan.check_copy_shape`), else a kernel for this shape. Compiles
    nothing. `options`: `reduce_options`; `kernel`: one of `plan.reduce.REDUCE_KERNELS`."""
    dtype = dtype_of(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    sm_count, l2_bytes = device_facts(src.device)
    if route.view is None:
        shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    else:
        shape, src_strides, dst_strides = route.view
    check_rank(len(shape))
    src_major, dst_major = major_of(src_strides, shape), major_of(dst_strides, shape)
    transpose = src_major != dst_major
    tile = options.default_tile(dtype, transpose, None, sm_count)
    fits_l2 = copy_fits_l2(src.numel() * nbytes, l2_bytes)
    device = str(src.device)
    as_view = route.view is not None  # launched on views of these strides
    if not tvm_ffi_available():
        source = LoadConfig(shape, dtype, tile, 0, src_major, src_strides)
        destination = LoadConfig(shape, dtype, tile, 0, dst_major, dst_strides)
        LoadPlan(destination)  # its strides and the tile, checked as the source's are
        copy = options.plan(LoadPlan(source), transpose, sm_count, fits_l2)
        reduce = reduce_plan(copy, op, kernel, options.stages is not None)
        same_layout = source.element_strides == destination.element_strides
        views = (src_strides, dst_strides) if as_view else (None, None)
        return ReduceKernel(reduce, None if same_layout else destination, False, device, shape, *views)
    rank = len(shape)
    reduce = reduce_class(
        options, op, dtype, rank, src_major, transpose, tile, sm_count, fits_l2, kernel=kernel
    )
    contiguous = (contiguous_index(src_major, rank), contiguous_index(dst_major, rank))
    fixed_src, fixed_dst = check_copy_shape(
        reduce.copy, shape, (src_strides, dst_strides), contiguous, nbytes
    )
    if as_view:
        fixed_src, fixed_dst = fixed_src or src_strides, fixed_dst or dst_strides
    destination = copy_destination(reduce.copy) if transpose else None
    return ReduceKernel(reduce, destination, True, device, shape, fixed_src, fixed_dst)
