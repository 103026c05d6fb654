"""How a reduce call is planned and run (`tmakit.reduce_into_`'s planner, `reduce.api`): its
tensors' checks, its route (`reduce.plan.reduce_route`), the kernel that serves it (reduce stores
or the load-add-store ring, `reduce.plan.reduce_kernel`) planned for its class, and torch's own op
for the tensors TMA does not serve (`torch_reduce`), with torch's refusals raised as
TmaConfigError naming them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..api.tensors import (
    check_tensor_pair,
    check_torch_tensor,
    cuda_index,
    device_facts,
    import_torch,
    pair_facts,
)
from ..config import DTYPES, LoadConfig, dtype_of, major_of
from ..errors import TmaConfigError, TorchOpError
from ..limits import DEFAULT_DEVICE_FACTS
from ..plan import CopyOptions, LoadPlan, check_copy_shape, check_reduce, copy_destination, reduce_op
from ..plan.copy_defaults import fits_l2 as copy_fits_l2
from ..plan.route import PairFacts, Route, torch_route
from ..runtime.dispatch import Signature
from ..runtime.dispatch import check_no_partial_overlap as dispatch_overlap_check
from ..runtime.launch import Launcher, copy_nothing, tvm_ffi_available
from ..validate import check_rank
from .launch import class_launcher, reduce_launcher
from .plan import (
    RING_REASON,
    TMA_KERNEL_PATHS,
    ReduceDecision,
    ReducePlan,
    decide_reduce,
    moved_bytes,
    plan_reduce_class,
    reduce_kernel,
    reduce_plan,
    reduce_route,
)

if TYPE_CHECKING:
    import torch


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
            compiled = class_launcher(self.plan, self.destination, self.device)
        else:
            compiled = reduce_launcher(self.plan, self.destination, self.device)
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
    facts: Signature,
    op: str,
    strict: bool,
    reduce_by: str | None = None,
) -> Launcher:
    """`CopyDispatch`'s planner of a new reduce configuration: the launcher of its route (the
    kernel compiled here, at its first launch; `reduce_path` plans and never compiles). The
    options' `as_rows`/`bulk` were refused before (`reduce_dispatch`)."""
    if options != _DEFAULT_REDUCE_OPTIONS:
        check_reduce_options(dst, src, op, options, reduce_by)
    route, kernel = plan_reduce_call(dst, src, op, options, strict, reduce_by)
    if route.path == "empty":
        return copy_nothing
    if kernel is None:
        return torch_launcher(op, route.reason)
    return kernel.launcher()


def check_reduce_options(
    dst: torch.Tensor, src: torch.Tensor, op: str, options: CopyOptions, reduce_by: str | None
) -> None:
    """Options given, checked the same way on every path, before the route is taken: the call
    planned on the route TMA would take (no rule of the L2), as on a Hopper GPU
    (`limits.DEFAULT_DEVICE_FACTS`) for tensors that are not on one, its planner's refusal raised
    whatever then serves the call (`copies.call.check_options`'s rule, for a reduce)."""
    src_device = cuda_index(src)
    on_gpu = src_device >= 0 and cuda_index(dst) == src_device
    device = device_facts(src.device) if on_gpu else DEFAULT_DEVICE_FACTS
    plan_reduce_call(dst, src, op, options, False, reduce_by, on=device)


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


def checked_facts(
    dst: torch.Tensor, src: torch.Tensor, op: str, strict: bool, on_device_0: bool = False
) -> PairFacts:
    """A new call's tensors checked (torch tensors; strict: TMA's rules first) and their facts at
    base address 0 (each call checks its own addresses), read as on device 0 where the call is
    planned for another GPU (`on_device_0`)."""
    import_torch("reduce_into_")
    check_torch_tensor(dst, "reduce_into_", "dst")
    check_torch_tensor(src, "reduce_into_", "src")
    if strict:
        check_reduce_tensors(dst, src, op)
    read = pair_facts(dst, src)
    placed = {"address": 0, "device": 0} if on_device_0 else {"address": 0}
    return replace(read, dst=replace(read.dst, **placed), src=replace(read.src, **placed))


