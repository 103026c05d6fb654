"""What the timing suites share (the rotated buffers that defeat the L2, the eager-timing rule) and
the copy's suite (a family's is its `bench` part): tmakit's kernels beside torch (and Triton) on
the same configuration, same run, same timer, every tmakit row verified in that run."""

from __future__ import annotations

import time
from dataclasses import replace

from .. import api
from ..api.copy import specialised_copy_
from ..check.inputs import make_input_tensor
from ..check.run import first_wrong_tile, signed_bits
from ..limits import POISON
from ..plan import CopyOptions, LoadPlan
from ..plan.copy_defaults import copy_tile
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


# `tmakit bench --kernel reduce` without --reduce (the core's flag, its default named in the help;
# the reduce family's bench reads it): torch's add_ on the float types, and min/max where TMA
# reduces them (fp16, bf16; not fp32).
DEFAULT_REDUCE_CASES = ("add:fp32,fp16,bf16", "min:fp16,bf16", "max:fp16,bf16")
