"""Mixture-of-experts token movement: `moe_dispatch` (permute) and `moe_combine` (unpermute and
weighted sum), differentiable, CUDA-graph capturable, traceable by torch.compile (they run
through `torch.ops.tmakit.moe_permute` and `moe_combine`, whose fakes know every output's size).

The routing is read on the device: no host synchronisation but the ids' check, which an eager call
makes (`check_ids=True`: one reduction, a TmaConfigError naming the first bad id before anything
is written) and a CUDA-graph capture or a torch.compile trace skips; there a bad id's slot moves
nothing and is counted in `MoeDispatch.dropped`.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, NamedTuple

from ..api.tensors import check_torch_tensor, import_torch
from ..errors import TmaConfigError
from ..plan.budget import call_budget
from ..plan.route import Route
from ..validate import flag, one_of
from .call import (
    check_id_range,
    check_mask_rows,
    facts,
    host_checks_allowed,
    ids_of_mask,
    route_ids,
    unnamed_rows,
)
from .plan import QUANT_BLOCK, SCALE_FORMATS, check_routing_sizes, dispatch_rows, moe_route

if TYPE_CHECKING:
    import torch

__all__ = ["MoeDispatch", "moe_combine", "moe_dispatch", "moe_path"]


class MoeDispatch(NamedTuple):
    """What `moe_dispatch` returns.

    Attributes:
        out: (T*topk + E*(align-1), H) of x's dtype: expert e's tokens' rows, in token order, from
            row `expert_offsets[e]`, its group padded with zero rows to a multiple of `align`;
            rows from `expert_offsets[E]` on are zero (but those of `dropped` slots, which are
            not written).
        row_map: (T, topk) int32: the row of `out` holding token t's slot j (-1: the slot has no
            expert); what `moe_combine` reads.
        tokens_per_expert: (E,) int32, the tokens routed to each expert (padding not counted).
        expert_offsets: (E + 1,) int32: each expert's first row of `out`, then the rows used.
        probs: (rows,) the probabilities permuted as the rows (0 on padding), or None.
        scales: (rows, S) the per-token scales permuted as the rows (0 on padding), or None;
            with `quantize="fp8"`, the blockwise scales the call made: (rows, H / 128) fp32,
            MN-major and TMA-aligned as DeepGEMM's Hopper fp8 GEMMs read them (strides (1,
            lead), lead the rows padded to 16 bytes of scales), or with `scale_format="ue8m0"`
            one float8_e8m0fnu exponent byte a block in the same layout (not packed four to an
            int32); zero bytes on padding; out[r, 128 b: 128 (b + 1)] times scales[r, b] is the
            row's value.
        token_probs: (T, topk) each slot's probability, as `moe_combine` takes it (a mask's
            probabilities gathered per slot; 0 where a slot has no expert), or None.
        dropped: () int32 on the device: slots skipped because their id was out of range (only
            a capture or a trace lets one through; an eager call raises).
    """

    out: torch.Tensor
    row_map: torch.Tensor
    tokens_per_expert: torch.Tensor
    expert_offsets: torch.Tensor
    probs: torch.Tensor | None
    scales: torch.Tensor | None
    token_probs: torch.Tensor | None
    dropped: torch.Tensor


def _ops():
    from .. import ops  # registers torch.ops.tmakit (imports torch)

    return ops.torch.ops.tmakit


def _count(value: object, name: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise TmaConfigError(f"{name} is {value!r}; it must be an integer, {least} or more")
    return int(value)


def moe_dispatch(
    x: torch.Tensor,
    routing: torch.Tensor,
    *,
    num_experts: int | None = None,
    topk: int | None = None,
    probs: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
    align: int = 1,
    quantize: str | None = None,
    scale_format: str = "fp32",
    check_ids: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> MoeDispatch:
    """Each token's row copied to the rows of its experts, grouped by expert (the permute before
    the expert GEMMs): one bulk load per stage of token rows, one bulk store per (token, expert).

    Args:
        x: (T, H) activations, rows contiguous (any dtype; the kernel moves bytes).
        routing: (T, topk) int32/int64 expert ids (`num_experts` required), or a (T, E) bool mask
            (`topk` required: the most experts a token takes).
        num_experts: E, with ids (a mask's is its width).
        topk: with a mask, the slots per token (its row map's width); with ids, their width.
        probs: the router's probabilities, (T, topk) with ids or (T, E) with a mask
            (differentiable).
        scales: (T, S) per-token scales (e.g. blockwise quantization scales), permuted as the rows.
        align: each expert's group padded to a multiple of this (grouped GEMMs' tile rows).
        quantize: "fp8": each row quantized to float8_e4m3fn as it moves, by 1 x 128 blocks (a
            block's amax, at least 1e-4, maps to 448), its scales in `MoeDispatch.scales` (H a
            multiple of 128; bf16 and fp16 by the kernel, other floats by torch's expressions;
            finite values: a NaN's block is not the reference's). The quantized output carries
            no gradient.
        scale_format: with `quantize`, "fp32" (amax / 448) or "ue8m0" (that rounded up to a power
            of two, stored as its exponent byte).
        check_ids: check the ids on the host (one synchronisation; skipped inside a CUDA-graph
            capture and a torch.compile trace, where a bad slot is skipped and counted).
        strict: raise instead of taking torch's expressions where the kernel cannot serve.
        sms: an SM budget (`tmakit.sm_budget`): the kernel's persistent grid (and its backward's)
            takes this many SMs, one block each; None: the enclosing budget's, else the whole GPU.
            The routing's own small kernels are not confined.

    Returns:
        A `MoeDispatch`.

    Raises:
        TmaConfigError: a tensor, shape, dtype or device it does not take; an id out of range or
            a mask row past `topk` (eagerly, with `check_ids`); with `strict`, why the kernel
            cannot serve; an `sms` past the GPU's SM count.
    """
    torch = import_torch("moe_dispatch")
    sms = call_budget(sms)
    check_torch_tensor(x, "moe_dispatch", "x")
    check_torch_tensor(routing, "moe_dispatch", "routing")
    checking = flag(check_ids, "moe_dispatch's check_ids") and host_checks_allowed(x, routing)
    strict = flag(strict, "moe_dispatch's strict")
    align = _count(align, "moe_dispatch's align")
    if x.dim() != 2 or routing.dim() != 2 or routing.shape[0] != x.shape[0]:
        raise TmaConfigError(
            f"x is {tuple(x.shape)} and routing {tuple(routing.shape)}; moe_dispatch takes x (tokens, "
            "hidden) and routing (tokens, topk) ids or a (tokens, experts) bool mask"
        )
    if routing.device != x.device:
        raise TmaConfigError(f"routing is on {routing.device} and x on {x.device}; use one device")
    tokens = x.shape[0]
    if routing.dtype == torch.bool:
        experts = routing.shape[1]
        if num_experts is not None and _count(num_experts, "num_experts") != experts:
            raise TmaConfigError(f"num_experts={num_experts} but the mask has {experts} columns")
        if topk is None:
            raise TmaConfigError(
                "a routing mask needs topk=: the most experts a token takes (the row map's width)"
            )
        topk = _count(topk, "moe_dispatch's topk")
        check_routing_sizes(tokens, topk, experts, align)
        if checking:
            check_mask_rows(routing, topk)
        ids, extra = ids_of_mask(routing, topk)
    elif routing.dtype in (torch.int32, torch.int64):
        if num_experts is None:
            raise TmaConfigError("expert ids need num_experts=: the output's size depends on it")
        experts, ids, extra = _count(num_experts, "num_experts"), routing, None
        if topk is not None and _count(topk, "moe_dispatch's topk") != routing.shape[1]:
            raise TmaConfigError(f"topk={topk} but the ids have {routing.shape[1]} columns")
        topk = routing.shape[1]
        check_routing_sizes(tokens, topk, experts, align)
        if checking:
            check_id_range(routing, experts)
    else:
        raise TmaConfigError(
            f"routing is {routing.dtype}; moe_dispatch takes int32 or int64 expert ids or a bool mask"
        )
    token_probs = _token_probs(probs, ids, routing, experts)
    _check_rows_of(scales, "scales", tokens, x.device)
    quantizing = _check_quantize(quantize, scale_format, scales, x)
    routed = route_ids(ids, experts, align)
    dropped = routed.dropped if extra is None else routed.dropped + extra
    rows = dispatch_rows(tokens, topk, experts, align)
    # The rows no slot names: with ids, the padding and the rows past the last group (a static
    # list); a mask's short rows may leave any number, so its output is zeroed first.
    zero_rows = None if extra is not None else unnamed_rows(routed, topk, align)
    ops = _ops()
    if quantizing:
        out, lead_major = ops.moe_permute_fp8(
            x.detach(), routed.row_map, rows, zero_rows, scale_format, strict, sms
        )
        permuted_scales = lead_major.t()[:rows]  # (rows, H / 128), MN-major
    else:
        out = ops.moe_permute(x, routed.row_map, rows, zero_rows, strict, sms)
        permuted_scales = (
            None if scales is None else ops.moe_permute(scales, routed.row_map, rows, zero_rows, False, sms)
        )
    permuted_probs = None
    if token_probs is not None:
        flat = routed.row_map.reshape(-1).long()
        where = torch.where(flat >= 0, flat, rows)
        spread = token_probs.new_zeros(rows + 1).scatter(0, where, token_probs.reshape(-1))
        permuted_probs = spread[:rows]
    return MoeDispatch(
        out,
        routed.row_map,
        routed.tokens_per_expert,
        routed.expert_offsets,
        permuted_probs,
        permuted_scales,
        token_probs,
        dropped,
    )


def _check_quantize(quantize: object, scale_format: object, scales: object, x: torch.Tensor) -> bool:
    """Whether the call quantizes (`quantize="fp8"`), its options checked first."""
    if quantize is None:
        return False
    if quantize != "fp8":
        raise TmaConfigError(f"moe_dispatch quantize={quantize!r}; it takes None or 'fp8' (e4m3)")
    one_of(scale_format, "moe_dispatch's scale_format", SCALE_FORMATS)
    if scales is not None:
        raise TmaConfigError("moe_dispatch(quantize='fp8') makes the scales: pass scales=None")
    if not x.is_floating_point() or x.shape[1] % QUANT_BLOCK:
        raise TmaConfigError(
            f"x is {tuple(x.shape)} {x.dtype}; moe_dispatch(quantize='fp8') quantizes float rows of a "
            f"multiple of {QUANT_BLOCK} elements (1 x {QUANT_BLOCK} blocks): pad the hidden size"
        )
    return True


def _check_rows_of(tensor: object, name: str, tokens: int, device) -> None:
    if tensor is None:
        return
    check_torch_tensor(tensor, "moe_dispatch", name)
    if tensor.dim() != 2 or tensor.shape[0] != tokens or tensor.device != device:
        raise TmaConfigError(
            f"{name} is {tuple(tensor.shape)} on {tensor.device}; it must be ({tokens}, S) on {device}"
        )


def _token_probs(probs, ids, routing, experts: int):
    """The (T, topk) probability of each slot: `probs` itself with ids, a mask's (T, E) gathered
    at each slot's expert (0 where none); None without probs."""
    if probs is None:
        return None
    torch = import_torch("moe_dispatch")
    check_torch_tensor(probs, "moe_dispatch", "probs")
    masked = routing.dtype == torch.bool
    expected = (routing.shape[0], experts if masked else routing.shape[1])
    if tuple(probs.shape) != expected or not probs.is_floating_point() or probs.device != routing.device:
        raise TmaConfigError(
            f"probs is {tuple(probs.shape)} {probs.dtype} on {probs.device}; it must be a float tensor "
            f"{expected} on {routing.device} ({'(tokens, experts) with a mask' if masked else 'as the ids'})"
        )
    if not masked:
        return probs
    picked = probs.gather(1, ids.clamp(min=0))
    return torch.where(ids >= 0, picked, 0)


