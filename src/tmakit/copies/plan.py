"""The copy's decision, pure Python: which path serves a copy (`copy_route`) and the pair it
moves planned from its layout (`plan_pair`), together `decide_copy`, what `copy_path`, the call
and `tmakit plan`/`explain --kernel copy|transpose` read. The facts a route is a function of
(shapes, strides, dtype names, element size, base addresses, device indices) are read off the
tensors by the API.

A copy's route, in order (`copy_route`):

1. torch's `copy_` for what no TMA path takes (`plan.route.torch_pair_rule`, a reduce's too):
   tensors not on one CUDA device, a dtype change, a broadcast source, a bit torch applies lazily
   (a conjugate or negative view), a destination that may overlap itself; then a dtype with no
   same-size type TMA moves, and a base address that is not 16-byte aligned;
2. nothing to move: an empty copy; then torch's `copy_` for a compact copy of one layout on an SM
   budget (`ON_THE_COPY_ENGINE`: the copy engine, no SM; never for a strict call), and for one past
   `TORCH_FASTER_BEYOND_L2["copy"]` of the L2 (`BY_THE_DRIVER`: the driver's memcpy, measured
   faster there; never for a strict call, which asks for TMA);
3. TMA as the tensors are laid out: rank 2 to 5, a stride-1 dim among the last two, outer strides
   multiples of 16 bytes (the copy's own planner has the last word on these);
4. TMA on the canonical view of the same memory (`plan.route.canonical_pair`): dims permuted
   together so the source's stride-1 dim comes last, runs both tensors walk contiguously merged,
   extent-1 dims dropped; a compact run becomes a rows view (`config.rows_view`), or rows with a
   tail of fewer than a row's elements that torch's copy_ moves;
5. else torch's `copy_`, with the rule that failed as the reason.

A dtype TMA has no type for is moved as the same-size type it has (`config.MOVED_AS`): a copy
moves bits, so bool moves as uint8 and float64 as int64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config import DTYPES, ROW_VIEW_WIDTHS, contiguous_index, is_compact, major_of, rows_view
from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN, GLOBAL_STRIDE_ALIGN
from ..plan.copy import CopyOptions, CopyPlan, default_as_rows
from ..plan.copy_class import check_copy_shape, copy_class
from ..plan.copy_defaults import fits_l2 as copy_fits_l2
from ..plan.copy_layout import copy_rows_view
from ..plan.route import (
    PairFacts,
    Route,
    canonical_pair,
    moved_as_dtype,
    moved_dtype,
    strided_rule,
    torch_faster,
    torch_pair_rule,
    torch_route,
)
from ..plan.tuning import TUNING
from ..validate import check_rank

# From what size a captured copy past the L2 takes torch's element-wise kernel: measured, justified
# in `plan.tuning`.
GRAPH_MEMCPY_MOST_BYTES: int = TUNING["GRAPH_MEMCPY_MOST_BYTES"].value
# The reason of a copy `plan.route.TORCH_FASTER_BEYOND_L2` gives torch (`views.driver_launcher`).
BY_THE_DRIVER = (
    "a row-major copy of one layout past the L2: the driver's memcpy (torch's copy_), measured faster "
    f"there; inside a CUDA graph past {GRAPH_MEMCPY_MOST_BYTES >> 20} MiB, torch's element-wise kernel on "
    "the same bits (a graph's memcpy node is slower there)"
)

# The reason of a budgeted compact copy of one layout (`copy_route`): torch's copy_, whose
# cudaMemcpyAsync runs on the copy engine.
ON_THE_COPY_ENGINE = (
    "a compact copy of one layout on an SM budget: the copy engine (torch's copy_, the driver's "
    "memcpy), which takes no SM; strict=True asks for TMA"
)


def copy_route(
    facts: PairFacts, op: str = "copy_", l2_bytes: int | None = None, budgeted: bool = False
) -> Route:
    """The route of a copy of `facts`' tensors (the module's docstring gives the order). The
    copy's planner may still refuse a "tma" or "tma-view" route for what only it checks (its
    tile against the shape); the API then takes torch's path with that reason. `l2_bytes`: the
    device's L2, for the measured rule (None: a pure plan, a strict call); `budgeted`: the call
    runs on an SM budget (`plan.budget`), whose compact copy of one layout takes the copy engine
    (`ON_THE_COPY_ENGINE`) where the measured rule applies."""
    dst, src = facts.dst, facts.src
    shared = torch_pair_rule(
        facts, op, "they must match (tmakit.copy(src) allocates a matching one)", "TMA moves bits"
    )
    if shared is not None:
        return shared
    dtype = moved_dtype(src.dtype)
    if dtype is None:
        return torch_route(op, f"TMA has no {src.nbytes}-byte type for {src.dtype}")
    moved_as = moved_as_dtype(src.dtype)
    if 0 in dst.shape:
        return Route(op, "empty", "no element to move", moved_as)
    for name, address in (("src", src.address), ("dst", dst.address)):
        if address % GLOBAL_BASE_ALIGN:
            return torch_route(op, f"{name}'s base address is not {GLOBAL_BASE_ALIGN}-byte aligned")
    if budgeted and l2_bytes is not None and one_compact_layout(facts):
        return torch_route(op, ON_THE_COPY_ENGINE)
    if by_the_driver(facts, l2_bytes):
        return torch_route(op, BY_THE_DRIVER)
    as_laid_out = strided_rule(dst.shape, src.strides, dst.strides, src.nbytes)
    if as_laid_out is None:
        return Route(op, "tma", "the tensors as laid out", moved_as)
    shape, src_strides, dst_strides = canonical_pair(dst.shape, src.strides, dst.strides)
    if len(shape) == 1 and src_strides == dst_strides == (1,):
        return compact_route(op, shape[0], src.nbytes, moved_as)
    if len(shape) == 1:
        name, step = ("src", src_strides[0]) if src_strides[0] != 1 else ("dst", dst_strides[0])
        return torch_route(op, f"{name} walks its memory {step} elements apart; TMA needs a stride-1 dim")
    broken = strided_rule(shape, src_strides, dst_strides, src.nbytes)
    if broken is not None:
        return torch_route(op, broken)
    return Route(op, "tma-view", "a view of the same memory", moved_as, (shape, src_strides, dst_strides))


def by_the_driver(facts: PairFacts, l2_bytes: int | None) -> bool:
    """Whether `TORCH_FASTER_BEYOND_L2` gives a copy to the driver's memcpy: row-major, one
    layout, both streams past its share of the L2."""
    if l2_bytes is None or not one_compact_layout(facts):
        return False
    moved = 2 * math.prod(facts.dst.shape) * facts.src.nbytes
    return torch_faster("copy", facts.src.dtype, moved, l2_bytes)


def one_compact_layout(facts: PairFacts) -> bool:
    """Whether both tensors are compact, row-major, with the same strides: bytes the driver's
    memcpy moves as they lie."""
    return facts.src.strides == facts.dst.strides and is_compact(facts.dst.shape, facts.src.strides)


def compact_route(op: str, numel: int, nbytes: int, moved_as: str | None) -> Route:
    """A compact run's route: rows of the widest `ROW_VIEW_WIDTHS` that divides it, else rows of
    the widest it fills with the last `tail` elements (fewer than a row) copied by torch's copy_
    after them; torch's alone for a run shorter than a row."""
    view = rows_view(numel, nbytes)
    if view is not None:
        return Route(op, "tma-rows", f"a compact run as {view[0]} x {view[1]} rows", moved_as, rows_of(view))
    for width in ROW_VIEW_WIDTHS:
        if width * nbytes % GLOBAL_STRIDE_ALIGN == 0 and numel >= width:
            rows, tail = divmod(numel, width)
            reason = f"a compact run as {rows} x {width} rows, its last {tail} elements by torch's copy_"
            return Route(op, "tma-rows", reason, moved_as, rows_of((rows, width)), tail)
    return torch_route(op, f"a compact run of {numel} elements, shorter than a row of TMA's")


def rows_of(view: tuple[int, int]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A rows view's (shape, src strides, dst strides)."""
    return view, (view[1], 1), (view[1], 1)


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
    options or the layout break. What `copy_` plans on the GPU, and what checks the options
    given on any device."""
    sm_count, l2_bytes = device
    nbytes = DTYPES[dtype].nbytes
    numel = math.prod(shape)
    majors = major_of(strides[0], shape), major_of(strides[1], shape)
    transpose = majors[0] != majors[1]
    fits_l2 = copy_fits_l2(numel * nbytes, l2_bytes)
    if default_as_rows(options, transpose, compact, fits_l2, numel, nbytes):
        options = _AS_ROWS
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


# The options a compact pair beyond the L2 is planned with (built once: `CopyOptions` checks its
# fields' types as it is made).
_AS_ROWS = CopyOptions(as_rows=True)

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
    route = copy_route(facts, l2_bytes=l2_rule, budgeted=options.sms is not None)
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
