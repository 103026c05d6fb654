"""The dispatch, combine and routing kernels compiled once per plan, and their launchers."""

from __future__ import annotations

import functools

from ..config import DTYPES
from ..limits import GLOBAL_BASE_ALIGN, GLOBAL_STRIDE_ALIGN
from ..linter.kernels import LintVariant
from ..plan.ring import GUARD_WORDS
from ..runtime.compile import compiles, fake_tensor, placeholder_stream
from ..runtime.launch import Launcher, guarded_launcher
from .plan import CombinePlan, DispatchPlan, QuantizePlan, RoutingPlan


def _byte_rows(symbol: str, width: int, compact: bool = False):
    """A fake (rows, width) uint8 tensor: `symbol` rows, a run-time row stride (16-byte multiple)
    unless `compact`."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    rows = cute.sym_int64(symbol=symbol)
    if compact:
        return make_fake_compact_tensor(cutlass.Uint8, (rows, width), stride_order=(1, 0), assumed_align=16)
    stride = cute.sym_int64(divisibility=GLOBAL_STRIDE_ALIGN, symbol=f"{symbol}_stride")
    return make_fake_tensor(cutlass.Uint8, (rows, width), (stride, 1), assumed_align=GLOBAL_BASE_ALIGN)


def _row_map(tokens, topk: int):
    import cutlass
    from cutlass.cute.runtime import make_fake_compact_tensor

    return make_fake_compact_tensor(cutlass.Int32, (tokens, topk), stride_order=(1, 0), assumed_align=4)


@compiles
def compile_dispatch(dispatch: DispatchPlan, tvm_ffi: bool = False) -> tuple:
    """The dispatch (`moe.kernel.DispatchKernel`) for sm_90a, one compile per plan: called with
    x (tokens, row_bytes) uint8 compact, the row map (tokens, topk) int32, out (rows, row_bytes)
    uint8 with a run-time row stride, the guard words and a stream (none with `tvm_ffi`)."""
    import cutlass

    from .kernel import DispatchKernel

    x = _byte_rows("tokens", dispatch.row_bytes, compact=True)
    row_map = _row_map(x.shape[0], dispatch.topk)
    out = _byte_rows("rows", dispatch.row_bytes)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return DispatchKernel(dispatch), x, row_map, out, guard, placeholder_stream(env=tvm_ffi)


@compiles
def compile_quantize_dispatch(quantize: QuantizePlan, tvm_ffi: bool = False) -> tuple:
    """The dispatch that quantizes to fp8 (`moe.kernel.QuantizeDispatchKernel`) for sm_90a, one
    compile per plan: called with x (tokens, row_bytes) uint8 compact, the row map (tokens, topk)
    int32, out (rows, hidden) uint8 with a run-time row stride, the scales (blocks, lead) fp32 or
    uint8 compact (lead: a run-time multiple of 16 bytes of scales), the guard words and a stream
    (none with `tvm_ffi`)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .kernel import QuantizeDispatchKernel

    x = _byte_rows("tokens", quantize.row_bytes, compact=True)
    row_map = _row_map(x.shape[0], quantize.topk)
    out = _byte_rows("rows", quantize.hidden)
    fp32 = quantize.scale_format == "fp32"
    lead = cute.sym_int64(divisibility=4 if fp32 else 16, symbol="lead")
    element = cutlass.Float32 if fp32 else cutlass.Uint8
    scales = make_fake_compact_tensor(element, (quantize.blocks, lead), stride_order=(1, 0), assumed_align=16)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return QuantizeDispatchKernel(quantize), x, row_map, out, scales, guard, placeholder_stream(env=tvm_ffi)


@compiles
def compile_combine(combine: CombinePlan, tvm_ffi: bool = False) -> tuple:
    """The combine (`moe.kernel.CombineKernel`) for sm_90a, one compile per plan: called with y
    (rows, row_bytes) uint8 with a run-time row stride, the row map (tokens, topk) int32, the
    probabilities (tokens, topk) fp32 (unweighted: a (1, 1) fp32 tensor), out (tokens, row
    elements) of the plan's dtype with a run-time row stride, the guard words and a stream."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .kernel import CombineKernel

    y = _byte_rows("rows", combine.row_bytes)
    tokens = cute.sym_int64(symbol="tokens")
    row_map = _row_map(tokens, combine.topk)
    shape = (tokens, combine.topk) if combine.weighted else (1, 1)
    probs = make_fake_compact_tensor(cutlass.Float32, shape, stride_order=(1, 0), assumed_align=4)
    out = _element_rows(combine, tokens)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return CombineKernel(combine), y, row_map, probs, out, guard, placeholder_stream(env=tvm_ffi)


@compiles
def compile_combine_grad(combine: CombinePlan, tvm_ffi: bool = False) -> tuple:
    """The combine's backward (`moe.kernel.CombineGradKernel`, a plan with `grad`) for sm_90a,
    one compile per plan: called with y (rows, row_bytes) uint8 and the output's gradient
    (tokens, row_bytes) uint8, each with a run-time row stride, the row map (tokens, topk) int32,
    the probabilities (tokens, topk) fp32, y's gradient (rows, row elements) of the plan's dtype
    with a run-time row stride, the partial sums (tokens, topk, plan.partials) fp32, the rows'
    flags (rows + 1,) uint8, the guard words and a stream (none with `tvm_ffi`)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .kernel import CombineGradKernel

    y = _byte_rows("rows", combine.row_bytes)
    grad = _byte_rows("tokens", combine.row_bytes)
    tokens = grad.shape[0]
    row_map = _row_map(tokens, combine.topk)
    probs = make_fake_compact_tensor(
        cutlass.Float32, (tokens, combine.topk), stride_order=(1, 0), assumed_align=4
    )
    grad_y = _element_rows(combine, y.shape[0])
    partials = make_fake_compact_tensor(
        cutlass.Float32, (tokens, combine.topk, combine.partials), stride_order=(2, 1, 0), assumed_align=4
    )
    flags = cute.sym_int64(symbol="flags")  # rows + 1: symbols take no arithmetic
    named = make_fake_compact_tensor(cutlass.Uint8, (flags,), stride_order=(0,), assumed_align=1)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return (
        CombineGradKernel(combine),
        y,
        grad,
        row_map,
        probs,
        grad_y,
        partials,
        named,
        guard,
        placeholder_stream(env=tvm_ffi),
    )


