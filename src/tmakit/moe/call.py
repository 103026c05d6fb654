"""How a mixture-of-experts call runs (`moe.api` holds the public functions): the routing made on
the device (the row map, each expert's tokens and group offsets, no host synchronisation: the
routing kernels on a Hopper, torch's sort and scans elsewhere and in a trace), the checks of the
ids on the host where one may synchronise, the route (`plan.moe_tma_rule`) and the launches, and
torch's expressions where the kernels cannot serve."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, NamedTuple

from ..api.tensors import check_budget, cuda_index, device_facts, import_torch, lazy_bit, tensor_facts
from ..config import dtype_of
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT
from ..plan.budget import budget_grid
from ..plan.route import torch_route
from .launch import combine_launcher, dispatch_launcher, quantize_launcher, routing_launcher
from .plan import (
    AMAX_FLOOR,
    FP8_MAX,
    QUANT_BLOCK,
    QUANTIZE_OP,
    CombinePlan,
    DispatchPlan,
    MoeFacts,
    QuantizePlan,
    RoutingPlan,
    moe_route,
    routing_rule,
    scale_rows,
)

if TYPE_CHECKING:
    import torch


class Routing(NamedTuple):
    """A routing on the device: `row_map` (T, topk) int32, the output row of token t's slot j
    (-1: none); `tokens_per_expert` (E,) int32; `expert_offsets` (E + 1,) int32, each expert's
    first row in the padded output and, last, the rows used; `dropped` () int32, the slots skipped
    because their id was out of range (or past topk in a mask), which only a capture lets through."""

    row_map: torch.Tensor
    tokens_per_expert: torch.Tensor
    expert_offsets: torch.Tensor
    dropped: torch.Tensor


def torch_module():
    return import_torch("moe")


def host_checks_allowed(*tensors: torch.Tensor) -> bool:
    """Whether a check may read values on the host: not inside a CUDA-graph capture (nothing may
    synchronise) nor while a trace (torch.compile, make_fx, torch.export) runs on fake tensors."""
    torch = torch_module()
    from torch._guards import detect_fake_mode

    if torch.compiler.is_compiling() or detect_fake_mode(tensors) is not None:
        return False
    return not (tensors[0].is_cuda and torch.cuda.is_current_stream_capturing())


def check_id_range(ids: torch.Tensor, experts: int) -> None:
    """Every id in [0, experts), or TmaConfigError naming the first that is not (a sync)."""
    if not ids.numel():
        return
    low, high = torch_module().stack(ids.aminmax()).tolist()  # one synchronisation
    if low >= 0 and high < experts:
        return
    token, slot = (int(v) for v in ((ids < 0) | (ids >= experts)).nonzero()[0])
    raise TmaConfigError(
        f"topk_ids[{token}, {slot}] is {int(ids[token, slot])}; with num_experts={experts} every id must "
        f"be in [0, {experts}): fix the router's output (or pass a boolean mask for tokens routed to "
        "fewer experts)"
    )


def check_mask_rows(mask: torch.Tensor, topk: int) -> None:
    """No token of a (T, E) mask routed to more than `topk` experts (a sync), or TmaConfigError."""
    if not mask.numel():
        return
    counts = mask.sum(dim=1)
    most = int(counts.max())
    if most <= topk:
        return
    token = int((counts > topk).nonzero()[0, 0])
    raise TmaConfigError(
        f"routing mask row {token} names {int(counts[token])} experts; with topk={topk} a token takes at "
        f"most {topk}: pass topk={most} or fix the mask"
    )


def ids_of_mask(mask: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (T, topk) int64: each token's experts in order, -1 past its last; the slots past
    topk the mask names, () int32)."""
    torch = torch_module()
    ordered, experts = torch.sort(mask.to(torch.uint8), dim=1, descending=True, stable=True)
    kept = ordered[:, :topk] > 0
    ids = torch.where(kept, experts[:, :topk], -1)
    extra = (mask.sum(dim=1) - topk).clamp(min=0).sum().to(torch.int32)
    return ids, extra


