"""A `LoadPlan` run as an N-stage ring: stages, barriers, parities, the persistent grid's tile
order, the hang guard's record. Pure Python."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import LoadConfig
from ..errors import TmaConfigError
from ..limits import (
    DEFAULT_SM_COUNT,
    L2_HINTS,
    MAX_CONSUMER_WARPS,
    MAX_DEVICE_INT,
    MBARRIER_BYTES,
    SMEM_PER_BLOCK,
    VECTOR_BYTES,
    WARP_THREADS,
)
from ..validate import check_field_types, one_of
from .budget import ONE_BLOCK_PER_SM_SMEM
from .load import LoadPlan, ceil_div, check_tile_count
from .mappings import RowSumMapping
from .tuning import TUNING

TILE_ORDERS = ("interleaved", "columns", "blocked")  # a persistent grid's walk (PipelinePlan.tile_order)
# One record per role, [timed out, block, stage, parity, expected bytes, step, 0, 0]: the producer's
# at words 0-7, the consumers' at 8-15. Separate, because when a full barrier never completes the
# producer soon times out too (nobody frees a stage) and would overwrite the root cause.
GUARD_RECORD = 8
GUARD_WORDS = 2 * GUARD_RECORD
PRODUCER, CONSUMER = 0, 1  # the roles, in record order
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


@dataclass(frozen=True)
class PipelinePlan:
    """A `LoadPlan` run as an N-stage ring: a producer warp keeps up to `stages` TMA loads in
    flight; `consumer_warps` warps wait on each stage's "full" barrier, use the tile and release
    the stage through its "empty" barrier. With `persistent`, about one block per SM (times
    `blocks_per_sm`) walks the tiles round-robin instead of one block per strip of rows."""

    load: LoadPlan
    stages: int = 4
    consumer_warps: int = 1
    persistent: bool = False
    sm_count: int = DEFAULT_SM_COUNT
    blocks_per_sm: int = 1
    # An SM budget's grid (`plan.budget`): each block asks for more than half an SM's shared
    # memory, so the `sm_count` blocks take one SM each.
    one_block_per_sm: bool = False
    prefetch_tiles: int = 0  # the producer also prefetches the tile this many loads ahead into L2
    prefetch_descriptor: bool = False  # prefetch the TMA descriptor at kernel start
    # Loads (and a copy's stores: `CopyPlan`) hint L2 to evict their lines first: a streaming copy
    # touches each byte once, so its lines need not displace anything else.
    evict_first: bool = False
    # Programmatic dependent launch: the kernel may start while the previous kernel on the stream
    # finishes (its barrier set-up overlapping that kernel's tail), waits for it to complete
    # before touching global memory, then lets the next kernel start the same way.
    pdl: bool = False
    # The loads' L2 eviction-priority hint (`L2_HINTS`), overriding `evict_first`; "none" gives no hint.
    load_hint: str | None = None
    # Persistent grids: "interleaved" (block b takes tiles b, b + grid, ...: the grid sweeps the
    # tensor together, along each strip of rows), "columns" (interleaved, but counting tiles down
    # each column of tiles first: the tiles in flight spread over many strips of rows) or
    # "blocked" (each block one contiguous run of tiles).
    tile_order: str = "interleaved"

    def __post_init__(self) -> None:
        check_field_types(self)
        check_l2_hint(self.load_hint)
        one_of(self.tile_order, "tile order", TILE_ORDERS)
        if not 1 <= self.consumer_warps <= MAX_CONSUMER_WARPS:
            raise TmaConfigError(
                f"consumer warps is {self.consumer_warps}; a block has 1 producer + 1..{MAX_CONSUMER_WARPS}"
            )
        if self.sm_count < 1 or self.blocks_per_sm < 1:
            raise TmaConfigError(
                f"sm_count {self.sm_count} and blocks_per_sm {self.blocks_per_sm} must be >= 1"
            )
        if self.one_block_per_sm and self.blocks_per_sm != 1:
            raise TmaConfigError(
                f"blocks_per_sm {self.blocks_per_sm} on an SM budget: a budget runs one block per SM "
                "(leave blocks_per_sm at 1)"
            )
        if self.persistent and self.persistent_blocks > MAX_DEVICE_INT:  # a shape-generic grid's count
            raise TmaConfigError(
                f"a persistent grid of {self.persistent_blocks} blocks (sm_count {self.sm_count} x "
                f"blocks_per_sm {self.blocks_per_sm}): the kernels count blocks in 32-bit integers, at "
                f"most {MAX_DEVICE_INT}; pass the device's SM count"
            )
        if self.prefetch_tiles < 0:
            raise TmaConfigError(f"prefetch distance is {self.prefetch_tiles} tiles; it must be >= 0")
        check_walk(self.walk)
        check_stages(self.stages, self.max_stages, self.stage_bytes)

    @property
    def stage_bytes(self) -> int:
        """One stage's tile, rounded up so that the next stage starts aligned as TMA needs."""
        alignment = self.load.tile_alignment
        return ceil_div(self.load.expected_tx_bytes, alignment) * alignment

    def stages_that_fit(self, reserved_bytes: int = 0) -> int:
        """Stages (each with its two barriers) that fit beside `reserved_bytes` of shared memory."""
        return stages_fitting(self.stage_bytes, reserved_bytes)

    @property
    def max_stages(self) -> int:
        return self.stages_that_fit()

    @property
    def smem_bytes(self) -> int:
        """The stages (at offset 0 of the 1024-aligned dynamic shared memory), then the full and
        the empty barrier of each stage."""
        return self.ring_bytes + self.barrier_bytes

    @property
    def ring_bytes(self) -> int:
        """The stages, each `stage_bytes` apart."""
        return self.stages * self.stage_bytes

    @property
    def barrier_bytes(self) -> int:
        """The full and the empty barrier of each stage."""
        return 2 * self.stages * MBARRIER_BYTES

    @property
    def stage_elements(self) -> int:
        """Elements from one stage to the next."""
        return self.stage_bytes // self.load.config.element.nbytes

    @property
    def threads_per_block(self) -> int:
        return WARP_THREADS * (1 + self.consumer_warps)

    @property
    def grid(self) -> int:
        if self.persistent:
            return min(self.load.total_tile_loads, self.persistent_blocks)
        return self.load.grid

    @property
    def load_policy(self) -> int | None:
        """The loads' 64-bit L2 cache policy (None: no hint)."""
        return self.policy(self.load_hint)

    def policy(self, hint: str | None) -> int | None:
        """The 64-bit L2 cache policy of one side: its hint, else `evict_first`'s."""
        return L2_HINTS[hint or ("evict_first" if self.evict_first else "none")]

    @property
    def walk(self) -> TileWalk:
        """This plan's tiles and which block takes which, in plain integers."""
        load = self.load
        return self.walk_of(load.row_blocks, load.tiles_per_block, load.batch_count, self.grid)

    def check_walk_over(self, shape: tuple[int, ...]) -> None:
        """Refuse a tensor of `shape` whose walk (a shape-generic kernel's run-time tile counts
        and grid, as the kernel computes them) would not fit 32-bit device integers."""
        tile_rows, tile_cols = self.load.config.tile
        total = ceil_div(shape[-2], tile_rows) * ceil_div(shape[-1], tile_cols)
        for extent in shape[:-2]:
            total *= extent
        check_walk_counts(total, min(total, self.persistent_blocks), self.persistent and self.tile_order)

    def walk_of(self, row_blocks, column_tiles, batch_count, grid, divisors: object = None) -> TileWalk:
        """The walk of a tensor with these many tiles on `grid` blocks, in this plan's order: a
        shape-generic kernel passes its run-time counts (device integers) and their fast
        divisors (`TileWalk.divisors`)."""
        return TileWalk(
            row_blocks, column_tiles, batch_count, grid, self.persistent, self.tile_order, divisors
        )

    @property
    def persistent_blocks(self) -> int:
        """A persistent grid's blocks when there are at least as many tiles."""
        return self.sm_count * self.blocks_per_sm

    def first_tile(self, block):
        return self.walk.first_tile(block)

    def tiles_of_block(self, block):
        return self.walk.tiles_of_block(block)

    def tile_of(self, block, step):
        return self.walk.tile_of(block, step)

    @property
    def rowsum_shape(self) -> tuple[int, ...]:
        """The row-sum consumer's output: (batch..., padded rows) fp32 row sums. The kernel adds
        into it (atomically, once per row per strip of tiles a block reads): start from zeros."""
        load = self.load
        return (*load.batch_shape, load.padded_shape[-2])

    @property
    def rowsum_mapping(self) -> RowSumMapping:
        """How the consumer threads split a row-major tile for the row sum (see RowSumMapping)."""
        load = self.load
        tile_rows, tile_cols = load.config.tile
        vector = VECTOR_BYTES // load.config.element.nbytes
        chunks = tile_cols // vector
        threads = WARP_THREADS * self.consumer_warps
        per_row = 1
        while per_row * 2 * tile_rows <= threads and chunks % (per_row * 2) == 0 and per_row < WARP_THREADS:
            per_row *= 2
        rows_per_pass = threads // per_row
        return RowSumMapping(vector, chunks, per_row, rows_per_pass, ceil_div(tile_rows, rows_per_pass))

    def stage_and_parity(self, step):
        """The ring slot of the `step`-th load and the parity its full-barrier wait names: each
        stage's barrier completes once per trip round the ring, so the parity flips per trip."""
        stage, trip = step % self.stages, step // self.stages
        return stage, trip % 2

    def summary(self) -> str:
        load, threads = self.load, self.threads_per_block
        batch = f" = {load.row_blocks} row blocks x {load.batch_count} batch" if load.batch_shape else ""
        grid = f"grid              {load.grid} blocks x {threads} threads ({threads // 32} warps){batch}"
        lines = [
            load.summary(grid),
            f"pipeline          {self.stages} stages x {self.stage_bytes} bytes; 1 producer warp + "
            f"{self.consumer_warps} consumer warp(s) = {self.threads_per_block} threads",
            f"shared memory     {self.smem_bytes} bytes requested (stages {self.ring_bytes} "
            f"+ full/empty barriers {self.barrier_bytes}); "
            f"at most {self.max_stages} stages fit",
        ]
        if self.prefetch_tiles or self.prefetch_descriptor:
            lines.append(
                f"prefetch          tile {self.prefetch_tiles} loads ahead into L2"
                + (", TMA descriptor at kernel start" if self.prefetch_descriptor else "")
            )
        if self.persistent:
            lines.append(f"persistent grid   {self.grid} blocks, {self.tiles_of_block(0)} tiles for block 0")
        if self.one_block_per_sm:
            lines.append(
                f"SM budget         {self.sm_count} SMs, one block each (each asks for at least "
                f"{ONE_BLOCK_PER_SM_SMEM} bytes of shared memory)"
            )
        return "\n".join(lines)

    @property
    def budget_note(self) -> str:
        """What an SM budget's grid adds to a grid line: its blocks one an SM ("" without one)."""
        if not self.one_block_per_sm:
            return ""
        smem = ONE_BLOCK_PER_SM_SMEM
        return f", one an SM (an SM budget: each asks for {smem} bytes of shared memory or more)"

    def launch_smem(self, kernel_bytes: int) -> int:
        """The shared memory a block is launched with, its kernel using `kernel_bytes`: on an SM
        budget at least `ONE_BLOCK_PER_SM_SMEM`, so that no two blocks share an SM."""
        return max(kernel_bytes, ONE_BLOCK_PER_SM_SMEM) if self.one_block_per_sm else kernel_bytes


