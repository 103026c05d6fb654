"""The load family: tile loads (and --pipeline's ring variants, --cluster's multicast loads) against
torch's sum and copy_."""

from __future__ import annotations

from dataclasses import replace

from ..bench import cluster, suites
from ..bench.baselines import torch_copy_launches, torch_sum_launches
from ..bench.pipeline import PipelineVariant, bench_pipelines
from ..bench.report import BenchRow
from ..check.run import verify_pipelined_load
from ..config import SEED, LoadConfig, dtype_named
from ..plan import LoadPlan, MulticastPlan, PipelinePlan
from ..runtime.launch import compile_pipelined_load, max_active_clusters
from . import Family, Options, bench_shapes

CLUSTER_STAGES = 4  # ring stages per CTA for --cluster without --stages
# What --pipeline and --cluster read: every load-shaped family times them beside its own rows.
RING_OPTIONS = frozenset({"pipeline", "prefetch", "cluster", "stages", "persistent_clusters", "ncu"})


def load_plans(options: Options, dtype: str | None = None) -> list[LoadPlan]:
    """A `LoadPlan` of each shape (--shape, --sizes) of `dtype` (default --dtype), with every
    pipeline variant and cluster plan the run will build on it checked now."""
    element = dtype_named(dtype or options.dtype)
    shapes = bench_shapes(options, element.nbytes)
    plans = [LoadPlan(LoadConfig(shape, element.name, options.tile, options.swizzle)) for shape in shapes]
    for plan in plans:
        for variant in pipeline_variants(options):
            variant.pipeline(plan)
        for multicast in (True, False) if options.cluster else ():
            walk = options.persistent_clusters if isinstance(options.persistent_clusters, int) else None
            MulticastPlan(plan, options.cluster, multicast, cluster_stages(options), walk)
    return plans


def cluster_stages(options: Options) -> int:
    return options.stages or CLUSTER_STAGES


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


def ring_rows(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    """--pipeline's variants and --cluster's multicast loads on `plan`."""
    rows = []
    if variants := pipeline_variants(options):
        rows += bench_pipelines(plan, variants, l2_bytes, options.hot_l2, options.samples)
    if options.cluster:
        walk = options.persistent_clusters
        if walk == "auto":
            walk = max_active_clusters(options.cluster[0] * options.cluster[1])
        stages = cluster_stages(options)
        rows += cluster.bench_multicast(
            plan, options.cluster, stages, l2_bytes, options.hot_l2, options.samples, walk
        )
    return rows


def bench_load(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    rows = suites.bench_size(plan, l2_bytes, options.hot_l2, options.samples)
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
