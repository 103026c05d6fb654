"""The cluster family's studies, every tmakit row verified in the same run:

- multicast: a cluster's loads with TMA multicast against the same cluster without (each CTA
  loading every whole tile itself); its rows are --cluster's in every load-shaped study
  (`families.ring_rows`, which reads `cluster_rows` and `check_clusters` by name);
- cluster-dot: out[b, m] = sum_k A[b, m, k] * X[m, k], the CTAs of a cluster sharing each X tile.
  With multicast against without (the same kernel and launch, each CTA loading X itself), one
  cluster per strip and persistent clusters (as many as the GPU keeps resident), beside torch's
  expressions (`baselines.TORCH_DOTS`, each this torch has). Its study is fixed (`DOT_PARTS`); the
  JSON it writes is the cluster-dot study (each part's speedups over the fastest torch row).
"""

from __future__ import annotations

from dataclasses import replace
from operator import itemgetter
from typing import NamedTuple

from ..bench.baselines import TORCH_DOTS
from ..bench.report import BenchRow
from ..bench.suites import rotated_sources, rotation_buffers
from ..bench.timing import graph_samples_us, interleaved_graph_samples_us
from ..config import SEED
from ..families import CLUSTER_STAGES, Family, Options, chosen, load_plans
from ..plan import LoadPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import max_active_clusters
from .check import compare_dot, make_dot_inputs, run_cluster_dot, verify_cluster_dot, verify_multicast_load
from .launch import compile_cluster_dot, compile_multicast_load
from .plan import ClusterDotPlan, MulticastPlan

# What the core reads by name (`registry.exporting`): --cluster's rows in the load-shaped studies.
__all__ = ["check_clusters", "cluster_rows"]


def bench_multicast(
    plan: LoadPlan,
    cluster: tuple[int, int],
    stages: int,
    l2_bytes: int,
    hot_l2: bool,
    samples: int,
    persistent_clusters: int | None = None,
) -> list[BenchRow]:
    """The cluster kernel's loads alone (ring of `stages` per CTA, consumers only wait and
    release), with multicast and without (each CTA loading every whole tile itself), each first
    verified with its store-back in the same run, then timed interleaved
    (`interleaved_graph_samples_us`: the differences are a few percent). Every CTA of a cluster
    receives the whole strip, so SMs receive cluster-size x the tensor either way; multicast
    reads it from L2 once. With `persistent_clusters`, both again with that many resident
    clusters walking the tiles."""
    import torch

    config = plan.config
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    walks = (None,) if persistent_clusters is None else (None, persistent_clusters)
    scratch = {}
    launches, found = {}, {}
    for walk, multicast in [(walk, multicast) for walk in walks for multicast in (True, False)]:
        cluster_plan = MulticastPlan(plan, cluster, multicast, max(stages, 2), walk)
        verdicts = verify_multicast_load(cluster_plan)
        compiled = compile_multicast_load(cluster_plan, store=False)
        # Never written (the load-only kernel); one per cluster size.
        copies = scratch.setdefault(
            cluster_plan.copies_shape,
            torch.empty(cluster_plan.copies_shape, dtype=sources[0].dtype, device="cuda"),
        )
        pairs = [(to_cute_tensor(s), to_cute_tensor(copies)) for s in sources]
        what = "multicast" if multicast else "no-multicast"
        name = f"tmakit {what} {cluster[0]}x{cluster[1]} {cluster_plan.stages}st"
        name += "" if walk is None else f" {cluster_plan.clusters} persistent clusters"
        launches[name] = [lambda p=p, c=compiled: c(p[0], p[1], current_stream()) for p in pairs]
        found[name] = (cluster_plan, walk, verdicts, compiled.compile_seconds)
    timed = interleaved_graph_samples_us(launches, samples)
    rows = []
    for name, (cluster_plan, walk, verdicts, compile_seconds) in found.items():
        ok = sum(v.ok for v in verdicts)
        rows.append(
            BenchRow(
                name,
                "load",
                tuple(config.shape),
                config.dtype,
                plan.tensor_bytes,
                timed[name],
                f"{ok}/{len(verdicts)} CTAs of the cluster hold every tile ({verdicts[0]})",
                compile_seconds,
                {
                    "cluster": list(cluster),
                    "stages": cluster_plan.stages,
                    "persistent_clusters": walk,
                    "multicast": cluster_plan.multicast,
                    "bytes_to_sms": cluster_plan.cluster_size * plan.tensor_bytes,
                    "rotated_buffers": len(sources),
                    "timed": "interleaved with the other cluster rows",
                },
            )  # fmt: skip
        )
    del sources, scratch, launches
    torch.cuda.empty_cache()
    return rows