@dataclass(frozen=True)
class TileWalk:
    """Which tile the `step`-th load of block `block` is: `row_blocks` x `column_tiles` tiles per
    matrix, `batch_count` matrices, `grid` blocks, walked as a `PipelinePlan` says
    (`PipelinePlan.walk`). The methods use only `+ - * //`, so they run on the host on plain
    integers and, traced, in a kernel on device integers: a shape-generic kernel builds its walk
    from the tensor's run-time counts and the launched grid. One source for both.

    `divisors` (a shape-generic kernel's): an object whose attributes `row_blocks`,
    `column_tiles`, `grid` and `matrix_tiles` are what `//` divides by instead of the counts -
    the DSL's fast divisors, made once on the host, so that no division instruction runs per
    tile (a multiply-high and a shift instead)."""

    row_blocks: int
    column_tiles: int
    batch_count: int
    grid: int
    persistent: bool = False
    tile_order: str = "interleaved"
    divisors: object = None

    @property
    def matrix_tiles(self):
        return self.row_blocks * self.column_tiles

    @property
    def total_tiles(self):
        return self.matrix_tiles * self.batch_count

    def quotient(self, dividend, count: str):
        """`dividend // self.<count>` (through the fast divisor of that count, where given)."""
        return dividend // getattr(self if self.divisors is None else self.divisors, count)

    def first_tile(self, block):
        """Where a "blocked" block's run of tiles starts (block * tiles // grid)."""
        return self.quotient(block * self.total_tiles, "grid")

    def tiles_of_block(self, block):
        """Tiles block `block` loads: its strip's, or its share of the tiles when persistent."""
        if self.persistent:
            if self.tile_order == "blocked":
                return self.first_tile(block + 1) - self.first_tile(block)
            return self.quotient(self.total_tiles - block + self.grid - 1, "grid")  # ceil_div
        return self.column_tiles

    def tile_of(self, block, step):
        """(batch, row_block, column_tile) of the `step`-th tile block `block` loads."""
        if not self.persistent:
            index = block * self.column_tiles + step
        elif self.tile_order == "blocked":
            index = self.first_tile(block) + step
        else:
            index = block + step * self.grid
        if self.persistent and self.tile_order == "columns":
            batch = self.quotient(index, "matrix_tiles")
            within = index - batch * self.matrix_tiles
            column_tile = self.quotient(within, "row_blocks")
            return batch, within - column_tile * self.row_blocks, column_tile
        strip = self.quotient(index, "column_tiles")
        batch = self.quotient(strip, "row_blocks")
        return batch, strip - batch * self.row_blocks, index - strip * self.column_tiles


