"""The layout rules of a copy's (or reduce's) tensors that hold whatever the tile: a rows view's,
or the strided path's; and a pair's copy class planned from its layout (`plan_pair`). Pure
Python: what `api.copy` plans with and what the torch ops' fake implementations check while
tracing, on static strides."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config import DTYPES, ROW_VIEW_WIDTHS, contiguous_index, is_compact, major_of, rows_view
from ..errors import TmaConfigError
from ..validate import check_outer_strides, check_rank
from .copy import CopyOptions, CopyPlan, default_as_rows
from .copy_class import check_copy_shape, copy_class
from .copy_defaults import fits_l2 as copy_fits_l2
from .route import PairFacts, Route, copy_route, moved_dtype


def copy_rows_view(
    options: CopyOptions, shape: tuple[int, ...], dtype: str, strides: tuple[tuple, tuple], compact: bool
) -> tuple[int, int] | None:
    """The rows view (`config.rows_view`) a copy of `compact` tensors (both contiguous, one layout)
    takes with `as_rows` or `bulk`; None: the strided path. TmaConfigError for a bulk copy that
    has none."""
    numel = math.prod(shape)
    view = rows_view(numel, DTYPES[dtype].nbytes) if compact and (options.as_rows or options.bulk) else None
    if options.bulk and view is None:
        raise TmaConfigError(
            f"bulk copy of {shape} {dtype} with strides {strides[0]} into {strides[1]}: it needs both "
            f"tensors compact (contiguous) and a number of elements that {min(ROW_VIEW_WIDTHS)} divides"
        )
    return view


def check_copy_layout(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    dtype: str,
    options: CopyOptions | None = None,
    compact: bool = False,
) -> None:
    """The layout rules a copy's (or reduce's) tensors of `shape` meet whatever the tile: a rows
    view's (`copy_rows_view`, with `options` and `compact`), or the strided path's: rank 2..5, a
    stride-1 dim among the last two, outer strides TMA takes (what a trace's fake implementation
    can check on static strides; `plan_copy` checks them with the class)."""
    if 0 in shape:
        return
    if options is not None and copy_rows_view(options, shape, dtype, (src_strides, dst_strides), compact):
        return
    nbytes = DTYPES[dtype].nbytes
    check_rank(len(shape))
    for name, strides in (("src", src_strides), ("dst", dst_strides)):
        contiguous = contiguous_index(major_of(strides, shape), len(shape))
        check_outer_strides(shape, strides, nbytes, contiguous, name=name)


@dataclass(frozen=True)
class PairPlan:
    """A pair's copy planned from its layout: the options as planned (a rows view's where the
    defaults take one), the rows view it copies where it takes one (`copy_rows_view`), its tile,
    whether it changes the layout, whether both tensors fit in the L2, each tensor's major mode,
    and its shape-generic class (`copy_class`, None where not asked for) with the index of each
    tensor's stride-1 dim (None for a rows view)."""

    options: CopyOptions
    view: tuple[int, int] | None
    tile: tuple[int, int]
    transpose: bool
    fits_l2: bool
    majors: tuple[str, str]
    copy: CopyPlan | None = None
    contiguous: tuple[int, int] | None = None