def route_ids(ids: torch.Tensor, experts: int, align: int) -> Routing:
    """The routing of `ids` (T, topk) int32 or int64: an id in [0, experts) is a slot's expert;
    any other value is no expert (a -1 from a mask's short row; another is counted as dropped).
    Expert-major rows, tokens in order within an expert (a stable order of the slots), each
    expert's group padded to a multiple of `align`; all on the device, by the routing kernels
    where they serve (`routes_by_kernel`), else by torch's expressions (`route_ids_by_torch`):
    the two agree bit for bit."""
    if routes_by_kernel(ids, experts, align):
        return route_ids_by_kernel(ids, experts, align)
    return route_ids_by_torch(ids, experts, align)


def routes_by_kernel(ids: torch.Tensor, experts: int, align: int) -> bool:
    """Whether the routing kernels route `ids`: real int32/int64 tensors on a Hopper, a size they
    take (`plan.routing_rule`), and no trace running (torch.compile, make_fx, a fake or other
    dispatch mode): a trace records torch's expressions, which it can see."""
    torch = torch_module()
    if torch.compiler.is_compiling():
        return False
    from torch._guards import detect_fake_mode
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    if detect_fake_mode((ids,)) is not None or _get_current_dispatch_mode() is not None:
        return False
    if not ids.is_cuda or ids.dtype not in (torch.int32, torch.int64) or cuda_index(ids) < 0:
        return False
    return routing_rule(ids.numel(), experts, align) is None


def route_ids_by_kernel(ids: torch.Tensor, experts: int, align: int) -> Routing:
    """The routing by `moe.kernel.RoutingKernel` (three launches on the current stream, no
    synchronisation): ids (T, topk) int32 or int64 on a Hopper, a size `plan.routing_rule` takes."""
    torch = torch_module()
    tokens, topk = ids.shape
    plan = _routing_plan(experts, align, "int64" if ids.dtype == torch.int64 else "int32")
    flat = ids.contiguous().view(-1)
    device = ids.device
    row_map = torch.empty(flat.numel(), dtype=torch.int32, device=device)
    counts = torch.empty(experts, dtype=torch.int32, device=device)
    offsets = torch.empty(experts + 1, dtype=torch.int32, device=device)
    dropped = torch.empty(1, dtype=torch.int32, device=device)
    workspace = torch.empty(plan.workspace_shape(flat.numel()), dtype=torch.int32, device=device)
    launch = routing_launcher(plan, str(device)).launch
    with torch.cuda.device(device):  # the launcher takes the current device's stream
        launch(flat, row_map, counts, offsets, dropped, workspace)
    return Routing(row_map.view(tokens, topk), counts, offsets, dropped.view(()))


@functools.lru_cache(maxsize=64)
def _routing_plan(experts: int, align: int, id_dtype: str) -> RoutingPlan:
    return RoutingPlan(experts, align, id_dtype)


