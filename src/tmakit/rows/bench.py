"""The rows study: gathers, scatters, adds and (int32) maxes of rows by index from 64 B to 16 KiB
rows against torch's `index_select`, `index_copy_`, `index_add_` and `index_reduce_` (amax), and the
workloads the rows ops are for: an embedding backward (Zipf-distributed tokens into a 128K x 4096
bf16 table), a mixture-of-experts dispatch and combine (16K tokens x 4096 bf16, top-2 of 64
experts) and a paged gather (pages of 16 rows). The sweep runs the kernel at every row size
(strict), then again as a user calls each op, the rule choosing the kernel or torch's op (the cases
named "rule: ..."). Device time from interleaved CUDA-graph replays, then eager back-to-back calls,
every tmakit result compared with torch's first; a torch copy of the same bytes in the same run is
the copy rate the rows are measured against.

The cases named "torch tma scatter_add ..." add rows of 128 B to 2 KiB (bf16 and fp32) beside a
third peer: torch's own CuTe DSL TMA scatter_add kernel (a bulk load of each source row, a bulk
reduce-add into its destination row), which torch 2.13 runs for `scatter_add_` of an index
expanded along the rows, the same sum as `index_add_` on dim 0. The GPU machine's torch predates it,
so `scripts/fetch_peers.py` unpacks its source into the git-ignored `.peers/` and the study imports
it from there (its rows skipped with a note where it is absent) and calls its host function,
`tma_scatter_add_into(dst, index, src)`, directly: torch's dispatch to it (its eligibility check of
the layout) is not in the timed call. `--only` picks cases by the start of their names. Its JSON:
one row a case."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..bench.peers import PEERS, Peer, load_peer, peer_folders
from ..bench.report import BenchRow
from ..bench.timing import EAGER, captured, eager_samples_us, interleaved_graph_samples_us
from ..check.reference import index_add_wrong_rows
from ..families import case_study, eager_columns, medians, tabled_study
from . import api

KINDS = {"gather": "copy", "scatter": "copy", "add": "reduce", "max": "reduce"}  # bytes: read + written
TORCH_NAMES = {
    "gather": "index_select",
    "scatter": "index_copy_",
    "add": "index_add_",
    "max": "index_reduce_",
}
PATTERNS = ("random", "zipf", "pages", "experts", "permutation")
PAGE_ROWS = 16  # a paged cache's rows per page
DEVICE = "cuda"  # where the study runs (its CPU tests run the same code on "cpu", timers faked)
COPY = "torch copy_"  # the copy of the same bytes: the run's copy rate

# torch's TMA scatter_add kernel: its row's name (and its cases' label), the release that ships it,
# where `scripts/fetch_peers.py` unpacks it, the module imported, its host function.
TMA_PEER = "torch tma scatter_add"
TORCH_PEER_VERSION = "2.13.0"
TORCH_PEER_PACKAGE = "torch_native_scatter_add"
TORCH_PEER_MODULE = f"{TORCH_PEER_PACKAGE}.tma_kernel"
TORCH_PEER_ENTRY = "tma_scatter_add_into"
TORCH_FETCH = (
    f"fetch it with `python scripts/fetch_peers.py --peer torch` (torch {TORCH_PEER_VERSION}'s "
    "torch/_native/ops/scatter_add/tma_kernel.py and _ptx.py, from an installed torch of that release "
    f"or its wheel, unpacked into {PEERS}/{TORCH_PEER_PACKAGE}/) and carry {PEERS} to the GPU machine"
)


@dataclass(frozen=True)
class RowsCase:
    """One row of the study: `op` on `count` rows of `row_bytes` (of `dtype`) by an index of
    `pattern` into a table of `rows` rows (an add's destination, a gather's source)."""

    op: str
    row_bytes: int
    rows: int
    count: int
    pattern: str = "random"
    dtype: str = "bfloat16"
    label: str = ""
    strict: bool = True  # False: the call as a user makes it, the rule choosing the path
    tma_peer: bool = False  # an add also timed by torch's TMA scatter_add kernel (`TMA_PEER`)

    @property
    def name(self) -> str:
        what = f"{self.label}: " if self.label else ""
        return f"{what}{self.op} {self.count} x {self.row_bytes} B rows of {self.rows}, {self.pattern}"

    @property
    def tensor_bytes(self) -> int:
        return self.count * self.row_bytes


def make_index(case: RowsCase, generator) -> object:
    """The case's index on the study's device (int64), seeded."""
    import torch

    rows, count = case.rows, case.count
    if case.pattern == "zipf":  # token frequencies: rank k drawn with weight 1 / k
        weights = 1.0 / torch.arange(1, rows + 1, dtype=torch.float64, device=DEVICE)
        ranks = torch.multinomial(weights.float(), count, replacement=True, generator=generator)
        order = torch.randperm(rows, device=DEVICE, generator=generator)
        return order[ranks]
    if case.pattern == "pages":  # whole pages of PAGE_ROWS rows, the pages in a random order
        pages = torch.randint(
            0, rows // PAGE_ROWS, (math.ceil(count / PAGE_ROWS),), device=DEVICE, generator=generator
        )
        offsets = torch.arange(PAGE_ROWS, device=DEVICE)
        return (pages[:, None] * PAGE_ROWS + offsets).reshape(-1)[:count]
    if case.pattern == "experts":  # top-2 of 64 experts: each token twice, slots sorted by expert
        tokens = rows
        experts = torch.rand(tokens, 64, device=DEVICE, generator=generator).topk(2, dim=1).indices
        order = experts.reshape(-1).argsort(stable=True)
        return (order // 2)[:count]
    if case.pattern == "permutation":
        return torch.randperm(rows, device=DEVICE, generator=generator)[:count]
    return torch.randint(0, rows, (count,), device=DEVICE, generator=generator)


def calls(case: RowsCase):
    """(tmakit's call, torch's call), each taking (table, index, compact)."""
    strict = case.strict
    if case.op == "gather":
        return (lambda t, i, c: api.gather_rows(t, i, c, check_index=False, strict=strict), _index_select)
    if case.op == "scatter":
        return (
            lambda t, i, c: api.scatter_rows_(t, i, c, check_index=False, strict=strict),
            lambda t, i, c: t.index_copy_(0, i, c),
        )
    if case.op == "max":
        return (
            lambda t, i, c: api.index_reduce_(t, i, c, "amax", check_index=False, strict=strict),
            lambda t, i, c: t.index_reduce_(0, i, c, "amax"),
        )
    return (
        lambda t, i, c: api.index_add_(t, i, c, check_index=False, strict=strict),
        lambda t, i, c: t.index_add_(0, i, c),
    )


def _index_select(table, index, out) -> None:
    import torch

    torch.index_select(table, 0, index, out=out)


# -- torch's TMA scatter_add kernel ---------------------------------------------------------------
def quack_stand_ins() -> dict[str, ModuleType]:
    """What torch's kernel imports of torch's vendored quack, stood in for: `jit_cache` of
    `torch._vendor.quack.cache`, the cache of its compiled kernels. The GPU machine's torch has no
    vendored quack, and torch 2.13's does not import under the DSL tmakit runs (it reads DSL names
    4.8 lacks). The stand-in caches in memory (`functools.cache`: each dtype, row length and
    contiguity compiled once a process, as quack's keeps them, without its copy on disk); an
    identity decorator would compile on every call."""
    cache = ModuleType("torch._vendor.quack.cache")
    cache.jit_cache = functools.cache
    quack = ModuleType("torch._vendor.quack")
    quack.cache = cache
    return {"torch._vendor.quack": quack, "torch._vendor.quack.cache": cache}


def load_torch_scatter_add(folders: list[Path]) -> Peer:
    """torch's TMA scatter_add module from the first of `folders` holding it (`load_peer`, with
    `quack_stand_ins`); a note saying why not where it is absent, does not import or has no
    `tma_scatter_add_into`."""
    what = "TMA scatter_add kernel (torch/_native/ops/scatter_add/tma_kernel.py)"
    peer = load_peer(
        folders, TORCH_PEER_PACKAGE, TORCH_PEER_MODULE, what, TORCH_FETCH, quack_stand_ins(), "torch"
    )
    if peer.module is not None and not callable(getattr(peer.module, TORCH_PEER_ENTRY, None)):
        return Peer(None, peer.version, f"skipped: {TORCH_PEER_MODULE} has no {TORCH_PEER_ENTRY}")
    return peer


@functools.cache
def torch_scatter_add() -> Peer:
    """torch's TMA scatter_add for this process (`load_torch_scatter_add` of `peer_folders`)."""
    return load_torch_scatter_add(peer_folders())


