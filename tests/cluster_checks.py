"""What the cluster tests share: the seed with tile rows that split over a cluster, the cluster
shapes every GPU variant runs on, and checks of a cluster ring's PTX (tmakit's rings in
test_multicast, the lab's in test_timeline)."""

from __future__ import annotations

import re
from dataclasses import replace

from tmakit import SEED, LoadConfig
from tmakit.cluster.plan import MulticastPlan

# Every GPU variant runs on these shapes; `test_larger_and_odd_clusters` runs a few cases of the
# others (up to 8 CTAs, sizes that are not powers of two, slices at the swizzle's own alignment).
GPU_CLUSTER_SHAPES = ((1, 2), (2, 1), (2, 2), (1, 4))


def splitting(cluster: tuple[int, int]) -> LoadConfig:
    """The seed, with tile rows that split over the cluster: its 64 where they do, 8 per CTA
    where they do not (3, 5, 6 and 7 CTAs)."""
    size = cluster[0] * cluster[1]
    rows = SEED.tile[0] if SEED.tile[0] % size == 0 else 8 * size
    return replace(SEED, tile=(rows, SEED.tile[1]))


def assert_exits_by_draining(ptx: str, stages: int) -> None:
    """One relaxed cluster barrier after the barriers' set-up and none at the end; the tensor map
    fetched once; the loop's acquire and wait, and the drain's acquire of each stage (unrolled)."""
    arrives = re.findall(r"barrier\.cluster\.arrive[.a-z]*;", ptx)
    assert arrives == ["barrier.cluster.arrive.relaxed;"] and ptx.count("barrier.cluster.wait") == 1
    assert "fence.mbarrier_init.release.cluster" in ptx and "membar" not in ptx
    assert ptx.count("prefetch.tensormap") == 1  # fetched once, by the producer warp
    assert ptx.count("mbarrier.try_wait.parity") == 2 + stages


def assert_lane_per_peer_release(ptx: str) -> None:
    """Lane i arrives on CTA i's empty barrier: one mapa by lane id, one remote arrive."""
    assert ptx.count("mapa") == 1 and "%laneid" in ptx
    assert len(re.findall(r"mbarrier\.arrive\.shared::cluster", ptx)) == 1
    assert ptx.count("multicast::cluster") == 1


def assert_empty_barriers_count_every_cta(ptx: str, plan: MulticastPlan) -> None:
    """Every stage's empty barrier expects one arrival per CTA of the cluster."""
    holding_size = set(re.findall(rf"mov\.b32\s+(%r\d+), {plan.cluster_size};", ptx))
    counts = re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\],\s+(%r\d+);", ptx)
    assert sum(count in holding_size for count in counts) == plan.stages
