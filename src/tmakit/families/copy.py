"""The copy families: `tmakit.copy_` as a user calls it against torch's copy_, row-major to
row-major (copy) and from a column-major source into a row-major destination (transpose)."""

from __future__ import annotations

from typing import Any

from ..bench import suites
from ..bench.baselines import torch_copy_launches
from ..bench.report import BenchRow
from ..check.run import verify_copy
from ..config import SEED
from ..plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan
from ..runtime.launch import compile_copy
from . import RING_OPTIONS, Family, Options, load_plans, ring_rows


def copy_options(options: Options) -> list[CopyOptions]:
    """--copy's configurations (the defaults without)."""
    return [CopyOptions.parse(text) for text in options.copy or ["default"]]


def copy_plans(options: Options) -> list[LoadPlan]:
    copy_options(options)  # checked now
    return load_plans(options)


def copy_bench(transpose: bool):
    def bench(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
        rows = suites.bench_copy(
            plan, transpose, copy_options(options), l2_bytes, options.hot_l2, options.samples,
            options.specialised,
        )  # fmt: skip
        return rows + ring_rows(plan, options, l2_bytes)

    return bench


def torch_rows(name: str) -> list[str]:
    """A torch row graph-timed and its eager twin on a stream."""
    return [name, f"{name} {suites.STREAM_TIMED}"]


def copy_family(
    name: str, summary: str, plot_title: str, *, transpose: bool, baseline: str, **kernel: Any
) -> Family:
    """A family of `tmakit.copy_` on --copy's configurations (and the ring's variants) against
    torch's copy_ of the same pair, its row `baseline` (`transpose`: from a column-major source);
    `kernel`: the family's compile, example and verify, where it has them."""
    return Family(
        name=name,
        summary=summary,
        plot_title=plot_title,
        plans=copy_plans,
        bench=copy_bench(transpose),
        compared_with=lambda options: torch_rows(baseline),
        reads=RING_OPTIONS | {"copy", "specialised"},
        baselines={baseline: torch_copy_launches},
        **kernel,
    )


STUDIES = (
    copy_family(
        "copy",
        "tmakit.copy_ against torch's copy_",
        "tmakit.copy_ vs torch copy_",
        transpose=False,
        baseline="torch copy_",
        compile=lambda plan, keep_ptx=False: compile_copy(CopyPlan(PipelinePlan(plan)), keep_ptx=keep_ptx),
        example=lambda: LoadPlan(SEED),
        verify=lambda plan: verify_copy(CopyPlan(PipelinePlan(plan))),
    ),
    copy_family(
        "transpose",
        "the same from a column-major source (x.t()) into a row-major destination",
        "transposing tmakit.copy_ vs torch copy_",
        transpose=True,
        baseline="torch copy_ (transpose)",
    ),
)