def route_ids_by_torch(ids: torch.Tensor, experts: int, align: int) -> Routing:
    """`route_ids` in torch's expressions (a stable sort, scans and scatters): any device, and
    what a trace records."""
    torch = torch_module()
    tokens, topk = ids.shape
    flat = ids.reshape(-1).long()
    inside = (flat >= 0) & (flat < experts)
    dropped = (~inside & (flat != -1)).sum().to(torch.int32)
    key = torch.where(inside, flat, experts)  # the unrouted last
    order = torch.sort(key, stable=True).indices
    counts = torch.zeros(experts + 1, dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    padded = (counts[:experts] + (align - 1)) // align * align
    ends = torch.cumsum(padded, 0)
    starts = torch.cat([ends.new_zeros(1), ends])  # each expert's first row, then the rows used
    sorted_starts = torch.cumsum(counts, 0) - counts  # where each expert's slots begin in `order`
    sorted_key = key[order]
    rank = torch.arange(flat.numel(), device=ids.device) - sorted_starts[sorted_key]
    rows = torch.where(sorted_key < experts, starts[sorted_key] + rank, -1)
    row_map = torch.empty_like(rows).scatter_(0, order, rows)
    return Routing(
        row_map.to(torch.int32).view(tokens, topk),
        counts[:experts].to(torch.int32),
        starts.to(torch.int32),
        dropped,
    )


# -- the route ------------------------------------------------------------------------------------
def facts(op: str, rows: torch.Tensor, out_rows: int, row_map: torch.Tensor) -> MoeFacts:
    """What the route of a dispatch (of x) or combine (of y) reads, writing `out_rows` rows."""
    return MoeFacts(
        op=op,
        rows=tensor_facts(rows),
        out_rows=out_rows,
        routing_device=cuda_index(row_map),
        topk=row_map.shape[1],
        lazy=lazy_bit(rows),
    )


def refuse_strict(strict: bool, what: str, reason: str) -> None:
    if strict:
        raise TmaConfigError(f"{what}: the bulk-copy kernels cannot serve this call: {reason}")


# A call's plans, built once per shape class: a plan checks itself as it is made.
_dispatch_plan = functools.lru_cache(maxsize=256)(DispatchPlan)
_combine_plan = functools.lru_cache(maxsize=256)(CombinePlan)
_quantize_plan = functools.lru_cache(maxsize=256)(QuantizePlan)


@functools.lru_cache(maxsize=16)
def _device_sm_count(device: int) -> int:
    torch = torch_module()
    return device_facts(torch.device("cuda", device))[0] if device >= 0 else DEFAULT_SM_COUNT


def _grid(device: int, sms: int | None) -> dict:
    """A plan's grid on `device` on an SM budget of `sms` (`plan.budget`; None: the whole GPU):
    the rings keep their depth, already past the budget's bytes in flight."""
    return budget_grid(sms, _device_sm_count(device))


# -- dispatch -------------------------------------------------------------------------------------
def unnamed_rows(routed: Routing, topk: int, align: int) -> torch.Tensor:
    """The rows of a dispatch's output no slot of a routing of ids names, as a static-size int64
    index of E x (align - 1) rows, each named once: each expert's padding, then the rows from the
    last group's end (`expert_offsets[E]`). Every unnamed row when every slot has an expert (the
    rows are then T * topk + E x (align - 1)); a skipped slot's (`dropped`) leaves as many rows at
    the end unlisted. Empty for align 1. Exact, so that zeroing them writes each once."""
    torch = torch_module()
    counts = routed.tokens_per_expert.long()
    device, experts = counts.device, counts.numel()
    if align == 1:
        return torch.empty(0, dtype=torch.int64, device=device)
    padding = (counts + (align - 1)) // align * align - counts
    ends = torch.cumsum(padding, 0)  # where each expert's padding ends in the list
    entry = torch.arange(experts * (align - 1), device=device)
    expert = torch.searchsorted(ends, entry, right=True).clamp(max=experts - 1)
    offsets = routed.expert_offsets.long()
    pads = offsets[expert] + counts[expert] + entry - (ends - padding)[expert]
    tail = offsets[-1] + entry - ends[-1]
    return torch.where(entry < ends[-1], pads, tail)


def _new_rows(shape: tuple[int, ...], like: torch.Tensor, zeroed: bool) -> torch.Tensor:
    """The output's memory: zeros, or as allocated (the rows the call writes)."""
    torch = torch_module()
    return (torch.zeros if zeroed else torch.empty)(shape, dtype=like.dtype, device=like.device)


def permute(
    x: torch.Tensor,
    row_map: torch.Tensor,
    rows: int,
    zero_rows: torch.Tensor | None,
    strict: bool,
    sms: int | None = None,
) -> torch.Tensor:
    """(rows, *x.shape[1:]) of x's dtype: row row_map[t, j] holds x[t]. The rows no slot names are
    zero where `zero_rows` is None; else only those `zero_rows` lists (entries outside [0, rows)
    name none) are zeroed, the others no slot names left as allocated. On an SM budget of `sms`."""
    check_budget(sms, x)
    shape = (rows, *x.shape[1:])
    if not rows or not x.shape[0] or not x[0].numel():
        return _new_rows(shape, x, True)
    route = moe_route(facts("dispatch", x, rows, row_map))
    if not route.by_tma:
        refuse_strict(strict, "moe_dispatch", route.reason)
        return _permute_by_torch(x, row_map, rows)
    width = x[0].numel() * x.element_size()
    plan = _dispatch_plan(width, row_map.shape[1], **_grid(x.get_device(), sms))
    launch = dispatch_launcher(plan, str(x.device)).launch
    out = _dispatch_out(shape, x, rows, zero_rows)
    launch(_bytes(x), row_map, _bytes(out))
    return out


def _dispatch_out(shape: tuple[int, ...], like: torch.Tensor, rows: int, zero_rows: torch.Tensor | None):
    """A dispatch's output of `like`'s dtype before the kernel writes the slots' rows: zeros
    where `zero_rows` is None (every row no slot names), else only the rows it lists zeroed."""
    torch = torch_module()
    if zero_rows is None:  # every row no slot names: a memset first, then the slots' rows
        return _new_rows(shape, like, True)
    if not zero_rows.numel():
        return _new_rows(shape, like, False)
    # a scratch row past the end takes the entries that name no row
    spare = _new_rows((rows + 1, *shape[1:]), like, False)
    named = (zero_rows >= 0) & (zero_rows < rows)
    spare.index_fill_(0, torch.where(named, zero_rows, rows), 0)
    return spare[:rows]


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A (rows, ...) tensor's memory as (rows, row bytes) uint8 with its row stride."""
    torch = torch_module()
    return tensor.view(tensor.shape[0], -1).view(torch.uint8)


def _permute_by_torch(x: torch.Tensor, row_map: torch.Tensor, rows: int) -> torch.Tensor:
    """The dispatch in torch's expressions: each row's source token (a scatter of the slots),
    x gathered, the rows of no token zero."""
    torch = torch_module()
    tokens, topk = row_map.shape
    source = torch.full((rows + 1,), tokens, dtype=torch.int64, device=x.device)
    token_of_slot = torch.arange(tokens * topk, device=x.device) // topk
    source.scatter_(0, slot_rows(row_map, rows), token_of_slot)
    padded = torch.cat([x, x.new_zeros((1, *x.shape[1:]))])
    return padded.index_select(0, source[:rows])


# -- the dispatch that quantizes to fp8 -----------------------------------------------------------
def scale_dtype(scale_format: str):
    """The scales' torch dtype: fp32, or UE8M0 (each scale's biased exponent, a byte)."""
    torch = torch_module()
    return torch.float32 if scale_format == "fp32" else torch.float8_e8m0fnu


def quantize_rows_by_torch(x: torch.Tensor, scale_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x (T, H) quantized to e4m3 by 1 x 128 blocks, in torch's expressions (the reference the
    kernel equals bit for bit): (the e4m3 rows (T, H), the scales (T, H / 128) of
    `scale_dtype`). A block's amax (at least AMAX_FLOOR) maps to FP8_MAX: its scale is amax /
    FP8_MAX and its values are multiplied by FP8_MAX / amax (each one division in fp32), or
    with UE8M0 the scale rounded up to a power of two and the values multiplied by its exact
    reciprocal."""
    torch = torch_module()
    tokens, hidden = x.shape
    blocks = x.reshape(tokens, hidden // QUANT_BLOCK, QUANT_BLOCK).float()
    amax = blocks.abs().amax(dim=2).clamp(min=AMAX_FLOOR)
    top = torch.full_like(amax, FP8_MAX)  # a tensor: torch divides by a scalar as a reciprocal's product
    scale = amax / top
    if scale_format == "fp32":
        inverse, stored = top / amax, scale
    else:
        bits = scale.view(torch.int32)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
        inverse = ((254 - exponent) << 23).view(torch.float32)
        stored = exponent.to(torch.uint8).view(torch.float8_e8m0fnu)
    quantized = (blocks * inverse.unsqueeze(2)).to(torch.float8_e4m3fn)
    return quantized.view(tokens, hidden), stored


def permute_fp8(
    x: torch.Tensor,
    row_map: torch.Tensor,
    rows: int,
    zero_rows: torch.Tensor | None,
    scale_format: str,
    strict: bool,
    sms: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`permute` of x quantized to e4m3 (`quantize_rows_by_torch`): (the (rows, H) e4m3 rows, the
    scales' memory (H / 128, lead) of `scale_dtype`, row r's block b at [b, r], lead =
    `scale_rows(rows)`; a row no slot names has scale 0). The rows no slot names are zero as
    `permute` says."""
    torch = torch_module()
    check_budget(sms, x)
    tokens, hidden = x.shape
    blocks = hidden // QUANT_BLOCK
    lead = scale_rows(rows, scale_format)
    # zero bytes, viewed: e4m3's and UE8M0's zeros are bytes (UE8M0 has no 0.0 to convert)
    words = torch.float32 if scale_format == "fp32" else torch.uint8
    scales = torch.zeros((blocks, lead), dtype=words, device=x.device).view(scale_dtype(scale_format))
    fp8, like = torch.float8_e4m3fn, x.new_empty(0, dtype=torch.uint8)
    if not rows or not tokens or not hidden:
        return _new_rows((rows, hidden), like, True).view(fp8), scales
    route = moe_route(facts(QUANTIZE_OP, x, rows, row_map))
    if not route.by_tma:
        refuse_strict(strict, "moe_dispatch(quantize='fp8')", route.reason)
        quantized, stored = quantize_rows_by_torch(x, scale_format)
        out = _permute_by_torch(quantized.view(torch.uint8), row_map, rows).view(fp8)
        # each slot's scales to its row; the slots that name none to a spare row past the end
        spare = torch.zeros((rows + 1, blocks), dtype=words, device=x.device)
        per_slot = _scale_words(stored).repeat_interleave(row_map.shape[1], 0)
        spare.index_copy_(0, slot_rows(row_map, rows), per_slot)
        _scale_words(scales)[:, :rows] = spare[:rows].t()
        return out, scales
    plan = _quantize_plan(
        hidden, row_map.shape[1], dtype_of(x.dtype), scale_format, **_grid(x.get_device(), sms)
    )
    out = _dispatch_out((rows, hidden), like, rows, zero_rows)
    quantize_launcher(plan, str(x.device)).launch(_bytes(x), row_map, out, _scale_words(scales))
    return out.view(fp8), scales


def _scale_words(scales: torch.Tensor) -> torch.Tensor:
    """Scales as the kernel and torch's copies take them: fp32 as is, UE8M0 as its bytes."""
    torch = torch_module()
    return scales if scales.dtype == torch.float32 else scales.view(torch.uint8)


# -- combine --------------------------------------------------------------------------------------
def combine(
    y: torch.Tensor, row_map: torch.Tensor, probs: torch.Tensor | None, strict: bool, sms: int | None = None
) -> torch.Tensor:
    """(T, *y.shape[1:]) of y's dtype: out[t] = sum over slots j, in order, of probs[t, j] *
    y[row_map[t, j]] in fp32 (weight 1 without probs; a slot naming no row of y adds nothing). On
    an SM budget of `sms`."""
    torch = torch_module()
    check_budget(sms, y)
    tokens, topk = row_map.shape
    out = torch.empty((tokens, *y.shape[1:]), dtype=y.dtype, device=y.device)
    if not tokens:
        return out
    route = moe_route(facts("combine", y, tokens, row_map))
    if route.path == "empty":
        return out.zero_()
    if not route.by_tma:
        refuse_strict(strict, "moe_combine", route.reason)
        return _combine_by_torch(y, row_map, probs)
    width = y[0].numel() * y.element_size()
    plan = _combine_plan(
        width, topk, dtype_of(y.dtype), weighted=probs is not None, **_grid(y.get_device(), sms)
    )
    weights = _no_weights(y.device) if probs is None else probs.to(torch.float32).contiguous()
    combine_launcher(plan, str(y.device)).launch(_bytes(y), row_map, weights, out.view(tokens, -1))
    return out


def combine_grad(
    grad: torch.Tensor,
    y: torch.Tensor,
    row_map: torch.Tensor,
    probs: torch.Tensor,
    strict: bool,
    sms: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of a weighted combine out = moe_combine(y, row_map, probs) given the
    output's gradient `grad` (T, H): (y's, (rows, H) of y's dtype: row row_map[t, j] holds
    probs[t, j] * grad[t] computed in fp32, the rows no slot names zero; probs', (T, topk) of
    probs' dtype: the dot product of grad[t] with row row_map[t, j] in fp32, 0 where the slot
    names no row). On an SM budget of `sms`."""
    torch = torch_module()
    check_budget(sms, y)
    tokens, topk = row_map.shape
    rows = y.shape[0]
    if not tokens or not rows or not y.shape[1]:  # nothing named: no gradient
        zero_probs = torch.zeros(probs.shape, dtype=probs.dtype, device=probs.device)
        return torch.zeros(y.shape, dtype=y.dtype, device=y.device), zero_probs
    routes = [moe_route(facts("combine", tensor, tokens, row_map)) for tensor in (y, grad)]
    refused = next((route for route in routes if not route.by_tma), None)
    if refused is None and grad.dtype != y.dtype:
        refused = torch_route("combine", f"the gradient is {grad.dtype} and y {y.dtype}")
    if refused is not None:
        refuse_strict(strict, "moe_combine's backward", refused.reason)
        return combine_grad_by_torch(grad, y, row_map, probs)
    width = y[0].numel() * y.element_size()
    plan = _combine_plan(width, topk, dtype_of(y.dtype), grad=True, **_grid(y.get_device(), sms))
    partials = torch.empty((tokens, topk, plan.partials), dtype=torch.float32, device=y.device)
    weights = probs.to(torch.float32).contiguous()
    grad_y = torch.empty(y.shape, dtype=y.dtype, device=y.device)  # the kernel zeroes the unnamed
    launch = combine_launcher(plan, str(y.device)).launch
    launch(_bytes(y), _bytes(grad), row_map, weights, grad_y, partials, named_rows(row_map, rows))
    return grad_y, partials.sum(dim=2).to(probs.dtype)


def slot_rows(row_map: torch.Tensor, rows: int) -> torch.Tensor:
    """(T * topk,) int64: each slot's row of a tensor of `rows` rows, `rows` (a spare row past
    the end) for a slot that names none of them."""
    torch = torch_module()
    flat = row_map.reshape(-1).long()
    return torch.where((flat >= 0) & (flat < rows), flat, rows)


def named_rows(row_map: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows + 1,) uint8: 1 for each of `rows` rows a slot of `row_map` names (the last entry
    takes the slots that name none)."""
    torch = torch_module()
    flags = torch.zeros(rows + 1, dtype=torch.uint8, device=row_map.device)
    return flags.index_fill_(0, slot_rows(row_map, rows), 1)


