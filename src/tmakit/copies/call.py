"""How a copy call is planned (`copies.api`'s dispatch planner and `copy_path`'s decision): its
tensors' checks, its route (`copies.plan.copy_route`), the launcher of that route (TMA planned once
per class, `plan_copy`, on the views the route moves; torch's `copy_`; the driver's memcpy past
the L2), options given checked the same way on every path, and a strict call's refusal."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..api.tensors import (
    check_budget,
    check_tensor_pair,
    check_torch_tensor,
    device_facts,
    import_torch,
    lazy_bit,
    pair_facts,
)
from ..config import DTYPES, dtype_of, is_compact
from ..errors import TmaConfigError
from ..limits import DEFAULT_DEVICE_FACTS
from ..plan import CopyOptions, CopyPlan, check_copy_shape, copy_destination
from ..plan.route import PairFacts, Route, TensorFacts
from ..runtime.dispatch import (
    DST_DEVICE,
    DST_DTYPE,
    DST_SHAPE,
    DST_STRIDES,
    KEY_ERRORS,
    SRC_DEVICE,
    SRC_DTYPE,
    SRC_SHAPE,
    SRC_STRIDES,
    CallTable,
    Signature,
)
from ..runtime.launch import NOTHING, Launcher, copy_launcher, tvm_ffi_available
from .plan import (
    BY_THE_DRIVER,
    ON_THE_COPY_ENGINE,
    CopyDecision,
    PairPlan,
    copy_route,
    decide_copy,
    plan_pair,
)
from .views import (
    TORCH_COPY,
    driver_launcher,
    restrided,
    specialised_copy_launcher,
    viewed,
    viewed_launcher,
)

if TYPE_CHECKING:
    import torch


def plan_copy(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    facts: Signature | None = None,
    shape_generic: bool | None = None,
    compiled: bool = True,
) -> Launcher | None:
    """Check a copy's configuration in full and return its (compiled) launcher; an empty copy's
    launcher does nothing. `facts`: what the caller has read off the tensors already
    (`runtime.dispatch.Signature`). `compiled=False` checks everything and compiles nothing
    (`copy_path`): None then stands for a launcher not yet compiled.

    Shape-generic (the default where TVM-FFI is installed): the launcher of the copy's class
    (`plan.copy_class`: dtype, rank, contiguous dims, tile and options, compiled once), after
    this shape's own checks (`plan.check_copy_shape`). `shape_generic=False` compiles a kernel for
    this exact shape and these strides (the benchmark's comparison)."""
    if shape_generic is None:
        shape_generic = tvm_ffi_available()
    if shape_generic:
        if facts is None:  # a `Signature`'s first eight items
            facts = (dst.shape, dst.stride(), src.shape, src.stride(), dst.dtype, src.dtype,
                     dst.get_device(), src.get_device())  # fmt: skip
        known = known_class(src, options, facts)
        if known is not None:
            return known.launcher_for(facts[SRC_SHAPE], facts[SRC_STRIDES], facts[DST_STRIDES])
    import_torch("copy_")
    check_copy_tensors(dst, src)
    if src.numel() == 0:
        return NOTHING
    dtype = dtype_of(src.dtype)
    device_read = device_facts(src.device)
    shape, strides = tuple(src.shape), (tuple(src.stride()), tuple(dst.stride()))
    compact = src.is_contiguous() and dst.is_contiguous()
    pair = plan_pair(options, dtype, shape, strides, compact, device_read, classed=shape_generic)
    if not shape_generic:
        return specialised_copy_launcher(
            dst, src, pair.options, dtype, pair.view, pair.tile, pair.transpose, device_read[0],
            pair.fits_l2, compiled,
        )  # fmt: skip
    if not compiled:
        return None
    key = class_key(pair, src.dtype, src.get_device(), len(shape))
    known = _CLASSES.get(key)
    if known is None:
        known = _CLASSES.keep(key, compiled_class(pair, len(shape), str(src.device), DTYPES[dtype].nbytes))
    return known.launcher_for(shape, *strides)


@dataclass(frozen=True)
class CopyClass:
    """A compiled shape-generic copy class and what a new shape's checks need: the stride-1 dims
    of source and destination (None for a rows view's class), the element size, and the width of
    the rows a rows view's class copies (None for the tensors' own layout)."""

    copy: CopyPlan
    launcher: Launcher
    contiguous: tuple[int, int] | None
    nbytes: int
    rows_width: int | None = None

    def launcher_for(self, shape: tuple[int, ...], src_strides: tuple, dst_strides: tuple) -> Launcher:
        """The launcher for tensors of this shape and these strides, after their checks
        (`plan.check_copy_shape`: of the rows a rows view copies, or of the tensors' own layout,
        extent-1 strides TMA would refuse replaced: `restrided`)."""
        if self.rows_width is not None:
            width = self.rows_width
            check_copy_shape(self.copy, (math.prod(shape) // width, width), ((width, 1),), (1,), self.nbytes)
            return self.launcher
        fixed_src, fixed_dst = check_copy_shape(
            self.copy, shape, (src_strides, dst_strides), self.contiguous, self.nbytes
        )
        if fixed_src is None and fixed_dst is None:
            return self.launcher
        return restrided(self.launcher, shape, fixed_src, fixed_dst)


def compiled_class(pair: PairPlan, rank: int, device: str, nbytes: int) -> CopyClass:
    """A planned pair's class (`copies.plan.plan_pair`) compiled, or loaded from the disk cache,
    for one device: a rows view's for compact tensors of `rank` viewed as its rows, else the
    tensors' own layout's (the destination's stride-1 dim its own where the copy transposes)."""
    if pair.view is not None:
        tensor_shape = (1,) * (rank - 1) + (pair.view[1],)
        launcher = copy_launcher(pair.copy, None, tensor_shape, device, shape_generic=True)
        return CopyClass(pair.copy, launcher, None, nbytes, rows_width=pair.view[1])
    destination = copy_destination(pair.copy) if pair.transpose else None
    launcher = copy_launcher(pair.copy, destination, None, device, shape_generic=True)
    return CopyClass(pair.copy, launcher, pair.contiguous, nbytes)


# The compiled copy classes, by `class_key`: what a copy's next new shape finds (`known_class`).
_CLASSES = CallTable()


def class_key(pair: PairPlan, dtype: object, device: int, rank: int) -> tuple:
    """What picks a copy's class, read off its planned pair (`copies.plan.plan_pair`, the class
    itself left out): the options as planned (a compact copy beyond the L2 takes the rows view),
    the torch dtype, the device, the rank, the rows view's width or both tensors' major modes, the
    tile (a small transpose's included) and whether both tensors fit in the L2: the arguments of
    `plan.copy_class`, the SM count as the device's."""
    form = pair.majors if pair.view is None else pair.view[1]
    return (pair.options, dtype, device, rank, form, pair.tile, pair.fits_l2)


def known_class(src: torch.Tensor, options: CopyOptions, facts: Signature) -> CopyClass | None:
    """The compiled class of a copy whose class was seen before, read off the tensors cheaply (a
    new shape's lookup; `facts`: `runtime.dispatch.Signature`); None for anything else - other
    tensors, other classes, empty tensors - which then takes `plan_copy`'s full path. Equal
    dtypes, one CUDA device and equal shapes are checked here; what a class key fixes was checked
    when the class was made."""
    shape, dtype, device = facts[SRC_SHAPE], facts[SRC_DTYPE], facts[SRC_DEVICE]
    if device < 0 or facts[DST_DEVICE] != device or facts[DST_SHAPE] != shape or facts[DST_DTYPE] != dtype:
        return None
    if src.numel() == 0:
        return None
    strides = (facts[SRC_STRIDES], facts[DST_STRIDES])
    compact = is_compact(shape, strides[0]) and is_compact(shape, strides[1])
    try:  # the pair's layout alone: its class is what the key finds
        layout = plan_pair(
            options, dtype_of(dtype), shape, strides, compact, device_facts(device), classed=False
        )
    except TmaConfigError:
        return None  # refused: the full path names the rule
    key = class_key(layout, dtype, device, len(shape))
    return _CLASSES.get(key)


def check_copy_tensors(dst: object, src: object) -> None:
    """TmaConfigError naming the first thing a copy's tensors are not, before anything else is read
    off them: torch tensors with memory, of one shape and dtype, on one CUDA device, of a dtype TMA
    moves (the layout and the tile are `plan_copy`'s); ImportError without torch."""
    import_torch("copy_")
    check_tensor_pair(
        dst, src, "copy_", "they must match (tmakit.copy(src) allocates a matching destination)"
    )
    dtype_of(src.dtype)


def copy_decision(dst: torch.Tensor, src: torch.Tensor, options: CopyOptions, strict: bool) -> CopyDecision:
    """What a new call decides, compiling nothing (`copy_path`'s; `dst` and `src` detached): the
    tensors checked as the call checks them, options given checked on every path
    (`check_options`), then the pure decision (`copies.plan.decide_copy`) on their facts, on their
    GPU (SM count and L2, whose measured rule a strict call skips; off a GPU, as on a Hopper GPU).
    A strict call raises where TMA does not serve the pair whole."""
    try:
        facts = pair_facts(dst, src)
    except KEY_ERRORS:
        check_copy_tensors(dst, src)  # names what is wrong
        raise
    if options != _DEFAULT_OPTIONS:
        check_options(dst, src, options, facts)
    device = device_facts(src.device) if facts.src.device >= 0 else DEFAULT_DEVICE_FACTS
    decision = decide_copy(facts, options, device, None if strict else l2_of(src))  # strict: no rule
    if strict:
        refuse_unless_tma(dst, src, options, decision.route)
    return decision


def routed_copy_launcher(
    dst: torch.Tensor, src: torch.Tensor, options: CopyOptions, facts: Signature, strict: bool = False
) -> Launcher:
    """`Dispatch`'s planner of a new configuration: the launcher of the path `copy_route`
    picks. Strict: TmaConfigError (the copy planner's own, naming the rule) where that is torch's."""
    try:
        facts_read = pair_facts(dst, src)
    except KEY_ERRORS:  # a sparse tensor's signature reads, its address does not
        check_copy_tensors(dst, src)  # names what is wrong
        raise
    if options != _DEFAULT_OPTIONS:
        check_options(dst, src, options, facts_read)
    l2_rule = None if strict else l2_of(src)  # strict: TMA, no rule
    route = copy_route(facts_read, l2_bytes=l2_rule, budgeted=options.sms is not None)
    if route.reason == BY_THE_DRIVER:  # torch's copy_, or its element-wise kernel in a large capture
        return driver_launcher(src.numel() * src.element_size())
    if route.reason == ON_THE_COPY_ENGINE:  # the memcpy, a memcpy node in a capture: no SM
        return TORCH_COPY
    route, launcher = routed(dst, src, options, route, strict)
    if strict:
        refuse_unless_tma(dst, src, options, route, facts)
    return launcher


def check_options(dst: torch.Tensor, src: torch.Tensor, options: CopyOptions, facts: PairFacts) -> None:
    """Options given, checked the same way on every path, before the route is taken: planned on
    the route a strict call takes (as on a Hopper GPU, `limits.DEFAULT_DEVICE_FACTS`, for tensors
    that are not on one), so whatever then serves the call (TMA, the driver's memcpy past the L2,
    torch's copy_ off a Hopper GPU) a call with options its planner refuses raises, on a laptop as
    on an H100. A budget (`sms`) is checked against the tensors' GPU on every path."""
    check_budget(options.sms, src)
    src_device, dst_device = facts.src.device, facts.dst.device
    if src_device >= 0 and dst_device == src_device:
        routed(dst, src, options, copy_route(facts), compiled=False)  # the planner's refusal, raised
        return
    route = copy_route(dataclasses.replace(facts, src=on_a_hopper(facts.src), dst=on_a_hopper(facts.dst)))
    if not route.by_tma or route.path == "empty":
        return
    shape, src_strides, dst_strides = route.view or (facts.src.shape, facts.src.strides, facts.dst.strides)
    dtype = route.moved_as or dtype_of(src.dtype)
    compact = is_compact(shape, src_strides) and is_compact(shape, dst_strides)
    plan_pair(options, dtype, shape, (src_strides, dst_strides), compact, DEFAULT_DEVICE_FACTS)


def on_a_hopper(tensor: TensorFacts) -> TensorFacts:
    """A tensor's facts as they would read on a Hopper GPU's device 0."""
    return dataclasses.replace(tensor, device=0)


def refuse_unless_tma(
    dst: torch.Tensor, src: torch.Tensor, options: CopyOptions, route: Route, facts: Signature | None = None
) -> None:
    """A strict copy's rule: TmaConfigError where `route` is not TMA's whole, naming the copy
    planner's own rule where it has one, else the route's reason."""
    if route.tail:
        raise TmaConfigError(
            f"copy_ with strict=True: TMA moves all but the last {route.tail} elements ({route.reason}); "
            "strict=False copies those by torch's copy_"
        )
    if not route.by_tma:
        check_torch_tensor(dst, "copy_", "dst")  # what a tensor is (nested, quantized...), first
        check_torch_tensor(src, "copy_", "src")
        if str(src.dtype) in _LOADED_DTYPES and lazy_bit(dst, src) is None:
            plan_copy(dst, src, options, facts, compiled=False)  # the planner's words, if it has a rule
        raise TmaConfigError(f"copy_ with strict=True: no TMA path, {route.reason}")


def routed(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: CopyOptions,
    route: Route,
    strict: bool = False,
    compiled: bool = True,
) -> tuple[Route, Launcher | None]:
    """The route a copy finally takes and its launcher: a TMA route's planner may still refuse
    the tensors (torch's then, with its reason) or the options given (raised). `strict`: the
    launcher refuses what it would otherwise hand torch (`viewed_launcher`); `compiled=False`:
    the route alone, every check made and nothing compiled (the launcher None on a TMA route)."""
    if route.path == "torch":
        return route, TORCH_COPY
    if route.path == "empty":
        return route, NOTHING
    torch = import_torch("copy_")
    dtype = None if route.moved_as is None else getattr(torch, DTYPES[route.moved_as].torch_name)
    shape, src_strides, dst_strides = route.view or (None, None, None)
    source, destination = viewed(src, dtype, shape, src_strides), viewed(dst, dtype, shape, dst_strides)
    try:
        launcher = plan_copy(destination, source, options, compiled=compiled)
    except TmaConfigError as error:
        if options != _DEFAULT_OPTIONS:
            raise  # the options given are what TMA cannot take here
        return Route(route.op, "torch", str(error)), TORCH_COPY
    if launcher is None or (dtype is None and shape is None):
        return route, launcher
    return route, viewed_launcher(launcher, dtype, route.view, route.tail, strict)


def l2_of(src: torch.Tensor) -> int | None:
    """The L2 bytes of `src`'s GPU, for the route's measured rule; None off a CUDA device."""
    return device_facts(src.device)[1] if src.is_cuda else None


_DEFAULT_OPTIONS = CopyOptions()
# The torch dtypes tmakit's planner loads as they are (not moved as another: bool, complex...).
_LOADED_DTYPES = frozenset(f"torch.{element.torch_name}" for element in DTYPES.values())