def peer_add(module: ModuleType):
    """torch's kernel as the study calls it on (table, index, compact): `tma_scatter_add_into(dst,
    index_1d, src)` adds row i of src into row index[i] of dst, what torch 2.13's `scatter_add_`
    hands it for an index expanded along the rows (the index int64, as torch makes it)."""
    add = getattr(module, TORCH_PEER_ENTRY)
    return lambda table, index, compact: add(table, index, compact)


def verify_add(add, table, index, compact) -> str:
    """An add's result (`add(table, index, compact)`, the table restored afterwards) within the
    summation-order bound of the float64 sum (`index_add_wrong_rows`)."""
    import torch

    start = table.clone()
    add(table, index, compact)
    torch.cuda.synchronize()
    got = table.clone()
    table.copy_(start)
    wrong = index_add_wrong_rows(got, start, index, compact)
    if not wrong.numel():
        return "ok: within the summation-order bound (float64 sum)"
    return f"MISMATCH first at row {int(wrong[0])} (beyond the summation-order bound)"


def verify_peer(add, table, index, compact) -> str:
    """A peer's add checked as tmakit's (`verify_add`), eagerly and then replayed from a CUDA graph
    (a capture that fails raises, saying so): "ok" on both, else the first verdict that is not."""
    verdict = verify_add(add, table, index, compact)
    if not verdict.startswith("ok"):
        return verdict
    start = table.clone()
    try:
        graph, _ = captured(lambda: add(table, index, compact))
    except Exception as error:
        raise RuntimeError(f"capturing it in a CUDA graph: {error!r}") from error
    finally:
        table.copy_(start)  # the call made before the capture added into it
    replay = verify_add(lambda *operands: graph.replay(), table, index, compact)
    if not replay.startswith("ok"):
        return f"replayed from a CUDA graph: {replay}"
    return f"{verdict}; the same replayed from a CUDA graph"


