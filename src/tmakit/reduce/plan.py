"""TMA reduce stores (`tmakit.reduce_into_`): the plan of a reduce, a copy whose stores combine
each element with the destination's, and the route a reduce's tensors take (`reduce_route`). Pure
Python. Which (op, dtype) pairs the hardware reduces is the core's table (`plan.reduce_ops`).

A reduce runs on one of two kernels (`REDUCE_KERNELS`): "store", TMA reduce stores (the L2
combines each element as the store lands), or "ring", a load-add-store ring (the destination's tile
loaded beside the source's, the consumer warps combining them in registers, one plain TMA store
writing the result back); `reduce_kernel` picks one per call from `RING_BEYOND_L2`.

A reduce's route, in order (`reduce_route`), is the copy's (`plan.route`) less its moved-as types:
a reduce does arithmetic, so a dtype the table lacks for the op is torch's, never moved as another.

1. torch's op for what no TMA path takes: the rules a copy's route shares
   (`route.torch_pair_rule`: not one CUDA device, a dtype change, a broadcast source, a lazily
   applied bit, a destination that may overlap itself), an (op, dtype) pair the table lacks;
2. nothing to reduce: an empty destination;
3. torch's op for a base address TMA cannot take (not 16-byte aligned), and for a call
   `route.TORCH_FASTER_BEYOND_L2` gives torch (an add past 40% of the L2, a call that chose no
   kernel and is not strict);
4. TMA as the tensors are laid out (`route.strided_rule`);
5. TMA on the canonical view of the same memory (`route.canonical_pair`; a compact run as
   rows, `config.rows_view`, a rank-2 row-major view);
6. else torch's op, with the rule that failed as the reason.

`decide_reduce` is the whole decision of a call on its tensors' facts: that route, then a TMA
route's reduce planned as the call plans it (`ReduceDecision`); what `reduce_path` and `tmakit
plan`/`explain --kernel reduce` read.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import DTYPES, LoadConfig, contiguous_index, dtype_of, major_of, rows_view
from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..plan.copy import CopyOptions, CopyPlan
from ..plan.copy_class import check_copy_shape, copy_class
from ..plan.copy_defaults import fits_l2 as copy_fits_l2
from ..plan.load import LoadPlan
from ..plan.reduce_ops import REDUCE_DTYPES, check_reduce, reduce_op
from ..plan.ring import check_stages, stages_fitting
from ..plan.route import (
    PairFacts,
    Route,
    canonical_pair,
    strided_rule,
    torch_faster,
    torch_pair_rule,
    torch_route,
)
from ..plan.tuning import TUNING, BeyondL2
from ..validate import check_field_types, check_rank, one_of

# How a reduce combines (`ReducePlan.kernel`): TMA reduce stores, or the load-add-store ring.
REDUCE_KERNELS = ("store", "ring")
RING_REASON = "; the load-add-store ring"  # a route's reason ends so where the ring serves it
# The ops and dtypes the ring computes in registers: adds, fp16 and bf16 in fp32 and rounded once
# (as torch's add_ computes them), fp32 and int32 (wrapping) as they are.
RING_DTYPES: dict[str, tuple[str, ...]] = {"add": ("fp32", "fp16", "bf16", "int32")}
# The ring's consumer warps: they add every element of a stage, 16 bytes a thread at a time.
RING_CONSUMER_WARPS = 4


# op -> where TMA runs a reduce on the ring instead of reduce stores (`BeyondL2`: the call's three
# streams, src read and dst read and written, past that share of the L2, on those torch dtypes), as
# measured (`plan.tuning`). Where `route.TORCH_FASTER_BEYOND_L2` gives torch the call, the ring
# serves strict calls and calls that choose it.
RING_BEYOND_L2: dict[str, BeyondL2] = TUNING["RING_BEYOND_L2"].value


def moved_bytes(facts: PairFacts) -> int:
    """What a reduce moves, the measure the rule tables compare with the L2: its three streams
    (src read, dst read and written)."""
    return 3 * math.prod(facts.dst.shape) * facts.src.nbytes


def reduce_kernel(chosen: str | None, op: str, dtype: str, moved: int, l2_bytes: int | None) -> str:
    """The kernel a reduce on `dtype` (torch's name) moving `moved` bytes (`moved_bytes`) runs on,
    one of `REDUCE_KERNELS`: the one `chosen` (the call's `reduce_by`), else the ring where
    `RING_BEYOND_L2` gives it the call (never without an L2 size: a pure plan), else reduce
    stores."""
    if chosen is not None:
        return chosen
    rule = RING_BEYOND_L2.get(op)
    return "ring" if rule is not None and rule.covers(dtype, moved, l2_bytes) else "store"


def chosen_kernel(reduce_by: object) -> str | None:
    """A call's `reduce_by`: None (the rule's choice, `reduce_kernel`) or one of `REDUCE_KERNELS`;
    TmaConfigError naming them otherwise."""
    return None if reduce_by is None else str(one_of(reduce_by, "reduce_by", REDUCE_KERNELS))


def check_ring(op: str, dtype: str) -> None:
    """Refuse an (op, dtype) the load-add-store ring does not compute (TmaConfigError naming both
    and what it takes)."""
    op = reduce_op(op)
    if dtype not in RING_DTYPES.get(op, ()):
        takes = "; ".join(f"{name} on {', '.join(types)}" for name, types in RING_DTYPES.items())
        raise TmaConfigError(
            f"reduce op {op!r} with dtype {dtype} on the load-add-store ring (reduce_by='ring'): it "
            f"computes {takes} only; reduce_by='store' (TMA reduce stores) or torch's op serves the rest"
        )


def check_ring_layouts(transpose: bool) -> None:
    """Refuse a layout-changing pair on the ring, which combines tiles of one layout."""
    if transpose:
        raise TmaConfigError(
            "the load-add-store ring (reduce_by='ring') combines tiles of one layout; source and "
            "destination are laid out differently: reduce_by='store' takes them"
        )


def ring_copy(copy: CopyPlan, stages_given: bool) -> CopyPlan:
    """`copy` as the load-add-store ring runs it: `RING_CONSUMER_WARPS` consumer warps, and (when
    the call chose no depth) as many of its stages as fit with two tiles a stage."""
    ring = copy.ring
    fitting = max(1, stages_fitting(2 * ring.stage_bytes))  # none: `ReducePlan` says one does not fit
    stages = ring.stages if stages_given else min(ring.stages, fitting)
    ring = dataclasses.replace(ring, consumer_warps=RING_CONSUMER_WARPS, stages=stages)
    return dataclasses.replace(copy, ring=ring)


@dataclass(frozen=True)
class ReducePlan:
    """A copy whose TMA stores reduce into the destination (`op`, one of `plan.REDUCE_OPS`): the ring,
    the stores in flight, the transposing staging tiles and the store hint are the copy's
    (`CopyPlan`); each element of the destination receives exactly one reduction, from the tile
    that holds it. Bulk copies (non-tensor `cp.async.bulk`) have no reduce form here.

    `kernel` "ring" (`REDUCE_KERNELS`): the load-add-store ring instead. Each stage holds the
    source's tile and the destination's (the full barrier expects both), the consumer warps
    combine them into the destination's and one thread stores it with a plain TMA store; the
    tensors share one layout (no transposing copy)."""

    copy: CopyPlan
    op: str = "add"
    kernel: str = "store"

    def __post_init__(self) -> None:
        check_field_types(self)
        # the kernel names its reduce store by the op: torch's names are kept as tmakit's
        object.__setattr__(self, "op", reduce_op(self.op))
        one_of(self.kernel, "reduce kernel", REDUCE_KERNELS)
        dtype = self.copy.load.config.dtype
        if self.copy.bulk:
            raise TmaConfigError(
                "a reduce stores through tensor maps; bulk=True (contiguous runs) is a copy's"
            )
        if self.kernel == "store":
            check_reduce(self.op, dtype)
            return
        check_ring(self.op, dtype)
        check_ring_layouts(self.copy.transpose)
        ring = self.copy.ring
        pair = 2 * ring.stage_bytes
        beside = ", each the source's tile and the destination's,"
        check_stages(ring.stages, stages_fitting(pair), pair, beside)

    @property
    def load(self):
        return self.copy.load

    @property
    def by_ring(self) -> bool:
        return self.kernel == "ring"

    @property
    def smem_bytes(self) -> int:
        """The copy's shared memory; the ring's holds a second tile a stage (the destination's)."""
        if self.by_ring:
            return self.copy.smem_bytes + self.copy.ring.ring_bytes
        return self.copy.smem_bytes

    @property
    def expected_tx_bytes(self) -> int:
        """What each stage's full barrier expects: the source's tile (and the ring's destination tile)."""
        return (2 if self.by_ring else 1) * self.load.expected_tx_bytes

    def summary(self) -> str:
        if self.by_ring:
            return (
                f"{self.copy.summary()}\nreduce            load-add-store ring: each stage the source's "
                f"and the destination's tile ({self.expected_tx_bytes} bytes expected), {self.op} by "
                f"{self.copy.ring.consumer_warps} consumer warps, one TMA store; {self.smem_bytes} bytes of "
                "shared memory in all"
            )
        return f"{self.copy.summary()}\nreduce            each store .{self.op} into the destination"


def reduce_class(
    options: CopyOptions, op: str, dtype: str, *class_arguments: Any, kernel: str = "store"
) -> ReducePlan:
    """The plan of a shape-generic reduce: `plan.copy_class`'s copy (`options`, `dtype` and its
    `class_arguments`, rank to rows_width, as `copy_class` takes them) with a reduce store
    (`kernel` "ring": run as the load-add-store ring, `ring_copy`), the pair checked first
    (nothing is planned for a refused one). The shape's own checks are the copy's
    (`plan.check_copy_shape` on `ReducePlan.copy`). `op` may be torch's name; the plan holds
    tmakit's."""
    op = reduce_op(op)
    one_of(kernel, "reduce kernel", REDUCE_KERNELS)  # before the cached planners hash it
    if kernel == "ring":
        check_ring(op, dtype)
    else:
        check_reduce(op, dtype)
    copy = copy_class(options, dtype, *class_arguments)
    return reduce_plan(copy, op, kernel, options.stages is not None)


@functools.lru_cache(maxsize=1024)
def reduce_plan(copy: CopyPlan, op: str, kernel: str = "store", stages_given: bool = False) -> ReducePlan:
    """One `ReducePlan` per (copy class, op, kernel): planned once, like the copy's class; the
    ring's copy as `ring_copy` makes it."""
    if kernel == "ring":
        copy = ring_copy(copy, stages_given)
    return ReducePlan(copy, op, kernel)


def reduce_route(
    facts: PairFacts,
    op: str,
    l2_bytes: int | None = None,
    reduce_by: str | None = None,
    strict: bool = False,
) -> Route:
    """The route of `dst = dst op src` on `facts`' tensors (the module's docstring gives the
    order); TmaConfigError for an op that is not one of `plan.REDUCE_OPS`, whatever the tensors. The
    reduce's planner may still refuse a "tma" or "tma-view" route for what only it checks (its
    tile against the shape); the API then takes torch's path with that reason. `l2_bytes`: the
    device's L2, for the rule tables (None: TMA wherever it can, by reduce stores);
    `reduce_by`: the kernel the call chose, if any (`reduce_kernel`). `plan.route.
    TORCH_FASTER_BEYOND_L2` sends a call to torch only where it chose no kernel and is not
    `strict` (which asks for TMA); `RING_BEYOND_L2` picks the kernel TMA runs."""
    dst, src = facts.dst, facts.src
    op = reduce_op(op)
    shared = torch_pair_rule(
        facts, op, "a reduce combines elements of one shape", "a TMA reduce combines one dtype"
    )
    if shared is not None:
        return shared
    refused = pair_rule(op, src.dtype)
    if refused is not None:
        return torch_route(op, refused)
    if 0 in dst.shape:
        return Route(op, "empty", "no element to reduce")
    for name, address in (("src", src.address), ("dst", dst.address)):
        if address % GLOBAL_BASE_ALIGN:
            return torch_route(
                op,
                f"{name}'s base address {address:#x} is not {GLOBAL_BASE_ALIGN}-byte aligned (TMA needs it; "
                "a .clone() is)",
            )
    moved = moved_bytes(facts)
    if reduce_by is None and not strict and torch_faster(op, src.dtype, moved, l2_bytes):
        return torch_route(
            op, f"an {op} beyond L2: torch's in-place op measured faster than TMA's kernels there"
        )
    ring = reduce_kernel(reduce_by, op, src.dtype, moved, l2_bytes) == "ring"
    by = RING_REASON if ring else ""
    if strided_rule(dst.shape, src.strides, dst.strides, src.nbytes) is None:
        return Route(op, "tma", f"the tensors as laid out{by}")
    shape, src_strides, dst_strides = canonical_pair(dst.shape, src.strides, dst.strides)
    reason = "a view of the same memory (dims permuted together, runs merged)"
    if len(shape) == 1 and src_strides == dst_strides == (1,):
        rows = rows_view(shape[0], src.nbytes)
        if rows is None:
            return torch_route(
                op, f"a compact run of {shape[0]} elements is no whole number of rows of 16-byte multiples"
            )
        shape, src_strides, dst_strides = rows, (rows[1], 1), (rows[1], 1)
        reason = f"a compact run as {rows[0]} x {rows[1]} rows"
    broken = strided_rule(shape, src_strides, dst_strides, src.nbytes)
    if broken is not None:
        return torch_route(op, broken)
    return Route(op, "tma-view", f"{reason}{by}", None, (shape, src_strides, dst_strides))


def pair_rule(op: str, torch_dtype: str) -> str | None:
    """Why a TMA reduce store cannot do `op` on a dtype (by torch's name), or None when it can."""
    try:
        dtype = dtype_of(torch_dtype)
    except TmaConfigError:  # no tmakit dtype at all (bool, float64)
        return (
            f"reduce op {op!r} with dtype {torch_dtype}: a TMA reduce store takes {op} on "
            f"{', '.join(REDUCE_DTYPES[op])} only"
        )
    try:
        check_reduce(op, dtype)
    except TmaConfigError as error:
        return str(error)
    return None


TMA_KERNEL_PATHS = ("tma", "tma-view")  # the paths that launch a reduce kernel


@dataclass(frozen=True)
class ReduceDecision:
    """What a reduce call does, decided before anything is launched: its `route` (`Route`: path
    and reason) and, on a TMA route, the reduce planned for its class (`ReducePlan`) with the
    strides its launch pins (`fixed`: the source's and the destination's, None where the class
    takes any; see `plan.check_copy_shape`)."""

    route: Route
    plan: ReducePlan | None = None
    fixed: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None)


def decide_reduce(
    facts: PairFacts,
    op: str,
    options: CopyOptions,
    device: tuple[int, int],
    l2_rule: int | None,
    reduce_by: str | None = None,
    strict: bool = False,
    check_shape: Callable[..., Any] | None = None,
    specialised: bool = False,
) -> ReduceDecision:
    """The decision of `dst = dst op src` on `facts`' tensors with `options` (a reduce's
    `CopyOptions`: no as_rows or bulk) on a GPU of `device` = (SM count, L2 bytes). Options given
    are planned first on the route TMA would take (no rule of the L2, not strict, the bases at 0),
    so that whatever then serves the call, options its planner refuses raise. Then the route
    `reduce_route` gives (`l2_rule`: the L2 its measured rules read, None for tensors off a GPU;
    `reduce_by`: the kernel chosen; `strict`: no torch for speed) and, on a TMA route, the reduce
    planned as the call plans it (`plan_reduce_view` on the route's view, on the kernel chosen or
    `reduce_kernel`'s; where the rule's ring cannot take the call, reduce stores). A TMA route the
    planner refuses becomes torch's with the planner's words, unless what the call chose is
    refused (a strict call, a `reduce_by`, options TMA takes the tensors without): TmaConfigError.
    A torch route is returned as it is, strict or not (the call's strict refusal is its own).
    The addresses are read as given: the call plans at 0 and checks each call's own.
    `check_shape`: the shape's check (None: `plan.check_copy_shape`; the call passes its own).
    `specialised`: the reduce planned for this exact shape and these strides, where no
    shape-generic kernel can be compiled (`plan_reduce_view`), instead of its class. A call on an
    SM budget (`options.sms`) reads no rule of the L2: torch's op would take every SM."""
    op = reduce_op(op)
    if options.sms is not None:
        l2_rule = None
    if options != CopyOptions():
        at_zero = dataclasses.replace(
            facts,
            dst=dataclasses.replace(facts.dst, address=0),
            src=dataclasses.replace(facts.src, address=0),
        )
        # the planner's refusal, raised
        decided(at_zero, op, options, device, None, reduce_by, False, check_shape, specialised)
    return decided(facts, op, options, device, l2_rule, reduce_by, strict, check_shape, specialised)


def decided(
    facts: PairFacts,
    op: str,
    options: CopyOptions,
    device: tuple[int, int],
    l2_rule: int | None,
    reduce_by: str | None,
    strict: bool,
    check_shape: Callable[..., Any] | None = None,
    specialised: bool = False,
) -> ReduceDecision:
    """`decide_reduce`'s decision on one route (`reduce_route` with `l2_rule`), options unchecked
    before it."""
    route = reduce_route(facts, op, l2_rule, reduce_by, strict)
    if route.path not in TMA_KERNEL_PATHS:
        return ReduceDecision(route)

    def planned(options: CopyOptions, kernel: str) -> tuple[tuple | None, TmaConfigError | None]:
        """(`plan_reduce_view`'s plan and strides, None), or (None, the planner's refusal)."""
        view = route.view or (facts.src.shape, facts.src.strides, facts.dst.strides)
        try:
            return plan_reduce_view(
                view, facts.src.dtype, op, options, kernel, device, check_shape, specialised
            ), None
        except TmaConfigError as error:
            return None, error

    by = reduce_kernel(reduce_by, op, facts.src.dtype, moved_bytes(facts), l2_rule)
    plan, error = planned(options, by)
    if plan is None and reduce_by is None and by == "ring":
        # the rule's ring cannot take the call (layouts that differ, a depth for one tile a
        # stage): reduce stores serve it
        route, by = dataclasses.replace(route, reason=route.reason.removesuffix(RING_REASON)), "store"
        plan, error = planned(options, by)
    if plan is not None:
        return ReduceDecision(route, plan[0], plan[1:])
    if strict or reduce_by is not None:  # what the call asked for is refused, naming why
        raise error
    if options != CopyOptions() and planned(CopyOptions(), by)[0] is not None:
        raise TmaConfigError(
            f"{error} (with the default options TMA serves these tensors: leave the options out)"
        ) from error
    return ReduceDecision(torch_route(op, str(error)))


def plan_reduce_view(
    view: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
    torch_dtype: str,
    op: str,
    options: CopyOptions,
    kernel: str,
    device: tuple[int, int],
    check_shape: Callable[..., Any] | None = None,
    specialised: bool = False,
) -> tuple[ReducePlan, tuple[int, ...] | None, tuple[int, ...] | None]:
    """A TMA route's reduce of `view` = (shape, src strides, dst strides) on `torch_dtype` on a
    GPU of `device` = (SM count, L2 bytes), planned for its shape-generic class (`reduce_class`),
    this shape checked by `check_shape` (None: `plan.check_copy_shape`): the plan and the strides
    the launch pins (None: any). `specialised`: planned for this exact shape and these strides
    (the plain launch path, without TVM-FFI; both tensor maps checked as a load's are), the
    strides the launch passes the view's own. TmaConfigError naming the first rule broken.
    Compiles nothing."""
    shape, src_strides, dst_strides = view
    dtype = dtype_of(torch_dtype)
    nbytes = DTYPES[dtype].nbytes
    sm_count, l2_bytes = device
    check_rank(len(shape))
    src_major, dst_major = major_of(src_strides, shape), major_of(dst_strides, shape)
    transpose = src_major != dst_major
    tile = options.default_tile(dtype, transpose, None, sm_count)
    fits_l2 = copy_fits_l2(math.prod(shape) * nbytes, l2_bytes)
    if specialised:
        LoadPlan(LoadConfig(shape, dtype, tile, 0, dst_major, dst_strides))  # checked as the source's
        source = LoadPlan(LoadConfig(shape, dtype, tile, 0, src_major, src_strides))
        copy = options.plan(source, transpose, sm_count, fits_l2)
        return reduce_plan(copy, op, kernel, options.stages is not None), src_strides, dst_strides
    rank = len(shape)
    reduce = reduce_class(
        options, op, dtype, rank, src_major, transpose, tile, sm_count, fits_l2, kernel=kernel
    )
    contiguous = (contiguous_index(src_major, rank), contiguous_index(dst_major, rank))
    fixed_src, fixed_dst = (check_shape or check_copy_shape)(
        reduce.copy, shape, (src_strides, dst_strides), contiguous, nbytes
    )
    return reduce, fixed_src, fixed_dst
