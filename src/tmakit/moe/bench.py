"""The MoE study: `moe_dispatch` and `moe_combine` on the layers they are for (bf16: DeepSeek-V3's
4K and 16K tokens, top-8 of 256 experts, hidden 7168; Mixtral's 8K tokens, top-2 of 8, hidden
4096; a small hidden size, 16K tokens, top-6 of 64, hidden 2048) against what a practitioner
writes in torch (`index_select` by the expert-major source index; `index_add_` of the weighted
rows), its `torch.compile` version, and TransformerEngine's Triton permutation kernels where they
have been fetched (`scripts/fetch_peers.py` unpacks them into the git-ignored `.peers/`).

The routing is a seeded random top-k of softmax scores, the probabilities the softmax's. Each case
times its rows in CUDA graphs (device time, interleaved replays) and then eagerly (back-to-back
calls, host included), enough inputs rotated that a pass moves more than 4x the L2, beside a torch
copy of the same bytes in the same run (the copy rate each row is measured against). Two scopes,
each row saying which: the routing's index built before the timed region (tmakit's kernel alone,
`moe.call.permute` given a row map; torch's gather given its source index; TransformerEngine's
permute given its row map), or built inside it (the whole `tmakit.moe_dispatch`; torch's argsort
then gather; TransformerEngine's `make_row_id_map` then permute). Every timed output is checked
first: dispatches bit for bit against torch's gather over every used row (TransformerEngine's
after mapping its rows to tmakit's, its order said in the row), combines within fp32 accumulation
and one bf16 rounding of the float64 sum.

The fp8 cases ("fp8-dispatch ...") time the dispatch that quantizes to e4m3 by 1 x 128 blocks as it
moves (fp32 scales, MN-major as DeepGEMM reads them) against quantize-then-permute: torch's
reference quantizer compiled by torch.compile, then tmakit's permute or TransformerEngine's (which
carries the scales beside the rows), the scales then laid MN-major by a transposing copy.
tmakit's is checked bit for bit against the reference quantizer's bytes and scales; each peer
against its own quantizer's (its permute exact), with how many of those bytes differ from the
reference's (inductor's divisions need not round as eager torch's do).

The layer cases ("layer ...") time a layer's token movement as training runs it: the dispatch, an
identity expert and the combine, forward and backward together (`torch.autograd.grad` of x and
the probabilities for a random output gradient), the routing built in each call: tmakit's
`moe_dispatch` and `moe_combine`, torch's argsort, gather and `index_add_` (and their
torch.compile) through torch's autograd, and TransformerEngine's permute and unpermute with merging
probabilities in autograd functions whose backwards are its own kernels. Each is checked first,
eagerly and replayed from a CUDA graph (a capture that fails is noted, the row not timed), against
torch's autograd in float64; no copy is timed beside them. `--only` picks cases by the start of
their names. Its JSON: one row a case."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..bench.report import BenchRow
from ..bench.suites import rotation_buffers
from ..bench.timing import EAGER, captured, eager_samples_us, interleaved_graph_samples_us
from ..families import case_study, medians, tabled_study
from . import api, call, peers
from .call import facts
from .peers import (
    combine_indices,
    make_routing,
    merging_probs,
    routing_mask,
    source_index,
    te_layer,
    te_layer_functions,
    te_row_order,
    torch_combine,
    torch_dispatch,
    torch_layer,
    torch_sorted_dispatch,
    with_gradients,
)
from .plan import QUANT_BLOCK, QUANTIZE_OP, moe_route

SEED = 2026  # the routing's and the activations' generator
DEVICE = "cuda"  # where the study runs (its CPU tests run the same code on "cpu", timers faked)
# (label, tokens, topk, experts, hidden): the layers the study times, each a dispatch, a combine and
# the two around an identity expert, forward and backward.
SHAPES = (
    ("deepseek-v3", 4096, 8, 256, 7168),
    ("deepseek-v3", 16384, 8, 256, 7168),
    ("mixtral", 8192, 2, 8, 4096),
    ("small-hidden", 16384, 6, 64, 2048),
)
LAYER = "layer"  # the op of a case timing dispatch, identity expert and combine, forward and backward
OPS = ("dispatch", "combine", LAYER, QUANTIZE_OP)

# The scopes of a timed row: what its timed region holds besides the rows' movement.
GIVEN = "index built before"  # the row map (or source index) built before the timed region
BUILT = "index built in the timed region"  # from the ids (or the mask), in each call

COPY = "torch copy_"  # the copy of the same bytes: the run's copy rate
TMAKIT_PERMUTE = "tmakit permute"
TMAKIT_DISPATCH = "tmakit moe_dispatch"
TMAKIT_COMBINE = "tmakit moe_combine"
TORCH_GATHER = "torch index_select"
TORCH_SORTED_GATHER = "torch argsort + index_select"
TORCH_COMBINE = "torch index_add_"
INDUCTOR = "inductor"  # the prefix of a torch expression's torch.compile row
TE_PERMUTE = "TE permute_with_mask_map"
TE_DISPATCH = "TE make_row_id_map + permute_with_mask_map"
TE_COMBINE = "TE unpermute_with_mask_map"
TMAKIT_LAYER = "tmakit moe_dispatch + moe_combine fwd+bwd"
TORCH_LAYER = "torch index_select + index_add_ fwd+bwd"
TE_LAYER = "TE permute + unpermute fwd+bwd"
TMAKIT_FP8 = "tmakit fp8 dispatch"
QUANTIZE_THEN_PERMUTE = "inductor quantize + tmakit permute"
TE_QUANTIZE_THEN_PERMUTE = "inductor quantize + TE permute_with_mask_map"


@dataclass(frozen=True)
class MoeCase:
    """One row of the study: a dispatch, a combine or a layer (`LAYER`: the dispatch, an identity
    expert and the combine, forward and backward) of `tokens` rows of `hidden` elements of `dtype`,
    each token routed to `topk` of `experts` experts (`label`: the model whose layer)."""

    op: str
    label: str
    tokens: int
    topk: int
    experts: int
    hidden: int
    dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        return (
            f"{self.op} {self.label}: {self.tokens} tokens, top-{self.topk} of {self.experts} experts, "
            f"hidden {self.hidden} {DTYPE_NAMES[self.dtype]}"
        )

    @property
    def rows(self) -> int:
        """The permuted rows: every token's topk (no padding: align 1)."""
        return self.tokens * self.topk

    @property
    def row_bytes(self) -> int:
        return self.hidden * ELEMENT_BYTES[self.dtype]

    @property
    def bytes_moved(self) -> int:
        """The fewest bytes that must cross DRAM, each input read once and each output written
        once: a dispatch reads T rows and writes T*topk, a combine reads T*topk and writes T; a
        layer is four such passes: the two forward, then the combine's gradient (the output's
        gradient read, T rows; y read for the probabilities' gradient and y's gradient written,
        T*topk each) and the dispatch's (y's gradient read, x's written): 4T + 5T*topk rows."""
        if self.op == LAYER:
            return (4 * self.tokens + 5 * self.rows) * self.row_bytes
        if self.op == QUANTIZE_OP:  # x read once, each row written in e4m3 with its fp32 scales
            return self.tokens * self.row_bytes + self.rows * (self.hidden + 4 * self.hidden // QUANT_BLOCK)
        return (self.tokens + self.rows) * self.row_bytes


DTYPE_NAMES = {"bfloat16": "bf16"}
ELEMENT_BYTES = {"bfloat16": 2}


def cases() -> list[MoeCase]:
    """Every case of the study, in its order: the dispatches, the combines, then the layers, of
    each shape."""
    return [MoeCase(op, *shape) for op in OPS for shape in SHAPES]


# -- tmakit's layer ----------------------------------------------------------------------------------
def tmakit_layer(x, ids, probs, experts: int):
    """The layer's forward by tmakit, the expert the identity: `moe_dispatch` with the
    probabilities, `moe_combine` of its rows weighted by its `token_probs` (strict: the kernels,
    not torch's expressions; no host check of the ids, as a CUDA-graph capture does)."""
    routed = api.moe_dispatch(x, ids, num_experts=experts, probs=probs, check_ids=False, strict=True)
    return api.moe_combine(routed.out, routed.row_map, routed.token_probs, strict=True)


# -- the checks -----------------------------------------------------------------------------------
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


# -- the rows a case times ------------------------------------------------------------------------
@dataclass(frozen=True)
class Timed:
    """One thing a case times: its row's `name`, its `scope` (`GIVEN` or `BUILT`), what its timed
    region holds, and the tmakit row a peer's is compared with."""

    name: str
    scope: str
    what: str
    call: Callable[[dict], Any]  # the call on one rotated set of operands: its output tensor
    compared_with: str | None = None


def dispatch_rows(case: MoeCase, te: ModuleType | None) -> list[Timed]:
    """The dispatch's rows: tmakit's kernel alone and whole, torch's and inductor's gathers with
    and without the argsort, TransformerEngine's permute with and without its row map's build."""
    experts, rows, hidden, tokens = case.experts, case.rows, case.hidden, case.tokens
    found = [
        Timed(
            TMAKIT_PERMUTE,
            GIVEN,
            "tmakit's dispatch kernel alone: moe.call.permute(x, row_map, rows) given the row map "
            "built before (moe.call.route_ids)",
            lambda s: call.permute(s["x"], s["row_map"], rows, s["row_map"].new_empty(0), True),
        ),
        Timed(
            TMAKIT_DISPATCH,
            BUILT,
            f"the whole tmakit.moe_dispatch(x, ids, num_experts={experts}, check_ids=False, strict=True): "
            "the row map built on the device (sort, scans), the list of rows it may leave unnamed "
            "(none at align 1) and the kernel; no host check of the ids, as in a CUDA-graph capture",
            lambda s: (
                api.moe_dispatch(s["x"], s["ids"], num_experts=experts, check_ids=False, strict=True).out
            ),
        ),
        Timed(
            TORCH_GATHER,
            GIVEN,
            "x.index_select(0, source), the expert-major source index "
            "(torch.argsort(ids.flatten(), stable=True) // topk) built before",
            lambda s: torch_dispatch(s["x"], s["source"]),
            TMAKIT_PERMUTE,
        ),
        Timed(
            TORCH_SORTED_GATHER,
            BUILT,
            "x.index_select(0, torch.argsort(ids.flatten(), stable=True) // topk), the argsort timed",
            lambda s: torch_sorted_dispatch(s["x"], s["ids"]),
            TMAKIT_DISPATCH,
        ),
        Timed(
            f"{INDUCTOR} index_select",
            GIVEN,
            "torch.compile (mode default) of torch's gather, its source index given",
            lambda s: s["compiled gather"](s["x"], s["source"]),
            TMAKIT_PERMUTE,
        ),
        Timed(
            f"{INDUCTOR} argsort + index_select",
            BUILT,
            "torch.compile (mode default) of torch's argsort and gather",
            lambda s: s["compiled sorted gather"](s["x"], s["ids"]),
            TMAKIT_DISPATCH,
        ),
    ]
    if te is not None:
        permute = lambda x, te_map: te.permute_with_mask_map(  # noqa: E731
            x, te_map, None, None, None, tokens, experts, rows, hidden, None
        )[0]
        found += [
            Timed(
                TE_PERMUTE,
                GIVEN,
                "TransformerEngine's Triton permute (no probs), its row map (make_row_id_map of the "
                "(T, E) bool mask) built before",
                lambda s: permute(s["x"], s["te_map"]),
                TMAKIT_PERMUTE,
            ),
            Timed(
                TE_DISPATCH,
                BUILT,
                "TransformerEngine's make_row_id_map of the (T, E) bool mask (three Triton passes) and "
                "its permute (no probs), from the mask a router hands it",
                lambda s: permute(s["x"], te.make_row_id_map(s["mask"], tokens, experts)),
                TMAKIT_DISPATCH,
            ),
        ]
    return found


def quantize_rows(case: MoeCase, te: ModuleType | None) -> list[Timed]:
    """The fp8 dispatch's rows, the row map given: tmakit's fused kernel, and quantize-then-permute
    (inductor's quantizer, then tmakit's permute of the rows and of the scales, or
    TransformerEngine's permute carrying the scales; the scales then copied MN-major)."""
    experts, rows, hidden, tokens = case.experts, case.rows, case.hidden, case.tokens
    blocks = hidden // QUANT_BLOCK

    def then_tmakit(s):
        quantized, scales = s["compiled quantize"](s["x"])
        empty = s["row_map"].new_empty(0)
        out = call.permute(quantized, s["row_map"], rows, empty, True)
        return out, call.permute(scales, s["row_map"], rows, empty, True).t().contiguous()

    found = [
        Timed(
            TMAKIT_FP8,
            GIVEN,
            "tmakit's fp8 dispatch alone: moe.call.permute_fp8(x, row_map, rows, scale_format='fp32') "
            "given the row map (each row quantized by 1 x 128 blocks as it moves, scales MN-major)",
            lambda s: call.permute_fp8(s["x"], s["row_map"], rows, s["row_map"].new_empty(0), "fp32", True),
        ),
        Timed(
            QUANTIZE_THEN_PERMUTE,
            GIVEN,
            "torch.compile (mode default) of the reference quantizer (moe.call.quantize_rows_by_torch), "
            "then tmakit's permute of the e4m3 rows and of the (T, H/128) scales, the scales then "
            "transposed MN-major (.t().contiguous())",
            then_tmakit,
            TMAKIT_FP8,
        ),
    ]
    if te is not None:

        def then_te(s):
            quantized, scales = s["compiled quantize"](s["x"])
            out, permuted, _ = te.permute_with_mask_map(
                quantized, s["te_map"], None, scales, None, tokens, experts, rows, hidden, blocks
            )
            return out, permuted.t().contiguous()

        found.append(
            Timed(
                TE_QUANTIZE_THEN_PERMUTE,
                GIVEN,
                "torch.compile of the reference quantizer, then TransformerEngine's Triton permute of "
                "the e4m3 rows carrying the scales (its row map given), the scales then transposed "
                "MN-major",
                then_te,
                TMAKIT_FP8,
            )
        )
    return found


def combine_rows(case: MoeCase, te: ModuleType | None) -> list[Timed]:
    """The combine's rows: tmakit's, torch's and inductor's index_add_ expression,
    TransformerEngine's unpermute with merging probabilities."""
    tokens, experts, hidden = case.tokens, case.experts, case.hidden
    found = [
        Timed(
            TMAKIT_COMBINE,
            GIVEN,
            "tmakit.moe_combine(y, row_map, token_probs, strict=True): the kernel, each token's rows "
            "weighted and summed in fp32, the row map given",
            lambda s: api.moe_combine(s["y"], s["row_map"], s["probs"], strict=True),
        ),
        Timed(
            TORCH_COMBINE,
            GIVEN,
            "torch.zeros(T, H, fp32).index_add_(0, token_of_row, y.index_select(0, rows).float() * "
            "w[:, None]).to(bf16), its indices and weights (token-major) given",
            lambda s: torch_combine(s["y"], *s["combine indices"], tokens),
            TMAKIT_COMBINE,
        ),
        Timed(
            f"{INDUCTOR} index_add_",
            GIVEN,
            "torch.compile (mode default) of torch's combine, its indices given",
            lambda s: s["compiled combine"](s["y"], *s["combine indices"], tokens),
            TMAKIT_COMBINE,
        ),
    ]
    if te is not None:
        found.append(
            Timed(
                TE_COMBINE,
                GIVEN,
                "TransformerEngine's Triton unpermute with (T, E) fp32 merging probs (summed in fp32), "
                "its row map given, y in its rows' order",
                lambda s: te.unpermute_with_mask_map(
                    s["y_te"], s["te_map"], s["merging"], None, None, tokens, experts, hidden
                )[0],
                TMAKIT_COMBINE,
            )
        )
    return found


def layer_rows(case: MoeCase, te: ModuleType | None) -> list[Timed]:
    """The layer's rows, each the forward and backward of a dispatch, an identity expert and a
    combine, its routing index built in the call: tmakit's, torch's and inductor's expressions
    through torch's autograd, TransformerEngine's permute and unpermute with their backwards."""
    experts, rows = case.experts, case.rows
    leaves = lambda s: (s["x"], s["probs"])  # noqa: E731
    found = [
        Timed(
            TMAKIT_LAYER,
            BUILT,
            f"routed = tmakit.moe_dispatch(x, ids, num_experts={experts}, probs=probs, check_ids=False, "
            "strict=True); out = tmakit.moe_combine(routed.out, routed.row_map, routed.token_probs, "
            "strict=True); torch.autograd.grad(out, (x, probs), grad): the row map built, the rows "
            "moved and summed, then their backwards (the combine's: the gradient permuted and scaled, "
            "the probabilities' dot products; the dispatch's: a combine of weight 1)",
            lambda s: with_gradients(
                tmakit_layer(s["x"], s["ids"], s["probs"], experts), leaves(s), s["grad"]
            ),
        ),
        Timed(
            TORCH_LAYER,
            BUILT,
            "order = torch.argsort(ids.flatten(), stable=True); y = x.index_select(0, order // topk); "
            "out = torch.zeros(T, H, fp32).index_add_(0, order // topk, y.float() * "
            "probs.flatten()[order][:, None]).to(bf16); torch.autograd.grad(out, (x, probs), grad)",
            lambda s: with_gradients(torch_layer(s["x"], s["ids"], s["probs"]), leaves(s), s["grad"]),
            TMAKIT_LAYER,
        ),
        Timed(
            f"{INDUCTOR} index_select + index_add_ fwd+bwd",
            BUILT,
            "torch.compile (mode default) of torch's layer, its backward compiled by AOTAutograd",
            lambda s: with_gradients(s["compiled layer"](s["x"], s["ids"], s["probs"]), leaves(s), s["grad"]),
            TMAKIT_LAYER,
        ),
    ]
    if te is not None:
        functions = te_layer_functions(te)
        found.append(
            Timed(
                TE_LAYER,
                BUILT,
                "TransformerEngine's make_row_id_map of the (T, E) bool mask, its permute, its unpermute "
                "with (T, E) fp32 merging probs (the leaf: what its router hands it), then their "
                "backwards (unpermute_with_mask_map_bwd_with_merging_probs; the permute's: its unpermute "
                "without probs), in torch.autograd.Functions as its torch wrappers pair them; "
                "torch.autograd.grad(out, (x, merging_probs), grad)",
                lambda s: with_gradients(
                    te_layer(te, functions, s["x"], s["mask"], s["merging"], rows),
                    (s["x"], s["merging"]),
                    s["grad"],
                ),
                TMAKIT_LAYER,
            )
        )
    return found


def operands(case: MoeCase, generator, device) -> dict:
    """One rotated set of a case's operands, seeded: the routing (ids, probs, tmakit's row map,
    torch's source index or combine indices, the (T, E) mask) and x (a dispatch) or y (a combine)
    of random rows."""
    import torch

    element = getattr(torch, case.dtype)
    ids, probs = make_routing(case.tokens, case.topk, case.experts, generator, device)
    row_map = call.route_ids(ids, case.experts, 1).row_map
    found = {"ids": ids, "probs": probs, "row_map": row_map, "mask": routing_mask(ids, case.experts)}
    dispatching = case.op in ("dispatch", QUANTIZE_OP)
    height = case.tokens if dispatching else case.rows
    rows = torch.randn(height, case.hidden, generator=generator, device=device).to(element)
    if dispatching:
        found.update(x=rows, source=source_index(ids))
    else:
        found.update(y=rows, merging=merging_probs(ids, probs, case.experts))
        found["combine indices"] = combine_indices(row_map, probs)
    return found


def layer_operands(case: MoeCase, generator, device) -> dict:
    """One rotated set of a layer's operands, seeded: the routing (ids, probs, the (T, E) mask and
    merging probabilities TransformerEngine takes), x and the output's gradient of random rows; x,
    probs and the merging probabilities require grad (the leaves differentiated)."""
    import torch

    element = getattr(torch, case.dtype)
    ids, probs = make_routing(case.tokens, case.topk, case.experts, generator, device)
    x = torch.randn(case.tokens, case.hidden, generator=generator, device=device).to(element)
    grad = torch.randn(case.tokens, case.hidden, generator=generator, device=device).to(element)
    return {
        "ids": ids,
        "mask": routing_mask(ids, case.experts),
        "merging": merging_probs(ids, probs, case.experts).requires_grad_(),
        "probs": probs.requires_grad_(),
        "x": x.requires_grad_(),
        "grad": grad,
    }


def add_te_operands(case: MoeCase, found: dict, te: ModuleType) -> None:
    """TransformerEngine's operands beside a set's: its row map of the mask, the order of its
    rows (`te_row_order`) and, for a combine, y laid out in that order (y itself where it is
    tmakit's)."""
    import torch

    found["te_map"] = te.make_row_id_map(found["mask"], case.tokens, case.experts)
    found["te_order"] = te_row_order(found["te_map"], found["ids"], found["row_map"], case.experts)
    if case.op == "combine":
        y, order = found["y"], found["te_order"]
        same = torch.equal(order, torch.arange(case.rows, device=order.device))
        found["y_te"] = y if same else y.index_select(0, order.clamp(min=0))


def compiled(case: MoeCase) -> dict[str, Callable[..., Any]]:
    """torch.compile (mode default, static shapes) of the case's torch expressions, by the operand
    name its rows read them under."""
    import torch

    if case.op == "dispatch":
        functions = {"compiled gather": torch_dispatch, "compiled sorted gather": torch_sorted_dispatch}
    elif case.op == LAYER:
        functions = {"compiled layer": torch_layer}
    elif case.op == QUANTIZE_OP:
        functions = {"compiled quantize": lambda x: call.quantize_rows_by_torch(x, "fp32")}
    else:
        functions = {"compiled combine": torch_combine}
    return {name: torch.compile(function, dynamic=False) for name, function in functions.items()}


def verify(case: MoeCase, timed: Timed, first: dict, reference: Any) -> str:
    """One row's output on the first operands against the reference (torch's gather, or the
    combine's float64 sum and bound), the output poisoned afterwards so that a later call handed
    the same memory by the allocator cannot pass without writing it."""
    import torch

    got = timed.call(first)
    if case.op == QUANTIZE_OP:
        order = first["te_order"] if timed.name.startswith("inductor quantize + TE") else None
        if timed.name == TMAKIT_FP8:
            verdict = quantized_verdict(got, reference, order)
        else:  # its own quantizer's bytes, moved: the permute exact, the quantizer inductor's
            verdict = quantized_verdict(got, quantized_reference(first["x"], first["source"], compiled=first),
                                        order)  # fmt: skip
            verdict = f"{verdict}; {quantizer_difference(first, reference)}"
        torch.cuda.synchronize()
        for output in got:
            output.view(torch.uint8).fill_(0xFF)
        return verdict
    if case.op == "combine":
        verdict = combine_verdict(got, *reference)
    elif timed.name.startswith("TE "):
        verdict = dispatch_verdict(got, reference, first["te_order"])
    else:
        verdict = dispatch_verdict(got, reference)
        if timed.name == TMAKIT_DISPATCH and verdict.startswith("ok"):
            verdict = row_map_verdict(first, case.experts, verdict)
    torch.cuda.synchronize()
    got.view(torch.uint8).fill_(0xFF)
    return verdict


def row_map_verdict(first: dict, experts: int, verdict: str) -> str:
    """`verdict` on moe_dispatch's rows, with whether its row map is the inverse of torch's
    stable argsort of the ids (a MISMATCH where it is not)."""
    import torch

    routed = api.moe_dispatch(first["x"], first["ids"], num_experts=experts, check_ids=False)
    order = torch.argsort(first["ids"].reshape(-1), stable=True)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    if torch.equal(routed.row_map.reshape(-1).long(), inverse):
        return f"{verdict}; its row map the inverse of torch's stable argsort"
    return "MISMATCH: its rows are torch's but its row map is not the inverse of torch's stable argsort"


def replayed(launch: Callable[[], Any]) -> tuple[Any, Any]:
    """(the CUDA graph, its outputs): `launch` captured (`captured`: a first call outside the
    capture makes what autograd makes on a stream's first backward), its outputs poisoned (NaN)
    and the graph replayed once: what a replay computes, the backward captured with the forward.
    The graph holds the outputs' memory: keep it while they are read."""
    import torch

    graph, outputs = captured(launch)
    for output in outputs:
        output.detach().fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return graph, outputs


def verify_layer(timed: Timed, first: dict, reference: Any) -> str:
    """A layer row's output and gradients on the first operands against `layer_reference`, called
    eagerly (its outputs poisoned afterwards, as `verify`'s) and then replayed from a CUDA graph
    (`replayed`): the verdict of both, the first that is not ok. A capture that fails raises,
    saying so."""
    import torch

    ids = first["ids"] if timed.name.startswith("TE ") else None
    got = timed.call(first)
    verdict = layer_verdict(got, reference, ids)
    torch.cuda.synchronize()
    for output in got:
        output.detach().fill_(float("nan"))
    del got
    if not verdict.startswith("ok"):
        return verdict
    try:
        graph, got = replayed(lambda: timed.call(first))
    except Exception as error:
        raise RuntimeError(f"capturing its forward and backward in a CUDA graph: {error!r}") from error
    replay = layer_verdict(got, reference, ids)
    del graph, got
    if not replay.startswith("ok"):
        return f"replayed from a CUDA graph: {replay}"
    return f"{verdict}; the same replayed from a CUDA graph"


def layer_path(case: MoeCase, first: dict) -> str:
    """The paths tmakit's dispatch and combine take on the layer's rows, and why."""
    row_map = call.route_ids(first["ids"], case.experts, 1).row_map
    x = first["x"].detach()
    dispatch = api.moe_path("dispatch", x, row_map, case.rows)
    combine = api.moe_path("combine", x.new_empty((case.rows, case.hidden)), row_map)
    return f"dispatch: {dispatch.path} ({dispatch.reason}); combine: {combine.path} ({combine.reason})"


def case_start(case: MoeCase, l2_bytes: int) -> tuple:
    """(TransformerEngine's module or None, the rows not timed and why, the case's generator, how
    many operand sets rotate past the L2): what every case starts from, its compiles reset."""
    import torch

    peer = peers.transformer_engine()
    not_timed = {} if peer.module is not None else {name: peer.note for name in te_names(case)}
    torch._dynamo.reset()  # each case's compiles anew: no recompile limit reached across cases
    generator = torch.Generator(device=DEVICE).manual_seed(SEED)
    return peer.module, not_timed, generator, rotation_buffers(case.bytes_moved, l2_bytes)


def bench_layer(case: MoeCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """Every row of a layer case (`layer_rows`), each verified eagerly and replayed from a CUDA
    graph first: device time, then eager back-to-back calls. No copy is timed beside them (its
    tensor would be the four passes' bytes: gigabytes beside the graphs' own); their rate counts
    `MoeCase.bytes_moved`. A peer that fails to compile, run or be captured is not timed; its
    error is the case's note instead."""
    import torch

    te, not_timed, generator, count = case_start(case, l2_bytes)
    sets = [layer_operands(case, generator, DEVICE) for _ in range(count)]
    functions = compiled(case)  # compiled on their first call, in `verify_layer`
    for found in sets:
        found.update(functions)
    first = sets[0]
    reference = layer_reference(first["x"], first["probs"], first["grad"])
    timed = layer_rows(case, te)
    verdicts = {}
    for row in timed:
        if row.name.startswith("tmakit"):  # tmakit's own: a failure is the study's, not a note
            verdicts[row.name] = verify_layer(row, first, reference)
            continue
        try:
            verdicts[row.name] = verify_layer(row, first, reference)
        except Exception as error:  # a peer's compile, run or capture failing: noted, not timed
            not_timed[row.name] = f"failed: {error!r}"[:2000]
    del reference
    timed = [row for row in timed if row.name in verdicts]
    path = layer_path(case, first)
    launches = {row.name: [lambda s=s, f=row.call: f(s) for s in sets] for row in timed}
    device = interleaved_graph_samples_us(launches, samples)
    eager = eager_samples_us(launches)
    shared = {"op": case.name, "path": path, "rotated_buffers": count, "not_timed": not_timed}
    rows = case_rows(case, timed, shared, device, eager, verdicts)
    del sets, first, launches, functions
    torch.cuda.empty_cache()
    return rows


def case_rows(
    case: MoeCase, timed: list[Timed], shared: dict, device: dict, eager: dict, verdicts: dict
) -> list[BenchRow]:
    """The case's `BenchRow`s: each timed row's device samples (with its verdict), then its eager
    twin's; the copy's, if `device` holds it. Every row counts the case's bytes moved as a copy of
    half as many: `kind` "copy" counts 2x its tensor's bytes, so each row's rate is comparable with
    the copy's."""
    notes = {row.name: {**shared, "scope": row.scope, "what": row.what, "compared_with": row.compared_with}
             for row in timed}  # fmt: skip
    notes[COPY] = {**shared, "what": "torch's copy_ of a flat tensor of half the bytes moved: the copy rate"}
    row = lambda name, us, verified=None: BenchRow(  # noqa: E731
        name, "copy", (case.tokens, case.topk, case.experts, case.hidden), case.dtype,
        case.bytes_moved // 2, us, verified, None, notes[name.removesuffix(f" {EAGER}")],
    )  # fmt: skip
    rows = [row(name, us, verdicts.get(name)) for name, us in device.items()]
    return rows + [row(f"{name} {EAGER}", us) for name, us in eager.items()]


def bench_moe(case: MoeCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """Every row of `case` (`dispatch_rows` or `combine_rows`) and torch's copy of the same bytes:
    device time, then eager back-to-back calls (the copy only in graphs); a layer's, `bench_layer`.
    A peer that fails to compile or run is not timed; its error is the case's note instead."""
    import torch

    if case.op == LAYER:
        return bench_layer(case, l2_bytes, samples)
    te, not_timed, generator, count = case_start(case, l2_bytes)
    sets = [operands(case, generator, DEVICE) for _ in range(count)]
    if te is not None:
        try:
            for found in sets:
                add_te_operands(case, found, te)
        except Exception as error:  # its row map's kernels failing to compile or run: noted
            not_timed = {name: f"failed: make_row_id_map: {error!r}"[:2000] for name in te_names(case)}
            te = None
    functions = compiled(case)  # compiled on their first call, in `verify`
    for found in sets:
        found.update(functions)
    first = sets[0]
    if case.op == "dispatch":
        reference = torch_dispatch(first["x"], first["source"])
    elif case.op == QUANTIZE_OP:
        reference = quantized_reference(first["x"], first["source"])
    else:
        reference = combine_reference(first["y"], first["row_map"], first["probs"])
    timed = {"dispatch": dispatch_rows, QUANTIZE_OP: quantize_rows}.get(case.op, combine_rows)(case, te)
    verdicts = {}
    for row in timed:
        if row.name.startswith("tmakit"):  # tmakit's own: a failure is the study's, not a note
            verdicts[row.name] = verify(case, row, first, reference)
            continue
        try:
            verdicts[row.name] = verify(case, row, first, reference)
        except Exception as error:  # a peer's compile or run failing: noted, not timed
            not_timed[row.name] = f"failed: {error!r}"[:2000]
    del reference
    timed = [row for row in timed if row.name in verdicts]
    path = moe_route(facts(case.op, first["y" if case.op == "combine" else "x"], case.rows, first["row_map"]))
    flat = torch.randn(case.bytes_moved // 2 // ELEMENT_BYTES[case.dtype], generator=generator, device=DEVICE)
    sources = [flat.to(getattr(torch, case.dtype)) for _ in range(count)]
    del flat
    copies = [torch.empty_like(source) for source in sources]
    launches = {row.name: [lambda s=s, f=row.call: f(s) for s in sets] for row in timed}
    launches[COPY] = [lambda s=s, o=o: o.copy_(s) for s, o in zip(sources, copies, strict=True)]
    device = interleaved_graph_samples_us(launches, samples)
    eager = eager_samples_us({row.name: launches[row.name] for row in timed})
    shared = {
        "op": case.name,  # the report compares rows of one case only (`report.ratios`)
        "path": f"{path.path} ({path.reason})",
        "rotated_buffers": count,
        "not_timed": not_timed,
    }
    rows = case_rows(case, timed, shared, device, eager, verdicts)
    del sets, first, sources, copies, launches, functions
    torch.cuda.empty_cache()
    return rows


def te_names(case: MoeCase) -> list[str]:
    """The TransformerEngine rows of the case's op."""
    return {
        "dispatch": [TE_PERMUTE, TE_DISPATCH],
        "combine": [TE_COMBINE],
        LAYER: [TE_LAYER],
        QUANTIZE_OP: [TE_QUANTIZE_THEN_PERMUTE],
    }[case.op]


# -- the study's JSON -----------------------------------------------------------------------------
def case_row(case: MoeCase, rows: list[BenchRow]) -> dict:
    """One case: its shape, the copy rate, each timed row's median device and eager time, rate,
    share of the copy rate and verdict; each peer's ratios to its tmakit row (above 1: tmakit
    faster); the peers not timed and why. A layer times no copy: its copy fields are None."""
    by_name, us = medians(rows)
    copy = by_name.get(COPY)
    shared = next(iter(by_name.values())).notes  # every row of a case holds the case's notes
    timed = []
    for name, row in by_name.items():
        if name == COPY or name.endswith(f" {EAGER}"):
            continue
        entry = {
            "name": name,
            "scope": row.notes["scope"],
            "what": row.notes["what"],
            "verified": row.verified,
            "graph_us": us[name],
            "eager_us": us.get(f"{name} {EAGER}"),
            "tb_per_s": row.gbps / 1e3,
            "of_copy_rate": None if copy is None else row.gbps / copy.gbps,
        }
        ours = row.notes["compared_with"]
        if ours is not None and ours in us:
            entry["compared_with"] = ours
            entry["tmakit_speedup_graph"] = us[name] / us[ours]
            if entry["eager_us"] is not None and f"{ours} {EAGER}" in us:
                entry["tmakit_speedup_eager"] = entry["eager_us"] / us[f"{ours} {EAGER}"]
        timed.append(entry)
    return {
        "case": case.name,
        "op": case.op,
        "tokens": case.tokens,
        "topk": case.topk,
        "experts": case.experts,
        "hidden": case.hidden,
        "dtype": case.dtype,
        "bytes_moved": case.bytes_moved,
        "path": shared["path"],
        "verified": [e["verified"] for e in timed if e["name"].startswith("tmakit")],
        "copy_graph_us": us.get(COPY),
        "copy_tb_per_s": None if copy is None else copy.gbps / 1e3,
        "timed": timed,
        "not_timed": shared["not_timed"],
        "rotated_buffers": shared["rotated_buffers"],
    }


tabled = tabled_study(
    "moe",
    "mixture-of-experts dispatch and combine (bf16; seeded random top-k of softmax scores, align 1): "
    "tmakit's kernels against torch's index_select / index_add_ expressions, their torch.compile "
    "and TransformerEngine's Triton permutation kernels, in CUDA graphs (device time) and eagerly "
    "(back-to-back calls, host included), L2 cold (inputs rotated), each routing index given or built "
    "in the timed region as each row says, beside a torch copy of the same bytes in the same run; "
    "rate = (input once + output) bytes / median time; every output checked first (dispatch "
    "bit-exact, combine within fp32 accumulation and one rounding). The layer cases time the "
    "dispatch, an identity expert and the combine forward and backward together (the gradients of "
    "x and the probabilities for a random output gradient, by torch.autograd.grad), the routing "
    "built in each call, no copy beside them; their rate counts the four passes' fewest bytes "
    "(4T + 5T*topk rows: MoeCase.bytes_moved), the speedups are what they report; each checked "
    "first, eagerly and replayed from a CUDA graph, against torch's autograd in float64 (output "
    "and probabilities' gradient within fp32 sums, x's gradient within topk + 1 bf16 roundings)",
    case_row,
    ratios="a peer's tmakit_speedup_graph and tmakit_speedup_eager: its median time over that of "
    "the tmakit row it is compared_with (the same scope); above 1, tmakit faster",
)


def study(results: list[tuple[Any, list[BenchRow]]], context: dict) -> dict:
    """The study's JSON (`tabled`), its context naming the peers' versions."""
    return tabled(results, {**context, **peers.peer_context()})


STUDIES = (
    case_study(
        "moe",
        "mixture-of-experts dispatch and combine on DeepSeek-V3, Mixtral and small-hidden layers, "
        "alone and forward and backward around an identity expert, against torch, torch.compile "
        "and TransformerEngine's Triton kernels (see --only)",
        "MoE dispatch and combine against torch and TransformerEngine",
        cases,
        bench_moe,
        [TORCH_GATHER, TORCH_SORTED_GATHER, TORCH_COMBINE, TORCH_LAYER, TE_PERMUTE, TE_COMBINE, TE_LAYER],
        study,
    ),
)
