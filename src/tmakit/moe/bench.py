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
and one bf16 rounding of the float64 sum. `--only` picks cases by the start of their names. Its
JSON: one row a case."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..bench.report import BenchRow
from ..bench.suites import rotation_buffers
from ..bench.timing import EAGER, eager_samples_us, interleaved_graph_samples_us
from ..families import case_study, medians, tabled_study
from . import api, call

SEED = 2026  # the routing's and the activations' generator
DEVICE = "cuda"  # where the study runs (its CPU tests run the same code on "cpu", timers faked)
# (label, tokens, topk, experts, hidden): the layers the study times, each a dispatch and a combine.
SHAPES = (
    ("deepseek-v3", 4096, 8, 256, 7168),
    ("deepseek-v3", 16384, 8, 256, 7168),
    ("mixtral", 8192, 2, 8, 4096),
    ("small-hidden", 16384, 6, 64, 2048),
)
OPS = ("dispatch", "combine")

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

# TransformerEngine's Triton permutation kernels: the version fetched, where they are unpacked
# (`scripts/fetch_peers.py`), the module imported.
TE_VERSION = "2.20.2"
PEERS = ".peers"
PEERS_VARIABLE = "TMAKIT_PEERS"  # a folder holding transformer_engine/ elsewhere than ./.peers
TE_MODULE = "transformer_engine.pytorch.triton.permutation"
FETCH = (
    f"fetch them with `python scripts/fetch_peers.py` (pip download transformer_engine=={TE_VERSION} "
    f"--no-deps; the permutation kernels unpacked into {PEERS}/) and carry {PEERS} to the GPU machine"
)


@dataclass(frozen=True)
class MoeCase:
    """One row of the study: a dispatch or a combine of `tokens` rows of `hidden` elements of
    `dtype`, each token routed to `topk` of `experts` experts (`label`: the model whose layer)."""

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
        """The fewest bytes that must cross DRAM, the input read once and the output written once:
        a dispatch reads T rows and writes T*topk, a combine reads T*topk and writes T."""
        return (self.tokens + self.rows) * self.row_bytes


DTYPE_NAMES = {"bfloat16": "bf16"}
ELEMENT_BYTES = {"bfloat16": 2}


def cases() -> list[MoeCase]:
    """Every case of the study, in its order: the dispatches, then the combines, of each shape."""
    return [MoeCase(op, *shape) for op in OPS for shape in SHAPES]


# -- the routing and the torch expressions --------------------------------------------------------
def make_routing(tokens: int, topk: int, experts: int, generator, device) -> tuple:
    """(ids (T, topk) int64, probs (T, topk) fp32): each token's top-k of softmax scores over
    `experts` random logits, seeded by `generator`."""
    import torch

    logits = torch.randn(tokens, experts, generator=generator, device=device)
    probs, ids = logits.softmax(dim=1).topk(topk, dim=1)
    return ids, probs


def source_index(ids) -> Any:
    """The expert-major source index (T*topk,) int64: the token of each permuted row, experts in
    order, tokens in order within one (a stable sort of the flat ids)."""
    import torch

    return torch.argsort(ids.reshape(-1), stable=True) // ids.shape[1]


def torch_dispatch(x, source):
    """The dispatch as a practitioner writes it, its source index given."""
    return x.index_select(0, source)


def torch_sorted_dispatch(x, ids):
    """The dispatch with its source index built from the ids (the argsort) in the same call."""
    return x.index_select(0, source_index(ids))


def torch_combine(y, rows, token_of_row, weights, tokens: int):
    """The combine as a practitioner writes it: the rows gathered token-major, weighted and added
    into an fp32 sum by token, cast back to y's dtype."""
    import torch

    total = torch.zeros((tokens, y.shape[1]), dtype=torch.float32, device=y.device)
    return total.index_add_(0, token_of_row, y.index_select(0, rows).float() * weights[:, None]).to(y.dtype)


def combine_indices(row_map, probs) -> tuple:
    """torch's combine's (rows, token_of_row, weights): each slot's row of y, its token, its
    probability, token-major."""
    import torch

    tokens, topk = row_map.shape
    token_of_row = torch.arange(tokens * topk, device=row_map.device) // topk
    return row_map.reshape(-1).long(), token_of_row, probs.reshape(-1)


def routing_mask(ids, experts: int) -> Any:
    """The (T, E) bool mask of the ids, as a router hands TransformerEngine's permute."""
    import torch

    return torch.zeros((ids.shape[0], experts), dtype=torch.bool, device=ids.device).scatter_(1, ids, True)


def merging_probs(ids, probs, experts: int) -> Any:
    """The (T, E) fp32 probabilities TransformerEngine's unpermute weighs each expert's row by."""
    import torch

    spread = torch.zeros((ids.shape[0], experts), dtype=torch.float32, device=ids.device)
    return spread.scatter_(1, ids, probs.float())