def plan_pair(
    options: CopyOptions,
    dtype: str,
    shape: tuple[int, ...],
    strides: tuple[tuple[int, ...], tuple[int, ...]],
    compact: bool,
    device: tuple[int, int],
    classed: bool = True,
) -> PairPlan:
    """A copy of `shape` (`strides`: the source's and the destination's; `compact`: both
    contiguous) on a GPU of `device` = (SM count, L2 bytes); `classed`: with its shape-generic
    class and this shape's checks (`check_copy_shape`), TmaConfigError naming the first rule the
    options or the layout break. What `api.copy_` plans on the GPU, and what checks the options
    given on any device."""
    sm_count, l2_bytes = device
    nbytes = DTYPES[dtype].nbytes
    numel = math.prod(shape)
    majors = major_of(strides[0], shape), major_of(strides[1], shape)
    transpose = majors[0] != majors[1]
    fits_l2 = copy_fits_l2(numel * nbytes, l2_bytes)
    if default_as_rows(options, transpose, compact, fits_l2, numel, nbytes):
        options = CopyOptions(as_rows=True)
    rows = (options.as_rows or options.bulk) and not transpose and compact
    view = copy_rows_view(options, shape, dtype, strides, rows)
    tile = options.default_tile(dtype, transpose, view, sm_count, numel * nbytes)
    layout = PairPlan(options, view, tile, transpose, fits_l2, majors)
    if not classed:
        return layout
    if view is not None:
        copy = copy_class(options, dtype, 2, "row", False, tile, sm_count, fits_l2, rows_width=view[1])
        check_copy_shape(copy, view, ((view[1], 1),), (1,), nbytes)
        return replace(layout, copy=copy)
    check_rank(len(shape))
    contiguous = contiguous_index(majors[0], len(shape)), contiguous_index(majors[1], len(shape))
    copy = copy_class(options, dtype, len(shape), majors[0], transpose, tile, sm_count, fits_l2)
    check_copy_shape(copy, shape, strides, contiguous, nbytes)  # before anything compiles
    return replace(layout, copy=copy, contiguous=contiguous)


# The words a route's reason gains where the defaults copy a compact pair as rows (`plan_pair`).
AS_ROWS_BEYOND_L2 = "as rows of its memory: beyond the L2"


@dataclass(frozen=True)
class CopyDecision:
    """What a copy call does, decided before anything is launched: its `route` (`Route`: path and
    reason) and, on a TMA route, the plan of the pair it moves (`PairPlan`, with its class)."""

    route: Route
    pair: PairPlan | None = None


def decide_copy(
    facts: PairFacts, options: CopyOptions, device: tuple[int, int], l2_rule: int | None
) -> CopyDecision:
    """The decision of a copy of `facts`' tensors with `options` on a GPU of `device` = (SM count,
    L2 bytes). Options given are planned first on the route a strict call takes, so that whatever
    then serves the call, options its planner refuses raise. Then the route `copy_route` gives
    (`l2_rule`: the L2 its measured rule reads, None for a strict call or tensors off a GPU) and,
    on a TMA route, its pair planned as the call plans it (`plan_pair` on the route's view and
    moved dtype). A TMA route whose planner refuses the tensors becomes torch's, with the
    planner's words as its reason. What `copy_path` and `tmakit plan`/`explain --kernel copy` read."""
    given = options != CopyOptions()
    if given:
        strict = copy_route(facts)
        if strict.path not in ("torch", "empty"):
            plan_route(facts, strict, options, device)  # the planner's refusal, raised
    route = copy_route(facts, l2_bytes=l2_rule)
    if route.path in ("torch", "empty"):
        return CopyDecision(route)
    try:
        pair = plan_route(facts, route, options, device)
    except TmaConfigError as error:
        if given:
            raise  # the options given are what TMA cannot take here
        return CopyDecision(Route(route.op, "torch", str(error)))
    compact = route.view is None and is_compact(facts.src.shape, facts.src.strides)
    if compact and is_compact(facts.dst.shape, facts.dst.strides) and pair.view is not None and not given:
        route = replace(route, reason=f"{route.reason}, {AS_ROWS_BEYOND_L2}")
    return CopyDecision(route, pair)


def plan_route(facts: PairFacts, route: Route, options: CopyOptions, device: tuple[int, int]) -> PairPlan:
    """The pair a TMA `route` of `facts`' tensors moves, planned (`plan_pair`): its view where it
    takes one, its moved dtype."""
    shape, src_strides, dst_strides = route.view or (facts.src.shape, facts.src.strides, facts.dst.strides)
    compact = is_compact(shape, src_strides) and is_compact(shape, dst_strides)
    return plan_pair(
        options, moved_dtype(facts.src.dtype), shape, (src_strides, dst_strides), compact, device
    )
