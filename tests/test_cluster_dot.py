"""The cluster row dot on the CPU: the plan's numbers, walk and refusals, and the compiled PTX for
every cluster shape, with multicast and without, one cluster per strip and persistent."""

import re
from dataclasses import replace

import pytest

from tmakit import TmaConfigError
from tmakit.cluster.launch import compile_cluster_dot
from tmakit.cluster.plan import CLUSTER_SHAPES, ClusterDotPlan
from tmakit.ptx import expect_tx_byte_counts

SEED_X = (8448, 1792)


def splitting_tile(cluster: tuple[int, int]) -> tuple[int, int]:
    """The default tile, with rows that split over the cluster: 64 where they do, 8 per CTA
    where they do not (3, 5, 6 and 7 CTAs)."""
    size = cluster[0] * cluster[1]
    return (64 if 64 % size == 0 else 8 * size), 128


def seed_dot(cluster=(1, 2), groups=1, **options) -> ClusterDotPlan:
    size = cluster[0] * cluster[1]
    return ClusterDotPlan((groups * size, *SEED_X), tile=splitting_tile(cluster), cluster=cluster, **options)


def test_a_stage_holds_an_a_tile_and_an_x_tile():
    dot = seed_dot((2, 2))
    tile_bytes = 64 * 128 * 2
    assert dot.tile_bytes == tile_bytes and dot.expected_tx_bytes == 2 * tile_bytes
    assert dot.stage_bytes == 2 * tile_bytes
    assert dot.smem_bytes == 4 * 2 * tile_bytes + 2 * 4 * 8
    assert dot.max_stages == 227 * 1024 // (2 * tile_bytes + 16)
    assert dot.threads_per_block == 32 * 5
    assert dot.x_multicast.issued_bytes_per_cta == tile_bytes // 4
    assert dot.clusters == 132 and dot.grid == 132 * 4 and dot.launch_grid == (264, 2, 1)
    assert "full expects 32768 bytes (A + whole X); empty expects 16 arrivals" in dot.summary()
    baseline = replace(dot, multicast=False)
    assert "empty expects 4 arrivals" in baseline.summary()
    assert "every CTA loads the whole X tile itself" in baseline.summary()
    # X read from L2 once per cluster with multicast, once per CTA without
    assert dot.l2_read_bytes == 132 * 14 * tile_bytes * (4 + 1)
    assert baseline.l2_read_bytes == 132 * 14 * tile_bytes * (4 + 4)


