"""The multicast family: a cluster's loads with TMA multicast against the same cluster without
(each CTA loading every whole tile itself)."""

from __future__ import annotations

from ..bench.report import BenchRow
from ..check.run import verify_multicast_load
from ..config import SEED
from ..plan import LoadPlan, MulticastPlan
from ..runtime.launch import compile_multicast_load
from . import Family, Options
from .load import CLUSTER_STAGES, load_plans, ring_rows

DEFAULT_CLUSTER = (1, 2)  # --kernel multicast without --cluster


def with_cluster(options: Options) -> Options:
    """The options with --cluster's default filled in (a copy: the caller's are left as given)."""
    return type(options)(**{**vars(options), "cluster": options.cluster or DEFAULT_CLUSTER})


def bench_multicast(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    return ring_rows(plan, with_cluster(options), l2_bytes)


def compared_with(options: Options) -> list[str]:
    columns, rows = options.cluster or DEFAULT_CLUSTER
    return [f"tmakit no-multicast {columns}x{rows} {max(options.stages or CLUSTER_STAGES, 2)}st"]


def multicast_plan(plan: LoadPlan) -> MulticastPlan:
    """The default cluster's multicast ring on `plan`."""
    return MulticastPlan(plan, DEFAULT_CLUSTER, True, CLUSTER_STAGES)


STUDIES = (
    Family(
        name="multicast",
        summary=f"a cluster's loads (--cluster, default {DEFAULT_CLUSTER[0]}x{DEFAULT_CLUSTER[1]}) with "
        "multicast against the same cluster without",
        plot_title="tmakit multicast loads vs the same cluster without",
        plans=lambda options: load_plans(with_cluster(options)),
        bench=bench_multicast,
        compared_with=compared_with,
        reads=frozenset({"cluster", "stages", "persistent_clusters"}),
        compile=lambda plan, keep_ptx=False: compile_multicast_load(multicast_plan(plan), keep_ptx=keep_ptx),
        example=lambda: LoadPlan(SEED),
        verify=lambda plan: verify_multicast_load(multicast_plan(plan)),
    ),
)