def moe_combine(
    y: torch.Tensor,
    row_map: torch.Tensor,
    probs: torch.Tensor | None = None,
    *,
    strict: bool = False,
    sms: int | None = None,
) -> torch.Tensor:
    """Each token's expert rows summed back (the unpermute after the expert GEMMs): out[t] = sum
    over slots j, in order, of probs[t, j] * y[row_map[t, j]], accumulated in fp32.

    Args:
        y: (rows, H) expert outputs, bf16, fp16 or fp32 for the kernel (others: torch's
            expressions), rows contiguous.
        row_map: (T, topk) int32, `MoeDispatch.row_map` (a slot of -1 adds nothing).
        probs: (T, topk) float weights (`MoeDispatch.token_probs`), or None for weight 1
            (differentiable).
        strict: raise instead of taking torch's expressions where the kernel cannot serve.
        sms: as `moe_dispatch`'s.

    Returns:
        (T, H) of y's dtype.

    Raises:
        TmaConfigError: a tensor, shape, dtype or device it does not take; with `strict`, why the
            kernel cannot serve; an `sms` past the GPU's SM count.
    """
    sms = call_budget(sms)
    check_torch_tensor(y, "moe_combine", "y")
    check_row_map(row_map, y, "moe_combine")
    strict = flag(strict, "moe_combine's strict")
    if probs is not None:
        check_torch_tensor(probs, "moe_combine", "probs")
        if (
            tuple(probs.shape) != tuple(row_map.shape)
            or not probs.is_floating_point()
            or probs.device != y.device
        ):
            raise TmaConfigError(
                f"probs is {tuple(probs.shape)} {probs.dtype} on {probs.device}; it must be a float tensor "
                f"{tuple(row_map.shape)} on {y.device}, as the row map"
            )
    return _ops().moe_combine(y, row_map, probs, strict, sms)


