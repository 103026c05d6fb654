"""The reduce study: `tmakit.reduce_into_` (reduce stores, and the load-add-store ring where it
computes the pair) against torch's in-place op on the same operands, each tmakit row verified bit
for bit in the same run (--reduce's cases, `bench.suites.DEFAULT_REDUCE_CASES` without)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ..bench import suites
from ..bench.baselines import TORCH_IN_PLACE, torch_reduce_launches
from ..bench.report import BenchRow
from ..bench.suites import STREAM_TIMED, STREAM_TIMED_BYTES, rotation_buffers
from ..bench.timing import graph_samples_us, stream_samples_us
from ..check.inputs import make_input_tensor
from ..check.run import first_wrong_tile, signed_bits
from ..config import SEED, dtype_from_text
from ..errors import TmaConfigError
from ..families import Family, Options, copy_options, load_plans, torch_rows
from ..limits import DEFAULT_SM_COUNT
from ..plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan, check_reduce, reduce_op
from ..plan.copy_defaults import copy_tile
from . import api
from .call import reduce_options
from .launch import compile_reduce
from .plan import RING_DTYPES, ReducePlan


@dataclass(frozen=True)
class ReduceCase:
    """One reduce to time: `op` on tensors of `dtype` (`tmakit.reduce_into_`), beside torch's
    in-place form of the same op (`baselines.TORCH_IN_PLACE`)."""

    op: str
    dtype: str

    @classmethod
    def parse(cls, text: str, default_dtype: str) -> list[ReduceCase]:
        """ "add:fp32,bf16" -> add on fp32 and on bf16; "min" -> min on `default_dtype`. Each pair
        checked (`plan.check_reduce`) and refused without a torch op to compare with."""
        op, _, dtypes = text.partition(":")
        names = [dtype_from_text(name).name for name in dtypes.split(",") if name.strip()]
        cases = [cls(reduce_op(op.strip()), name) for name in names or [default_dtype]]
        for case in cases:
            check_reduce(case.op, case.dtype)
            if case.op not in TORCH_IN_PLACE:
                raise TmaConfigError(
                    f"reduce op {case.op!r} has no torch in-place op to time against; the bench "
                    f"times {', '.join(TORCH_IN_PLACE)}"
                )
        return cases


def check_reduce_options(options: CopyOptions) -> None:
    """TmaConfigError for copy options a reduce does not take (`call.reduce_options`)."""
    reduce_options(None, None, options.changed())


def check_reduce_plan(case: ReduceCase, plan: LoadPlan, options: CopyOptions) -> None:
    """Plan the reduce a bench row will run (`ReducePlan` of the options' copy, on the default
    SM count) so that what cannot be planned - a ring that does not fit shared memory, a tile
    of the wrong width - is refused before any GPU work (TmaConfigError)."""
    check_reduce_options(options)
    tile = options.default_tile(case.dtype, False, None, DEFAULT_SM_COUNT)
    load = LoadPlan(replace(plan.config, tile=tile))
    ReducePlan(options.plan(load, False, DEFAULT_SM_COUNT, fits_l2=False), case.op)


def reduce_operands(plan: LoadPlan, l2_bytes: int, hot_l2: bool) -> tuple[list, list]:
    """Rotated (sources, destinations) of the plan's shape, `rotation_buffers` of each over both
    tensors' bytes. Floats: torch.randn (seeded), finite with full mantissas - a NaN would make
    min/max differ from torch's by rule (torch propagates it, TMA's min/max drop it), not by error;
    integers: the position-hashed bits of `make_input_tensor`."""
    import torch

    count = rotation_buffers(2 * plan.tensor_bytes, l2_bytes, hot_l2)
    dtype = getattr(torch, plan.config.element.torch_name)
    if not dtype.is_floating_point:
        sources = [make_input_tensor(plan) for _ in range(count)]
        return sources, [source.flip(-1).contiguous() for source in sources]
    generator = torch.Generator(device="cuda").manual_seed(2026)
    made = [
        torch.randn(plan.config.shape, generator=generator, device="cuda", dtype=dtype)
        for _ in range(2 * count)
    ]
    return made[:count], made[count:]


def bench_reduce(
    plan: LoadPlan, op: str, options: list[CopyOptions], l2_bytes: int, hot_l2: bool, samples: int
) -> list:
    """`tmakit.reduce_into_(dst, src, op)` as a user calls it (TVM-FFI launch, torch's stream),
    each option on reduce stores and, where it computes the pair, on the load-add-store ring,
    first verified bit for bit in the same run against torch's in-place op on the same operands
    (`baselines.TORCH_IN_PLACE`: one rounding either way for float adds), then timed beside that
    op, by graph replay and, from `STREAM_TIMED_BYTES`, eagerly on a stream. Bytes counted: 3x
    the tensor (src read, dst read and written). The timed passes keep reducing into the
    destinations (an add grows them; the values do not change the traffic)."""
    import torch

    config = plan.config
    sources, destinations = reduce_operands(plan, l2_bytes, hot_l2)
    bits = signed_bits(sources[0])
    initial = destinations[0].clone()
    torch_name, torch_op = TORCH_IN_PLACE[op]
    expected = initial.clone()
    torch_op(expected, sources[0])
    shape = tuple(sources[0].shape)
    rows, eager = [], []  # eager: (graph-timed row, its launches), timed on a stream after the graphs
    ring = config.dtype in RING_DTYPES.get(op, ())
    runs = [(option, "store") for option in options]
    runs += [(option, "ring") for option in options if ring and ring_takes(sources[0], op, option)]
    for option, kernel in runs:
        bits(destinations[0]).copy_(bits(initial))
        knobs = {**option.changed(), "reduce_by": kernel}
        start = time.perf_counter()
        # strict: a row named tmakit.reduce_into_ times TMA (reduce stores or the ring), never torch's op
        api.reduce_into_(destinations[0], sources[0], op, strict=True, **knobs)  # compiles once
        torch.cuda.synchronize()
        first_call = time.perf_counter() - start
        wrong = first_wrong_tile(destinations[0], expected, option.tile or copy_tile(config.dtype))
        verdict = f"ok: every element bit-exact against {torch_name} ({sources[0].numel()})"
        launches = [
            lambda s=s, d=d, k=knobs: api.reduce_into_(d, s, op, strict=True, **k)
            for s, d in zip(sources, destinations, strict=True)
        ]
        rows.append(
            BenchRow(
                f"tmakit.reduce_into_ {op} ({option.describe()}{', ring' if kernel == 'ring' else ''})",
                "reduce",
                shape,
                config.dtype,
                plan.tensor_bytes,
                graph_samples_us(launches, samples),
                verdict if wrong is None else f"WRONG against {torch_name}: {wrong}",
                first_call,
                {
                    "op": op,
                    "reduce_by": kernel,
                    "options": option.describe(),
                    "tile": list(option.tile) if option.tile else "default",
                    "stages": option.stages,
                    "rotated_buffers": len(sources),
                },
            )  # fmt: skip
        )
        eager.append((rows[-1], launches))
    torch_launches = torch_reduce_launches(op, sources, destinations)
    rows.append(
        BenchRow(
            torch_name,
            "reduce",
            shape,
            config.dtype,
            plan.tensor_bytes,
            graph_samples_us(torch_launches, samples),
            notes={"op": op},
        )  # fmt: skip
    )
    if plan.tensor_bytes >= STREAM_TIMED_BYTES:  # the eager loop beside the graph, every row
        for graph_row, timed in [*eager, (rows[-1], torch_launches)]:
            samples_us = stream_samples_us(timed, samples)
            rows.append(replace(graph_row, kernel=f"{graph_row.kernel} {STREAM_TIMED}", samples_us=samples_us,
                                compile_seconds=None))  # fmt: skip
    del sources, destinations, initial, expected, launches, eager, torch_launches
    torch.cuda.empty_cache()
    return rows


def ring_takes(tensor, op: str, option: CopyOptions) -> bool:
    """Whether the load-add-store ring plans `op` on `tensor` with these options (a depth chosen
    for one tile a stage may not fit two): its bench row is left out where not."""
    try:
        api.reduce_path(tensor, tensor, op, strict=True, reduce_by="ring", **option.changed())
    except TmaConfigError:
        return False
    return True


def reduce_cases(options: Options) -> list[ReduceCase]:
    """--reduce's (op, dtype) cases (`suites.DEFAULT_REDUCE_CASES` without)."""
    texts = options.reduce or suites.DEFAULT_REDUCE_CASES
    return [case for text in texts for case in ReduceCase.parse(text, options.dtype)]


def reduce_plans(options: Options) -> list[tuple[ReduceCase, LoadPlan]]:
    """(case, plan) for every reduce and size, each size of the case's dtype, planned now."""
    work = [(case, plan) for case in reduce_cases(options) for plan in load_plans(options, case.dtype)]
    for case, plan in work:
        for option in copy_options(options):
            check_reduce_plan(case, plan, option)
    return work


def bench_case(work: tuple[ReduceCase, LoadPlan], options: Options, l2_bytes: int) -> list[BenchRow]:
    case, plan = work
    return bench_reduce(plan, case.op, copy_options(options), l2_bytes, options.hot_l2, options.samples)


def compared_with(options: Options) -> list[str]:
    ops = dict.fromkeys(case.op for case in reduce_cases(options))
    return [name for op in ops for name in torch_rows(TORCH_IN_PLACE[op][0])]


STUDIES = (
    Family(
        name="reduce",
        summary="tmakit.reduce_into_ against torch's in-place op (see --reduce)",
        plot_title="tmakit.reduce_into_ vs torch's in-place ops",
        plans=reduce_plans,
        bench=bench_case,
        compared_with=compared_with,
        reads=frozenset({"copy", "reduce"}),
        compile=lambda work, keep_ptx=False: compile_reduce(
            ReducePlan(CopyPlan(PipelinePlan(work[1])), work[0].op), keep_ptx=keep_ptx
        ),
        example=lambda: (ReduceCase("add", SEED.dtype), LoadPlan(SEED)),
        baselines={name: function for name, function in TORCH_IN_PLACE.values()},
    ),
)