def check_walk(walk: TileWalk) -> None:
    """The walk's arithmetic fits the kernels' 32-bit device integers."""
    check_walk_counts(walk.total_tiles, walk.grid, walk.persistent and walk.tile_order)


def check_walk_counts(total_tiles: int, grid: int, tile_order: str | bool) -> None:
    """`total_tiles` on `grid` blocks, walked in `tile_order` (False: not persistent), fit the
    kernels' 32-bit device integers."""
    check_tile_count(total_tiles)
    if tile_order == "blocked" and grid * total_tiles > MAX_DEVICE_INT:
        raise TmaConfigError(
            f"blocked tile order: {grid} blocks x {total_tiles} tiles must fit 32-bit device "
            "arithmetic; use the interleaved order or larger tiles"
        )


def check_l2_hint(hint: str | None, what: str = "L2 hint") -> None:
    if hint is not None:
        one_of(hint, what, L2_HINTS)


def stages_fitting(stage_bytes: int, reserved_bytes: int = 0) -> int:
    """Stages of `stage_bytes` (each with its full and empty barrier) that fit a block's shared
    memory beside `reserved_bytes`."""
    return (SMEM_PER_BLOCK - reserved_bytes) // (stage_bytes + 2 * MBARRIER_BYTES)


def check_stages(stages: int, fitting: int, stage_bytes: int, beside: str = "", fix: str = "") -> None:
    """Refuse a stage count outside 1..`fitting` (what the shared memory holds); when not even
    one stage fits beside what else the kernel keeps there (`beside`), say so and name `fix`."""
    if fitting < 1:
        raise TmaConfigError(
            f"one stage of {stage_bytes} bytes (+ {2 * MBARRIER_BYTES} bytes of barriers){beside} does "
            f"not fit the {SMEM_PER_BLOCK}-byte shared memory of a Hopper block: "
            + (fix or "use a smaller tile")
        )
    if stages < 1:
        raise TmaConfigError(f"{stages} stages; a ring needs at least 1 (1..{fitting} fit this tile)")
    if stages > fitting:
        raise TmaConfigError(
            f"{stages} stages of {stage_bytes} bytes (+ {2 * MBARRIER_BYTES} bytes of barriers "
            f"each){beside} do not fit the {SMEM_PER_BLOCK}-byte shared memory of a Hopper block; "
            f"1..{fitting} stages fit this tile"
        )