def check_row_map(row_map: object, rows: torch.Tensor, what: str) -> None:
    """A (T, topk) int32 row map on the rows' device, rows a 2-D tensor."""
    torch = import_torch(what)
    check_torch_tensor(row_map, what, "row_map")
    if rows.dim() != 2:
        raise TmaConfigError(f"{what} takes a 2-D (rows, hidden) tensor; it is {tuple(rows.shape)}")
    if row_map.dtype != torch.int32 or row_map.dim() != 2 or row_map.device != rows.device:
        raise TmaConfigError(
            f"row_map is {tuple(row_map.shape)} {row_map.dtype} on {row_map.device}; {what} takes the "
            f"(tokens, topk) int32 row map moe_dispatch returns, on {rows.device}"
        )
    if not row_map.is_contiguous():
        raise TmaConfigError(f"{what}: row_map is not contiguous; pass row_map.contiguous()")


def moe_path(op: str, rows: torch.Tensor, row_map: torch.Tensor, out_rows: int | None = None) -> Route:
    """The path a dispatch or combine takes and why, without running it.

    Args:
        op: "dispatch" or "combine".
        rows: x (a dispatch) or y (a combine).
        row_map: the (T, topk) int32 row map.
        out_rows: a dispatch's output rows (`MoeDispatch.out`'s); a combine's is T.

    Returns:
        A `plan.route.Route`: "tma-rows-bulk" or "torch" (or "empty"), and the rule that chose it.

    Raises:
        TmaConfigError: an `op` it does not name; tensors as `moe_dispatch` and `moe_combine`.
    """
    if op not in ("dispatch", "combine"):
        raise TmaConfigError(f"moe_path op={op!r}; it takes 'dispatch' or 'combine'")
    check_torch_tensor(rows, "moe_path", "rows")
    check_row_map(row_map, rows, "moe_path")
    count = row_map.shape[0] if op == "combine" else out_rows if out_rows is not None else rows.shape[0]
    return moe_route(facts(op, rows, count, row_map))
