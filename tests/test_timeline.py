"""The multicast timeline lab (benchmarks/timeline/, outside tmakit; conftest puts benchmarks/ on
the path): the instrumented ring's stamps and the ring on CUTLASS's PipelineTmaAsync compiled on the
CPU, the stamps' summary of synthetic stamps, and on the GPU the comparison ring delivering every
tile."""

import numpy as np
import pytest
from timeline.kernels import PIPELINE_TMA_ASYNC, compile_cluster_ring
from timeline.layout import STEP_EVENTS, TimelineLayout
from timeline.study import summarise

from cluster_checks import (
    GPU_CLUSTER_SHAPES,
    assert_empty_barriers_count_every_cta,
    assert_exits_by_draining,
    assert_lane_per_peer_release,
    splitting,
)
from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.cluster.plan import MulticastPlan


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
@pytest.mark.parametrize("multicast", [True, False])
def test_timeline_stamps_only_when_asked(cluster, multicast):
    """The instrumented ring reads %globaltimer and %clock64 and stores them (the load-only ring
    stores nothing else); tmakit's ring has no clock read and no global store at all."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, multicast, stages=4)
    off = compile_cluster_ring(plan, store=False, keep_ptx=True).ptx
    assert "globaltimer" not in off and "clock64" not in off and "st.global" not in off
    on = compile_cluster_ring(plan, store=False, timeline=True, keep_ptx=True).ptx
    # start, ready, 3 producer + 3 consumer stamps per step (the loop body once), done, exit
    assert on.count("%globaltimer") == on.count("%clock64") == 2 + 6 + 2
    assert "%smid" in on and "st.global.b64" in on
    layout = TimelineLayout.of(plan)
    assert layout.shape == (2, plan.grid, 3 + 4 + 6 * 7) and layout.steps == plan.most_steps


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
@pytest.mark.parametrize("persistent_clusters", [None, 32])
def test_pipeline_tma_async_ring_exits_by_draining_too(cluster, persistent_clusters):
    """CUTLASS's ring, as tmakit's (`test_multicast`): one relaxed cluster barrier, the producer's
    tail drains the ring instead of a second one."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, stages=4, persistent_clusters=persistent_clusters)
    ptx = compile_cluster_ring(plan, PIPELINE_TMA_ASYNC, store=False, keep_ptx=True).ptx
    assert_exits_by_draining(ptx, plan.stages)


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2), (2, 4), (8, 1), (3, 1), (2, 3)])
def test_pipeline_tma_async_releases_a_lane_per_peer(cluster):
    """PipelineTmaAsync's consumer release is tmakit's "lanes": lane i arrives on CTA i."""
    plan = MulticastPlan(LoadPlan(splitting(cluster)), cluster, stages=4)
    ptx = compile_cluster_ring(plan, PIPELINE_TMA_ASYNC, store=False, keep_ptx=True).ptx
    assert_lane_per_peer_release(ptx)
    assert_empty_barriers_count_every_cta(ptx, plan)


def test_the_lab_rings_take_stages():
    with pytest.raises(ValueError, match="stages > 1"):
        compile_cluster_ring(MulticastPlan(LoadPlan(SEED), (1, 2)), PIPELINE_TMA_ASYNC)


