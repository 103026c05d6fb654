"""The drop-in study (`bench.dropin`): `copy_`, the transposing `copy_` and `add_` at 1, 16, 256
and 1024 MiB, and each family's cases (its bench part's `DROPIN_CASES`: `im2col` on ResNet-50's
layers, the 7x7 stride-2 stem and every 3x3), each against the fastest torch expression eagerly
and against the faster of it and its `torch.compile` version in CUDA graphs. `--only` picks cases
by the start of their names ("copy", "add 256", "im2col 32x224"...). Its JSON is the drop-in
study: one row a case."""

from __future__ import annotations

from .. import registry
from ..bench.dropin import EAGER, DropinCase, bench_dropin
from ..bench.report import BenchRow
from . import case_study, eager_columns, medians, tabled_study

SIZES_MIB = (1, 16, 256, 1024)
COLUMNS = {"fp16": 8192, "fp32": 4096}  # a row of 16 KiB: the matrices' width
DEVICE_TARGET, EAGER_TARGET = 1.00, 0.97  # x the faster peer in graphs; x torch's eager call


def cases() -> list[DropinCase]:
    """Every case of the study, in its order: the core's ops, then each family's
    (`registry.parts("bench")`)."""
    found = []
    for op, dtype in (("copy", "fp16"), ("transpose", "fp16"), ("add", "fp32")):
        cols = COLUMNS[dtype]
        itemsize = 2 if dtype == "fp16" else 4
        found += [DropinCase(op, (mib * 2**20 // itemsize // cols, cols), dtype) for mib in SIZES_MIB]
    for module in registry.parts("bench"):
        found += getattr(module, "DROPIN_CASES", ())
    return found


def case_row(case: DropinCase, rows: list[BenchRow]) -> dict:
    """One case's medians, its ratios (above 1: tmakit faster) and verdict."""
    by_name, us = medians(rows)
    peer = min(us["torch"], us["inductor"])
    tmakit = by_name["tmakit"]
    return {
        "case": case.name,
        "path": tmakit.notes["path"],
        "verified": tmakit.verified,
        "tmakit_graph_us": us["tmakit"],
        "torch_graph_us": us["torch"],
        "inductor_graph_us": us["inductor"],
        "device_vs_faster_peer": peer / us["tmakit"],
        "faster_peer": "torch" if us["torch"] <= us["inductor"] else "inductor",
        **eager_columns(us, "torch"),
        "gb_per_s": tmakit.gbps,
        "rotated_buffers": tmakit.notes["rotated_buffers"],
    }


study = tabled_study(
    "dropin",
    "each op as a user swaps it in: tmakit against the fastest torch expression eagerly "
    "(back-to-back calls, host included) and against the faster of it and torch.compile in CUDA "
    "graphs (device time), L2 cold, every tmakit result bit-compared with torch's first",
    case_row,
    targets={"device_vs_faster_peer": DEVICE_TARGET, "eager_vs_torch": EAGER_TARGET},
)


STUDIES = (
    case_study(
        "dropin",
        "copy_, the transposing copy_, add_ and im2col as a user swaps them in, against torch "
        "eagerly and the faster of torch and torch.compile in graphs (see --only)",
        "tmakit ops against torch and inductor",
        cases,
        bench_dropin,
        ["torch", "inductor", f"torch {EAGER}"],
        study,
    ),
)