@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize("persistent_clusters", [None, 1, 7, 100, 1000])
@pytest.mark.parametrize("groups", [1, 3])
def test_each_cluster_walks_whole_strips_and_every_tile_once(cluster, persistent_clusters, groups):
    """Every (batch group, row block, column tile) once; a cluster finishes a strip's column tiles
    in order before the next strip, so each row's sum is whole when written (no atomics)."""
    dot = ClusterDotPlan((groups * cluster[0] * cluster[1], 1000, 776), tile=splitting_tile(cluster),
                         cluster=cluster, persistent_clusters=persistent_clusters)  # fmt: skip
    row_blocks, column_tiles = -(-1000 // dot.tile[0]), 7  # ceil(776 / 128): partial tiles
    assert dot.x_load.row_blocks == row_blocks and dot.x_load.tiles_per_block == column_tiles
    strips = groups * row_blocks
    assert dot.clusters == (strips if persistent_clusters is None else min(persistent_clusters, strips))
    walk, seen = dot.walk, []
    for cluster_index in range(dot.clusters):
        tiles = [walk.tile_of(cluster_index, step) for step in range(walk.tiles_of_block(cluster_index))]
        for first in range(0, len(tiles), column_tiles):
            strip = tiles[first : first + column_tiles]
            assert [t[2] for t in strip] == list(range(column_tiles))
            assert len({t[:2] for t in strip}) == 1
        seen += tiles
    expected = [(g, r, c) for g in range(groups) for r in range(row_blocks) for c in range(column_tiles)]
    assert sorted(seen) == expected
    assert dot.most_steps == walk.tiles_of_block(0) == -(-strips // dot.clusters) * column_tiles


def test_cta_rank_takes_consecutive_batch_elements():
    dot = seed_dot((2, 2), groups=2)
    assert [dot.batch_of(group, rank) for group in range(2) for rank in range(4)] == list(range(8))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"shape": (3, *SEED_X)}, "batch 3 is not a multiple of the cluster's 2 CTAs"),
        (
            {"shape": (4, *SEED_X), "cluster": (1, 4), "dtype": "fp32"},
            "dtype 'fp32': the cluster dot takes fp16",
        ),
        ({"shape": SEED_X}, r"takes A as \(B, M, K\), 3 extents"),
        (
            {"shape": (9, *SEED_X), "cluster": (3, 3)},
            "cluster 3x3 is 9 CTAs; a portable cluster holds at most",
        ),
        ({"shape": (2, *SEED_X), "cluster": (1, 1)}, "cluster 1x1 is one CTA"),
        ({"shape": (3, *SEED_X), "cluster": (3, 1)}, "tile rows 64 do not split into 3 equal slices"),
        ({"shape": (3, *SEED_X), "cluster": (1, 2, 3)}, r"cluster is \(1, 2, 3\) \(tuple\)"),
        ({"shape": (2, *SEED_X), "tile": (64, 256)}, "4 stages of 65536 bytes"),
        ({"shape": (2, *SEED_X), "stages": 1}, "1 stages; the cluster dot's ring needs 2 or more"),
        ({"shape": (4, *SEED_X), "cluster": (1, 4), "tile": (2, 128)}, "tile rows 2 do not split into 4"),
        ({"shape": (4, 64, 64), "cluster": (1, 4), "tile": (4, 32)}, "slice is 64 bytes; its shared"),
        (
            {"shape": (8, 64, 64), "cluster": (2, 4), "tile": (32, 16), "swizzle": 32},
            r"slice is 128 bytes; its shared destination must stay 256-byte aligned \(the 32B swizzle's",
        ),
        ({"shape": (2, *SEED_X), "persistent_clusters": 0}, "persistent clusters is 0"),
        ({"shape": (2, *SEED_X), "consumer_warps": 0}, "consumer warps is 0"),
        ({"shape": (2, 1000, 1001)}, "multiple of 16"),
        ({"shape": (2, *SEED_X), "tile": (64, 300)}, "tile columns is 300"),
    ],
)
def test_bad_plans_are_refused_before_compiling(options, message):
    with pytest.raises(TmaConfigError, match=message):
        ClusterDotPlan(**options)


def test_the_baseline_has_no_slices_to_align():
    """Without multicast each CTA loads whole X tiles: tile rows need not split over the cluster."""
    baseline = ClusterDotPlan((4, *SEED_X), tile=(2, 128), cluster=(1, 4), multicast=False)
    assert baseline.expected_tx_bytes == 2 * 2 * 128 * 2


def loads(ptx: str) -> list[str]:
    return re.findall(r"cp\.async\.bulk\.tensor\S*", ptx)


