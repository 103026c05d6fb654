"""Multicast on the CPU: the plan's slices and the compiled PTX for every cluster shape."""

import re
from dataclasses import replace

import pytest

from cluster_checks import (
    assert_empty_barriers_count_every_cta,
    assert_exits_by_draining,
    assert_lane_per_peer_release,
    splitting,
)
from tmakit import SEED, LoadConfig, LoadPlan, TmaConfigError
from tmakit.cluster.launch import compile_multicast_load
from tmakit.cluster.plan import CLUSTER_SHAPES, MulticastPlan
from tmakit.limits import MAX_CLUSTER_SIZE, SWIZZLE_DESTINATION_ALIGN
from tmakit.plan import RELEASES
from tmakit.ptx import expect_tx_byte_counts, find_instructions


def traced_slices(multicast: MulticastPlan, tile: tuple[int, int]) -> list[tuple[int, int]]:
    """(first tile row, shared alignment in bytes) of each CTA's slice of `tile`, from the kernel's
    own atom and `slice_views` (the shared tile at a 1024-aligned address)."""
    from tmakit.cluster.explain import trace_cluster_slices

    origin_row = multicast.load.tile_origin(*tile)[0]
    found = []
    for traced in trace_cluster_slices(multicast, tile):
        # The coordinate tensor lists the innermost (column) coordinate first.
        _, row = map(int, re.match(r"tensor<\((\d+),(\d+)\)", traced["global"]).groups())
        found.append((row - origin_row, int(re.search(r"align<(\d+)>", traced["shared"]).group(1))))
    return found


def test_every_cluster_of_up_to_the_portable_size_is_a_shape():
    assert len(CLUSTER_SHAPES) == len(set(CLUSTER_SHAPES)) == 19
    assert {c * r for c, r in CLUSTER_SHAPES} == set(range(2, MAX_CLUSTER_SIZE + 1))
    for shape in ((1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 2), (1, 8), (8, 1), (3, 1), (2, 3)):
        assert shape in CLUSTER_SHAPES


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
def test_each_cta_issues_its_slice_and_expects_the_whole_tile(cluster, multicast):
    """Every shape: rank r's slice is rows r x slice_rows on (the plan), the kernel's own
    `slice_views` start rank r there (traced), the mask names every rank, every barrier expects
    the whole tile. The baseline: the same cluster launch, each CTA loading the whole tile."""
    config = splitting(cluster)
    plan = MulticastPlan(LoadPlan(config), cluster, multicast)
    size = cluster[0] * cluster[1]
    assert plan.cluster_size == size and plan.grid == plan.load.grid * size
    assert plan.launch_grid == (plan.load.grid * cluster[0], cluster[1], 1)
    tile_bytes = plan.load.expected_tx_bytes
    ptx = compile_multicast_load(plan, keep_ptx=True).ptx
    copy = find_instructions(ptx)["cp.async.bulk.tensor"].opcode
    assert expect_tx_byte_counts(ptx) == [tile_bytes]  # every CTA's barrier expects the whole tile
    if not multicast:
        assert plan.slice_of(size - 1) == (0, config.tile[0]) and plan.issued_bytes_per_cta == tile_bytes
        assert "multicast" not in copy and plan.multicast_mask == 1
        return
    assert plan.multicast_mask == (1 << size) - 1
    assert re.search(rf"mov\.b16\s+%rs\d+, {plan.multicast_mask};", ptx)  # the mask the copy takes
    slice_rows = config.tile[0] // size
    assert [plan.slice_of(rank) for rank in range(size)] == [
        (rank * slice_rows, (rank + 1) * slice_rows) for rank in range(size)
    ]
    assert plan.issued_bytes_per_cta * size == tile_bytes
    traced = traced_slices(plan, (1, 2))
    assert [first for first, _ in traced] == [plan.slice_of(rank)[0] for rank in range(size)]
    assert all(align % plan.load.destination_alignment == 0 for _, align in traced)
    assert "multicast::cluster" in copy and "shared::cluster" in copy
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx


def test_baseline_loads_the_whole_tile_without_multicast():
    baseline = MulticastPlan(LoadPlan(SEED), (2, 2), multicast=False)
    assert baseline.slice_of(3) == (0, 64) and baseline.issued_bytes_per_cta == 32768
    copy = find_instructions(compile_multicast_load(baseline, keep_ptx=True).ptx)[
        "cp.async.bulk.tensor"
    ].opcode
    assert "multicast" not in copy
    assert "every CTA loads the whole tile itself" in baseline.summary()


