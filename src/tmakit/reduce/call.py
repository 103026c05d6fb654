"""How a reduce call is planned and run (`tmakit.reduce_into_`'s planner, `reduce.api`): its
tensors' checks, its route (`reduce.plan.reduce_route`), the kernel that serves it (reduce stores
or the load-add-store ring, `reduce.plan.reduce_kernel`) planned for its class, and torch's own op
for the tensors TMA does not serve (`torch_reduce`), with torch's refusals raised as
TmaConfigError naming them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..api.tensors import (
    check_budget,
    check_tensor_pair,
    check_torch_tensor,
    cuda_index,
    device_facts,
    import_torch,
    pair_facts,
)
from ..config import LoadConfig, dtype_of, major_of
from ..errors import TmaConfigError, TorchOpError
from ..limits import DEFAULT_DEVICE_FACTS
from ..plan import CopyOptions, check_copy_shape, check_reduce, copy_destination
from ..plan.route import PairFacts, Route, torch_route
from ..runtime.dispatch import Signature
from ..runtime.dispatch import check_no_partial_overlap as dispatch_overlap_check
from ..runtime.launch import NOTHING, Launcher, tvm_ffi_available
from .launch import class_launcher, reduce_launcher
from .plan import (
    ReduceDecision,
    ReducePlan,
    decide_reduce,
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
        """The compiled launcher (dst, src), on the views TMA takes."""
        if self.shape_generic:
            compiled = class_launcher(self.plan, self.destination, self.device)
        else:
            compiled = reduce_launcher(self.plan, self.destination, self.device)
        shape, src_strides, dst_strides = self.shape, self.src_strides, self.dst_strides
        if src_strides is None and dst_strides is None:
            return compiled
        kernel = compiled.launch

        def launch(dst: torch.Tensor, src: torch.Tensor) -> None:
            kernel(
                dst if dst_strides is None else dst.as_strided(shape, dst_strides),
                src if src_strides is None else src.as_strided(shape, src_strides),
            )

        # Views of fixed strides: pinned to the shape and strides they were planned for, and only
        # where the compiled function checks the rest (dtype, device, alignment) itself.
        return replace(compiled, launch=launch, shape_generic=compiled.checks_arguments)


def routed_reduce_launcher(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    facts: Signature,
    op: str,
    strict: bool,
    reduce_by: str | None = None,
) -> Launcher:
    """`Dispatch`'s planner of a new reduce configuration: the launcher of its route (the
    kernel compiled here, at its first launch; `reduce_path` plans and never compiles). The
    options' `as_rows`/`bulk` were refused before (`reduce_dispatch`)."""
    if options != _DEFAULT_REDUCE_OPTIONS:
        check_reduce_options(dst, src, op, options, reduce_by)
    decision = reduce_decision(dst, src, op, options, strict, reduce_by)
    if decision.route.path == "empty":
        return NOTHING
    if decision.plan is None:
        return torch_launcher(op, decision.route.reason)
    return reduce_kernel_of(decision, dst, src, specialised(None)).launcher()


def check_reduce_options(
    dst: torch.Tensor, src: torch.Tensor, op: str, options: CopyOptions, reduce_by: str | None
) -> None:
    """Options given, checked the same way on every path, before the route is taken: the call
    planned on the route TMA would take (no rule of the L2), as on a Hopper GPU
    (`limits.DEFAULT_DEVICE_FACTS`) for tensors that are not on one, its planner's refusal raised
    whatever then serves the call (`copies.call.check_options`'s rule, for a reduce); a budget
    (`sms`) against the tensors' GPU."""
    check_budget(options.sms, src)
    src_device = cuda_index(src)
    on_gpu = src_device >= 0 and cuda_index(dst) == src_device
    on = device_facts(src.device) if on_gpu else DEFAULT_DEVICE_FACTS
    reduce_decision(dst, src, op, options, False, reduce_by, on=on)


def torch_launcher(op: str, reason: str) -> Launcher:
    """A launcher (dst, src) of torch's op, for any address."""
    return Launcher(functools.partial(torch_reduce, op=op, reason=reason), any_address=True)


def torch_fallback(op: str) -> Launcher:
    """torch's op on a call whose addresses TMA cannot take (`Dispatch`'s fallback)."""
    return torch_launcher(op, FALLBACK_REASON)


