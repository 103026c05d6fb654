"""The reduce family: `tmakit.reduce_into_` against torch's in-place op on the same operands."""

from __future__ import annotations

from ..bench import suites
from ..bench.baselines import TORCH_IN_PLACE
from ..bench.report import BenchRow
from ..config import SEED
from ..plan import CopyPlan, LoadPlan, PipelinePlan, ReducePlan
from ..runtime.launch import compile_copy
from . import Family, Options
from .copy import copy_options, torch_rows
from .load import load_plans


def reduce_cases(options: Options) -> list[suites.ReduceCase]:
    """--reduce's (op, dtype) cases (`suites.DEFAULT_REDUCE_CASES` without)."""
    texts = options.reduce or suites.DEFAULT_REDUCE_CASES
    return [case for text in texts for case in suites.ReduceCase.parse(text, options.dtype)]


def reduce_plans(options: Options) -> list[tuple[suites.ReduceCase, LoadPlan]]:
    """(case, plan) for every reduce and size, each size of the case's dtype, planned now."""
    work = [(case, plan) for case in reduce_cases(options) for plan in load_plans(options, case.dtype)]
    for case, plan in work:
        for option in copy_options(options):
            suites.check_reduce_plan(case, plan, option)
    return work


def bench_reduce(work: tuple[suites.ReduceCase, LoadPlan], options: Options, l2_bytes: int) -> list[BenchRow]:
    case, plan = work
    return suites.bench_reduce(
        plan, case.op, copy_options(options), l2_bytes, options.hot_l2, options.samples
    )


def compared_with(options: Options) -> list[str]:
    ops = dict.fromkeys(case.op for case in reduce_cases(options))
    return [name for op in ops for name in torch_rows(TORCH_IN_PLACE[op][0])]


STUDIES = (
    Family(
        name="reduce",
        summary="tmakit.reduce_into_ against torch's in-place op (see --reduce)",
        plot_title="tmakit.reduce_into_ vs torch's in-place ops",
        plans=reduce_plans,
        bench=bench_reduce,
        compared_with=compared_with,
        reads=frozenset({"copy", "reduce"}),
        compile=lambda work, keep_ptx=False: compile_copy(
            ReducePlan(CopyPlan(PipelinePlan(work[1])), work[0].op), keep_ptx=keep_ptx
        ),
        example=lambda: (suites.ReduceCase("add", SEED.dtype), LoadPlan(SEED)),
        baselines={name: function for name, function in TORCH_IN_PLACE.values()},
    ),
)