def te_row_order(te_map, ids, row_map, experts: int) -> Any:
    """For each row of TransformerEngine's permuted output, the row of tmakit's holding the same
    (token, expert) (-1: none): its row map (T, 2E + 1) holds each token's destination rows, then
    their experts, then their count."""
    import torch

    tokens, topk = row_map.shape
    slots = torch.full((tokens, experts + 1), -1, dtype=torch.int64, device=row_map.device)
    slots.scatter_(1, torch.where(ids >= 0, ids, experts).long(), row_map.long())
    counts = te_map[:, 2 * experts].long()
    routed = torch.arange(experts, device=te_map.device)[None, :] < counts[:, None]
    te_rows = te_map[:, :experts][routed].long()
    te_experts = te_map[:, experts : 2 * experts][routed].long()
    token = torch.arange(tokens, device=te_map.device)[:, None].expand(tokens, experts)[routed]
    order = torch.full((tokens * topk,), -1, dtype=torch.int64, device=te_map.device)
    order[te_rows] = slots[token, te_experts]
    return order


# -- TransformerEngine's kernels ------------------------------------------------------------------
@dataclass(frozen=True)
class Peer:
    """A peer's kernels as the study found them: the module (None: not loaded), its version, and
    where it was loaded from or why not."""

    module: ModuleType | None
    version: str | None
    note: str


def peer_folders() -> list[Path]:
    """Where `.peers` may be: the folder $TMAKIT_PEERS names, else ./.peers and the source tree's."""
    named = os.environ.get(PEERS_VARIABLE)
    if named:
        return [Path(named)]
    found = [Path.cwd() / PEERS, Path(__file__).resolve().parents[3] / PEERS]
    return list({folder.resolve(): folder for folder in found}.values())  # once where they are one


def load_transformer_engine(folders: list[Path]) -> Peer:
    """TransformerEngine's permutation module from the first of `folders` holding it, imported
    with that folder on sys.path for the import alone (its package `__init__`s are the fetch's
    empty stand-ins: nothing else of TransformerEngine is there); a note saying why not where it
    is absent or does not import."""
    folder = next((f for f in folders if (f / "transformer_engine" / "VERSION").is_file()), None)
    if folder is None:
        return Peer(
            None, None, f"skipped: no transformer_engine in {' or '.join(map(str, folders))}; {FETCH}"
        )
    version = (folder / "transformer_engine" / "VERSION").read_text().strip()
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(TE_MODULE)
    except Exception as error:  # a missing triton, a triton it cannot run on: the rows skipped, said why
        return Peer(None, version, f"skipped: importing {TE_MODULE} from {folder} failed: {error!r}")
    finally:
        sys.path.remove(str(folder))
    where = Path(module.__file__).resolve()
    if folder.resolve() not in where.parents:
        return Peer(None, version, f"skipped: {TE_MODULE} came from {where}, not from {folder}")
    return Peer(module, version, f"transformer_engine {version}'s permutation kernels from {folder}")


@functools.cache
def transformer_engine() -> Peer:
    """TransformerEngine's kernels for this process (`load_transformer_engine` of `peer_folders`)."""
    return load_transformer_engine(peer_folders())


