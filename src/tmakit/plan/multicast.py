"""Cluster loads: every CTA of a cluster needs every tile; each issues its slice. Pure Python."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import TmaConfigError
from ..limits import MAX_CLUSTER_SIZE, MAX_GRID_X
from ..validate import check_field_types, whole_numbers
from .load import LoadPlan
from .ring import PipelinePlan, TileWalk, check_walk


def check_cluster(cluster: object) -> tuple[int, int]:
    """`cluster` as (CTAs along x, CTAs along y) if a cluster kernel takes it: 2 to
    `MAX_CLUSTER_SIZE` CTAs in all, any arrangement (the CTA ranks, the mask and the slices
    follow the rank, x fastest, whatever the shape). TmaConfigError naming the rule otherwise."""
    columns, rows = whole_numbers(cluster, "cluster", 2, "(1, 2) for 1x2")
    name = f"{columns}x{rows}"
    if min(columns, rows) < 1:
        raise TmaConfigError(f"cluster {name} has no CTAs along one side; give each side 1 or more CTAs")
    size = columns * rows
    if size < 2:
        raise TmaConfigError(
            f"cluster {name} is one CTA; a cluster shares each tile between 2 to {MAX_CLUSTER_SIZE} CTAs: "
            "give e.g. 1x2"
        )
    if size > MAX_CLUSTER_SIZE:
        raise TmaConfigError(
            f"cluster {name} is {size} CTAs; a portable cluster holds at most {MAX_CLUSTER_SIZE} (more "
            f"needs the non-portable cluster opt-in, which tmakit's launches do not set): give a shape of "
            f"2 to {MAX_CLUSTER_SIZE} CTAs, e.g. 2x4"
        )
    return columns, rows


# Every cluster shape the cluster kernels take (`check_cluster`), smallest clusters first.
CLUSTER_SHAPES = tuple(
    (columns, size // columns)
    for size in range(2, MAX_CLUSTER_SIZE + 1)
    for columns in range(1, size + 1)
    if size % columns == 0
)
# How a ring's consumer warp frees a stage in every CTA of its cluster (`TileRing.release`):
# "elected-cluster": one elected lane arrives on each CTA's empty barrier in turn, each arrival
#   a release at cluster scope (tmakit's first protocol);
# "elected-cta": the same lane and order, each arrival a release at CTA scope (the DSL's default
#   for remote arrivals, and CUTLASS's `ClusterBarrier::arrive(cta_id)`);
# "lanes": lane i arrives on CTA i's barrier, CTA scope, all at once (`PipelineTmaAsync`'s
#   consumer_release with multicast signalling).
RELEASES = ("elected-cluster", "elected-cta", "lanes")
# The rings' protocol: on the H200 (seed shape, L2 hot) cluster-scope arrivals cost 3x at 2x2
# (docs/results.md, "Multicast: the release scope"); CTA scope is what CUTLASS relies on too.
DEFAULT_RELEASE = "lanes"


class ClusterLaunch:
    """The launch of a kernel whose clusters walk its tiles (`MulticastPlan`, `ClusterDotPlan`),
    from the plan's `cluster`, `clusters` and `walk`."""

    cluster: tuple[int, int]

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]

    @property
    def most_steps(self) -> int:
        """Loads of the busiest CTA (cluster 0's)."""
        return self.walk.tiles_of_block(0)

    @property
    def grid(self) -> int:
        """CTAs launched."""
        return self.clusters * self.cluster_size

    @property
    def launch_grid(self) -> tuple[int, int, int]:
        """The launch's grid: clusters side by side along x, so that (cx, cy, 1) clusters tile it
        and a CTA's cluster index is its cluster's x index."""
        return (self.clusters * self.cluster[0], self.cluster[1], 1)


