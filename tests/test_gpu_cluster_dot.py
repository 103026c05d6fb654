"""The cluster row dot on the device: every out[b, m] against torch's fp32 sum, for every cluster
shape, with multicast and without, partial and swizzled tiles, several batch groups and
persistent clusters (stage reuse across strips, the drain at the exit)."""

import pytest

from tmakit.cluster.plan import ClusterDotPlan

pytestmark = pytest.mark.gpu

# Every variant below runs on these shapes; `test_larger_and_odd_clusters` runs a few cases of the
# others (up to 8 CTAs, sizes that are not powers of two, X slices at the swizzle's own alignment).
CLUSTER_SHAPES = ((1, 2), (2, 1), (2, 2), (1, 4))


def size(cluster: tuple[int, int]) -> int:
    return cluster[0] * cluster[1]


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "x_shape, dtype, tile, swizzle, stages",
    [
        ((8448, 1792), "fp16", (64, 128), 0, 4),  # the seed's X: 14 column tiles per strip
        ((1000, 776), "fp16", (64, 128), 0, 2),  # partial tiles along both M and K
        ((1000, 3000), "bf16", (64, 64), 128, 3),  # partial, bf16, 128B swizzle: 47 column tiles
    ],
    ids=["seed-4st", "partial-2st", "partial-bf16-swizzled-3st"],
)
def test_every_row_dot(x_shape, dtype, tile, swizzle, stages, cluster, multicast):
    from tmakit.cluster.check import verify_cluster_dot

    dot = ClusterDotPlan((size(cluster), *x_shape), dtype, tile, cluster, multicast, stages, swizzle=swizzle)
    verdict = verify_cluster_dot(dot)
    assert verdict.startswith("ok"), verdict


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", [(1, 2), (2, 2)])
def test_several_batch_groups_share_x(cluster, multicast):
    """Three clusters per strip (B = 3 x cluster size): each group's CTAs take their own batch
    elements and read the same X tiles."""
    from tmakit.cluster.check import verify_cluster_dot

    dot = ClusterDotPlan((3 * size(cluster), 1000, 776), cluster=cluster, multicast=multicast)
    verdict = verify_cluster_dot(dot)
    assert verdict.startswith("ok"), verdict


@pytest.mark.parametrize("multicast", [True, False], ids=["multicast", "baseline"])
@pytest.mark.parametrize("cluster", CLUSTER_SHAPES)
@pytest.mark.parametrize(
    "shape_of, clusters",
    [
        (lambda n: (n, 8448, 1792), 32),  # 132 strips, 4-5 per cluster, the ring running on
        (lambda n: (2 * n, 1000, 3000), 5),  # 32 partial strips of 24 tiles over 5 clusters
        (lambda n: (n, 8448, 1792), "auto"),  # as many clusters as the GPU keeps resident
    ],
    ids=["seed-32-clusters", "partial-2-groups-5-clusters", "seed-auto"],
)
def test_persistent_clusters(shape_of, clusters, cluster, multicast):
    from tmakit.cluster.check import verify_cluster_dot
    from tmakit.runtime.launch import max_active_clusters

    resident = max_active_clusters(size(cluster)) if clusters == "auto" else clusters
    dot = ClusterDotPlan(shape_of(size(cluster)), cluster=cluster, multicast=multicast,
                         persistent_clusters=resident)  # fmt: skip
    verdict = verify_cluster_dot(dot)
    assert verdict.startswith("ok"), verdict


@pytest.mark.parametrize(
    "x_shape, dtype, tile, swizzle, cluster, multicast, clusters",
    [
        ((8448, 1792), "fp16", (64, 128), 0, (2, 4), True, None),
        ((8448, 1792), "fp16", (64, 128), 0, (8, 1), False, None),
        ((8448, 1792), "fp16", (64, 128), 0, (1, 8), True, "auto"),
        ((1000, 776), "fp16", (48, 128), 0, (3, 1), True, None),
        ((1000, 3000), "bf16", (64, 32), 64, (1, 8), True, 5),
        ((1000, 3000), "fp16", (64, 16), 32, (4, 2), True, None),
    ],
    ids=[
        "seed-2x4",
        "seed-8x1-baseline",
        "seed-1x8-auto",
        "partial-3x1",
        "partial-bf16-swizzle64-1x8-512-byte-slices-5-clusters",
        "partial-swizzle32-4x2-256-byte-slices",
    ],
)
def test_larger_and_odd_clusters(x_shape, dtype, tile, swizzle, cluster, multicast, clusters):
    """Clusters of 8 CTAs and of 3, X slices of exactly the 32B and 64B swizzles' repeats."""
    from tmakit.cluster.check import verify_cluster_dot
    from tmakit.runtime.launch import max_active_clusters

    resident = max_active_clusters(size(cluster)) if clusters == "auto" else clusters
    dot = ClusterDotPlan((size(cluster), *x_shape), dtype, tile, cluster, multicast, 3, swizzle=swizzle,
                         persistent_clusters=resident)  # fmt: skip
    verdict = verify_cluster_dot(dot)
    assert verdict.startswith("ok"), verdict
