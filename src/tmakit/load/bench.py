"""The load study: tile loads against torch's sum and copy_ (with --pipeline, the ring's variants:
stages, consumer warps, persistent, prefetch; load-only, row sums or a TMA store of each stage),
each tmakit row verified in the same run; and the demo's run of the seed's kernel (`LoadRun`).
--pipeline's rows are added to every load-shaped study (`families.ring_rows`, which reads
`pipeline_rows` and `check_pipelines` by name)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from ..bench.baselines import (
    torch_copy_launches,
    torch_sum_launches,
    triton_supports,
    triton_tma_copy_launches,
    triton_tma_rowsum_launches,
)
from ..bench.report import BenchRow
from ..bench.suites import rotated_sources
from ..bench.timing import graph_samples_us
from ..check.inputs import make_input_tensor
from ..check.reference import Verdict
from ..check.run import verify_copy
from ..config import SEED, describe_fields, parse_fields
from ..errors import TmaConfigError
from ..families import RING_OPTIONS, Family, Options, load_plans, ring_rows
from ..limits import DEFAULT_SM_COUNT
from ..plan import CopyPlan, LoadPlan, PipelinePlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_copy, new_guard
from .check import verify_pipelined_load, verify_tile_load
from .launch import compile_pipelined_load, compile_tile_load

# What the core reads by name (`registry.exporting`): --pipeline's rows, the demo's run.
__all__ = ["check_pipelines", "pipeline_rows", "run_load_on_gpu"]


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


@dataclass(frozen=True)
class PipelineVariant:
    """A pipelined kernel to time: `consumer` "none" (load-only) or "rowsum" (load + row sums)."""

    stages: int
    consumer_warps: int = 1
    persistent: bool = False
    consumer: str = "none"
    prefetch_tiles: int = 0
    prefetch_descriptor: bool = False

    def pipeline(self, load: LoadPlan, sm_count: int = DEFAULT_SM_COUNT) -> PipelinePlan:
        """The `PipelinePlan` this variant runs on `load`."""
        return PipelinePlan(
            load, self.stages, self.consumer_warps, self.persistent, sm_count,
            prefetch_tiles=self.prefetch_tiles, prefetch_descriptor=self.prefetch_descriptor,
        )  # fmt: skip

    @classmethod
    def parse(cls, text: str) -> PipelineVariant:
        """ "stages=4,consumer_warps=2,persistent,consumer=rowsum" -> a variant (`config.parse_fields`)."""
        fields = parse_fields(cls, text, "pipeline variant")
        if "stages" not in fields:
            raise TmaConfigError(f"pipeline variant {text!r} names no stages (e.g. stages=4)")
        return cls(**fields)

    def describe(self) -> str:
        return describe_fields(self)

    @property
    def name(self) -> str:
        grid = ", persistent" if self.persistent else ""
        what = {"rowsum": "load+rowsum", "copy": "copy"}.get(self.consumer, "load")
        prefetch = f", prefetch {self.prefetch_tiles}" if self.prefetch_tiles else ""
        prefetch += ", descriptor prefetch" if self.prefetch_descriptor else ""
        return f"tmakit {what} {self.stages}st x{self.consumer_warps}w{grid}{prefetch}"


def bench_pipelines(
    plan: LoadPlan, variants: list[PipelineVariant], l2_bytes: int, hot_l2: bool, samples: int
) -> list:
    """Pipelined variants on one configuration, each verified in the same run (store-back for
    load-only variants, torch's row sums for row-sum variants); torch's fp32 row sum beside them."""
    import torch

    config = plan.config
    tensor_bytes = plan.tensor_bytes
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    count = len(sources)
    guard = to_cute_tensor(new_guard())
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for variant in variants:
        pipeline = variant.pipeline(plan, sm_count)
        # Guarded: a schedule bug raises here instead of hanging the timing below.
        if variant.consumer == "copy":  # a TMA store of each stage (`CopyPlan`)
            verified = verify_copy(CopyPlan(pipeline), hang_guard=True)
            compiled = compile_copy(CopyPlan(pipeline))
        else:
            consumer = "store" if variant.consumer == "none" else variant.consumer
            verified = verify_pipelined_load(pipeline, consumer, hang_guard=True)
            compiled = compile_pipelined_load(pipeline, variant.consumer)
        make_out = {
            "rowsum": lambda s, p=pipeline: torch.zeros(p.rowsum_shape, dtype=torch.float32, device="cuda"),
            "copy": lambda s: torch.empty_like(s),  # a destination per source: the copy writes it
        }.get(variant.consumer, lambda s: s)
        outs = [make_out(s) for s in sources]
        pairs = [(to_cute_tensor(s), to_cute_tensor(o)) for s, o in zip(sources, outs, strict=True)]
        if variant.consumer == "rowsum":  # the kernel adds into its output: zeroing it is part of the time
            launches = [
                lambda p=p, o=o, c=compiled: (o.zero_(), c(p[0], p[1], guard, current_stream()))
                for p, o in zip(pairs, outs, strict=True)
            ]
        else:
            launches = [lambda p=p, c=compiled: c(p[0], p[1], guard, current_stream()) for p in pairs]
        rows.append(
            BenchRow(
                variant.name,
                "copy" if variant.consumer == "copy" else "load",
                tuple(config.shape),
                config.dtype,
                tensor_bytes,
                graph_samples_us(launches, samples),
                str(verified),
                compiled.compile_seconds,
                {
                    "stages": variant.stages,
                    "consumer_warps": variant.consumer_warps,
                    "persistent": variant.persistent,
                    "grid": pipeline.grid,
                    "rotated_buffers": count,
                },
            )  # fmt: skip
        )
    if any(v.consumer == "rowsum" for v in variants):
        baselines = {"torch row-sum fp32": [lambda s=s: s.sum(dim=-1, dtype=torch.float32) for s in sources]}
        if triton_supports(config):
            baselines["triton TMA row-sum fp32"] = triton_tma_rowsum_launches(sources)
        for name, launches in baselines.items():
            rows.append(
                BenchRow(
                    name,
                    "sum",
                    tuple(config.shape),
                    config.dtype,
                    tensor_bytes,
                    graph_samples_us(launches, samples),
                )  # fmt: skip
            )
    del sources, outs, pairs, launches  # every reference to the buffers, so the cache can free them
    torch.cuda.empty_cache()
    return rows


def pipeline_variants(options: Options) -> list[PipelineVariant]:
    """--pipeline's variants (stages=4 and stages=7 for a bare --prefetch), each beside itself
    with --prefetch's tile and descriptor prefetch."""
    variants = [PipelineVariant.parse(text) for text in options.pipeline or []]
    if options.prefetch and not variants:
        variants = [PipelineVariant(stages=4), PipelineVariant(stages=7)]
    if options.prefetch:
        variants += [
            replace(v, prefetch_tiles=options.prefetch, prefetch_descriptor=True)
            for v in variants
            if not v.prefetch_tiles
        ]
    return variants


def check_pipelines(plan: LoadPlan, options: Options) -> None:
    """Every ring --pipeline's variants run on `plan`, planned now (TmaConfigError for one that
    cannot be)."""
    for variant in pipeline_variants(options):
        variant.pipeline(plan)


def pipeline_rows(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    """--pipeline's variants on `plan` (none without --pipeline or --prefetch)."""
    if variants := pipeline_variants(options):
        return bench_pipelines(plan, variants, l2_bytes, options.hot_l2, options.samples)
    return []


def bench_load(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    rows = bench_size(plan, l2_bytes, options.hot_l2, options.samples)
    return rows + ring_rows(plan, options, l2_bytes)


STUDIES = (
    Family(
        name="load",
        summary="tile loads against torch's sum and copy_ (with --pipeline, the ring's variants)",
        plot_title="tmakit loads vs torch",
        plans=load_plans,
        bench=bench_load,
        compared_with=lambda options: ["torch copy_", "torch sum"],
        reads=RING_OPTIONS,
        compile=lambda plan, keep_ptx=False: compile_pipelined_load(
            PipelinePlan(plan), "store", keep_ptx=keep_ptx
        ),
        example=lambda: LoadPlan(SEED),
        verify=lambda plan: verify_pipelined_load(PipelinePlan(plan), "store"),
        baselines={"torch copy_": torch_copy_launches, "torch sum": torch_sum_launches},
    ),
)


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