def plan_reduce_call(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    copy_options: CopyOptions,
    strict: bool,
    reduce_by: str | None = None,
    on: tuple[int, int] | None = None,
) -> tuple[Route, ReduceKernel | None]:
    """A new call's checks in full: the tensors, the route (for 16-byte aligned bases: each call
    checks its own) and a TMA route's kernel (None on torch's and the empty path) on the kernel
    `reduce_by` chose or the rule gives (`reduce.plan.reduce_kernel`). A TMA route the planner
    refuses becomes torch's, with the planner's reason, unless the refusal is of options the
    caller chose (a `reduce_by` among them). Where the rule's ring cannot take the call, reduce
    stores do. `on`: plan the route TMA would take (no rule of the L2) on a GPU of these (SM
    count, L2 bytes), the tensors read as on its device 0 (`check_reduce_options`)."""
    facts = checked_facts(dst, src, op, strict, on_device_0=on is not None)
    l2_bytes = None if on is not None or facts.src.device < 0 else device_facts(dst.device)[1]
    route = reduce_route(facts, op, l2_bytes, reduce_by, strict)
    kernel = None
    if route.path in TMA_KERNEL_PATHS:
        by = reduce_kernel(reduce_by, reduce_op(op), facts.src.dtype, moved_bytes(facts), l2_bytes)
        kernel, error = planned_or_refused(dst, src, route, op, copy_options, by, on)
        if kernel is None and reduce_by is None and by == "ring":
            # the rule's ring cannot take the call (layouts that differ, a depth for one tile a
            # stage): reduce stores serve it
            route, by = replace(route, reason=route.reason.removesuffix(RING_REASON)), "store"
            kernel, error = planned_or_refused(dst, src, route, op, copy_options, by, on)
        if kernel is None:
            if strict or reduce_by is not None:  # what the call asked for is refused, naming why
                raise error
            if copy_options != _DEFAULT_REDUCE_OPTIONS and serves_by_default(dst, src, route, op, by, on):
                raise TmaConfigError(
                    f"{error} (with the default options TMA serves these tensors: leave the options out)"
                ) from error
            route = torch_route(op, str(error))
    if route.path == "torch" and strict:
        raise strict_refusal(route)
    return route, kernel


def reduce_decision(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    copy_options: CopyOptions,
    strict: bool,
    reduce_by: str | None = None,
) -> ReduceDecision:
    """What a new call decides, compiling nothing (`reduce_path`'s): the tensors checked as
    `plan_reduce_call` checks them, then the pure decision (`reduce.plan.decide_reduce`) on their
    facts at address 0 (each call checks its own), on their GPU (SM count and L2; off a GPU, as
    on a Hopper GPU, with no rule of the L2) where the planner plans the class, else
    `plan_reduce_call`'s route (a kernel for this shape). A strict call's torch route raises."""
    if not tvm_ffi_available():
        return ReduceDecision(plan_reduce_call(dst, src, op, copy_options, strict, reduce_by)[0])
    facts = checked_facts(dst, src, op, strict)
    on_gpu = facts.src.device >= 0
    device = device_facts(src.device) if on_gpu else DEFAULT_DEVICE_FACTS
    l2_rule = device[1] if on_gpu else None
    decision = decide_reduce(
        facts, op, copy_options, device, l2_rule, reduce_by, strict, check_shape=check_copy_shape
    )
    if decision.route.path == "torch" and strict:
        raise strict_refusal(decision.route)
    return decision


def planned_or_refused(
    dst: torch.Tensor,
    src: torch.Tensor,
    route: Route,
    op: str,
    options: CopyOptions,
    kernel: str,
    on: tuple[int, int] | None = None,
) -> tuple[ReduceKernel | None, TmaConfigError | None]:
    """(the planned kernel, None), or (None, the planner's refusal)."""
    try:
        return plan_reduce(dst, src, route, op, options, kernel, on), None
    except TmaConfigError as error:
        return None, error


def serves_by_default(
    dst: torch.Tensor,
    src: torch.Tensor,
    route: Route,
    op: str,
    kernel: str = "store",
    on: tuple[int, int] | None = None,
) -> bool:
    """Whether the planner takes this TMA route with the default options, on `kernel`."""
    try:
        plan_reduce(dst, src, route, op, _DEFAULT_REDUCE_OPTIONS, kernel, on)
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
    on: tuple[int, int] | None = None,
) -> ReduceKernel:
    """Check a TMA route's layouts (the copy's rules, on the route's view where it has one) and
    plan its kernel: the shape-generic class's where TVM-FFI is installed (`reduce.plan.reduce_class`,
    this shape checked by `plan.check_copy_shape`), else a kernel for this shape. Compiles
    nothing. `options`: `reduce_options`; `kernel`: one of `reduce.plan.REDUCE_KERNELS`; `on`:
    the (SM count, L2 bytes) of the GPU planned for, the class's path (None: the tensors' GPU)."""
    dtype = dtype_of(src.dtype)
    nbytes = DTYPES[dtype].nbytes
    sm_count, l2_bytes = device_facts(src.device) if on is None else on
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
    if on is None and not tvm_ffi_available():
        source = LoadConfig(shape, dtype, tile, 0, src_major, src_strides)
        destination = LoadConfig(shape, dtype, tile, 0, dst_major, dst_strides)
        LoadPlan(destination)  # its strides and the tile, checked as the source's are
        copy = options.plan(LoadPlan(source), transpose, sm_count, fits_l2)
        reduce = reduce_plan(copy, op, kernel, options.stages is not None)
        same_layout = source.element_strides == destination.element_strides
        views = (src_strides, dst_strides) if as_view else (None, None)
        return ReduceKernel(reduce, None if same_layout else destination, False, device, shape, *views)
    reduce, fixed_src, fixed_dst = plan_reduce_class(
        (shape, src_strides, dst_strides),
        str(src.dtype).removeprefix("torch."),
        op,
        options,
        kernel,
        (sm_count, l2_bytes),
        check_copy_shape,  # this module's name: what the call checks the shape with
    )
    if as_view:
        fixed_src, fixed_dst = fixed_src or src_strides, fixed_dst or dst_strides
    destination = copy_destination(reduce.copy) if transpose else None
    return ReduceKernel(reduce, destination, True, device, shape, fixed_src, fixed_dst)


