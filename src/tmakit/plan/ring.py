"""A `LoadPlan` run as an N-stage ring: stages, barriers, parities, the persistent grid's tile
order, and the copy consumer's options. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TmaConfigError
from ..limits import (
    BANK_ROW_BYTES,
    DEFAULT_SM_COUNT,
    L2_HINTS,
    MAX_CONSUMER_WARPS,
    MBARRIER_BYTES,
    SMEM_PER_BLOCK,
    STAGING_TILE_ALIGN,
    VECTOR_BYTES,
    WARP_THREADS,
)
from .load import LoadPlan, ceil_div
from .mappings import RowSumMapping, TransposeMapping

TILE_ORDERS = ("interleaved", "columns", "blocked")  # a persistent grid's walk (PipelinePlan.tile_order)
# One record per role, [timed out, block, stage, parity, expected bytes, step, 0, 0]: the producer's
# at words 0-7, the consumers' at 8-15. Separate, because when a full barrier never completes the
# producer soon times out too (nobody frees a stage) and would overwrite the root cause.
GUARD_RECORD = 8
GUARD_WORDS = 2 * GUARD_RECORD
PRODUCER, CONSUMER = 0, 1  # the roles, in record order


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
    prefetch_tiles: int = 0  # the producer also prefetches the tile this many loads ahead into L2
    prefetch_descriptor: bool = False  # prefetch the TMA descriptor at kernel start
    # A layout-changing copy: consumers transpose each stage into one of two staging tiles that a
    # TMA store writes out with the other contiguous mode (`transpose_mapping`).
    transpose: bool = False
    # The "copy" consumer: TMA stores allowed in flight before the oldest must have read its stage
    # (capped at `stages`: a stage is released only once its store has read it).
    store_depth: int = 2
    # Loads (and a copy's stores) hint L2 to evict their lines first: a streaming copy touches
    # each byte once, so its lines need not displace anything else.
    evict_first: bool = False
    # Programmatic dependent launch: the kernel may start while the previous kernel on the stream
    # finishes (its barrier set-up overlapping that kernel's tail), waits for it to complete
    # before touching global memory, then lets the next kernel start the same way.
    pdl: bool = False
    # L2 eviction-priority hints (`L2_HINTS`) of the loads and of a copy's stores, overriding
    # `evict_first` for that side; "none" gives no hint.
    load_hint: str | None = None
    store_hint: str | None = None
    # Persistent grids: "interleaved" (block b takes tiles b, b + grid, ...: the grid sweeps the
    # tensor together, along each strip of rows), "columns" (interleaved, but counting tiles down
    # each column of tiles first: the tiles in flight spread over many strips of rows) or
    # "blocked" (each block one contiguous run of tiles).
    tile_order: str = "interleaved"
    # The "copy" consumer over a compact row-major matrix whose tiles span whole rows (each tile
    # one contiguous run of memory): non-tensor bulk copies (`cp.async.bulk`) of each run, by
    # address and byte count, instead of tensor-map TMA; the host encodes no tensor maps.
    bulk: bool = False

    def __post_init__(self) -> None:
        for hint in (self.load_hint, self.store_hint):
            if hint is not None and hint not in L2_HINTS:
                raise TmaConfigError(f"L2 hint {hint!r}; one of {', '.join(L2_HINTS)}")
        if self.tile_order not in TILE_ORDERS:
            raise TmaConfigError(f"tile order {self.tile_order!r}; one of {', '.join(TILE_ORDERS)}")
        if self.transpose:
            self._check_transpose()
        if self.bulk:
            self._check_bulk()
        if not 1 <= self.consumer_warps <= MAX_CONSUMER_WARPS:
            raise TmaConfigError(
                f"consumer warps is {self.consumer_warps}; a block has 1 producer + 1..{MAX_CONSUMER_WARPS}"
            )
        if self.sm_count < 1 or self.blocks_per_sm < 1:
            raise TmaConfigError(
                f"sm_count {self.sm_count} and blocks_per_sm {self.blocks_per_sm} must be >= 1"
            )
        if self.store_depth < 1:
            raise TmaConfigError(f"store depth is {self.store_depth}; at least one store must be in flight")
        if self.prefetch_tiles < 0:
            raise TmaConfigError(f"prefetch distance is {self.prefetch_tiles} tiles; it must be >= 0")
        if self.tile_order == "blocked" and self.grid * self.load.total_tile_loads >= 2**31:
            raise TmaConfigError("blocked tile order: grid x tiles must fit 32-bit device arithmetic")
        if self.stages < 1 or self.stages > self.max_stages:
            raise TmaConfigError(
                f"{self.stages} stages of {self.stage_bytes} bytes (+ {2 * MBARRIER_BYTES} bytes of barriers "
                f"each) do not fit the {SMEM_PER_BLOCK}-byte shared memory of a Hopper block; "
                f"1..{self.max_stages} stages fit this tile"
            )

    @property
    def stage_bytes(self) -> int:
        """One stage's tile, rounded up so that the next stage starts aligned as TMA needs."""
        alignment = self.load.tile_alignment
        return ceil_div(self.load.expected_tx_bytes, alignment) * alignment

    @property
    def max_stages(self) -> int:
        # A stage and its two barriers; staging tiles and their alignment come first.
        staging = self.staging_bytes + STAGING_TILE_ALIGN if self.transpose else 0
        return (SMEM_PER_BLOCK - staging) // (self.stage_bytes + 2 * MBARRIER_BYTES)

    @property
    def smem_bytes(self) -> int:
        """The stages (at offset 0 of the 1024-aligned dynamic shared memory), then the full and
        the empty barrier of each stage, then (transposing) the staging tiles, 1024-aligned."""
        if self.transpose:
            return self.staging_offset + self.staging_bytes
        return self.ring_bytes + self.barrier_bytes

    @property
    def staging_offset(self) -> int:
        """Where a transposing copy's staging tiles start."""
        return ceil_div(self.ring_bytes + self.barrier_bytes, STAGING_TILE_ALIGN) * STAGING_TILE_ALIGN

    @property
    def staging_bytes(self) -> int:
        """A transposing copy's two staging tiles: one being filled while the other's TMA store
        reads it."""
        return 2 * self.stage_bytes if self.transpose else 0

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
            return min(self.load.total_tile_loads, self.sm_count * self.blocks_per_sm)
        return self.load.grid

    @property
    def load_policy(self) -> int | None:
        """The loads' 64-bit L2 cache policy (None: no hint)."""
        return self._policy(self.load_hint)

    @property
    def store_policy(self) -> int | None:
        """A copy's stores' 64-bit L2 cache policy (None: no hint)."""
        return self._policy(self.store_hint)

    def _policy(self, hint: str | None) -> int | None:
        """One side's hint, else `evict_first`'s."""
        return L2_HINTS[hint or ("evict_first" if self.evict_first else "none")]

    # The next four run on the host and, traced, in the kernel (device integers): one source.
    def first_tile(self, block):
        """Where a "blocked" block's run of tiles starts (block * tiles // grid)."""
        return block * self.load.total_tile_loads // self.grid

    def tiles_of_block(self, block):
        """Tiles block `block` loads: its strip's, or its share of the tiles when persistent."""
        if self.persistent:
            if self.tile_order == "blocked":
                return self.first_tile(block + 1) - self.first_tile(block)
            return ceil_div(self.load.total_tile_loads - block, self.grid)
        return self.load.tiles_per_block

    def tile_of(self, block, step):
        """(batch, row_block, column_tile) of the `step`-th tile block `block` loads."""
        load = self.load
        if not self.persistent:
            index = block * load.tiles_per_block + step
        elif self.tile_order == "blocked":
            index = self.first_tile(block) + step
        else:
            index = block + step * self.grid
        if self.persistent and self.tile_order == "columns":
            matrix_tiles = load.row_blocks * load.tiles_per_block
            batch = index // matrix_tiles
            within = index - batch * matrix_tiles
            column_tile = within // load.row_blocks
            return batch, within - column_tile * load.row_blocks, column_tile
        strip = index // load.tiles_per_block
        batch = strip // load.row_blocks
        return batch, strip - batch * load.row_blocks, index - strip * load.tiles_per_block

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

    @property
    def stores_in_flight(self) -> int:
        """The copy consumer's TMA stores in flight: `store_depth`, at most one per stage."""
        return min(self.store_depth, self.stages)

    @property
    def transpose_mapping(self) -> TransposeMapping:
        """How the consumer threads transpose a stage (see TransposeMapping)."""
        load = self.load
        tile_rows, tile_cols = load.config.tile
        # As stored: a column-major tile is tile_cols rows of tile_rows elements.
        source_rows, source_width = (tile_cols, tile_rows) if load.rows_contiguous else (tile_rows, tile_cols)
        vector = VECTOR_BYTES // load.config.element.nbytes
        return TransposeMapping(
            vector, source_rows, source_width // vector, WARP_THREADS * self.consumer_warps
        )

    def _check_transpose(self) -> None:
        """A transposing copy needs both tile extents to be whole 128-byte multiples (each stored
        row then starts in bank group 0, which the conflict-free mapping relies on) and no
        swizzle (the staging tile is written unswizzled)."""
        load = self.load
        nbytes = load.config.element.nbytes
        if load.config.swizzle:
            raise TmaConfigError(
                f"swizzle {load.config.swizzle} with a layout-changing copy; it stages tiles unswizzled"
            )
        bad = [extent for extent in load.config.tile if extent * nbytes % BANK_ROW_BYTES]
        if bad:
            raise TmaConfigError(
                f"tile {load.config.tile} of {load.config.dtype}: a layout-changing copy needs both "
                f"tile extents to be multiples of {BANK_ROW_BYTES // nbytes} elements "
                f"({BANK_ROW_BYTES} bytes)"
            )

    def _check_bulk(self) -> None:
        """Bulk copies move contiguous runs: the matrix compact and row-major, the tile whole
        rows of it, nothing swizzled or transposed."""
        config = self.load.config
        cols = self.load.matrix_shape[1]
        checks = [
            (self.transpose, "a layout-changing copy"),
            (config.swizzle, f"swizzle {config.swizzle}"),
            (len(config.shape) != 2, f"a rank-{len(config.shape)} tensor (2-D rows views only)"),
            (config.element_strides != (cols, 1), f"strides {config.element_strides} (compact row-major)"),
            (config.tile[1] != cols, f"tile {config.tile} (whole rows of {cols} only)"),
            (self.prefetch_tiles or self.prefetch_descriptor, "prefetching (no tensor map to prefetch by)"),
        ]
        problems = [what for failed, what in checks if failed]
        if problems:
            raise TmaConfigError(f"bulk copy cannot take {', '.join(problems)}: it copies contiguous runs")

    @property
    def bulk_tile_bytes(self) -> tuple[int, int]:
        """A bulk copy's bytes per tile: (every tile but the last, the last), which holds the rows
        left over and may be shorter (a bulk copy moves exactly its bytes, nothing zero-filled)."""
        load = self.load
        tile_rows, cols = load.config.tile
        rows_short = load.row_blocks * tile_rows - load.matrix_shape[0]  # rows the last tile lacks
        return load.expected_tx_bytes, load.expected_tx_bytes - rows_short * cols * load.config.element.nbytes

    def stage_and_parity(self, step):
        """The ring slot of the `step`-th load and the parity its full-barrier wait names: each
        stage's barrier completes once per trip round the ring, so the parity flips per trip."""
        stage, trip = step % self.stages, step // self.stages
        return stage, trip % 2

    def summary(self) -> str:
        lines = [
            self.load.summary(),
            f"pipeline          {self.stages} stages x {self.stage_bytes} bytes; 1 producer warp + "
            f"{self.consumer_warps} consumer warp(s) = {self.threads_per_block} threads",
            f"shared memory     {self.smem_bytes} bytes requested (stages {self.ring_bytes} "
            f"+ full/empty barriers {self.barrier_bytes}); "
            f"at most {self.max_stages} stages fit",
        ]
        if self.transpose:
            mapping = self.transpose_mapping
            lines.append(
                f"transpose         each stage into one of 2 staging tiles ({self.staging_bytes} bytes at "
                f"{self.staging_offset}); {mapping.blocks} blocks of {mapping.vector}x{mapping.vector}, "
                f"{mapping.passes} per consumer thread"
            )
        if self.bulk:
            tile_bytes, last_bytes = self.bulk_tile_bytes
            lines.append(
                f"bulk copies       runs of {tile_bytes} bytes (the last {last_bytes}) by address, "
                "`cp.async.bulk`; no tensor maps"
            )
        if self.prefetch_tiles or self.prefetch_descriptor:
            lines.append(
                f"prefetch          tile {self.prefetch_tiles} loads ahead into L2"
                + (", TMA descriptor at kernel start" if self.prefetch_descriptor else "")
            )
        if self.persistent:
            lines.append(f"persistent grid   {self.grid} blocks, {self.tiles_of_block(0)} tiles for block 0")
        return "\n".join(lines)