def strict_fallback(op: str) -> Launcher:
    """A strict call's `Dispatch` fallback: TmaConfigError naming the base TMA cannot take, or
    the overlap only an element-wise check could decide."""

    def refuse(dst: torch.Tensor, src: torch.Tensor) -> None:
        route = reduce_route(pair_facts(dst, src), op)
        if not route.by_tma:
            raise strict_refusal(route)
        check_no_partial_overlap(dst, src)
        raise strict_refusal(torch_route(op, FALLBACK_REASON))

    return Launcher(refuse)


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


def reduce_decision(
    dst: torch.Tensor,
    src: torch.Tensor,
    op: str,
    copy_options: CopyOptions,
    strict: bool,
    reduce_by: str | None = None,
    on: tuple[int, int] | None = None,
) -> ReduceDecision:
    """What a new call decides, compiling nothing (what `reduce_path`, `tmakit plan`/`explain
    --kernel reduce` and the call's planner read): the tensors checked (`checked_facts`), then
    the pure decision (`reduce.plan.decide_reduce`) on their facts at address 0 (each call checks
    its own), on their GPU (SM count and L2; off a GPU, as on a Hopper GPU, with no rule of the
    L2): the class's plan where TVM-FFI compiles shape-generic kernels, else this shape's. `on`:
    plan the route TMA would take (no rule of the L2) on a GPU of these (SM count, L2 bytes), the
    tensors read as on its device 0 (`check_reduce_options`). A strict call's torch route raises."""
    facts = checked_facts(dst, src, op, strict, on_device_0=on is not None)
    on_gpu = facts.src.device >= 0
    device = on or (device_facts(src.device) if on_gpu else DEFAULT_DEVICE_FACTS)
    l2_rule = device[1] if on is None and on_gpu else None
    decision = decide_reduce(
        facts, op, copy_options, device, l2_rule, reduce_by, strict, check_copy_shape, specialised(on)
    )
    if decision.route.path == "torch" and strict:
        raise strict_refusal(decision.route)
    return decision


def specialised(on: tuple[int, int] | None) -> bool:
    """Whether a call's kernel is planned for its exact shape: the plain launch path (no TVM-FFI)
    on the tensors' own GPU (`on`: a plan for another GPU checks the class's rules)."""
    return on is None and not tvm_ffi_available()


def reduce_kernel_of(
    decision: ReduceDecision, dst: torch.Tensor, src: torch.Tensor, specialised: bool
) -> ReduceKernel:
    """The kernel of a TMA decision on these tensors: the plan, the destination's layout where it
    is not the source's, and the strides each tensor is launched with (the route's view, or the
    strides a class pins; None: the tensor as it is)."""
    route, reduce = decision.route, decision.plan
    as_view = route.view is not None
    if as_view:
        shape, src_strides, dst_strides = route.view
    else:
        shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    device = str(src.device)
    if specialised:
        config = reduce.copy.load.config
        dst_major = major_of(dst_strides, shape)
        destination = LoadConfig(shape, config.dtype, config.tile, 0, dst_major, dst_strides)
        same_layout = config.element_strides == destination.element_strides
        views = (src_strides, dst_strides) if as_view else (None, None)
        return ReduceKernel(reduce, None if same_layout else destination, False, device, shape, *views)
    fixed_src, fixed_dst = decision.fixed
    if as_view:
        fixed_src, fixed_dst = fixed_src or src_strides, fixed_dst or dst_strides
    destination = copy_destination(reduce.copy) if reduce.copy.transpose else None
    return ReduceKernel(reduce, destination, True, device, shape, fixed_src, fixed_dst)


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


def torch_reduce(dst: torch.Tensor, src: torch.Tensor, op: str, reason: str, alpha: object = 1) -> None:
    """dst = dst op src by torch (`TORCH_OPS`; an add with `alpha`, `add_`'s: dst += alpha * src);
    a RuntimeError of torch's (NotImplementedError included) raised as TmaConfigError naming the
    op, why torch runs it and torch's message."""
    torch = import_torch("reduce_into_")
    try:
        if type(alpha) is int and alpha == 1:  # a float 1.0 is torch's to refuse on integers
            _TORCH_REDUCES[op](torch, dst, src)
        else:
            dst.add_(src, alpha=alpha)
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
