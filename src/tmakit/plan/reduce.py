"""TMA reduce stores (`tmakit.reduce_into_`): which (op, dtype) pairs the hardware reduces, and the
plan of a reduce, a copy whose stores combine each element with the destination's, and the route a
reduce's tensors take (`reduce_route`). Pure Python.

A reduce runs on one of two kernels (`REDUCE_KERNELS`): "store", TMA reduce stores (the L2
combines each element as the store lands), or "ring", a load-add-store ring (the destination's tile
loaded beside the source's, the consumer warps combining them in registers, one plain TMA store
writing the result back); `reduce_kernel` picks one per call from `RING_BEYOND_L2`.

`cp.reduce.async.bulk.tensor` carries no element type: the tensor map's decides, and neither
PTX nor CuTe DSL 4.8.1 checks the pair (f32 max, fp8 add and int8 min all compile). The table
here, the PTX ISA's for that instruction, is the only guard; every other pair is refused before
anything compiles.

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
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

from ..config import DTYPES, dtype_of, rows_view
from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..validate import check_field_types, one_of, type_name
from .copy import CopyOptions, CopyPlan
from .copy_class import copy_class
from .ring import check_stages, stages_fitting
from .route import (
    BeyondL2,
    PairFacts,
    Route,
    canonical_pair,
    strided_rule,
    torch_faster,
    torch_pair_rule,
    torch_route,
)

# The PTX ISA's element types of cp.reduce.async.bulk.tensor, per reduction, as tmakit's dtypes:
# add u32 s32 u64 f32 f16 bf16 (no s64); min/max u32 s32 u64 s64 f16 bf16 (no f32); inc/dec u32;
# and/or/xor b32 b64 (tmakit's integer types of those widths) - less the signed min and max
# (`SIGNED_ORDER_REFUSED`).
_BITWISE = ("int32", "uint32", "int64", "uint64")
_ORDERED = ("uint32", "uint64", "fp16", "bf16")
# Signed min/max: the ISA lists them, but on the H200 (CuTe DSL 4.8.1's tensor maps) int32 and
# int64 min and max compared as unsigned - a negative and a positive value gave the wrong one - so
# they are refused rather than computed wrong. Why: the instruction takes its type from the tensor
# map, and the DSL's maps of cutlass.Int32/Int64 tensors say U32/U64. Int32 and Uint32 share the
# signless MLIR type i32 (base_dsl/typing.py: `class Int32(..., mlir_type=T.i32)`, and Uint32 the
# same), and the map's format is derived from that type (`get_default_tma_format(i32)` is U32; an
# Int32 tensor's reduce atom prints `tma_format = U32`, an Int64's `U64`). `make_tiled_tma_atom`'s
# `internal_type` goes through the same signless type; only the private IR builder
# (`cute_nvgpu.atom_make_non_exec_tiled_tma_reduce(..., tma_format=TmaDataFormat.S32)`) takes S32.
SIGNED_ORDER_REFUSED = {("min", "int32"), ("min", "int64"), ("max", "int32"), ("max", "int64")}
REDUCE_DTYPES: dict[str, tuple[str, ...]] = {
    "add": ("uint32", "int32", "uint64", "fp32", "fp16", "bf16"),
    "min": _ORDERED,
    "max": _ORDERED,
    "inc": ("uint32",),
    "dec": ("uint32",),
    "and": _BITWISE,
    "or": _BITWISE,
    "xor": _BITWISE,
}
REDUCE_OPS = tuple(REDUCE_DTYPES)
# torch's names for the same reductions (`scatter_reduce`'s and `index_reduce`'s "sum", "amax",
# "amin"), accepted wherever an op is named and read as tmakit's.
REDUCE_OP_ALIASES = {"sum": "add", "amax": "max", "amin": "min"}


def reduce_op(op: object) -> str:
    """`op` as one of `REDUCE_OPS`, torch's names (`REDUCE_OP_ALIASES`) read as tmakit's;
    TmaConfigError naming both otherwise."""
    if isinstance(op, str) and op in REDUCE_OP_ALIASES:  # a numpy string too
        return REDUCE_OP_ALIASES[str(op)]
    aliases = tuple(f"{alias} (= {name})" for alias, name in REDUCE_OP_ALIASES.items())
    try:
        return str(one_of(op, "reduce op", REDUCE_OPS))
    except TmaConfigError as error:
        raise TmaConfigError(f"{error}, or torch's {', '.join(aliases)}") from None


# How a reduce combines (`ReducePlan.kernel`): TMA reduce stores, or the load-add-store ring.
REDUCE_KERNELS = ("store", "ring")
RING_REASON = "; the load-add-store ring"  # a route's reason ends so where the ring serves it
# The ops and dtypes the ring computes in registers: adds, fp16 and bf16 in fp32 and rounded once
# (as torch's add_ computes them), fp32 and int32 (wrapping) as they are.
RING_DTYPES: dict[str, tuple[str, ...]] = {"add": ("fp32", "fp16", "bf16", "int32")}
# The ring's consumer warps: they add every element of a stage, 16 bytes a thread at a time.
RING_CONSUMER_WARPS = 4


# op -> where TMA runs a reduce on the ring instead of reduce stores (`route.BeyondL2`: the call's
# three streams, src read and dst read and written, past that share of the L2, on those torch
# dtypes): on the H100 the ring took 0.94-0.96x the stores' time for fp32, fp16 and int32 adds of
# 8 MiB and 0.88-0.91x from 256 MiB; the stores led from 4 MiB down (reduce.json). Where
# `route.TORCH_FASTER_BEYOND_L2` gives torch the call, the ring serves strict calls and calls that
# choose it.
RING_BEYOND_L2: dict[str, BeyondL2] = {
    "add": BeyondL2(0.4, ("float32", "float16", "bfloat16", "int32")),
}


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


BITWISE_OPS = ("and", "or", "xor")
# The PTX type each dtype is reduced as, for messages (bitwise ops name the width only: `ptx_type`).
PTX_TYPES = {
    "uint32": "u32",
    "int32": "s32",
    "uint64": "u64",
    "int64": "s64",
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
}


def ptx_type(op: str, dtype: str) -> str:
    """The PTX ISA's name of the type `op` reduces `dtype` as: .b32/.b64 for bitwise ops."""
    return f"b{DTYPES[dtype].bits}" if op in BITWISE_OPS else PTX_TYPES[dtype]