def combine_grad_by_torch(
    grad: torch.Tensor, y: torch.Tensor, row_map: torch.Tensor, probs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`combine_grad` in torch's expressions, in fp32 (float64 stays float64): differentiable,
    what a backward whose graph is kept (create_graph) takes."""
    torch = torch_module()
    tokens, topk = row_map.shape
    rows = y.shape[0]
    named_row = slot_rows(row_map, rows)
    valid = named_row < rows
    accumulate = torch.float64 if y.dtype == torch.float64 else torch.float32
    token_of_slot = torch.arange(tokens * topk, device=y.device) // topk
    scaled = grad.to(accumulate).index_select(0, token_of_slot) * probs.reshape(-1, 1).to(accumulate)
    spare = y.new_zeros((rows + 1, *y.shape[1:]))
    spare.index_copy_(0, named_row, scaled.to(y.dtype))
    named = y.index_select(0, torch.where(valid, named_row, 0)).to(accumulate).view(tokens, topk, -1)
    dots = torch.bmm(named, grad.to(accumulate).view(tokens, -1, 1)).squeeze(-1)
    return spare[:rows], torch.where(valid.view(tokens, topk), dots, 0).to(probs.dtype)


@functools.lru_cache(maxsize=16)
def _no_weights(device) -> torch.Tensor:
    return torch_module().zeros((1, 1), dtype=torch_module().float32, device=device)


def _combine_by_torch(y: torch.Tensor, row_map: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
    """The combine in torch's expressions, slot by slot in order, in fp32 (float64 stays float64)."""
    torch = torch_module()
    tokens, topk = row_map.shape
    rows = y.shape[0]
    valid = (row_map >= 0) & (row_map < rows)
    accumulate = torch.float64 if y.dtype == torch.float64 else torch.float32
    total = torch.zeros((tokens, *y.shape[1:]), dtype=accumulate, device=y.device)
    shape = (tokens,) + (1,) * (y.dim() - 1)
    for slot in range(topk):
        named = valid[:, slot]
        values = y.index_select(0, torch.where(named, row_map[:, slot], 0).long()).to(accumulate)
        if probs is not None:
            values = values * probs[:, slot].to(accumulate).view(shape)
        total += torch.where(named.view(shape), values, 0)
    return total.to(y.dtype)
