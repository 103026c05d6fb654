"""The timing suites of loads, copies and reduces: tmakit's kernels beside torch (and Triton) on
the same configuration, same run, same timer, every tmakit row verified in that run."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

from .. import api
from ..api.copy import specialised_copy_
from ..check.inputs import make_input_tensor
from ..check.reference import Verdict
from ..check.run import first_wrong_tile, signed_bits, verify_tile_load
from ..config import dtype_from_text
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, POISON
from ..plan import CopyOptions, LoadPlan, ReducePlan, check_reduce, reduce_op
from ..plan.copy_defaults import copy_tile
from ..plan.reduce import RING_DTYPES
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_tile_load
from .baselines import (
    TORCH_IN_PLACE,
    torch_copy_launches,
    torch_reduce_launches,
    torch_sum_launches,
    triton_supports,
    triton_tma_copy_launches,
)
from .report import BenchRow
from .timing import graph_samples_us, stream_samples_us


def rotation_buffers(bytes_per_launch: int, l2_bytes: int, hot_l2: bool = False) -> int:
    """Buffers to rotate over so a pass touches more than 4x the L2 (1 when timing L2-hot)."""
    if hot_l2:
        return 1
    return max(2, 4 * l2_bytes // bytes_per_launch + 1)


def rotated_sources(plan: LoadPlan, l2_bytes: int, hot_l2: bool) -> list:
    """The plan's position-dependent input and copies of it (copies, not views: each buffer must
    be its own memory for the rotation to defeat the L2), `rotation_buffers` in all."""

    first = make_input_tensor(plan)
    return [first] + [first.clone() for _ in range(rotation_buffers(plan.tensor_bytes, l2_bytes, hot_l2) - 1)]


def bench_size(
    plan: LoadPlan, l2_bytes: int, hot_l2: bool, samples: int, baselines: bool = True
) -> list[BenchRow]:
    """tmakit's load kernel and the baselines on one configuration, verified in the same run."""
    import torch

    config = plan.config
    tensor_bytes = plan.tensor_bytes
    verdict = verify_tile_load(plan)  # the same configuration's output, checked in this run
    compiled = compile_tile_load(plan, consumer="none")
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    count = len(sources)
    cute_sources = [to_cute_tensor(s) for s in sources]
    row = lambda name, kind, launches, **extra: BenchRow(  # noqa: E731
        name,
        kind,
        tuple(config.shape),
        config.dtype,
        tensor_bytes,
        graph_samples_us(launches, samples),
        **extra,
    )
    rows = [
        row(
            "tmakit load",
            "load",
            [lambda s=s: compiled(s, s, current_stream()) for s in cute_sources],
            verified=str(verdict),
            compile_seconds=compiled.compile_seconds,
            notes={"rotated_buffers": count, "tile": list(config.tile)},
        )
    ]
    if baselines:
        rows.append(row("torch copy_", "copy", torch_copy_launches(sources)))
        rows.append(row("torch sum", "sum", torch_sum_launches(sources)))
        if triton_supports(config):
            rows.append(row("triton TMA copy", "copy", triton_tma_copy_launches(sources, config.tile)))
    del sources, cute_sources
    torch.cuda.empty_cache()
    return rows


# Copies at least this large are also timed eagerly (`stream_samples_us`): long enough that the
# host's cost per call (host-cost.json) stays ahead of the GPU.
STREAM_TIMED_BYTES = 16 * 2**20
SPECIALISED_LABEL = ", shape-specialised"  # a bench row of the kernel compiled for the exact shape
STREAM_TIMED = "[stream]"