def reduce_pairs() -> list[tuple[str, str]]:
    """Every (op, dtype) pair a TMA reduce store takes, in the table's order."""
    return [(op, dtype) for op, dtypes in REDUCE_DTYPES.items() for dtype in dtypes]


def check_reduce(op: str, dtype: str) -> None:
    """Refuse an op TMA does not reduce with, or a dtype that op does not take (TmaConfigError
    naming both and the dtypes the op takes)."""
    op = reduce_op(op)
    if not isinstance(dtype, str):
        raise TmaConfigError(f"dtype is {dtype!r} ({type_name(dtype)}); pass a name such as 'fp32'")
    allowed = REDUCE_DTYPES[op]
    if (op, dtype) in SIGNED_ORDER_REFUSED:
        raise TmaConfigError(
            f"reduce op {op!r} with dtype {dtype}: the PTX ISA lists signed {op}, but through CuTe "
            f"DSL 4.8.1's tensor maps the H200 compared {dtype} as unsigned (wrong results), so "
            f"tmakit refuses it; {op} takes {', '.join(allowed)}"
        )
    if dtype not in allowed:
        types = ", ".join(f"{name} (.{ptx_type(op, name)})" for name in allowed)
        hint = ""
        if op == "add" and dtype == "int64":
            hint = "; an int64 add has the bits of a uint64 one: pass dst.view(torch.uint64) and src's"
        raise TmaConfigError(
            f"reduce op {op!r} with dtype {dtype}: a TMA reduce store (cp.reduce.async.bulk.tensor) "
            f"takes {op} on {types} only{hint}"
        )


@dataclass(frozen=True)
class ReducePlan:
    """A copy whose TMA stores reduce into the destination (`op`, one of `REDUCE_OPS`): the ring,
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
    order); TmaConfigError for an op that is not one of `REDUCE_OPS`, whatever the tensors. The
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