# torch's own op for each reduce, as its messages name it (`torch_reduce` runs them).
TORCH_OPS: dict[str, str] = {
    "add": "dst.add_(src)",
    "min": "torch.minimum(dst, src, out=dst)",
    "max": "torch.maximum(dst, src, out=dst)",
    "inc": "dst = where(dst >= src, 0, dst + 1) (PTX red.inc, unsigned)",
    "dec": "dst = where(dst == 0 or dst > src, src, dst - 1) (PTX red.dec, unsigned)",
    "and": "dst.bitwise_and_(src)",
    "or": "dst.bitwise_or_(src)",
    "xor": "dst.bitwise_xor_(src)",
}


def torch_reduce(dst: torch.Tensor, src: torch.Tensor, op: str, reason: str) -> None:
    """dst = dst op src by torch (`TORCH_OPS`); a RuntimeError of torch's (NotImplementedError
    included) raised as TmaConfigError naming the op, why torch runs it and torch's message."""
    torch = import_torch("reduce_into_")
    try:
        _TORCH_REDUCES[op](torch, dst, src)
    except RuntimeError as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TorchOpError(
            f"reduce_into_ {op} runs torch's {TORCH_OPS[op]} here ({reason}), and torch refused: {detail}"
        ) from error


def in_place_shape(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    """An in-place op's rule for an `out=` or composed op: `src` broadcasts to `dst`'s shape
    (torch's own RuntimeError otherwise; an `out=` would resize `dst`)."""
    if torch.broadcast_shapes(dst.shape, src.shape) != dst.shape:
        raise RuntimeError(
            f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
            f"{list(torch.broadcast_shapes(dst.shape, src.shape))}"
        )


def torch_minimum(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    in_place_shape(torch, dst, src)
    torch.minimum(dst, src, out=dst)


def torch_maximum(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    in_place_shape(torch, dst, src)
    torch.maximum(dst, src, out=dst)


def wrapping_step(torch: Any, dst: torch.Tensor, src: torch.Tensor, op: str) -> None:
    """PTX's red.inc / red.dec on torch tensors: inc: dst = 0 if dst >= src else dst + 1; dec:
    dst = src if dst == 0 or dst > src else dst - 1, compared as the dtype orders (unsigned for
    the uint types). torch has no comparisons or arithmetic for uint16/32/64 on every device, so
    those run in int64: exact for uint16/32, and uint64's bits with the sign flipped to order."""
    in_place_shape(torch, dst, src)
    if not torch.can_cast(torch.result_type(dst, src), dst.dtype):
        raise RuntimeError(f"result type {torch.result_type(dst, src)} can't be cast to {dst.dtype}")
    src = src.to(dst.dtype)
    if dst.dtype == torch.uint64:
        bits, src_bits = dst.view(torch.int64), src.view(torch.int64)
        sign = torch.iinfo(torch.int64).min  # xor: unsigned order as int64's
        value, order, src_value, src_order = bits, bits ^ sign, src_bits, src_bits ^ sign
        out = bits
    elif dst.dtype in (torch.uint16, torch.uint32):
        value = order = dst.to(torch.int64)
        src_value = src_order = src.to(torch.int64)
        out = dst
    else:
        value, order, src_value, src_order, out = dst, dst, src, src, dst
    if op == "inc":
        result = torch.where(order >= src_order, torch.zeros_like(value), value + 1)
    else:
        result = torch.where((value == 0) | (order > src_order), src_value, value - 1)
    out.copy_(result)


_TORCH_REDUCES: dict[str, Callable[[Any, Any, Any], None]] = {
    "add": lambda torch, dst, src: dst.add_(src),
    "min": torch_minimum,
    "max": torch_maximum,
    "inc": lambda torch, dst, src: wrapping_step(torch, dst, src, "inc"),
    "dec": lambda torch, dst, src: wrapping_step(torch, dst, src, "dec"),
    "and": lambda torch, dst, src: dst.bitwise_and_(src),
    "or": lambda torch, dst, src: dst.bitwise_or_(src),
    "xor": lambda torch, dst, src: dst.bitwise_xor_(src),
}
