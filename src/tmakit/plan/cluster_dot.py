"""The cluster row dot, out[b, m] = sum_k A[b, m, k] * X[m, k]: CTAs of a cluster reuse a shared
tile. Pure Python.

A cluster takes `cluster_size` consecutive batch elements (CTA rank r takes batch element
group * cluster_size + r) and one strip of tile rows at a time. Per column tile of the strip each
CTA needs its own A tile and the X tile every CTA of the cluster shares: with multicast each CTA
issues its slice of X into every CTA (`MulticastPlan`), without it each loads the whole X tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import LoadConfig
from ..errors import TmaConfigError
from ..limits import MAX_GRID_X
from ..validate import check_field_types
from .load import LoadPlan
from .multicast import ClusterLaunch, MulticastPlan, check_cluster
from .ring import PipelinePlan, TileWalk, check_stages, check_walk, stages_fitting

DOT_DTYPES = ("fp16", "bf16")  # inputs; the products are summed in fp32


@dataclass(frozen=True)
class StripWalk:
    """Which tile the `step`-th load of cluster k is: whole strips, each strip's column tiles in
    order, so a CTA finishes a row's sum before it moves on (no atomics). `strips` walks the
    (group, row block) strips as one-tile rows: strip k alone, or persistent, strips k,
    k + clusters, ... Runs on plain integers on the host and, traced, on device integers."""

    strips: TileWalk
    column_tiles: int

    def tiles_of_block(self, cluster):
        """Loads of cluster `cluster`: its strips' column tiles."""
        return self.strips.tiles_of_block(cluster) * self.column_tiles

    def tile_of(self, cluster, step):
        """(group, row block, column tile) of cluster `cluster`'s `step`-th load."""
        strip_step = step // self.column_tiles
        group, row_block, _ = self.strips.tile_of(cluster, strip_step)
        return group, row_block, step - strip_step * self.column_tiles


