"""The cluster family's plans, pure Python: clusters whose CTAs share a tile.

- `MulticastPlan`, cluster loads: every CTA of a cluster needs every tile; each issues its slice
  and multicasts it to all;
- `ClusterDotPlan`, the cluster row dot, out[b, m] = sum_k A[b, m, k] * X[m, k]: CTAs of a cluster
  reuse a shared tile. A cluster takes `cluster_size` consecutive batch elements (CTA rank r takes
  batch element group * cluster_size + r) and one strip of tile rows at a time. Per column tile of
  the strip each CTA needs its own A tile and the X tile every CTA of the cluster shares: with
  multicast each CTA issues its slice of X into every CTA (`MulticastPlan`), without it each loads
  the whole X tile.

How a ring's consumers free a stage in the peers (`plan.ring.RELEASES`) is the core ring's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import LoadConfig
from ..errors import TmaConfigError
from ..limits import MAX_CLUSTER_SIZE, MAX_GRID_X
from ..plan import LoadPlan, PipelinePlan
from ..plan.ring import TileWalk, check_stages, check_walk, stages_fitting
from ..validate import check_field_types, whole_numbers

# What the core's commands read by name (`registry.exporting`): the plans they draw with --cluster.
__all__ = ["CLUSTER_SHAPES", "MulticastPlan"]


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
