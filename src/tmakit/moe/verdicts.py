"""The MoE study's references and verdicts (`moe.bench`): what each timed row's output is compared
with (torch's gather bit for bit, the reference quantizer's bytes and scales, a float64 sum and
its fp32-accumulation bound, torch's float64 autograd of the layer) and how the comparison reads:
"ok: ..." or "MISMATCH ..." naming the first wrong row or token."""

from __future__ import annotations

from . import call

DTYPE_NAMES = {"bfloat16": "bf16"}  # a dtype's short name in a verdict and a case's name


def first_wrong_row(got, expected) -> int | None:
    """The first row whose bits differ (None: every row equal)."""
    import torch

    if got.shape != expected.shape:
        return 0
    wrong = (got.view(torch.uint8) != expected.view(torch.uint8)).reshape(got.shape[0], -1).any(dim=1)
    found = wrong.nonzero()
    return int(found[0, 0]) if len(found) else None


def dispatch_verdict(got, expected, order=None) -> str:
    """A dispatch's output against torch's gather, bit for bit over every used row; `order`: the
    row of `expected` each row of `got` holds (TransformerEngine's rows in its own order)."""
    import torch

    if order is not None:
        if bool((order < 0).any()):
            return "MISMATCH: its row map names rows tmakit's does not"
        expected = expected.index_select(0, order)
    wrong = first_wrong_row(got, expected)
    if wrong is not None:
        return f"MISMATCH first at row {wrong}"
    if order is None:
        return "ok: bit-exact against torch"
    same = bool(torch.equal(order, torch.arange(order.numel(), device=order.device)))
    if same:
        return "ok: bit-exact against torch, its rows in tmakit's order"
    return "ok: bit-exact against torch after mapping its rows to tmakit's (its order differs)"


def quantized_reference(x, source, compiled: dict | None = None) -> tuple:
    """(the e4m3 rows' bytes (rows, H) uint8, their fp32 scales (rows, H / 128)): torch's
    reference quantizer (`moe.call.quantize_rows_by_torch`) gathered by the source index; with
    `compiled` (a case's operands), the quantizer inductor compiled from it instead."""
    import torch

    quantize = compiled["compiled quantize"] if compiled else call.quantize_rows_by_torch
    quantized, scales = quantize(x) if compiled else quantize(x, "fp32")
    return quantized.view(torch.uint8).index_select(0, source), scales.index_select(0, source)


def quantizer_difference(first: dict, reference: tuple) -> str:
    """How inductor's compile of the reference quantizer differs from it, byte for byte: its
    divisions need not round as torch's eager ones do."""
    inductor = quantized_reference(first["x"], first["source"], compiled=first)
    rows = int((inductor[0] != reference[0]).sum())
    scales = int((inductor[1] != reference[1]).sum())
    total, blocks = reference[0].numel(), reference[1].numel()
    return (
        f"inductor's quantizer: {rows} of {total} bytes and {scales} of {blocks} scales differ from "
        "the reference's"
    )


def quantized_verdict(got, expected, order=None) -> str:
    """An fp8 dispatch's (rows, MN-major scales (H / 128, lead)) against `quantized_reference`
    bit for bit; `order` as `dispatch_verdict`'s."""
    import torch

    out, scales = got
    verdict = dispatch_verdict(out.view(torch.uint8), expected[0], order)
    if not verdict.startswith("ok"):
        return verdict
    rows = expected[1].shape[0]
    by_row = scales.t()[:rows]
    want = expected[1] if order is None else expected[1].index_select(0, order)
    if not torch.equal(by_row, want):
        first = int((by_row != want).any(1).nonzero()[0, 0])
        return f"MISMATCH: scales first wrong at row {first}"
    return verdict.replace("bit-exact against torch", "bit-exact against torch's reference quantizer")


def combine_reference(y, row_map, probs) -> tuple:
    """(the combine summed in float64 (T, H), the bound of fp32 accumulation's error: (topk + 1)
    units of fp32 rounding of the sum of magnitudes)."""
    import torch

    tokens, topk = row_map.shape
    total = torch.zeros((tokens, y.shape[1]), dtype=torch.float64, device=y.device)
    magnitude = torch.zeros_like(total)
    for slot in range(topk):
        values = y.index_select(0, row_map[:, slot].long()).double() * probs[:, slot].double()[:, None]
        total += values
        magnitude += values.abs()
    return total, (topk + 1) * 2.0**-23 * magnitude