@dataclass(frozen=True)
class ClusterDotPlan(ClusterLaunch):
    """out[b, m] = sum_k A[b, m, k] * X[m, k] for A of `shape` (B, M, K) and X (M, K), both
    row-major and compact, fp16 or bf16, out (B, M) fp32.

    Each CTA runs a ring of `stages`; a stage holds an A tile and an X tile of the same layout
    and swizzle. Its full barrier expects both tiles' bytes (`expected_tx_bytes`); its empty
    barrier expects `consumer_warps` arrivals from every CTA the X tile is multicast to. The
    `multicast=False` baseline is the same kernel, cluster and launch, each CTA loading the whole
    X tile itself. `persistent_clusters`: that many clusters stay resident and walk the strips
    (`walk`); None: one cluster per (batch group, strip). `cluster`: any shape of 2 to 8 CTAs
    (`MulticastPlan`'s rule; X's slices need tile rows that split over the cluster, each slice
    aligned as TMA asks for the swizzle)."""

    shape: tuple[int, ...]  # (B, M, K)
    dtype: str = "fp16"
    tile: tuple[int, int] = (64, 128)
    cluster: tuple[int, int] = (1, 2)
    multicast: bool = True
    stages: int = 4
    consumer_warps: int = 4
    persistent_clusters: int | None = None
    swizzle: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster", check_cluster(self.cluster))
        check_field_types(self)
        if len(self.shape) != 3:
            raise TmaConfigError(
                f"shape {self.shape}: the cluster dot takes A as (B, M, K), 3 extents; "
                "give a batch of 1 as (1, M, K)"
            )
        if self.dtype not in DOT_DTYPES:
            raise TmaConfigError(
                f"dtype {self.dtype!r}: the cluster dot takes {' or '.join(DOT_DTYPES)} inputs "
                "(it sums the products in fp32)"
            )
        self.a_load  # noqa: B018 - validates A (and X, its last two extents) as TMA loads them
        self.x_load  # noqa: B018
        multicast = self.x_multicast  # validates the cluster shape and X's slices
        batch = self.shape[0]
        if batch % multicast.cluster_size:
            raise TmaConfigError(
                f"batch {batch} is not a multiple of the cluster's {multicast.cluster_size} CTAs (each "
                f"CTA of a cluster takes one batch element): use a batch of a multiple of "
                f"{multicast.cluster_size} or a smaller cluster"
            )
        if self.stages < 2:
            raise TmaConfigError(f"{self.stages} stages; the cluster dot's ring needs 2 or more")
        check_stages(self.stages, self.max_stages, self.stage_bytes)
        self.pipeline  # noqa: B018 - validates the consumer warps
        if self.persistent_clusters is not None and self.persistent_clusters < 1:
            raise TmaConfigError(
                f"persistent clusters is {self.persistent_clusters}; give 1 or more, or None for one "
                "cluster per strip"
            )
        check_walk(self.walk.strips)
        if self.launch_grid[0] > MAX_GRID_X:
            raise TmaConfigError(
                f"{self.launch_grid[0]} CTAs along the grid's x; CUDA allows at most {MAX_GRID_X}: "
                "use larger tiles or persistent clusters"
            )

    # -- the loads ------------------------------------------------------------------------------
    @property
    def a_load(self) -> LoadPlan:
        """A (B, M, K): each CTA loads its own batch element's tiles, into itself only."""
        return LoadPlan(LoadConfig(self.shape, self.dtype, self.tile, self.swizzle))

    @property
    def x_load(self) -> LoadPlan:
        """X (M, K): the tile every CTA of the cluster shares."""
        return LoadPlan(LoadConfig(self.shape[1:], self.dtype, self.tile, self.swizzle))

    @property
    def x_multicast(self) -> MulticastPlan:
        """X's cluster loads: the slices, the mask and the CTAs each load lands in (the walk and
        the ring are this plan's, not the MulticastPlan's)."""
        return MulticastPlan(self.x_load, self.cluster, self.multicast)

    @property
    def pipeline(self) -> PipelinePlan:
        """Each CTA's ring as `TileRing` sees it: the X tile's stages, barriers, parities and the
        consumers' row-sum mapping (the A tiles' ring has the same layout beside it)."""
        return PipelinePlan(self.x_load, stages=self.stages, consumer_warps=self.consumer_warps)

    # -- shared memory and bytes ----------------------------------------------------------------
    @property
    def tile_bytes(self) -> int:
        """One tile's bytes (A's and X's are the same shape)."""
        return self.x_load.expected_tx_bytes

    @property
    def expected_tx_bytes(self) -> int:
        """What a stage's full barrier expects per trip: this CTA's A tile and the whole X tile
        (with multicast every CTA's slice lands here; partial tiles count the whole box)."""
        return self.a_load.expected_tx_bytes + self.x_load.expected_tx_bytes

    @property
    def stage_bytes(self) -> int:
        """A stage's two tiles, each rounded up to keep the next TMA destination aligned."""
        return 2 * PipelinePlan(self.x_load, stages=1).stage_bytes

    @property
    def max_stages(self) -> int:
        """Stages whose two tiles and two barriers fit a block's shared memory."""
        return stages_fitting(self.stage_bytes)

    @property
    def smem_bytes(self) -> int:
        """The X ring, then the A ring (each at a tile-aligned offset), then the barriers."""
        pipeline = self.pipeline
        return 2 * pipeline.ring_bytes + pipeline.barrier_bytes

    @property
    def threads_per_block(self) -> int:
        return self.pipeline.threads_per_block

    # -- the grid -------------------------------------------------------------------------------
    @property
    def groups(self) -> int:
        """Batch groups: each cluster's CTAs take `cluster_size` consecutive batch elements."""
        return self.shape[0] // self.cluster_size

    @property
    def strips(self) -> int:
        """(batch group, strip of tile rows) pairs: what one cluster finishes at a time."""
        return self.groups * self.x_load.row_blocks

    @property
    def clusters(self) -> int:
        """Clusters launched: one per strip, or the persistent ones (no more than strips)."""
        if self.persistent_clusters is None:
            return self.strips
        return min(self.persistent_clusters, self.strips)

    @property
    def walk(self) -> StripWalk:
        """Cluster k's loads: (group, row block, column tile) per step (`StripWalk`)."""
        x_load = self.x_load
        persistent = self.persistent_clusters is not None
        strips = TileWalk(x_load.row_blocks, 1, self.groups, self.clusters, persistent)
        return StripWalk(strips, x_load.tiles_per_block)

    @property
    def out_shape(self) -> tuple[int, int]:
        """out: (B, M) fp32, every element written once."""
        return self.shape[0], self.shape[1]

    @property
    def x_shape(self) -> tuple[int, int]:
        return self.shape[1], self.shape[2]

    def batch_of(self, group: int, rank: int) -> int:
        """The batch element CTA `rank` of a cluster takes in batch group `group`."""
        return group * self.cluster_size + rank

    # -- bytes moved ----------------------------------------------------------------------------
    @property
    def input_bytes(self) -> int:
        """A and X: what the kernel must read from memory at least."""
        return self.a_load.tensor_bytes + self.x_load.tensor_bytes

    @property
    def l2_read_bytes(self) -> int:
        """Bytes the CTAs ask L2 for: every A tile once; X once per cluster with multicast, once
        per CTA without (partial tiles counted as whole boxes)."""
        tiles = self.strips * self.x_load.tiles_per_block
        x_reads = 1 if self.multicast else self.cluster_size
        return tiles * self.tile_bytes * (self.cluster_size + x_reads)

    def summary(self) -> str:
        batch, rows, cols = self.shape
        multicast = self.x_multicast
        lines = [
            f"cluster dot       out[b, m] = sum_k A[b, m, k] * X[m, k]; A {batch}x{rows}x{cols} "
            f"{self.dtype}, X {rows}x{cols}, fp32 sums",
            f"tile              {self.tile[0]} x {self.tile[1]} ({self.tile_bytes} bytes) for A and X"
            + (f", {self.swizzle}B swizzle" if self.swizzle else ""),
            f"cluster           {self.cluster[0]}x{self.cluster[1]} = {self.cluster_size} CTAs, CTA r takes "
            f"batch element group x {self.cluster_size} + r; {self.grid} CTAs in {self.clusters} clusters, "
            + (
                "one strip per cluster"
                if self.persistent_clusters is None
                else f"persistent: each walks every {self.clusters}th strip, cluster 0 "
                f"{self.most_steps} tiles"
            ),
            (
                f"X tile            multicast, mask {multicast.multicast_mask:#06b}: each CTA issues "
                f"{multicast.slice_rows} rows ({multicast.issued_bytes_per_cta} bytes)"
                if self.multicast
                else "X tile            no multicast: every CTA loads the whole X tile itself (the baseline)"
            ),
            f"ring              {self.stages} stages x (A + X) = {self.stage_bytes} bytes; 1 producer + "
            f"{self.consumer_warps} consumer warps; shared memory {self.smem_bytes} bytes "
            f"(at most {self.max_stages} stages fit)",
            f"barriers          full expects {self.expected_tx_bytes} bytes (A + whole X); empty expects "
            f"{self.consumer_warps * multicast.num_multicast} arrivals",
        ]
        return "\n".join(lines)
