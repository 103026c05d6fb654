"""The rows study: gathers, scatters, adds and (int32) maxes of rows by index from 64 B to 16 KiB
rows against torch's `index_select`, `index_copy_`, `index_add_` and `index_reduce_` (amax), and the
workloads the rows ops are for: an embedding backward (Zipf-distributed tokens into a 128K x 4096
bf16 table), a mixture-of-experts dispatch and combine (16K tokens x 4096 bf16, top-2 of 64
experts) and a paged gather (pages of 16 rows). The sweep runs the kernel at every row size
(strict), then again as a user calls each op, the rule choosing the kernel or torch's op (the cases
named "rule: ..."). Device time from interleaved CUDA-graph replays, then eager back-to-back calls,
every tmakit result compared with torch's first; a torch copy of the same bytes in the same run is
the copy rate the rows are measured against. `--only` picks cases by the start of their names. Its
JSON: one row a case."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..bench.report import BenchRow
from ..bench.timing import EAGER, eager_samples_us, interleaved_graph_samples_us
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

    @property
    def name(self) -> str:
        what = f"{self.label}: " if self.label else ""
        return f"{what}{self.op} {self.count} x {self.row_bytes} B rows of {self.rows}, {self.pattern}"

    @property
    def tensor_bytes(self) -> int:
        return self.count * self.row_bytes


def make_index(case: RowsCase, generator) -> object:
    """The case's index on the GPU (int64), seeded."""
    import torch

    rows, count = case.rows, case.count
    if case.pattern == "zipf":  # token frequencies: rank k drawn with weight 1 / k
        weights = 1.0 / torch.arange(1, rows + 1, dtype=torch.float64, device="cuda")
        ranks = torch.multinomial(weights.float(), count, replacement=True, generator=generator)
        order = torch.randperm(rows, device="cuda", generator=generator)
        return order[ranks]
    if case.pattern == "pages":  # whole pages of PAGE_ROWS rows, the pages in a random order
        pages = torch.randint(
            0, rows // PAGE_ROWS, (math.ceil(count / PAGE_ROWS),), device="cuda", generator=generator
        )
        offsets = torch.arange(PAGE_ROWS, device="cuda")
        return (pages[:, None] * PAGE_ROWS + offsets).reshape(-1)[:count]
    if case.pattern == "experts":  # top-2 of 64 experts: each token twice, slots sorted by expert
        tokens = rows
        experts = torch.rand(tokens, 64, device="cuda", generator=generator).topk(2, dim=1).indices
        order = experts.reshape(-1).argsort(stable=True)
        return (order // 2)[:count]
    if case.pattern == "permutation":
        return torch.randperm(rows, device="cuda", generator=generator)[:count]
    return torch.randint(0, rows, (count,), device="cuda", generator=generator)


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
    table (a random row of a table beyond the L2 is cold)."""
    import torch

    element = getattr(torch, case.dtype)
    generator = torch.Generator(device="cuda").manual_seed(2026)
    width = case.row_bytes // torch.empty(0, dtype=element).element_size()
    scale = 1 if element.is_floating_point else 1000  # integers of many values, not -3..3
    table = (torch.randn(case.rows, width, device="cuda", generator=generator) * scale).to(element)
    count = max(2, 4 * l2_bytes // (2 * case.tensor_bytes) + 1)
    indexes = [make_index(case, generator) for _ in range(count)]
    compacts = [
        (torch.randn(case.count, width, device="cuda", generator=generator) * scale).to(element)
        for _ in range(count)
    ]
    flat = [c.reshape(-1) for c in compacts]
    copies = [torch.empty_like(f) for f in flat]
    ours, theirs = calls(case)
    verdict = verify(case, ours, theirs, table, indexes[0], compacts[0])
    launches = {
        "tmakit": [lambda i=i, c=c, t=table: ours(t, i, c) for i, c in zip(indexes, compacts, strict=True)],
        f"torch {TORCH_NAMES[case.op]}": [
            lambda i=i, c=c, t=table: theirs(t, i, c) for i, c in zip(indexes, compacts, strict=True)
        ],
        "torch copy_": [lambda f=f, o=o: o.copy_(f) for f, o in zip(flat, copies, strict=True)],
    }
    device = interleaved_graph_samples_us(launches, samples)
    eager = eager_samples_us({name: launches[name] for name in list(launches)[:2]})
    notes = {
        "op": case.name,
        "path": "{0.path} ({0.reason})".format(api.rows_path(case.op, table, indexes[0], compacts[0]))
        if not case.strict
        else "tma-rows-bulk (strict)",
        "rotated_buffers": count,
    }
    kind = KINDS[case.op]
    row = lambda name, us, verified=None, kind=kind: BenchRow(  # noqa: E731
        name, kind, (case.count, width), case.dtype, case.tensor_bytes, us, verified, None, notes
    )
    rows = [
        row(name, us, verdict if name == "tmakit" else None, "copy" if name == "torch copy_" else kind)
        for name, us in device.items()
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


def cases() -> list[RowsCase]:
    """Every case of the study, in its order: the named workloads, then the sweep."""
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
    return found


def case_row(case: RowsCase, rows: list[BenchRow]) -> dict:
    """One case's medians, rates and ratios (above 1: tmakit faster)."""
    by_name, us = medians(rows)
    torch_name = f"torch {TORCH_NAMES[case.op]}"
    tmakit, copy = by_name["tmakit"], by_name["torch copy_"]
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
        "rotated_buffers": tmakit.notes["rotated_buffers"],
    }


study = tabled_study(
    "rows",
    "rows by index, tmakit's bulk row copies (strict: every row size; the 'rule' cases as a "
    "user calls each op, the rule choosing the kernel or torch's op) against torch's "
    "index_select / index_copy_ / index_add_ / index_reduce_ (amax) in CUDA graphs (device time) and "
    "eagerly (back-to-back calls, host included), L2 cold, bytes read plus written, beside a torch "
    "copy of the same bytes in the same run; every tmakit result compared with torch's first",
    case_row,
)


STUDIES = (
    case_study(
        "rows",
        "gather, scatter, add and max of rows by index (64 B to 16 KiB rows; an embedding backward, "
        "a mixture-of-experts dispatch and combine, a paged gather) against torch's index ops (see --only)",
        "rows by index against torch",
        cases,
        bench_rows,
        [f"torch {name}" for name in TORCH_NAMES.values()],
        study,
    ),
)