def verify(case: RowsCase, ours, theirs, table, index, compact) -> str:
    """tmakit's result against torch's on the same inputs, every element: "ok" or the first
    wrong row (a float add with repeated entries: within its summation-order bound)."""
    import torch

    if case.op == "gather":
        expected = compact.clone()
        theirs(table, index, expected)
        compact.view(torch.uint8).fill_(0xFF)
        ours(table, index, compact)
        got = compact
    else:
        start = table.clone()
        theirs(table, index, compact)
        expected = table.clone()
        table.copy_(start)
        ours(table, index, compact)
        got = table.clone()
        table.copy_(start)
    torch.cuda.synchronize()
    if case.op == "add" and got.dtype.is_floating_point:
        wrong = index_add_wrong_rows(got, start, index, compact)
        if not wrong.numel():
            return "ok: within the summation-order bound (float64 sum)"
        return f"MISMATCH first at row {int(wrong[0])} (beyond the summation-order bound)"
    wrong = (
        (got.view(torch.uint8) != expected.view(torch.uint8)).reshape(got.shape[0], -1).any(dim=1).nonzero()
    )
    return "ok: bit-exact against torch" if not len(wrong) else f"MISMATCH first at row {int(wrong[0, 0])}"


def bench_rows(case: RowsCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """tmakit and torch on `case` (and torch's copy of the same bytes), device time then eager;
    enough index and compact buffers rotated that a pass moves more than 4x the L2, over one
    table (a random row of a table beyond the L2 is cold). A `tma_peer` case times torch's TMA
    scatter_add beside them where it was fetched and passes its check's call (else the note
    says why not)."""
    import torch

    element = getattr(torch, case.dtype)
    generator = torch.Generator(device=DEVICE).manual_seed(2026)
    width = case.row_bytes // torch.empty(0, dtype=element).element_size()
    scale = 1 if element.is_floating_point else 1000  # integers of many values, not -3..3
    table = (torch.randn(case.rows, width, device=DEVICE, generator=generator) * scale).to(element)
    count = max(2, 4 * l2_bytes // (2 * case.tensor_bytes) + 1)
    indexes = [make_index(case, generator) for _ in range(count)]
    compacts = [
        (torch.randn(case.count, width, device=DEVICE, generator=generator) * scale).to(element)
        for _ in range(count)
    ]
    flat = [c.reshape(-1) for c in compacts]
    copies = [torch.empty_like(f) for f in flat]
    ours, theirs = calls(case)
    verdicts = {"tmakit": verify(case, ours, theirs, table, indexes[0], compacts[0])}
    peers = {f"torch {TORCH_NAMES[case.op]}": theirs}
    notes = {"op": case.name}
    if case.tma_peer:
        found = torch_scatter_add()
        notes[TMA_PEER] = found.note
        if found.module is not None:
            add = peer_add(found.module)
            try:  # its first call compiles it: a failure to compile, run or capture is noted
                verdicts[TMA_PEER] = verify_peer(add, table, indexes[0], compacts[0])
                peers[TMA_PEER] = add
            except Exception as error:
                notes[TMA_PEER] = f"failed: {error!r}"[:2000]
    launches = {
        name: [lambda i=i, c=c, t=table, f=call: f(t, i, c) for i, c in zip(indexes, compacts, strict=True)]
        for name, call in {"tmakit": ours, **peers}.items()
    }
    launches[COPY] = [lambda f=f, o=o: o.copy_(f) for f, o in zip(flat, copies, strict=True)]
    device = interleaved_graph_samples_us(launches, samples)
    eager = eager_samples_us({name: launched for name, launched in launches.items() if name != COPY})
    notes["path"] = (
        "{0.path} ({0.reason})".format(api.rows_path(case.op, table, indexes[0], compacts[0]))
        if not case.strict
        else "tma-rows-bulk (strict)"
    )
    notes["rotated_buffers"] = count
    kind = KINDS[case.op]
    row = lambda name, us, verified=None, kind=kind: BenchRow(  # noqa: E731
        name, kind, (case.count, width), case.dtype, case.tensor_bytes, us, verified, None, notes
    )
    rows = [
        row(name, us, verdicts.get(name), "copy" if name == COPY else kind) for name, us in device.items()
    ]
    rows += [row(f"{name} {EAGER}", us) for name, us in eager.items()]
    del table, indexes, compacts, flat, copies, launches
    torch.cuda.empty_cache()
    return rows


ROW_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
RULE = "rule"  # the label of the cases called as a user calls them (not strict)
SWEEP_BYTES = 64 * 2**20  # rows moved per call in the sweep
TABLE_BYTES = 512 * 2**20  # the sweep's table: far beyond the L2
TOKENS, HIDDEN_BYTES = 16384, 4096 * 2  # 16K tokens of 4096 bf16
# The adds timed beside torch's TMA scatter_add: its sizes of interest (a row one chunk of its 512 B
# bulk reduces, up to four), in both dtypes it and tmakit add (by name: the label's word).
PEER_ROW_SIZES = (128, 256, 512, 1024, 2048)
PEER_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}


def cases() -> list[RowsCase]:
    """Every case of the study, in its order: the named workloads, the sweep, then the adds beside
    torch's TMA scatter_add."""
    found = [
        RowsCase("add", HIDDEN_BYTES, 128 * 1024, TOKENS, "zipf", label="embedding backward"),
        RowsCase("gather", HIDDEN_BYTES, TOKENS, 2 * TOKENS, "experts", label="moe dispatch"),
        RowsCase("add", HIDDEN_BYTES, TOKENS, 2 * TOKENS, "experts", label="moe combine"),
        RowsCase("gather", 2048, 1 << 18, TOKENS, "pages", label="paged gather"),
    ]
    dtypes = {"add": "float32", "max": "int32"}
    for strict in (True, False):
        for op in ("gather", "scatter", "add", "max"):
            for row_bytes in ROW_SIZES:
                rows = TABLE_BYTES // row_bytes
                count = SWEEP_BYTES // row_bytes
                pattern = "permutation" if op == "scatter" else "random"
                dtype = dtypes.get(op, "bfloat16")
                label = "" if strict else RULE
                found.append(RowsCase(op, row_bytes, rows, count, pattern, dtype, label, strict))
    for dtype, short in PEER_DTYPES.items():  # beside torch's TMA scatter_add, the sweep's sizes
        for row_bytes in PEER_ROW_SIZES:
            rows, count = TABLE_BYTES // row_bytes, SWEEP_BYTES // row_bytes
            label = f"{TMA_PEER} {short}"
            found.append(RowsCase("add", row_bytes, rows, count, "random", dtype, label, True, True))
    return found


def case_row(case: RowsCase, rows: list[BenchRow]) -> dict:
    """One case's medians, rates and ratios (above 1: tmakit faster)."""
    by_name, us = medians(rows)
    torch_name = f"torch {TORCH_NAMES[case.op]}"
    tmakit, copy = by_name["tmakit"], by_name[COPY]
    peer = tma_peer_columns(case, by_name, us) if case.tma_peer else {}
    return {
        "case": case.name,
        "op": case.op,
        "row_bytes": case.row_bytes,
        "path": tmakit.notes["path"],
        "verified": tmakit.verified,
        "tmakit_graph_us": us["tmakit"],
        "torch_graph_us": us[torch_name],
        "device_vs_torch": us[torch_name] / us["tmakit"],
        "tmakit_tb_per_s": tmakit.gbps / 1e3,
        "torch_tb_per_s": by_name[torch_name].gbps / 1e3,
        "copy_tb_per_s": copy.gbps / 1e3,
        "of_copy_rate": tmakit.gbps / copy.gbps,
        **eager_columns(us, torch_name),
        **peer,
        "rotated_buffers": tmakit.notes["rotated_buffers"],
    }


def tma_peer_columns(case: RowsCase, by_name: dict, us: dict) -> dict:
    """A `tma_peer` case's columns of torch's TMA scatter_add: its verdict, median device and eager
    times, rate and tmakit's speedup over it (above 1: tmakit faster), or None each where it was
    not timed; the note says where it came from, or why not."""
    timed = by_name.get(TMA_PEER)
    eager = us.get(f"{TMA_PEER} {EAGER}")
    return {
        "tma_scatter_add": by_name["tmakit"].notes[TMA_PEER],
        "tma_scatter_add_verified": None if timed is None else timed.verified,
        "tma_scatter_add_graph_us": us.get(TMA_PEER),
        "tma_scatter_add_tb_per_s": None if timed is None else timed.gbps / 1e3,
        "device_vs_tma_scatter_add": None if timed is None else us[TMA_PEER] / us["tmakit"],
        "tma_scatter_add_eager_us": eager,
        "eager_vs_tma_scatter_add": None if eager is None else eager / us[f"tmakit {EAGER}"],
    }


tabled = tabled_study(
    "rows",
    "rows by index, tmakit's bulk row copies (strict: every row size; the 'rule' cases as a "
    "user calls each op, the rule choosing the kernel or torch's op) against torch's "
    "index_select / index_copy_ / index_add_ / index_reduce_ (amax) in CUDA graphs (device time) and "
    "eagerly (back-to-back calls, host included), L2 cold, bytes read plus written, beside a torch "
    "copy of the same bytes in the same run; every tmakit result compared with torch's first. The "
    "'torch tma scatter_add' cases time torch 2.13's CuTe DSL TMA scatter_add kernel too (its host "
    "function tma_scatter_add_into called directly, loaded from .peers), checked as tmakit's add",
    case_row,
)


def study(results: list[tuple[object, list[BenchRow]]], context: dict) -> dict:
    """The study's JSON (`tabled`), its context naming where torch's TMA scatter_add came from
    when a case timed it."""
    if any(getattr(case, "tma_peer", False) for case, _ in results):
        peer = torch_scatter_add()
        context = {**context, "torch_tma_scatter_add": {"version": peer.version, "note": peer.note}}
    return tabled(results, context)


STUDIES = (
    case_study(
        "rows",
        "gather, scatter, add and max of rows by index (64 B to 16 KiB rows; an embedding backward, "
        "a mixture-of-experts dispatch and combine, a paged gather) against torch's index ops, adds "
        "also against torch's TMA scatter_add kernel (see --only)",
        "rows by index against torch",
        cases,
        bench_rows,
        [*(f"torch {name}" for name in TORCH_NAMES.values()), TMA_PEER],
        study,
    ),
)