@pytest.mark.parametrize("persistent_clusters", [None, 33], ids=["strips", "persistent"])
@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
def test_compiled_ring_loads_both_tiles_under_one_barrier(cluster, multicast, persistent_clusters):
    """With multicast: X through one multicast load (this CTA's slice into every CTA), A through
    one plain load into this CTA; without: two plain loads. One arrive declares both tiles' bytes.
    One relaxed cluster barrier publishes the barriers' initialisation; the exit is the producer's
    drain (an acquire of each stage), never a second cluster barrier. Without multicast nothing
    remote targets a CTA: no cluster barrier, no drain, no remote arrival."""
    dot = seed_dot(cluster, persistent_clusters=persistent_clusters, multicast=multicast)
    ptx = compile_cluster_dot(dot, keep_ptx=True).ptx
    copies = loads(ptx)
    assert len(copies) == 2
    a_loads = [c for c in copies if c.startswith("cp.async.bulk.tensor.3d.shared::cta")]
    x_loads = [c for c in copies if c.startswith("cp.async.bulk.tensor.2d")]
    assert len(a_loads) == len(x_loads) == 1
    assert expect_tx_byte_counts(ptx) == [dot.expected_tx_bytes]
    assert ptx.count("mbarrier.arrive.expect_tx") == 1
    arrives = re.findall(r"barrier\.cluster\.arrive[.a-z]*;", ptx)
    if multicast:
        x_slices, size = dot.x_multicast, dot.cluster_size
        assert x_slices.multicast_mask == (1 << size) - 1
        assert re.search(rf"mov\.b16\s+%rs\d+, {x_slices.multicast_mask};", ptx)  # the mask X's copy takes
        rows = dot.tile[0] // size
        assert [x_slices.slice_of(r) for r in range(size)] == [
            (r * rows, (r + 1) * rows) for r in range(size)
        ]
        assert "multicast::cluster" in x_loads[0] and "shared::cluster" in x_loads[0]
        assert ptx.count("multicast::cluster") == 1
        assert arrives == ["barrier.cluster.arrive.relaxed;"] and ptx.count("barrier.cluster.wait") == 1
        assert "fence.mbarrier_init.release.cluster" in ptx and "membar" not in ptx
        # the producer's acquire, the consumers' wait, and the drain's acquire of each stage
        assert ptx.count("mbarrier.try_wait.parity") == 2 + dot.stages
        assert ptx.count("mapa") == 1 and len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx)) == 1
    else:
        assert "multicast" not in ptx and "shared::cta" in x_loads[0]
        assert "barrier.cluster" not in ptx and "mapa" not in ptx
        assert ptx.count("mbarrier.try_wait.parity") == 2
    # each empty barrier expects the consumer warps of every CTA its X tile lands in
    peers = dot.cluster_size if multicast else 1
    holding = set(re.findall(rf"mov\.b32\s+(%r\d+), {dot.consumer_warps * peers};", ptx))
    counts = re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\],\s+(%r\d+);", ptx)
    assert sum(count in holding for count in counts) == dot.stages


@pytest.mark.parametrize(
    "shape, dtype, tile, swizzle",
    [((2, 1000, 776), "fp16", (64, 128), 0), ((2, 1000, 3000), "bf16", (64, 64), 128)],
    ids=["partial", "partial-bf16-swizzled"],
)
def test_partial_and_swizzled_tiles_compile(shape, dtype, tile, swizzle):
    """The consumers sum A * X through physical positions (both tiles share layout and swizzle)
    and write only rows inside the tensor: out is exactly (B, M)."""
    dot = ClusterDotPlan(shape, dtype, tile, swizzle=swizzle)
    ptx = compile_cluster_dot(dot, keep_ptx=True).ptx
    assert expect_tx_byte_counts(ptx) == [2 * tile[0] * tile[1] * 2]
    assert "st.global" in ptx and not re.search(r"^\s*(red|atom)\.", ptx, re.M)  # one store per row
    assert dot.out_shape == shape[:2]


@pytest.mark.parametrize(
    "cluster, dtype, tile, swizzle",
    [((1, 8), "fp16", (64, 16), 32), ((2, 4), "bf16", (64, 32), 64), ((8, 1), "fp16", (64, 64), 128)],
    ids=["1x8-32B", "2x4-64B", "8x1-128B"],
)
def test_x_slices_need_only_their_swizzles_alignment(cluster, dtype, tile, swizzle):
    """8 CTAs, one swizzle span wide: X's slices of 8 rows are 256, 512 and 1024 bytes, exactly
    the swizzle's repeat, which is all TMA asks of a swizzled destination; multicast and baseline
    compile, each with one multicast load of X at most."""
    dot = ClusterDotPlan((8, 1000, 3000), dtype, tile, cluster, stages=3, swizzle=swizzle)
    multicast = dot.x_multicast
    assert multicast.slice_rows == 8 and multicast.issued_bytes_per_cta == 8 * swizzle
    assert multicast.issued_bytes_per_cta == dot.x_load.destination_alignment
    assert multicast.multicast_mask == 0xFF
    for plan in (dot, replace(dot, multicast=False)):
        ptx = compile_cluster_dot(plan, keep_ptx=True).ptx
        assert expect_tx_byte_counts(ptx) == [2 * tile[0] * tile[1] * 2]
        assert ptx.count("multicast::cluster") == int(plan.multicast)
        if plan.multicast:
            assert re.search(r"mov\.b16\s+%rs\d+, 255;", ptx)
