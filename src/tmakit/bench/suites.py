"""The timing suites of loads (a family's is its `bench` part) and what the suites share (rotated
buffers, the eager rows): tmakit's kernels beside torch (and Triton) on the same configuration,
same run, same timer, every tmakit row verified in that run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..check.inputs import make_input_tensor
from ..check.reference import Verdict
from ..check.run import verify_tile_load
from ..plan import LoadPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_tile_load
from .baselines import (
    torch_copy_launches,
    torch_sum_launches,
    triton_supports,
    triton_tma_copy_launches,
)
from .report import BenchRow
from .timing import graph_samples_us


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
STREAM_TIMED = "[stream]"


# `tmakit bench --kernel reduce` without --reduce (the core's flag, its default named in the help;
# the reduce family's bench reads it): torch's add_ on the float types, and min/max where TMA
# reduces them (fp16, bf16; not fp32).
DEFAULT_REDUCE_CASES = ("add:fp32,fp16,bf16", "min:fp16,bf16", "max:fp16,bf16")


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