# -- rings of bulk copies (rows by index, a grouped copy): a stand-in tile sizes their stages --
# Bytes a stage aims at, so that small rows share a stage (measured: `plan.tuning`).
STAGE_TARGET_BYTES: int = TUNING["STAGE_TARGET_BYTES"].value
# The stand-in tile's width and element: 256 int32, a KiB per row of the stand-in.
_STAND_IN_WIDTH, _STAND_IN_BYTES = 256, 1024


def stand_in_tile(stage_bytes: int) -> tuple[int, int]:
    """The stand-in tile of a stage of `stage_bytes`: int32, 256 wide, whole KiB."""
    return math.ceil(stage_bytes / _STAND_IN_BYTES), _STAND_IN_WIDTH


def stand_in_ring(
    stage_bytes: int,
    stages: int,
    sm_count: int,
    consumer_warps: int = 1,
    blocks_per_sm: int = 1,
    one_block_per_sm: bool = False,
) -> PipelinePlan:
    """A ring of `stages` stages of at least `stage_bytes` for kernels of bulk copies: a
    persistent `PipelinePlan` (`consumer_warps`, `blocks_per_sm`, `one_block_per_sm` as its)
    over a stand-in load plan whose tile (`stand_in_tile`) sizes the stages and carries the
    barriers and walk; no tensor map is made from it."""
    tile = stand_in_tile(stage_bytes)
    load = LoadPlan(LoadConfig(shape=tile, dtype="int32", tile=tile))
    return PipelinePlan(
        load,
        stages=stages,
        persistent=True,
        sm_count=sm_count,
        consumer_warps=consumer_warps,
        blocks_per_sm=blocks_per_sm,
        one_block_per_sm=one_block_per_sm,
    )