def synthetic_stamps(layout, steps, skew: int):
    """Stamps of `layout`'s CTAs, 100 ns between CTA events and 50 between step events, CTA i
    running `steps[i]` steps and starting `skew` ns later when it is the second of its cluster."""
    stamps = np.zeros(layout.shape, np.int64)
    for cta, count in enumerate(steps):
        now = 1000 + skew * (cta % 2)
        stamps[:, cta, layout.identity_word("smid")] = cta
        for event in ("start", "ready"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
        for step in range(count):
            for event in STEP_EVENTS:
                stamps[:, cta, layout.step_word(event, step)] = now
                now += 50
        for event in ("done", "exit"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
    return stamps


def test_timeline_summary_of_synthetic_stamps():
    layout = TimelineLayout(ctas=4, steps=5)
    stamps = synthetic_stamps(layout, [5] * 4, skew=10)  # the second CTA of each cluster 10 ns later
    summary = summarise(layout, stamps, cluster_size=2, stages=2)
    assert summary["start_skew_in_cluster_ns"]["median"] == 10
    assert summary["per_step"][0]["producer_wait_ns"]["median"] == 50
    assert summary["per_step"][0]["fill_after_own_issue_ns"]["median"] == 100
    assert summary["per_step"][0]["issue_spread_in_cluster_ns"]["median"] == 10
    assert summary["intra_cta_cycles"]["issue_to_next_issue"]["median"] == 300
    assert summary["sms_used"] == 4


def test_timeline_summary_leaves_out_steps_a_persistent_cta_never_ran():
    """Cluster 1 of a persistent walk ran 3 of 5 steps: its last two step records stay zero and
    must not enter any interval."""
    layout = TimelineLayout(ctas=4, steps=5)
    steps = np.array([5, 5, 3, 3])
    stamps = synthetic_stamps(layout, steps, skew=0)
    summary = summarise(layout, stamps, cluster_size=2, stages=2, steps=steps)
    # Unmasked, cluster 1's zero words would give waits of 0 ns and a negative reuse time.
    assert summary["per_step"][4]["producer_wait_ns"]["p10"] == 50  # cluster 0 only
    assert summary["per_step"][2]["consumer_wait_ns"]["p10"] == 50  # both clusters
    assert summary["totals_per_cta_ns"]["producer_wait"]["p10"] == 150  # 3 steps x 50 ns
    assert 0 < summary["stage_reuse_after_last_release_ns"]["p10"] < 1000
    # A CTA ends at its consumer's last release or its producer's exit, whichever is later.
    assert summary["cta_phases_ns"]["after the last tile (landed->end)"]["max"] == 200
    assert summary["cta_phases_ns"]["lifetime (start->end)"]["p10"] == 200 + 3 * 300 + 100
    unmasked = summarise(layout, stamps, cluster_size=2, stages=2)
    assert unmasked["per_step"][4]["producer_wait_ns"]["p10"] != 50


def verify_pipeline_tma_async(plan: MulticastPlan) -> None:
    """The comparison ring stores what each CTA received: every CTA's copy of every tile."""
    from tmakit.cluster.check import verify_multicast_kernel

    verdicts = verify_multicast_kernel(plan, compile_cluster_ring(plan, PIPELINE_TMA_ASYNC))
    for rank, verdict in enumerate(verdicts):
        assert verdict.ok, f"CTA {rank} of the cluster: {verdict}"


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", GPU_CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config, stages",
    [(LoadConfig((512, 8192)), 4), (LoadConfig((1000, 3000), "bf16", (64, 64), 128), 3)],
    ids=["32-tiles-4st", "partial-swizzled-47-tiles-3st"],
)
def test_pipeline_tma_async_delivers_every_tile(config, stages, cluster):
    """The ring as CUTLASS's PipelineTmaAsync writes it, with many stage reuses."""
    verify_pipeline_tma_async(MulticastPlan(LoadPlan(config), cluster, stages=stages))


@pytest.mark.gpu
@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", GPU_CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config, stages, clusters",
    [(SEED, 4, 32), (LoadConfig((1000, 3000), "bf16", (64, 64), 128), 3, 5)],
    ids=["seed-32-clusters-4st", "partial-swizzled-5-clusters-3st"],
)
def test_pipeline_tma_async_persistent_clusters_deliver_every_tile(
    config, stages, clusters, cluster, multicast
):
    """Persistent clusters: each CTA's ring runs on across strips; the producer's tail drains it."""
    verify_pipeline_tma_async(
        MulticastPlan(LoadPlan(config), cluster, multicast, stages=stages, persistent_clusters=clusters)
    )


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config, cluster, stages, clusters",
    [(SEED, (1, 8), 4, 32), (LoadConfig((1000, 3000), "fp16", (64, 32), 64), (2, 4), 3, 5)],
    ids=["seed-1x8-32-clusters", "swizzle64-2x4-512-byte-slices-5-clusters"],
)
def test_pipeline_tma_async_larger_clusters(config, cluster, stages, clusters):
    """Clusters of 8 CTAs, slices of exactly the 64B swizzle's repeat (512 bytes)."""
    verify_pipeline_tma_async(
        MulticastPlan(LoadPlan(config), cluster, stages=stages, persistent_clusters=clusters)
    )
