"""Multicast on the device: every CTA of every cluster holds every complete tile."""

import pytest

from cluster_checks import GPU_CLUSTER_SHAPES as CLUSTER_SHAPES
from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.cluster.plan import MulticastPlan

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config", [SEED, LoadConfig((1000, 776), "bf16", (64, 64), 128)], ids=["seed", "partial-swizzled"]
)
def test_every_cta_receives_every_tile(config, cluster, multicast):
    from tmakit.cluster.check import verify_multicast_load

    verdicts = verify_multicast_load(MulticastPlan(LoadPlan(config), cluster, multicast))
    for rank, verdict in enumerate(verdicts):
        assert verdict.ok, f"CTA {rank} of the cluster: {verdict}"


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config, stages",
    [
        (LoadConfig((512, 8192)), 2),
        (LoadConfig((512, 8192)), 4),
        (LoadConfig((1000, 3000), "bf16", (64, 64), 128), 3),
    ],
    ids=["32-tiles-2st", "32-tiles-4st", "partial-swizzled-47-tiles-3st"],
)
def test_pipelined_multicast_every_cta_receives_every_tile(config, stages, cluster, multicast):
    """Many tiles per CTA through a ring: a stage is reused only once every CTA released it."""
    from tmakit.cluster.check import verify_multicast_load

    verdicts = verify_multicast_load(MulticastPlan(LoadPlan(config), cluster, multicast, stages=stages))
    for rank, verdict in enumerate(verdicts):
        assert verdict.ok, f"CTA {rank} of the cluster: {verdict}"


@pytest.mark.parametrize("release", ["elected-cta", "lanes"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config, stages",
    [(LoadConfig((512, 8192)), 4), (LoadConfig((1000, 3000), "bf16", (64, 64), 128), 3)],
    ids=["32-tiles-4st", "partial-swizzled-47-tiles-3st"],
)
def test_every_release_protocol_delivers_every_tile(config, stages, cluster, release):
    """The other consumer-release protocols with many stage reuses: every CTA's copy of every
    tile complete (the ring as CUTLASS's PipelineTmaAsync writes it: test_timeline)."""
    from tmakit.cluster.check import verify_multicast_load

    verdicts = verify_multicast_load(MulticastPlan(LoadPlan(config), cluster, stages=stages), release=release)
    for rank, verdict in enumerate(verdicts):
        assert verdict.ok, f"CTA {rank} of the cluster ({release}): {verdict}"


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "config, stages, clusters",
    [
        (SEED, 4, 32),  # 924 tiles: 28-29 per cluster, the ring running on across strips
        (LoadConfig((1000, 3000), "bf16", (64, 64), 128), 3, 5),  # 752 partial tiles, 5 clusters
    ],
    ids=["seed-32-clusters-4st", "partial-swizzled-5-clusters-3st"],
)
def test_persistent_clusters_deliver_every_tile(config, stages, clusters, cluster, multicast):
    """Persistent clusters walk every so-many-th tile and each CTA's ring runs on across strips
    (stage reuse over many trips); every CTA drains its ring before it exits."""
    from tmakit.cluster.check import verify_multicast_load

    plan = MulticastPlan(LoadPlan(config), cluster, multicast, stages=stages, persistent_clusters=clusters)
    for rank, verdict in enumerate(verify_multicast_load(plan)):
        assert verdict.ok, f"CTA {rank} of the cluster: {verdict}"


@pytest.mark.parametrize(
    "config, cluster, multicast, stages, clusters, release",
    [
        (SEED, (2, 4), True, 4, None, "lanes"),
        (SEED, (4, 2), False, 4, None, "lanes"),
        (SEED, (8, 1), True, 1, None, "lanes"),  # the single-tile kernel
        (LoadConfig((1000, 776), "bf16", (48, 256)), (3, 1), True, 3, None, "lanes"),
        (LoadConfig((1000, 776), "fp16", (60, 64)), (2, 3), True, 2, None, "elected-cta"),
        (LoadConfig((1000, 3000), "fp16", (64, 16), 32), (1, 8), True, 3, None, "lanes"),
    ],
    ids=[
        "seed-2x4-4st",
        "seed-4x2-baseline-4st",
        "seed-8x1-one-tile",
        "partial-3x1-16-row-slices-3st",
        "partial-2x3-10-row-slices-2st",
        "swizzle32-1x8-256-byte-slices-3st",
    ],
)
def test_larger_and_odd_clusters(config, cluster, multicast, stages, clusters, release):
    """Clusters of 6 and 8 CTAs, of 3 and 6 (tile rows that split into 16 and 10), and slices of
    exactly the 32B swizzle's repeat (256 bytes; the 64B one's: test_timeline): every CTA's copy
    complete."""
    from tmakit.cluster.check import verify_multicast_load

    plan = MulticastPlan(LoadPlan(config), cluster, multicast, stages=stages, persistent_clusters=clusters)
    for rank, verdict in enumerate(verify_multicast_load(plan, release=release)):
        assert verdict.ok, f"CTA {rank} of the cluster ({release}): {verdict}"
