"""Multicast on the CPU: the plan's slices and the compiled PTX for every cluster shape."""

import re
from dataclasses import replace

import pytest

from tmakit import SEED, LoadConfig, LoadPlan, TmaConfigError
from tmakit.plan import CLUSTER_SHAPES, MulticastPlan
from tmakit.ptx import expect_tx_byte_counts, find_instructions
from tmakit.runtime.launch import compile_multicast_load


@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
def test_each_cta_issues_its_slice_and_expects_the_whole_tile(cluster):
    multicast = MulticastPlan(LoadPlan(SEED), cluster)
    size = cluster[0] * cluster[1]
    assert multicast.grid == 132 * size
    assert multicast.multicast_mask == (1 << size) - 1
    slices = [multicast.slice_of(rank) for rank in range(size)]
    assert slices[0][0] == 0 and slices[-1][1] == 64
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:], strict=False))
    assert multicast.issued_bytes_per_cta * size == 32768
    ptx = compile_multicast_load(multicast, keep_ptx=True).ptx
    copy = find_instructions(ptx)["cp.async.bulk.tensor"].opcode
    assert "multicast::cluster" in copy and "shared::cluster" in copy
    assert expect_tx_byte_counts(ptx) == [32768]  # every CTA's barrier expects the whole tile
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx


def test_baseline_loads_the_whole_tile_without_multicast():
    baseline = MulticastPlan(LoadPlan(SEED), (2, 2), multicast=False)
    assert baseline.slice_of(3) == (0, 64) and baseline.issued_bytes_per_cta == 32768
    copy = find_instructions(compile_multicast_load(baseline, keep_ptx=True).ptx)[
        "cp.async.bulk.tensor"
    ].opcode
    assert "multicast" not in copy
    assert "every CTA loads the whole tile itself" in baseline.summary()


def test_bad_clusters_are_refused():
    with pytest.raises(TmaConfigError, match="cluster 3x1 is not one of 1x2, 2x1, 2x2, 1x4"):
        MulticastPlan(LoadPlan(SEED), (3, 1))
    with pytest.raises(TmaConfigError, match="tile rows 2 do not split into 4 equal slices"):
        MulticastPlan(LoadPlan(LoadConfig((64, 256), "fp16", (2, 256))), (1, 4))


def test_launch_grid_is_tiled_by_every_cluster_shape():
    for cluster in CLUSTER_SHAPES:
        grid = MulticastPlan(LoadPlan(SEED), cluster).launch_grid
        assert grid[0] % cluster[0] == 0 and grid[1] % cluster[1] == 0
        assert grid[0] * grid[1] == 132 * cluster[0] * cluster[1]