def combine_verdict(got, total, bound) -> str:
    """A combine's output within fp32 accumulation and one rounding to its dtype (bf16's eps
    2^-7) of the float64 sum: "ok" or its first token beyond."""
    import torch

    eps = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-23}[got.dtype]
    if tuple(got.shape) != tuple(total.shape):
        return f"MISMATCH: shape {tuple(got.shape)}, not {tuple(total.shape)}"
    wrong = first_beyond(got, total, bound + eps * (total.abs() + bound))
    if wrong is not None:
        return f"MISMATCH first at token {wrong} (beyond fp32 accumulation and one rounding)"
    name = DTYPE_NAMES.get(str(got.dtype).removeprefix("torch."), got.dtype)
    return f"ok: within fp32 accumulation and one {name} rounding of the float64 sum"


def first_beyond(got, expected, bound) -> int | None:
    """The first row of `got` with an element farther than `bound` from `expected` (float64), a
    NaN (an output poisoned and never written) counting as farther; None: none."""
    within = (got.double() - expected).abs() <= bound + 1e-30
    found = (~within).reshape(got.shape[0], -1).any(dim=1).nonzero()
    return int(found[0, 0]) if len(found) else None


def layer_reference(x, probs, grad) -> tuple:
    """((out, x's gradient, probs' gradient) by torch's autograd in float64, the same of x's,
    probs' and grad's magnitudes: each sum's terms' magnitudes summed, what its rounding is bounded
    by). The expert is the identity, so each slot's row is its own token's and the layer is
    out[t] = sum over j of probs[t, j] * x[t] whatever the routing: the reference needs none."""
    import torch

    def differentiated(x, probs, grad):
        x = x.detach().double().requires_grad_()
        probs = probs.detach().double().requires_grad_()
        out = sum(probs[:, slot, None] * x for slot in range(probs.shape[1]))
        return (out.detach(), *torch.autograd.grad(out, (x, probs), grad.double()))

    return differentiated(x, probs, grad), differentiated(x.detach().abs(), probs.detach().abs(), grad.abs())


def layer_verdict(got, reference, ids=None) -> str:
    """A layer's (out, x's gradient, probs' gradient) against `layer_reference`: out within fp32
    accumulation and one rounding (`combine_verdict`); x's gradient within topk + 1 roundings to its
    dtype of the magnitudes of its slots' terms (each term rounded, then their sum, which torch's
    backward of index_select adds in x's dtype); probs' gradient within the rounding of an fp32
    sum of `hidden` products (hidden units of fp32 rounding of their magnitudes). `ids`: probs'
    gradient is TransformerEngine's (T, E), compared at each slot's expert and zero elsewhere."""
    import torch

    out, grad_x, grad_probs = got
    (total, expected_x, expected_probs), (magnitude, magnitude_x, magnitude_probs) = reference
    topk, hidden = expected_probs.shape[1], expected_x.shape[1]
    verdict = combine_verdict(out, total, (topk + 1) * 2.0**-23 * magnitude)
    if not verdict.startswith("ok"):
        return f"output: {verdict}"
    if ids is not None:
        if grad_probs.shape[0] != ids.shape[0]:
            return f"MISMATCH: probs' gradient is {tuple(grad_probs.shape)}"
        if bool(grad_probs.scatter(1, ids, 0).ne(0).any()):
            return "MISMATCH: probs' (T, E) gradient is not zero off the routed experts"
        grad_probs = grad_probs.gather(1, ids)
    for name, gradient, expected, bound in (
        ("x's", grad_x, expected_x, (topk + 1) * torch.finfo(grad_x.dtype).eps * magnitude_x),
        ("probs'", grad_probs, expected_probs, hidden * torch.finfo(grad_probs.dtype).eps * magnitude_probs),
    ):
        if tuple(gradient.shape) != tuple(expected.shape):
            return f"MISMATCH: {name} gradient is {tuple(gradient.shape)}, not {tuple(expected.shape)}"
        wrong = first_beyond(gradient, expected, bound)
        if wrong is not None:
            return f"MISMATCH: {name} gradient first at token {wrong} (beyond its rounding bound)"
    return (
        "ok: out, x's and probs' gradients within their rounding bounds of torch's float64 autograd "
        f"(fp32 sums; x's gradient {topk + 1} {DTYPE_NAMES.get(str(grad_x.dtype).removeprefix('torch.'))} "
        "roundings)"
    )