@pytest.mark.parametrize(
    "cluster, message",
    [
        ((1, 1), "cluster 1x1 is one CTA; a cluster shares each tile between 2 to 8 CTAs"),
        ((3, 3), "cluster 3x3 is 9 CTAs; a portable cluster holds at most 8"),
        ((4, 4), "cluster 4x4 is 16 CTAs; .* non-portable cluster opt-in"),
        ((0, 2), "cluster 0x2 has no CTAs along one side"),
        ((2, 2, 1), r"cluster is \(2, 2, 1\) \(tuple\); it must be a tuple of 2 whole numbers"),
        ("2x2", r"cluster is '2x2' \(str\)"),
    ],
)
def test_bad_clusters_are_refused(cluster, message):
    with pytest.raises(TmaConfigError, match=message):
        MulticastPlan(LoadPlan(SEED), cluster)
    with pytest.raises(TmaConfigError, match=message):
        MulticastPlan(LoadPlan(SEED), cluster, multicast=False)


def test_tile_rows_must_split_over_the_cluster():
    with pytest.raises(TmaConfigError, match="tile rows 2 do not split into 4 equal slices"):
        MulticastPlan(LoadPlan(LoadConfig((64, 256), "fp16", (2, 256))), (1, 4))
    with pytest.raises(TmaConfigError, match="tile rows 64 do not split into 3 equal slices"):
        MulticastPlan(LoadPlan(SEED), (3, 1))
    assert MulticastPlan(LoadPlan(SEED), (3, 1), multicast=False).slice_of(2) == (0, 64)


def test_a_cluster_given_as_a_list_or_numpy_integers_is_a_tuple():
    import numpy as np

    plan = MulticastPlan(LoadPlan(SEED), [np.int64(2), 4])
    assert plan.cluster == (2, 4) and type(plan.cluster[0]) is int and plan.cluster_size == 8


def test_launch_grid_is_tiled_by_every_cluster_shape():
    for cluster in CLUSTER_SHAPES:
        plan = MulticastPlan(LoadPlan(splitting(cluster)), cluster)
        grid = plan.launch_grid
        assert grid[0] % cluster[0] == 0 and grid[1] % cluster[1] == 0
        assert grid[0] * grid[1] == plan.load.grid * cluster[0] * cluster[1]


def test_column_major_and_misaligned_slices_are_refused():
    with pytest.raises(TmaConfigError, match="row-major 2-D tensors"):
        MulticastPlan(LoadPlan(LoadConfig((512, 512), "fp16", (64, 64), 128, "col")), (2, 2))
    with pytest.raises(
        TmaConfigError,
        match=r"slice is 16 bytes; its shared destination must stay 128-byte aligned \(TMA's\): "
        "use tile rows a multiple of 32",
    ):
        MulticastPlan(LoadPlan(LoadConfig((64, 64), "fp32", (4, 4))), (1, 4))