@dataclass(frozen=True)
class MulticastPlan(ClusterLaunch):
    """A `LoadPlan` where every CTA of a cluster needs the same tiles (as all CTAs in a row of a
    GEMM read the same operand tiles): each cluster walks one strip of rows; each CTA issues only
    its slice of every tile and multicasts it to all CTAs of the cluster, so every CTA's barrier
    expects the whole tile's bytes. `multicast=False` is the baseline: the same CTAs, each loading
    the whole tile itself. `stages` > 1 runs each CTA as an N-stage ring (`pipeline`): a producer
    warp and a consumer warp, a stage reused only once every CTA's consumer released it.

    `cluster` is (CTAs along x, CTAs along y), any shape of 2 to 8 CTAs (`check_cluster`; 1x2,
    4x2, 3x1, ...): CTA rank r = x + y * columns issues tile rows r * `slice_rows` to
    (r + 1) * `slice_rows` and every mask names all ranks, so only the size matters to the
    slices. A slice must start where TMA accepts a destination: 128 bytes, or swizzled the
    swizzle's repeat (256, 512, 1024 bytes for 32B, 64B, 128B; `LoadPlan.destination_alignment`)."""

    load: LoadPlan
    cluster: tuple[int, int] = (1, 2)
    multicast: bool = True
    stages: int = 1
    # None: one cluster per strip of rows. N (a ring only): N clusters stay resident and walk the
    # tiles round-robin (`walk`), each CTA's ring running on across strips, so the set-up and the
    # exit are paid once per CTA rather than once per strip.
    persistent_clusters: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster", check_cluster(self.cluster))
        check_field_types(self)
        if self.stages > 1:
            self.pipeline  # noqa: B018 - validates the stage count
        if self.persistent_clusters is not None:
            if self.stages < 2:
                raise TmaConfigError("persistent clusters run a ring: give stages >= 2")
            if self.persistent_clusters < 1:
                raise TmaConfigError(f"persistent clusters is {self.persistent_clusters}; it must be >= 1")
            check_walk(self.walk)
        if len(self.load.config.shape) != 2:  # the cluster kernels, with multicast or without
            raise TmaConfigError(
                f"cluster loads take 2-D tensors; this one has {len(self.load.config.shape)} dimensions"
            )
        if self.launch_grid[0] > MAX_GRID_X:
            raise TmaConfigError(
                f"{self.launch_grid[0]} CTAs along the grid's x; CUDA allows at most {MAX_GRID_X}: "
                "use larger tiles"
            )
        if not self.multicast:
            return
        if self.load.rows_contiguous:
            raise TmaConfigError(
                "multicast takes row-major 2-D tensors for now (tma_partition slices a column-major "
                "tile along its columns, which tmakit's slice arithmetic does not describe)"
            )
        if self.load.config.tile[0] % self.cluster_size:
            raise TmaConfigError(
                f"tile rows {self.load.config.tile[0]} do not split into {self.cluster_size} equal slices "
                "(one per CTA of the cluster)"
            )
        alignment = self.load.destination_alignment
        if self.issued_bytes_per_cta % alignment:
            swizzle = self.load.config.swizzle
            why = f"the {swizzle}B swizzle's pattern repeats every {alignment} bytes" if swizzle else "TMA's"
            row_bytes = self.load.expected_tx_bytes // self.load.config.tile[0]
            rows = self.cluster_size * alignment // math.gcd(alignment, row_bytes)
            raise TmaConfigError(
                f"each CTA's slice is {self.issued_bytes_per_cta} bytes; its shared destination must stay "
                f"{alignment}-byte aligned ({why}): use tile rows a multiple of {rows}"
            )

    @property
    def copies_shape(self) -> tuple[int, ...]:
        """The kernels' store-back output: one padded copy of the tensor per CTA rank."""
        return (self.cluster_size, *self.load.padded_shape)

    @property
    def pipeline(self) -> PipelinePlan:
        """Each CTA's ring when `stages` > 1: one producer warp, one consumer warp; the tile
        order is the strip's (the block index the ring's arithmetic sees is the cluster's)."""
        return PipelinePlan(self.load, stages=self.stages, consumer_warps=1)

    @property
    def clusters(self) -> int:
        """Clusters launched: one per strip of rows, or the persistent ones (no more than tiles)."""
        if self.persistent_clusters is None:
            return self.load.grid
        return min(self.persistent_clusters, self.load.total_tile_loads)

    @property
    def walk(self) -> TileWalk:
        """Which tile the `step`-th load of cluster k is (every CTA of the cluster loads the same
        tiles): its strip's tiles in order, or, persistent, tiles k, k + clusters, ... of the
        row-major order of tiles."""
        load = self.load
        persistent = self.persistent_clusters is not None
        return TileWalk(load.row_blocks, load.tiles_per_block, 1, self.clusters, persistent)

    @property
    def num_multicast(self) -> int:
        """CTAs each TMA load lands in (1: the baseline, no multicast)."""
        return self.cluster_size if self.multicast else 1

    @property
    def slice_rows(self) -> int:
        """Rows of each tile one CTA issues (the whole tile without multicast)."""
        return self.load.config.tile[0] // self.cluster_size if self.multicast else self.load.config.tile[0]

    def slice_of(self, cta_rank: int) -> tuple[int, int]:
        """Tile rows [first, last) CTA `cta_rank` of the cluster loads and multicasts."""
        if not self.multicast:
            return 0, self.load.config.tile[0]
        return cta_rank * self.slice_rows, (cta_rank + 1) * self.slice_rows

    @property
    def multicast_mask(self) -> int:
        """Destination CTAs of every slice: all of the cluster."""
        return (1 << self.cluster_size) - 1 if self.multicast else 1

    @property
    def issued_bytes_per_cta(self) -> int:
        """Bytes each CTA asks TMA for per tile: its slice (the barrier still expects the whole tile)."""
        return self.load.expected_tx_bytes * self.slice_rows // self.load.config.tile[0]

    def grid_line(self) -> str:
        """The launch as `LoadPlan.summary` writes its grid: CTAs in clusters, not the blocks of a
        launch without one, each one warp (a ring's: a producer and a consumer warp)."""
        x, y, _ = self.launch_grid
        threads = self.pipeline.threads_per_block if self.stages > 1 else self.load.threads_per_block
        return f"grid              ({x}, {y}, 1) = {self.grid} CTAs x {threads} threads"

    def cluster_drawing(self) -> list[str]:
        """The cluster's CTAs where the launch puts them, rank r = x + y * columns: a row per y."""
        columns, rows = self.cluster
        return [
            f"{'  CTA ranks' if y == 0 else '':<18}y={y} "
            + "".join(f"[CTA {x + y * columns}]" for x in range(columns))
            for y in range(rows)
        ]

    def summary(self) -> str:
        rows = [
            f"cluster           {self.cluster[0]}x{self.cluster[1]} = {self.cluster_size} CTAs, "
            f"{self.cluster[0]} along x and {self.cluster[1]} along y; "
            f"{self.grid} CTAs in {self.clusters} clusters, "
            + (
                "one strip of rows per cluster"
                if self.persistent_clusters is None
                else f"persistent: each walks every {self.clusters}th tile, cluster 0 {self.most_steps} tiles"
            ),
            *self.cluster_drawing(),
        ]
        if self.multicast:
            rows.append(
                f"multicast         mask {self.multicast_mask:#06b}: "
                "each slice lands in every CTA of the cluster"
            )
            for rank in range(self.cluster_size):
                first, last = self.slice_of(rank)
                rows.append(
                    f"  CTA {rank}: tile rows {first}-{last - 1} ({self.issued_bytes_per_cta} bytes issued), "
                    f"barrier expects {self.load.expected_tx_bytes} bytes"
                )
        else:
            rows.append("no multicast      every CTA loads the whole tile itself (the baseline)")
        if self.stages > 1:
            peers = self.num_multicast
            rows.append(
                f"ring              {self.stages} stages per CTA; a stage is reused once the consumer warps "
                f"of {'all ' + str(peers) + ' CTAs' if peers > 1 else 'this CTA'} released it "
                f"(empty barrier: {peers} arrival(s))"
            )
        return "\n".join(rows)
