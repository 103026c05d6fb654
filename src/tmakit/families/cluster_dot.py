"""The cluster dot family: out[b, m] = sum_k A[b, m, k] * X[m, k], the CTAs of a cluster sharing
each X tile. With multicast against without (the same kernel and launch, each CTA loading X
itself), one cluster per strip and persistent clusters (as many as the GPU keeps resident), beside
torch's expressions (`baselines.TORCH_DOTS`, each this torch has). Its study is fixed (`PARTS`);
the JSON it writes is the cluster-dot study (each part's speedups over the fastest torch row)."""

from __future__ import annotations

from operator import itemgetter
from typing import NamedTuple

from ..bench.baselines import TORCH_DOTS
from ..bench.cluster import bench_cluster_dot
from ..bench.report import BenchRow
from ..check.run import verify_cluster_dot
from ..plan import ClusterDotPlan
from ..runtime.launch import compile_cluster_dot, max_active_clusters
from . import Family, Options, chosen

SEED_COLS = 1792  # the seed's K
STAGES = 4


class DotPart(NamedTuple):
    """One part of the study: a name, the plan and whether it is timed with the L2 warm."""

    name: str
    dot: ClusterDotPlan
    hot_l2: bool


# (part, A's shape, cluster, L2 hot). L2 hot: A + X in 37.8 MB (fp16), inside the H200's 60 MB L2
# (the seed's 8448 rows would need 87-144 MB), 132 CTAs either way; L2 cold: a larger X
# (256 MiB, A 1 GiB) rotated past the L2.
PARTS = (
    ("hot-1x2", (4, 2112, SEED_COLS), (1, 2), True),
    ("hot-2x2", (4, 2112, SEED_COLS), (2, 2), True),
    ("cold-1x2", (4, 32768, 4096), (1, 2), False),
    ("cold-2x2", (4, 32768, 4096), (2, 2), False),
)


def dot_parts(options: Options) -> list[DotPart]:
    """The study's parts --only chooses, each planned now."""
    return [
        DotPart(name, ClusterDotPlan(shape, cluster=cluster, stages=STAGES), hot_l2)
        for name, shape, cluster, hot_l2 in chosen(options, PARTS, itemgetter(0))
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


def study(results: list[tuple[DotPart, list[BenchRow]]], context: dict) -> dict:
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
        "context": {**context, "stages": STAGES},
        "rows": rows,
        "summary": {
            "parts": {part.name: part_summary(part, part_rows) for part, part_rows in results},
            "speedup": "ratios > 1: the named row is faster",
        },
    }


STUDIES = (
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
        study=study,
    ),
)
