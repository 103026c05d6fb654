"""The copy studies: `tmakit.copy_` as a user calls it against torch's copy_, row-major to
row-major (copy) and from a column-major source into a row-major destination (transpose), each
option verified element for element in the same run."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ..bench.baselines import torch_copy_launches
from ..bench.report import BenchRow
from ..bench.suites import STREAM_TIMED, STREAM_TIMED_BYTES, rotated_sources
from ..bench.timing import graph_samples_us, stream_samples_us
from ..check.run import first_wrong_tile, signed_bits, verify_copy
from ..config import SEED
from ..families import RING_OPTIONS, Family, Options, copy_options, load_plans, ring_rows, torch_rows
from ..limits import POISON
from ..plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan
from ..plan.copy_defaults import copy_tile
from ..runtime.launch import compile_copy
from .api import copy_, specialised_copy_

SPECIALISED_LABEL = ", shape-specialised"  # a bench row of the kernel compiled for the exact shape


def copy_plans(options: Options) -> list[LoadPlan]:
    copy_options(options)  # checked now
    return load_plans(options)


def copy_bench(transpose: bool):
    def bench(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
        rows = bench_copy(
            plan, transpose, copy_options(options), l2_bytes, options.hot_l2, options.samples,
            options.specialised,
        )  # fmt: skip
        return rows + ring_rows(plan, options, l2_bytes)

    return bench


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
    also through the kernel compiled for this exact shape (`copies.api.specialised_copy_`)
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
        call = specialised_copy_ if shape_specialised else copy_
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