# How far torch's dot expressions may be from the fp32 sum (relative to sum |a * x|), by how they
# round (`baselines.TORCH_DOTS`): a result or products rounded to the input type are off by up to
# its unit roundoff (2^-11 for fp16, 2^-8 for bf16; 4x that here); cuBLAS's fp32 accumulation
# may add in a different order and with tensor-core rounding.
TORCH_DOT_TOLERANCE = {
    "fp32": {"fp16": 1e-4, "bf16": 1e-4},
    "output": {"fp16": 2.0**-9, "bf16": 2.0**-6},
    "products": {"fp16": 2.0**-9, "bf16": 2.0**-6},
}


def bench_cluster_dot(
    dot: ClusterDotPlan,
    l2_bytes: int,
    hot_l2: bool,
    samples: int,
    persistent_clusters: int | None = None,
    torch_baselines: bool = True,
) -> list[BenchRow]:
    """The cluster row dot with multicast and without (the same kernel, cluster and launch; each
    CTA then loads the whole X tile itself), both one cluster per strip and, with
    `persistent_clusters`, that many resident clusters; beside torch's expressions
    (`baselines.TORCH_DOTS`, each one this torch has). Every row verified first on the same
    inputs (every out[b, m]); GB/s counts A and X read once. `dot`'s own `multicast` and
    `persistent_clusters` are replaced by each variant's."""
    import torch

    count = rotation_buffers(dot.input_bytes, l2_bytes, hot_l2)
    a, x = make_dot_inputs(dot)
    operands = [(a, x)] + [(a.clone(), x.clone()) for _ in range(count - 1)]  # own memory each
    out = torch.empty(dot.out_shape, dtype=torch.float32, device="cuda")
    cute_out = to_cute_tensor(out)
    cute_operands = [(to_cute_tensor(a_), to_cute_tensor(x_)) for a_, x_ in operands]
    row = lambda name, samples_us, verified, compile_seconds=None, **notes: BenchRow(  # noqa: E731
        name, "load", dot.shape, dot.dtype, dot.input_bytes, samples_us, verified, compile_seconds,
        {"rotated_buffers": count, "hot_l2": hot_l2, "tile": list(dot.tile), **notes},
    )  # fmt: skip
    rows = []
    walks = (None,) if persistent_clusters is None else (None, persistent_clusters)
    launches, found = {}, {}
    for walk, multicast in [(walk, multicast) for walk in walks for multicast in (True, False)]:
        variant = replace(dot, multicast=multicast, persistent_clusters=walk)
        verdict = compare_dot(variant, a, x, run_cluster_dot(variant, a, x))
        compiled = compile_cluster_dot(variant)
        what = "multicast" if multicast else "no-multicast"
        name = f"tmakit cluster dot {what} {dot.cluster[0]}x{dot.cluster[1]} {dot.stages}st"
        name += "" if walk is None else f" {variant.clusters} persistent clusters"
        launches[name] = [
            lambda p=p, c=compiled, o=cute_out: c(p[0], p[1], o, current_stream()) for p in cute_operands
        ]
        found[name] = (variant, walk, multicast, verdict, compiled)
    timed = interleaved_graph_samples_us(launches, samples)  # the variants differ by a few percent
    for name, (variant, walk, multicast, verdict, compiled) in found.items():
        rows.append(
            row(
                name,
                timed[name],
                verdict,
                compiled.compile_seconds,
                cluster=list(dot.cluster),
                stages=dot.stages,
                consumer_warps=dot.consumer_warps,
                persistent_clusters=walk,
                clusters=variant.clusters,
                multicast=multicast,
                l2_read_bytes=variant.l2_read_bytes,
            )
        )
    for name, (function, rounding) in (TORCH_DOTS if torch_baselines else {}).items():
        try:
            result = function(a, x)
        except (TypeError, RuntimeError) as error:  # an expression this torch lacks
            print(f"{name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
            continue
        verdict = compare_dot(dot, a, x, result, TORCH_DOT_TOLERANCE[rounding][dot.dtype])
        launches = [lambda a_=a_, x_=x_, f=function: f(a_, x_) for a_, x_ in operands]
        rows.append(row(name, graph_samples_us(launches, samples), verdict, rounding=rounding))
    del operands, cute_operands, out, cute_out, a, x
    torch.cuda.empty_cache()
    return rows


# -- --cluster's rows, in every load-shaped study ------------------------------------------------
def cluster_stages(options: Options) -> int:
    return options.stages or CLUSTER_STAGES


def check_clusters(plan: LoadPlan, options: Options) -> None:
    """Every cluster ring --cluster runs on `plan` (with multicast and without), planned now
    (TmaConfigError for one that cannot be)."""
    for multicast in (True, False) if options.cluster else ():
        walk = options.persistent_clusters if isinstance(options.persistent_clusters, int) else None
        MulticastPlan(plan, options.cluster, multicast, cluster_stages(options), walk)


def cluster_rows(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    """--cluster's multicast loads on `plan` (none without --cluster); --persistent-clusters auto:
    as many clusters as the GPU keeps resident."""
    if not options.cluster:
        return []
    walk = options.persistent_clusters
    if walk == "auto":
        walk = max_active_clusters(options.cluster[0] * options.cluster[1])
    stages = cluster_stages(options)
    return bench_multicast(plan, options.cluster, stages, l2_bytes, options.hot_l2, options.samples, walk)


# -- the multicast study ---------------------------------------------------------------------------
DEFAULT_CLUSTER = (1, 2)  # --kernel multicast without --cluster


def with_cluster(options: Options) -> Options:
    """The options with --cluster's default filled in (a copy: the caller's are left as given)."""
    return type(options)(**{**vars(options), "cluster": options.cluster or DEFAULT_CLUSTER})


def bench_cluster_loads(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    return cluster_rows(plan, with_cluster(options), l2_bytes)


def multicast_compared_with(options: Options) -> list[str]:
    columns, rows = options.cluster or DEFAULT_CLUSTER
    return [f"tmakit no-multicast {columns}x{rows} {max(options.stages or CLUSTER_STAGES, 2)}st"]


def multicast_plan(plan: LoadPlan) -> MulticastPlan:
    """The default cluster's multicast ring on `plan`."""
    return MulticastPlan(plan, DEFAULT_CLUSTER, True, CLUSTER_STAGES)


# -- the cluster-dot study -------------------------------------------------------------------------
SEED_COLS = 1792  # the seed's K
DOT_STAGES = 4


class DotPart(NamedTuple):
    """One part of the study: a name, the plan and whether it is timed with the L2 warm."""

    name: str
    dot: ClusterDotPlan
    hot_l2: bool


# (part, A's shape, cluster, L2 hot). L2 hot: A + X in 37.8 MB (fp16), inside the H200's 60 MB L2
# (the seed's 8448 rows would need 87-144 MB), 132 CTAs either way; L2 cold: a larger X
# (256 MiB, A 1 GiB) rotated past the L2.
DOT_PARTS = (
    ("hot-1x2", (4, 2112, SEED_COLS), (1, 2), True),
    ("hot-2x2", (4, 2112, SEED_COLS), (2, 2), True),
    ("cold-1x2", (4, 32768, 4096), (1, 2), False),
    ("cold-2x2", (4, 32768, 4096), (2, 2), False),
)


def dot_parts(options: Options) -> list[DotPart]:
    """The study's parts --only chooses, each planned now."""
    return [
        DotPart(name, ClusterDotPlan(shape, cluster=cluster, stages=DOT_STAGES), hot_l2)
        for name, shape, cluster, hot_l2 in chosen(options, DOT_PARTS, itemgetter(0))
    ]


def bench_part(part: DotPart, options: Options, l2_bytes: int) -> list[BenchRow]:
    resident = max_active_clusters(part.dot.cluster_size)
    return bench_cluster_dot(part.dot, l2_bytes, part.hot_l2, options.samples, resident)


def part_summary(part: DotPart, rows: list[BenchRow]) -> dict:
    """A part's shape and cluster, its resident clusters, and the speedups: multicast over
    no-multicast, each tmakit row over the fastest torch row."""
    medians = {row.kernel: row.median_us for row in rows}
    tmakit = {k: v for k, v in medians.items() if k.startswith("tmakit")}
    torch_rows = {k: v for k, v in medians.items() if k.startswith("torch")}
    fastest_torch = min(torch_rows, key=torch_rows.get) if torch_rows else None
    walks = [row.notes["persistent_clusters"] for row in rows if row.notes.get("persistent_clusters")]
    return {
        "shape": list(part.dot.shape),
        "cluster": list(part.dot.cluster),
        "hot_l2": part.hot_l2,
        "persistent_clusters_auto": max(walks, default=None),
        "fastest_torch": fastest_torch,
        "multicast_speedup": {
            k: tmakit[k.replace(" multicast ", " no-multicast ")] / v
            for k, v in tmakit.items()
            if " multicast " in k and k.replace(" multicast ", " no-multicast ") in tmakit
        },
        "over_fastest_torch": {k: torch_rows[fastest_torch] / v for k, v in tmakit.items()}
        if fastest_torch
        else {},
    }


def dot_study(results: list[tuple[DotPart, list[BenchRow]]], context: dict) -> dict:
    peak = context.get("peak_bandwidth")
    rows = [
        {"part": part.name, **row.summary(peak), "samples_us": row.samples_us}
        for part, part_rows in results
        for row in part_rows
    ]
    return {
        "study": "cluster-dot",
        "what": "out[b, m] = sum_k A[b, m, k] * X[m, k] (fp16 in, fp32 sums): tmakit's cluster dot, X "
        "multicast to the cluster against each CTA loading X itself (same kernel and launch), one "
        "cluster per strip and persistent ('auto': the driver's resident clusters), beside torch's "
        "expressions; every row verified first; CUDA-graph replay medians; GB/s of A + X",
        "context": {**context, "stages": DOT_STAGES},
        "rows": rows,
        "summary": {
            "parts": {part.name: part_summary(part, part_rows) for part, part_rows in results},
            "speedup": "ratios > 1: the named row is faster",
        },
    }


STUDIES = (
    Family(
        name="multicast",
        summary=f"a cluster's loads (--cluster, default {DEFAULT_CLUSTER[0]}x{DEFAULT_CLUSTER[1]}) with "
        "multicast against the same cluster without",
        plot_title="tmakit multicast loads vs the same cluster without",
        plans=lambda options: load_plans(with_cluster(options)),
        bench=bench_cluster_loads,
        compared_with=multicast_compared_with,
        reads=frozenset({"cluster", "stages", "persistent_clusters"}),
        compile=lambda plan, keep_ptx=False: compile_multicast_load(multicast_plan(plan), keep_ptx=keep_ptx),
        example=lambda: LoadPlan(SEED),
        verify=lambda plan: verify_multicast_load(multicast_plan(plan)),
    ),
    Family(
        name="cluster-dot",
        summary="the cluster row dot (X multicast to the cluster) against torch's dot expressions, "
        "on its study's parts (see --only)",
        plot_title="tmakit's cluster dot vs torch",
        plans=dot_parts,
        bench=bench_part,
        compared_with=lambda options: list(TORCH_DOTS),
        reads=frozenset({"only"}),
        compile=lambda part, keep_ptx=False: compile_cluster_dot(part.dot, keep_ptx=keep_ptx),
        example=lambda: DotPart("example", ClusterDotPlan((2, 128, SEED_COLS), cluster=(1, 2)), True),
        verify=lambda part: verify_cluster_dot(part.dot),
        baselines={name: function for name, (function, _) in TORCH_DOTS.items()},
        study=dot_study,
    ),
)