def _element_rows(combine: CombinePlan, rows):
    """A fake (rows, row elements) tensor of the plan's dtype, a run-time row stride."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    element = getattr(cutlass, DTYPES[combine.dtype].cutlass_name)
    width = combine.row_bytes // combine.element_bytes
    stride = cute.sym_int64(divisibility=GLOBAL_STRIDE_ALIGN // combine.element_bytes, symbol="out_stride")
    return make_fake_tensor(element, (rows, width), (stride, 1), assumed_align=GLOBAL_BASE_ALIGN)


@compiles
def compile_routing(routing: RoutingPlan, tvm_ffi: bool = False) -> tuple:
    """The routing (`moe.kernel.RoutingKernel`, three launches) for sm_90a, one compile per plan:
    called with the ids (slots,) of the plan's dtype, the row map (slots,) int32, the tokens per
    expert (E,), the expert offsets (E + 1,) and the dropped count (1,) int32, the workspace
    (`RoutingPlan.workspace_shape`) int32, the guard words (not read) and a stream."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .kernel import RoutingKernel

    def compact(dtype, shape, align: int = 4):
        return make_fake_compact_tensor(
            dtype, shape, stride_order=tuple(reversed(range(len(shape)))), assumed_align=align
        )

    slots = cute.sym_int64(symbol="slots")
    blocks = cute.sym_int64(symbol="blocks")
    experts = routing.experts
    wide = routing.id_dtype == "int64"
    ids = compact(cutlass.Int64 if wide else cutlass.Int32, (slots,), 8 if wide else 4)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return (
        RoutingKernel(routing),
        ids,
        compact(cutlass.Int32, (slots,)),
        compact(cutlass.Int32, (experts,)),
        compact(cutlass.Int32, (experts + 1,)),
        compact(cutlass.Int32, (1,)),
        compact(cutlass.Int32, (blocks, experts + 1)),
        guard,
        placeholder_stream(env=tvm_ffi),
    )


@functools.lru_cache(maxsize=64)
def routing_launcher(routing: RoutingPlan, device: str) -> Launcher:
    """A callable (ids, row_map, tokens_per_expert, expert_offsets, dropped, workspace) for one
    routing plan on one device (`guarded_launcher`)."""
    return guarded_launcher(lambda tvm_ffi: compile_routing(routing, tvm_ffi=tvm_ffi), device)


@functools.lru_cache(maxsize=64)
def dispatch_launcher(dispatch: DispatchPlan, device: str) -> Launcher:
    """A callable (x, row_map, out) for one dispatch plan on one device (`guarded_launcher`)."""
    return guarded_launcher(lambda tvm_ffi: compile_dispatch(dispatch, tvm_ffi=tvm_ffi), device)


@functools.lru_cache(maxsize=64)
def quantize_launcher(quantize: QuantizePlan, device: str) -> Launcher:
    """A callable (x, row_map, out, scales) for one fp8 dispatch plan on one device (`guarded_launcher`)."""
    return guarded_launcher(lambda tvm_ffi: compile_quantize_dispatch(quantize, tvm_ffi=tvm_ffi), device)


@functools.lru_cache(maxsize=64)
def combine_launcher(combine: CombinePlan, device: str) -> Launcher:
    """A callable for one combine plan on one device (`guarded_launcher`): (y, row_map, probs,
    out), or with a `grad` plan (y, grad, row_map, probs, grad_y, partials)."""
    compile = compile_combine_grad if combine.grad else compile_combine
    return guarded_launcher(lambda tvm_ffi: compile(combine, tvm_ffi=tvm_ffi), device)


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
LINT_VARIANTS = {
    "moe-dispatch": LintVariant(
        "the MoE dispatch: bf16 rows of 7168, top-8, each row stored to its experts' rows",
        lambda: compile_dispatch.__wrapped__(DispatchPlan(14336, 8)),
    ),
    "moe-dispatch-fp8": LintVariant(
        "the MoE dispatch that quantizes: bf16 rows of 7168 to e4m3 with fp32 scales, top-8",
        lambda: compile_quantize_dispatch.__wrapped__(QuantizePlan(7168, 8)),
    ),
    "moe-combine": LintVariant(
        "the MoE combine: bf16 rows of 7168, top-8, weighted sums in fp32",
        lambda: compile_combine.__wrapped__(CombinePlan(14336, 8, "bf16")),
    ),
    "moe-combine-grad": LintVariant(
        "the MoE combine's backward: bf16 rows of 7168, top-8, y's and the probabilities' gradients",
        lambda: compile_combine_grad.__wrapped__(CombinePlan(14336, 8, "bf16", grad=True)),
    ),
    "moe-combine-unweighted": LintVariant(
        "the MoE combine of fp32 rows, top-2, unweighted",
        lambda: compile_combine.__wrapped__(CombinePlan(8192, 2, "fp32", weighted=False)),
    ),
}
