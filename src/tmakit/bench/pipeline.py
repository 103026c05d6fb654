"""The pipelined suite: ring variants (stages, consumer warps, persistent, prefetch; load-only,
row sums or a TMA store of each stage) on one configuration, each verified in the same run,
torch's (and Triton's) row sums beside them."""

from __future__ import annotations

from dataclasses import dataclass

from ..check.run import verify_copy, verify_pipelined_load
from ..config import describe_fields, parse_fields
from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT
from ..plan import CopyPlan, LoadPlan, PipelinePlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_copy, compile_pipelined_load, new_guard
from .baselines import triton_supports, triton_tma_rowsum_launches
from .report import BenchRow
from .suites import rotated_sources
from .timing import graph_samples_us


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