def bench_copy(
    plan: LoadPlan,
    transpose: bool,
    options: list[CopyOptions],
    l2_bytes: int,
    hot_l2: bool,
    samples: int,
    specialised: bool = False,
) -> list:
    """`tmakit.copy_` as a user calls it (TVM-FFI launch, torch's stream), each option verified
    element for element in the same run (destination poisoned first), beside torch's `copy_` of
    the same pair. `transpose`: the source is the column-major view `x.t()` of each rotated
    buffer and the destination row-major - torch's `dst.copy_(x.t())`. `specialised`: each option
    also through the kernel compiled for this exact shape (`api.copy.specialised_copy_`)
    beside the shape-generic one."""
    import torch

    config = plan.config
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    if transpose:
        sources = [s.t() for s in sources]  # column-major views; the buffers stay distinct memory
    destinations = [torch.empty(s.shape, dtype=s.dtype, device="cuda") for s in sources]
    bits = signed_bits(sources[0])
    what = "transpose" if transpose else "copy"
    shape = tuple(sources[0].shape)
    rows, eager = [], []  # eager: (graph-timed row, its launches), timed on a stream after the graphs
    variants = [(option, False) for option in options]
    if specialised:
        variants = [(option, kind) for option in options for kind in (False, True)]
    for option, shape_specialised in variants:
        bits(destinations[0]).fill_(POISON)  # every element the copy must write
        # strict: a row named tmakit.copy_ times TMA's copy, never the driver's memcpy it may route to
        knobs = option.changed() if shape_specialised else {**option.changed(), "strict": True}
        call = specialised_copy_ if shape_specialised else api.copy_
        start = time.perf_counter()
        call(destinations[0], sources[0], **knobs)  # compiles once
        torch.cuda.synchronize()
        first_call = time.perf_counter() - start
        wrong = first_wrong_tile(
            destinations[0], sources[0], option.tile or copy_tile(config.dtype, transpose)
        )
        launches = [
            lambda s=s, d=d, k=knobs, f=call: f(d, s, **k) for s, d in zip(sources, destinations, strict=True)
        ]
        rows.append(
            BenchRow(
                f"tmakit.copy_ {what} ({option.describe()}{SPECIALISED_LABEL if shape_specialised else ''})",
                "copy",
                shape,
                config.dtype,
                plan.tensor_bytes,
                graph_samples_us(launches, samples),
                f"ok: every element bit-exact ({sources[0].numel()})" if wrong is None else f"WRONG: {wrong}",
                first_call,
                {
                    "options": option.describe(),
                    "tile": list(option.tile) if option.tile else "default",
                    "stages": option.stages,
                    "rotated_buffers": len(sources),
                    "transpose": transpose,
                    "bulk": option.bulk,
                    "compiled_for": "this shape" if shape_specialised else "every shape of its class",
                },
            )  # fmt: skip
        )
        eager.append((rows[-1], launches))
    name = "torch copy_ (transpose)" if transpose else "torch copy_"
    torch_launches = [lambda s=s, d=d: d.copy_(s) for s, d in zip(sources, destinations, strict=True)]
    rows.append(
        BenchRow(
            name, "copy", shape, config.dtype, plan.tensor_bytes, graph_samples_us(torch_launches, samples)
        )
    )
    if plan.tensor_bytes >= STREAM_TIMED_BYTES:  # the eager loop beside the graph, every row
        for graph_row, timed in [*eager, (rows[-1], torch_launches)]:
            samples_us = stream_samples_us(timed, samples)
            rows.append(replace(graph_row, kernel=f"{graph_row.kernel} {STREAM_TIMED}", samples_us=samples_us,
                                compile_seconds=None))  # fmt: skip
    del sources, destinations, launches, eager, torch_launches
    torch.cuda.empty_cache()
    return rows


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


# `tmakit bench --kernel reduce` without --reduce: torch's add_ on the float types, and min/max
# where TMA reduces them (fp16, bf16; not fp32).
DEFAULT_REDUCE_CASES = ("add:fp32,fp16,bf16", "min:fp16,bf16", "max:fp16,bf16")


def check_reduce_options(options: CopyOptions) -> None:
    """TmaConfigError for copy options a reduce does not take (`api.reduce_options`)."""
    api.reduce_options(None, None, options.changed())


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


@dataclass(frozen=True)
class LoadRun:
    """What one GPU run of the load experiment found."""

    verdict: Verdict
    compile_seconds: float
    kernel_us: list[float]  # load-only kernel, device time per launch (graph replay samples)

    @property
    def median_us(self) -> float:
        return statistics.median(self.kernel_us)


def time_tile_load(plan: LoadPlan) -> list[float]:
    """Device time of the load-only kernel (microseconds per launch, one sample a graph replay)."""
    compiled = compile_tile_load(plan, consumer="none")
    src = to_cute_tensor(make_input_tensor(plan))
    return graph_samples_us([lambda: compiled(src, src, current_stream())], samples=30)


def run_load_on_gpu(plan: LoadPlan) -> LoadRun:
    compile_seconds = compile_tile_load(plan, consumer="store").compile_seconds
    verdict = verify_tile_load(plan)
    return LoadRun(verdict, compile_seconds, time_tile_load(plan))