def peer_context() -> dict:
    """What the results record of the peers: TransformerEngine's version and source, Triton's."""
    peer = transformer_engine()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"transformer_engine": {"version": peer.version, "note": peer.note}, "triton": triton_version}


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
    beyond = ((got.double() - total).abs() > bound + eps * (total.abs() + bound) + 1e-30).any(dim=1).nonzero()
    if len(beyond):
        return f"MISMATCH first at token {int(beyond[0, 0])} (beyond fp32 accumulation and one rounding)"
    name = DTYPE_NAMES.get(str(got.dtype).removeprefix("torch."), got.dtype)
    return f"ok: within fp32 accumulation and one {name} rounding of the float64 sum"


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
            lambda s: call.permute(s["x"], s["row_map"], rows, False, True),
        ),
        Timed(
            TMAKIT_DISPATCH,
            BUILT,
            f"the whole tmakit.moe_dispatch(x, ids, num_experts={experts}, check_ids=False, strict=True): "
            "the row map built on the device (sort, scans) and the kernel; with no host check of the ids "
            "it zeroes the rows no slot names (one gather pass, writing none here), as a CUDA-graph "
            "capture does whatever check_ids says",
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


def operands(case: MoeCase, generator, device) -> dict:
    """One rotated set of a case's operands, seeded: the routing (ids, probs, tmakit's row map,
    torch's source index or combine indices, the (T, E) mask) and x (a dispatch) or y (a combine)
    of random rows."""
    import torch

    element = getattr(torch, case.dtype)
    ids, probs = make_routing(case.tokens, case.topk, case.experts, generator, device)
    row_map = call.route_ids(ids, case.experts, 1).row_map
    found = {"ids": ids, "probs": probs, "row_map": row_map, "mask": routing_mask(ids, case.experts)}
    height = case.tokens if case.op == "dispatch" else case.rows
    rows = torch.randn(height, case.hidden, generator=generator, device=device).to(element)
    if case.op == "dispatch":
        found.update(x=rows, source=source_index(ids))
    else:
        found.update(y=rows, merging=merging_probs(ids, probs, case.experts))
        found["combine indices"] = combine_indices(row_map, probs)
    return found


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
    else:
        functions = {"compiled combine": torch_combine}
    return {name: torch.compile(function, dynamic=False) for name, function in functions.items()}


def verify(case: MoeCase, timed: Timed, first: dict, reference: Any) -> str:
    """One row's output on the first operands against the reference (torch's gather, or the
    combine's float64 sum and bound), the output poisoned afterwards so that a later call handed
    the same memory by the allocator cannot pass without writing it."""
    import torch

    got = timed.call(first)
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


def bench_moe(case: MoeCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """Every row of `case` (`dispatch_rows` or `combine_rows`) and torch's copy of the same bytes:
    device time, then eager back-to-back calls (the copy only in graphs). A peer that fails to
    compile or run is not timed; its error is the case's note instead."""
    import torch

    peer = transformer_engine()
    te = peer.module
    not_timed = {} if te is not None else {name: peer.note for name in te_names(case)}
    torch._dynamo.reset()  # each case's compiles anew: no recompile limit reached across cases
    generator = torch.Generator(device=DEVICE).manual_seed(SEED)
    count = rotation_buffers(case.bytes_moved, l2_bytes)
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
    else:
        reference = combine_reference(first["y"], first["row_map"], first["probs"])
    timed = dispatch_rows(case, te) if case.op == "dispatch" else combine_rows(case, te)
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
    path = api.moe_path(case.op, first["x" if case.op == "dispatch" else "y"], first["row_map"], case.rows)
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
    notes = {row.name: {**shared, "scope": row.scope, "what": row.what, "compared_with": row.compared_with}
             for row in timed}  # fmt: skip
    notes[COPY] = {**shared, "what": "torch's copy_ of a flat tensor of half the bytes moved: the copy rate"}
    # Every row counts the case's bytes moved (input read once, output written once) as a copy of
    # half as many: `kind` "copy" counts 2x its tensor's bytes, so each row's rate is comparable
    # with the copy's.
    row = lambda name, us, verified=None: BenchRow(  # noqa: E731
        name, "copy", (case.tokens, case.topk, case.experts, case.hidden), case.dtype,
        case.bytes_moved // 2, us, verified, None, notes[name.removesuffix(f" {EAGER}")],
    )  # fmt: skip
    rows = [row(name, us, verdicts.get(name)) for name, us in device.items()]
    rows += [row(f"{name} {EAGER}", us) for name, us in eager.items()]
    del sets, first, sources, copies, launches, functions
    torch.cuda.empty_cache()
    return rows


def te_names(case: MoeCase) -> list[str]:
    """The TransformerEngine rows of the case's op."""
    return [TE_PERMUTE, TE_DISPATCH] if case.op == "dispatch" else [TE_COMBINE]


# -- the study's JSON -----------------------------------------------------------------------------
def case_row(case: MoeCase, rows: list[BenchRow]) -> dict:
    """One case: its shape, the copy rate, each timed row's median device and eager time, rate,
    share of the copy rate and verdict; each peer's ratios to its tmakit row (above 1: tmakit
    faster); the peers not timed and why."""
    by_name, us = medians(rows)
    copy = by_name[COPY]
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
            "of_copy_rate": row.gbps / copy.gbps,
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
        "path": copy.notes["path"],
        "verified": [e["verified"] for e in timed if e["name"].startswith("tmakit")],
        "copy_graph_us": us[COPY],
        "copy_tb_per_s": copy.gbps / 1e3,
        "timed": timed,
        "not_timed": copy.notes["not_timed"],
        "rotated_buffers": copy.notes["rotated_buffers"],
    }


tabled = tabled_study(
    "moe",
    "mixture-of-experts dispatch and combine (bf16; seeded random top-k of softmax scores, align 1): "
    "tmakit's kernels against torch's index_select / index_add_ expressions, their torch.compile "
    "and TransformerEngine's Triton permutation kernels, in CUDA graphs (device time) and eagerly "
    "(back-to-back calls, host included), L2 cold (inputs rotated), each routing index given or built "
    "in the timed region as each row says, beside a torch copy of the same bytes in the same run; "
    "rate = (input once + output) bytes / median time; every output checked first (dispatch "
    "bit-exact, combine within fp32 accumulation and one rounding)",
    case_row,
    ratios="a peer's tmakit_speedup_graph and tmakit_speedup_eager: its median time over that of "
    "the tmakit row it is compared_with (the same scope); above 1, tmakit faster",
)


def study(results: list[tuple[Any, list[BenchRow]]], context: dict) -> dict:
    """The study's JSON (`tabled`), its context naming the peers' versions."""
    return tabled(results, {**context, **peer_context()})


STUDIES = (
    case_study(
        "moe",
        "mixture-of-experts dispatch and combine on DeepSeek-V3, Mixtral and small-hidden layers "
        "against torch, torch.compile and TransformerEngine's Triton kernels (see --only)",
        "MoE dispatch and combine against torch and TransformerEngine",
        cases,
        bench_moe,
        [TORCH_GATHER, TORCH_SORTED_GATHER, TORCH_COMBINE, TE_PERMUTE, TE_COMBINE],
        study,
    ),
)