def test_column_major_and_misaligned_slices_are_refused():
    with pytest.raises(TmaConfigError, match="row-major 2-D tensors"):
        MulticastPlan(LoadPlan(LoadConfig((512, 512), "fp16", (64, 64), 128, "col")), (2, 2))
    with pytest.raises(TmaConfigError, match="slice is 16 bytes; its shared destination must stay 128-byte"):
        MulticastPlan(LoadPlan(LoadConfig((64, 64), "fp32", (4, 4))), (1, 4))


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
def test_pipelined_multicast_frees_a_stage_in_every_cta(cluster):
    """The ring's release arrives on the empty barrier of every CTA (the default protocol,
    "lanes": lane i maps CTA i's barrier and arrives at CTA scope), and each empty barrier expects
    every CTA's consumer warp."""

    multicast = MulticastPlan(LoadPlan(SEED), cluster, stages=4)
    ptx = compile_multicast_load(multicast, keep_ptx=True).ptx
    size = multicast.cluster_size
    assert ptx.count("multicast::cluster") == 1
    assert ptx.count("mapa") == 1 and "%laneid" in ptx
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx)) == 1
    assert "mbarrier.arrive.release.cluster" not in ptx  # cluster scope cost 3x at 2x2 on the H200
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    assert f"empty barrier: {size} arrival(s)" in multicast.summary()
    baseline = compile_multicast_load(
        MulticastPlan(LoadPlan(SEED), cluster, False, stages=4), keep_ptx=True
    ).ptx
    assert "mapa" not in baseline and "multicast::cluster" not in baseline


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
@pytest.mark.parametrize("persistent_clusters", [None, 32])
def test_multicast_ring_exits_by_draining_not_by_a_cluster_barrier(cluster, persistent_clusters):
    """One relaxed cluster barrier publishes the barriers' initialisation (the fence releases it);
    at the end the producer drains the ring instead of a second cluster barrier, whose arrive
    would release (wait for) every memory operation of the CTA. Without multicast nothing remote
    targets a CTA: no cluster barrier at all."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, stages=4, persistent_clusters=persistent_clusters)
    for release in ("lanes", "pipeline-tma-async"):
        ptx = compile_multicast_load(plan, keep_ptx=True, store=False, release=release).ptx
        arrives = re.findall(r"barrier\.cluster\.arrive[.a-z]*;", ptx)
        assert arrives == ["barrier.cluster.arrive.relaxed;"] and ptx.count("barrier.cluster.wait") == 1
        assert "fence.mbarrier_init.release.cluster" in ptx and "membar" not in ptx
        assert ptx.count("prefetch.tensormap") == 1  # fetched while the barriers are set up
        # the loop's acquire and wait, and the drain's acquire of each stage (unrolled)
        assert ptx.count("mbarrier.try_wait.parity") == 2 + plan.stages
    baseline = replace(plan, multicast=False)
    ptx = compile_multicast_load(baseline, keep_ptx=True, store=False).ptx
    assert "barrier.cluster" not in ptx and ptx.count("mbarrier.try_wait.parity") == 2


@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize("clusters", [1, 7, 32, 33, 132, 500])
def test_persistent_clusters_walk_every_tile_once(cluster, clusters):
    plan = MulticastPlan(LoadPlan(SEED), cluster, stages=4, persistent_clusters=clusters)
    walk, launched = plan.walk, min(clusters, 132 * 7)
    assert plan.clusters == launched and plan.grid == launched * plan.cluster_size
    assert plan.launch_grid == (launched * cluster[0], cluster[1], 1)
    tiles = [walk.tile_of(k, step)[1:] for k in range(launched) for step in range(walk.tiles_of_block(k))]
    assert sorted(tiles) == [(row, col) for row in range(132) for col in range(7)]
    assert plan.most_steps == walk.tiles_of_block(0) == -(-132 * 7 // launched)
    assert plan.timeline.steps == plan.most_steps
    assert f"{launched} clusters, persistent" in plan.summary()


def test_persistent_clusters_are_checked():
    with pytest.raises(TmaConfigError, match="persistent clusters run a ring"):
        MulticastPlan(LoadPlan(SEED), (1, 2), persistent_clusters=32)
    with pytest.raises(TmaConfigError, match="persistent clusters is 0"):
        MulticastPlan(LoadPlan(SEED), (1, 2), stages=4, persistent_clusters=0)


def test_multicast_ring_stage_count_is_checked():
    with pytest.raises(TmaConfigError, match="8 stages"):
        MulticastPlan(LoadPlan(SEED), (1, 2), stages=8)


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
@pytest.mark.parametrize("multicast", [True, False])
def test_timeline_stamps_only_when_asked(cluster, multicast):
    """The instrumented ring reads %globaltimer and %clock64 and stores them (the load-only ring
    stores nothing else); off, its PTX has no clock read and no global store at all."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, multicast, stages=4)
    off = compile_multicast_load(plan, keep_ptx=True, store=False).ptx
    assert "globaltimer" not in off and "clock64" not in off and "st.global" not in off
    on = compile_multicast_load(plan, keep_ptx=True, store=False, timeline=True).ptx
    # start, ready, 3 producer + 3 consumer stamps per step (the loop body once), done, exit
    assert on.count("%globaltimer") == on.count("%clock64") == 2 + 6 + 2
    assert "%smid" in on and "st.global.b64" in on
    assert plan.timeline.shape == (2, plan.grid, 3 + 4 + 6 * 7)


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
def test_release_protocols(cluster):
    """elected-cluster: one lane, a cluster-scoped release per peer; elected-cta: the same arrivals
    at CTA scope; lanes and PipelineTmaAsync: lane i arrives on CTA i (one mapa by lane id)."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, stages=4)
    size = plan.cluster_size
    ptx = {
        release: compile_multicast_load(plan, keep_ptx=True, store=False, release=release).ptx
        for release in ("elected-cluster", "elected-cta", "lanes", "pipeline-tma-async")
    }
    assert (
        len(re.findall(r"mbarrier\.arrive\.release\.cluster\.shared::cluster", ptx["elected-cluster"]))
        == size
    )
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx["elected-cta"])) == size
    for release in ("lanes", "pipeline-tma-async"):
        assert ptx[release].count("mapa") == 1 and "%laneid" in ptx[release]
        assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx[release])) == 1
        assert ptx[release].count("multicast::cluster") == 1
    # every protocol's empty barriers expect one arrival per CTA of the cluster
    for text in ptx.values():
        holding_size = set(re.findall(rf"mov\.b32\s+(%r\d+), {size};", text))
        counts = re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\],\s+(%r\d+);", text)
        assert sum(count in holding_size for count in counts) == plan.stages


def test_timeline_summary_of_synthetic_stamps():
    import numpy as np

    from tmakit.bench.timeline import summarise
    from tmakit.plan.timeline import STEP_EVENTS, TimelineLayout

    layout = TimelineLayout(ctas=4, steps=5)
    stamps = np.zeros(layout.shape, np.int64)
    for cta in range(4):
        now = 1000 + 10 * (cta % 2)  # the second CTA of each cluster starts 10 ns later
        stamps[:, cta, layout.identity_word("smid")] = cta
        for event in ("start", "ready"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
        for step in range(5):
            for event in STEP_EVENTS:
                stamps[:, cta, layout.step_word(event, step)] = now
                now += 50
        for event in ("done", "exit"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
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
    import numpy as np

    from tmakit.bench.timeline import summarise
    from tmakit.plan.timeline import STEP_EVENTS, TimelineLayout

    layout = TimelineLayout(ctas=4, steps=5)
    steps = np.array([5, 5, 3, 3])
    stamps = np.zeros(layout.shape, np.int64)
    for cta in range(4):
        now = 1000
        stamps[:, cta, layout.identity_word("smid")] = cta
        for event in ("start", "ready"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
        for step in range(steps[cta]):
            for event in STEP_EVENTS:
                stamps[:, cta, layout.step_word(event, step)] = now
                now += 50
        for event in ("done", "exit"):
            stamps[:, cta, layout.cta_word(event)] = now
            now += 100
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


def test_the_measured_ratios_explain_prints_are_the_results_files():
    """`H200_HOT_L2_TIME_RATIO` (what `tmakit explain --cluster` says) against the medians of
    benchmarks/results/multicast-hot-l2.json: a new run of the study must update both."""
    import json
    import statistics
    from pathlib import Path

    from tmakit.explain import H200_HOT_L2_TIME_RATIO

    study = Path(__file__).parent.parent / "benchmarks" / "results" / "multicast-hot-l2.json"
    parts = json.loads(study.read_text())["parts"]
    assert sorted(H200_HOT_L2_TIME_RATIO) == sorted(CLUSTER_SHAPES)  # explain --cluster takes every shape
    assert sorted(parts) == sorted(f"{r}x{c}" for r, c in H200_HOT_L2_TIME_RATIO)
    for (rows, cols), ratios in H200_HOT_L2_TIME_RATIO.items():
        median = {
            row["kernel"]: statistics.median(row["samples_us"]) for row in parts[f"{rows}x{cols}"]["rows"]
        }
        multicast = sorted(name for name in median if name.startswith(f"tmakit multicast {rows}x{cols}"))
        assert len(multicast) == 2  # one cluster per strip, then persistent clusters
        for name, ratio in zip(multicast, ratios, strict=True):
            measured = median[name] / median[name.replace("tmakit multicast", "tmakit no-multicast")]
            assert abs(measured - ratio) < 0.006, (name, measured, ratio)


def test_the_shared_tile_speedup_explain_prints_is_the_results_files():
    """`H200_SHARED_TILE_SPEEDUP` against benchmarks/results/cluster-dot.json's L2-cold parts."""
    import json
    from pathlib import Path

    from tmakit.explain import H200_SHARED_TILE_SPEEDUP

    study = Path(__file__).parent.parent / "benchmarks" / "results" / "cluster-dot.json"
    parts = json.loads(study.read_text())["summary"]["parts"]
    for (rows, cols), speedup in H200_SHARED_TILE_SPEEDUP.items():
        ratios = parts[f"cold-{rows}x{cols}"]["multicast_speedup"]
        (persistent,) = [ratio for name, ratio in ratios.items() if "persistent" in name]
        assert abs(persistent - speedup) < 0.006, (rows, cols, persistent, speedup)