def check_bulk_ring(stages: int, sm_count: int, stage_bytes: int, what: str, fix: str = "") -> None:
    """Refuse a bulk-copy ring (`stand_in_ring`) its kernel cannot run: fewer than one stage or
    SM, a persistent grid past the host code's 32-bit block count, or `stages` stages of
    `stage_bytes` (`what` describes one) that do not fit a block's shared memory (`fix`: what to
    do when not even one fits)."""
    if stages < 1 or sm_count < 1:
        raise TmaConfigError(f"stages {stages}, sm_count {sm_count}: a ring needs at least one of each")
    if sm_count > MAX_DEVICE_INT:
        raise TmaConfigError(
            f"sm_count {sm_count}: the kernel's host code counts the persistent grid's blocks in a 32-bit "
            f"integer; at most {MAX_DEVICE_INT}"
        )
    most = stages_fitting(stand_in_tile(stage_bytes)[0] * _STAND_IN_BYTES)  # as the ring counts them
    if stages > most:
        raise TmaConfigError(
            f"{stages} stages of {stage_bytes} bytes{what} do not fit the {SMEM_PER_BLOCK}-byte shared "
            f"memory of a block (each a whole KiB and {2 * MBARRIER_BYTES} bytes of barriers); {most} fit"
            + (f": {fix}" if fix and not most else "")
        )
