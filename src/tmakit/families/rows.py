"""The rows study (`bench.rows`): gathers, scatters, adds and (int32) maxes of rows by index from 64 B
to 16 KiB rows against torch's `index_select`, `index_copy_`, `index_add_` and `index_reduce_`, and
the workloads the rows ops are for: an embedding backward (Zipf-distributed tokens into a 128K x
4096 bf16 table), a mixture-of-experts dispatch and combine (16K tokens x 4096 bf16, top-2 of 64
experts) and a paged gather (pages of 16 rows). The sweep runs the kernel at every row size
(strict), then again as a user calls each op, the rule choosing the kernel or torch's op (the cases
named "rule: ..."). `--only` picks cases by the start of their names. Its JSON is the rows study:
one row a case, with the same run's copy rate."""

from __future__ import annotations

from ..bench.report import BenchRow
from ..bench.rows import TORCH_NAMES, RowsCase, bench_rows
from . import case_study, eager_columns, medians, tabled_study

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


FAMILIES = (
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