def span_config(swizzle: int, rows: int) -> LoadConfig:
    """fp16 tiles one swizzle span wide (32 bytes without a swizzle), `rows` tall."""
    return LoadConfig((1000, 3000), "fp16", (rows, (swizzle or 32) // 2), swizzle)


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_a_slice_needs_only_its_swizzles_alignment(swizzle):
    """TMA asks a destination for 128 bytes, swizzled for the swizzle's repeat (256, 512, 1024
    bytes): 8 CTAs' slices of exactly that many bytes are planned, start there (traced) and compile,
    multicast and baseline, one tile and a ring; half of it is refused, naming the rows that fit."""
    alignment = SWIZZLE_DESTINATION_ALIGN[swizzle]
    row_bytes = swizzle or 32
    rows = 8 * alignment // row_bytes  # 8 CTAs' slices of `alignment` bytes each
    plan = MulticastPlan(LoadPlan(span_config(swizzle, rows)), (1, 8))
    assert plan.load.destination_alignment == alignment and plan.issued_bytes_per_cta == alignment
    traced = traced_slices(plan, (1, 2))
    assert [first for first, _ in traced] == [rank * rows // 8 for rank in range(8)]
    assert [align for _, align in traced][1::2] == [alignment] * 4  # odd ranks: exactly the repeat
    for stages in (1, 3):
        for multicast in (True, False):
            ptx = compile_multicast_load(replace(plan, multicast=multicast, stages=stages), keep_ptx=True).ptx
            assert ptx.count("multicast::cluster") == int(multicast)
            assert expect_tx_byte_counts(ptx) == [plan.load.expected_tx_bytes]
    swizzled = f"the {swizzle}B swizzle's pattern repeats every {alignment} bytes" if swizzle else "TMA's"
    with pytest.raises(
        TmaConfigError,
        match=rf"slice is {alignment // 2} bytes; its shared destination must stay {alignment}-byte "
        rf"aligned \({swizzled}\): use tile rows a multiple of {rows}",
    ):
        MulticastPlan(LoadPlan(span_config(swizzle, rows // 2)), (1, 8))
    assert MulticastPlan(LoadPlan(span_config(swizzle, rows // 2)), (1, 8), multicast=False)


@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
def test_pipelined_multicast_frees_a_stage_in_every_cta(cluster):
    """The ring's release arrives on the empty barrier of every CTA (the default protocol,
    "lanes": lane i maps CTA i's barrier and arrives at CTA scope), and each empty barrier expects
    every CTA's consumer warp."""

    multicast = MulticastPlan(LoadPlan(splitting(cluster)), cluster, stages=4)
    ptx = compile_multicast_load(multicast, keep_ptx=True).ptx
    size = multicast.cluster_size
    assert ptx.count("multicast::cluster") == 1
    assert ptx.count("mapa") == 1 and "%laneid" in ptx
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx)) == 1
    assert "mbarrier.arrive.release.cluster" not in ptx  # cluster scope cost 3x at 2x2 on the H200
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    assert f"empty barrier: {size} arrival(s)" in multicast.summary()
    # lanes 0 to size - 1 arrive, one per CTA: the others (lane id > size - 1) skip
    laneid = re.search(r"mov\.u32\s+(%r\d+), %laneid;", ptx).group(1)
    assert re.search(rf"setp\.gt\.u32\s+%p\d+, {laneid}, {size - 1};", ptx)
    baseline = compile_multicast_load(replace(multicast, multicast=False), keep_ptx=True).ptx
    assert "mapa" not in baseline and "multicast::cluster" not in baseline


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
@pytest.mark.parametrize("persistent_clusters", [None, 32])
def test_multicast_ring_exits_by_draining_not_by_a_cluster_barrier(cluster, persistent_clusters):
    """One relaxed cluster barrier publishes the barriers' initialisation (the fence releases it);
    at the end the producer drains the ring instead of a second cluster barrier, whose arrive
    would release (wait for) every memory operation of the CTA. Without multicast nothing remote
    targets a CTA: no cluster barrier at all."""
    plan = MulticastPlan(LoadPlan(SEED), cluster, stages=4, persistent_clusters=persistent_clusters)
    ptx = compile_multicast_load(plan, keep_ptx=True, store=False, release="lanes").ptx
    assert_exits_by_draining(ptx, plan.stages)
    baseline = replace(plan, multicast=False)
    ptx = compile_multicast_load(baseline, keep_ptx=True, store=False).ptx
    assert "barrier.cluster" not in ptx and ptx.count("mbarrier.try_wait.parity") == 2


@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize("clusters", [1, 7, 32, 33, 132, 500])
def test_persistent_clusters_walk_every_tile_once(cluster, clusters):
    plan = MulticastPlan(LoadPlan(splitting(cluster)), cluster, stages=4, persistent_clusters=clusters)
    row_blocks, columns = plan.load.row_blocks, plan.load.tiles_per_block
    walk, launched = plan.walk, min(clusters, row_blocks * columns)
    assert plan.clusters == launched and plan.grid == launched * plan.cluster_size
    assert plan.launch_grid == (launched * cluster[0], cluster[1], 1)
    tiles = [walk.tile_of(k, step)[1:] for k in range(launched) for step in range(walk.tiles_of_block(k))]
    assert sorted(tiles) == [(row, col) for row in range(row_blocks) for col in range(columns)]
    assert plan.most_steps == walk.tiles_of_block(0) == -(-row_blocks * columns // launched)
    assert f"{launched} clusters, persistent" in plan.summary()


def test_persistent_clusters_are_checked():
    with pytest.raises(TmaConfigError, match="persistent clusters run a ring"):
        MulticastPlan(LoadPlan(SEED), (1, 2), persistent_clusters=32)
    with pytest.raises(TmaConfigError, match="persistent clusters is 0"):
        MulticastPlan(LoadPlan(SEED), (1, 2), stages=4, persistent_clusters=0)


def test_multicast_ring_stage_count_is_checked():
    with pytest.raises(TmaConfigError, match="8 stages"):
        MulticastPlan(LoadPlan(SEED), (1, 2), stages=8)


@pytest.mark.parametrize("cluster", [(1, 2), (2, 2), (2, 4), (8, 1), (3, 1), (2, 3)])
def test_release_protocols(cluster):
    """elected-cluster: one lane, a cluster-scoped release per peer; elected-cta: the same arrivals
    at CTA scope; lanes: lane i arrives on CTA i (one mapa by lane id)."""
    plan = MulticastPlan(LoadPlan(splitting(cluster)), cluster, stages=4)
    size = plan.cluster_size
    ptx = {
        release: compile_multicast_load(plan, keep_ptx=True, store=False, release=release).ptx
        for release in RELEASES
    }
    assert (
        len(re.findall(r"mbarrier\.arrive\.release\.cluster\.shared::cluster", ptx["elected-cluster"]))
        == size
    )
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx["elected-cta"])) == size
    assert_lane_per_peer_release(ptx["lanes"])
    for text in ptx.values():
        assert_empty_barriers_count_every_cta(text, plan)
