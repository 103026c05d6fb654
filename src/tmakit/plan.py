"""The seed's arithmetic for any configuration: the single source of every number.

The kernel launch, `tmakit plan`, the verifier and the tests all read grid, tile bytes and
shared-memory size from a `LoadPlan`; none of them recomputes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import LoadConfig
from .errors import TmaConfigError
from .validate import MBARRIER_BYTES, SMEM_PER_BLOCK, check_load_config


def ceil_div(a, b):
    """Ceiling of a / b for a >= 0, b > 0; plain `//`, `+`, `-`, so it also runs on the DSL's
    device integers (whose `//` truncates, which is the floor for non-negative operands)."""
    return (a + b - 1) // b


@dataclass(frozen=True)
class LoadPlan:
    """How a `LoadConfig` is split: one block (one warp) per strip of `tile[0]` rows of each
    matrix, loading that strip's column tiles one after another into one shared tile."""

    config: LoadConfig

    def __post_init__(self) -> None:
        check_load_config(self.config)

    @property
    def threads_per_block(self) -> int:
        return 32  # one warp, as in the seed

    # -- the decomposition ------------------------------------------------------------------
    @property
    def matrix_shape(self) -> tuple[int, int]:
        """(rows, columns): the last two dims, which the tile covers."""
        rows, cols = self.config.shape[-2:]
        return rows, cols

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading dims; each index is a separate matrix with its own blocks."""
        return tuple(self.config.shape[:-2])

    @property
    def batch_count(self) -> int:
        return math.prod(self.batch_shape)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of the tensor's elements (padding between rows not counted): what a load reads."""
        return math.prod(self.config.shape) * self.config.element.nbytes

    @property
    def row_blocks(self) -> int:
        """Strips of rows per matrix (ceiling: a partial strip still gets a block)."""
        return ceil_div(self.matrix_shape[0], self.config.tile[0])

    @property
    def grid(self) -> int:
        """Blocks launched: one per strip of rows of each matrix in the batch."""
        return self.row_blocks * self.batch_count

    @property
    def tiles_per_block(self) -> int:
        """Column tiles each block loads in sequence."""
        return ceil_div(self.matrix_shape[1], self.config.tile[1])

    @property
    def total_tile_loads(self) -> int:
        return self.grid * self.tiles_per_block

    @property
    def has_partial_tiles(self) -> bool:
        rows, cols = self.matrix_shape
        return rows % self.config.tile[0] != 0 or cols % self.config.tile[1] != 0

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """The extent covered by whole tiles; the verifying kernel's scratch output has this
        shape (row-major, compact, whatever the input's layout)."""
        return (
            *self.batch_shape,
            self.row_blocks * self.config.tile[0],
            self.tiles_per_block * self.config.tile[1],
        )

    @property
    def rows_contiguous(self) -> bool:
        """True when the rows dim has stride 1 (a column-major matrix, e.g. a transposed view):
        the shared tile is then column-major too, so TMA's inner box dim is the rows."""
        return self.config.contiguous_dim == "rows"

    def tile_origin(self, row_block: int, column_tile: int) -> tuple[int, int]:
        """Element coordinates of the tile's first element: (64, 512) for tile (1, 2) of the seed."""
        return (row_block * self.config.tile[0], column_tile * self.config.tile[1])

    # -- bytes ----------------------------------------------------------------------------------
    @property
    def expected_tx_bytes(self) -> int:
        """Bytes the barrier expects per phase: the whole box, even for a partial edge tile
        (TMA zero-fills the out-of-bounds part and still counts it). The barrier's own 8 bytes
        are storage, not transferred data, so they are not part of the transaction."""
        tile_rows, tile_cols = self.config.tile
        return tile_rows * tile_cols * self.config.element.nbytes

    @property
    def barrier_bytes(self) -> int:
        return MBARRIER_BYTES

    @property
    def swizzle_bits(self) -> int:
        """B of CuTe's Swizzle(B, 4, 3) on byte addresses: 0 (none), 1 (32B), 2 (64B), 3 (128B)."""
        return {0: 0, 32: 1, 64: 2, 128: 3}[self.config.swizzle]

    @property
    def tile_alignment(self) -> int:
        """Byte alignment of the shared tile: TMA destinations need 128, swizzled ones 1024
        (the swizzle pattern is a function of the address bits up to 1024)."""
        return 1024 if self.config.swizzle else 128

    @property
    def smem_bytes(self) -> int:
        """Shared memory the launch requests: the tile at offset 0 of the dynamic shared memory
        (which the DSL aligns to 1024 bytes, so no padding precedes it), then the 8-byte barrier
        (tile sizes are multiples of 16, so none follows it either). 32776 for the seed."""
        return self.expected_tx_bytes + self.barrier_bytes

    def phase_parity(self, column_tile: int) -> int:
        """The parity a block waits on for its `column_tile`-th load: 0, 1, 0, 1, ..."""
        return column_tile % 2

    # -- text -------------------------------------------------------------------------------------
    def summary(self) -> str:
        cfg = self.config
        layout = "column-major" if self.rows_contiguous else "row-major"
        shape = " x ".join(map(str, cfg.shape))
        lines = [
            f"tensor            {shape} {cfg.dtype}, {layout}, strides {cfg.element_strides} "
            f"({self.tensor_bytes} bytes)",
            f"tile              {cfg.tile[0]} x {cfg.tile[1]} ({self.expected_tx_bytes} bytes), "
            + (f"{cfg.swizzle}B swizzle" if cfg.swizzle else "no swizzle (Swizzle(0,4,3))"),
            f"grid              {self.grid} blocks x {self.threads_per_block} threads (one warp)"
            + (f" = {self.row_blocks} row blocks x {self.batch_count} batch" if self.batch_shape else ""),
            f"tiles per block   {self.tiles_per_block}",
            f"total tile loads  {self.total_tile_loads}",
            f"shared memory     {self.smem_bytes} bytes requested "
            f"(tile {self.expected_tx_bytes} + barrier {self.barrier_bytes})",
            f"expect_tx         {self.expected_tx_bytes} bytes per barrier phase",
            "phase parity      "
            + ", ".join(str(self.phase_parity(j)) for j in range(min(self.tiles_per_block, 8)))
            + (", ..." if self.tiles_per_block > 8 else ""),
        ]
        if self.has_partial_tiles:
            lines.append("partial tiles     yes: edge boxes are zero-filled by TMA past the tensor's end")
        return "\n".join(lines)

    def diagram(self, highlight: tuple[int, int] | None = None, max_blocks: int = 3) -> str:
        """The seed's tile diagram: a row per block, a box per column tile, X at `highlight`."""
        lines = [f"{'':11}" + "".join(f"{j:^5}" for j in range(self.tiles_per_block))]
        shown = sorted(
            set(range(min(max_blocks, self.row_blocks)))
            | ({highlight[0]} if highlight else set())
            | {self.row_blocks - 1}
        )
        previous = -1
        for row_block in shown:
            if row_block != previous + 1:
                lines.append("   ...")
            boxes = "".join(
                "[ X ]" if highlight == (row_block, j) else "[   ]" for j in range(self.tiles_per_block)
            )
            lines.append(f"block {row_block:<4} {boxes}")
            previous = row_block
        if highlight is not None:
            row_block, column_tile = highlight
            if not (0 <= row_block < self.row_blocks and 0 <= column_tile < self.tiles_per_block):
                raise ValueError(
                    f"tile {highlight} is outside the {self.row_blocks} x {self.tiles_per_block} tile grid"
                )
            r0, c0 = self.tile_origin(row_block, column_tile)
            r1 = min(r0 + self.config.tile[0], self.matrix_shape[0]) - 1
            c1 = min(c0 + self.config.tile[1], self.matrix_shape[1]) - 1
            lines.append(
                f"tile ({row_block}, {column_tile}): element origin ({r0}, {c0}); "
                f"rows {r0}-{r1}, columns {c0}-{c1}"
            )
        return "\n".join(lines)


# 64-bit L2 cache policies for TMA's `.L2::cache_hint` (CUTLASS's `TMA::CacheHintSm90`); "none":
# no hint.
L2_HINTS = {
    "none": None,
    "evict_first": 0x12F0000000000000,
    "evict_normal": 0x1000000000000000,
    "evict_last": 0x14F0000000000000,
}
TILE_ORDERS = ("interleaved", "columns", "blocked")  # a persistent grid's walk (PipelinePlan.tile_order)
H200_SMS = 132  # default for persistent grids; the GPU path passes the real count


@dataclass(frozen=True)
class RowSumMapping:
    """The row-sum consumer's split of a row-major tile: 16-byte chunks of `vector` elements,
    `chunks` per row; `threads_per_row` adjacent lanes share a row (combined by shuffles), so
    `rows_per_pass` rows are summed at once and each thread keeps `row_slots` fp32 accumulators.
    Share `part` of a row reads chunk (part + threads_per_row * (step + row)) mod chunks: the
    start rotates with the row, so the 8 lanes of a 16-byte access phase hit 8 different
    bank groups although rows are a multiple of 128 bytes apart."""

    vector: int
    chunks: int
    threads_per_row: int
    rows_per_pass: int
    row_slots: int

    # Run on the host (tests) and, traced, in the kernel (device integers): one source.
    def row_and_part(self, thread, slot):
        """(tile row, share of that row) of consumer thread `thread`'s accumulator `slot`."""
        return thread // self.threads_per_row + slot * self.rows_per_pass, thread % self.threads_per_row

    def chunk(self, row, part, step):
        """The 16-byte chunk of `row` that share `part` reads at `step` (0 .. chunks/threads_per_row)."""
        return (part + self.threads_per_row * (step + row)) % self.chunks


STAGING_ALIGNMENT = 1024  # a transposing copy's staging tiles, as TMA stores read them


@dataclass(frozen=True)
class TransposeMapping:
    """A layout-changing copy's transpose of one stage in shared memory, from the stored source
    tile (`source_rows` rows of `source_chunks` 16-byte chunks) into a staging tile stored the
    other way round (`source_chunks * vector` rows of `source_rows` elements).

    A thread moves one `vector` x `vector` block at a time: `vector` 16-byte reads (one chunk of
    `vector` consecutive source rows), a transpose in registers, `vector` 16-byte writes (one
    chunk of `vector` consecutive staging rows). Both row widths are multiples of 128 bytes, so
    a 16-byte access's bank group is its chunk index mod 8; block `index` reads chunk
    `index mod source_chunks` and writes chunk `(index / source_chunks + that) mod row_blocks`,
    so the 8 lanes of an access phase hit 8 different bank groups on both sides."""

    vector: int
    source_rows: int
    source_chunks: int
    threads: int

    @property
    def row_blocks(self) -> int:
        """Blocks of `vector` source rows (= 16-byte chunks of a staging row)."""
        return self.source_rows // self.vector

    @property
    def blocks(self) -> int:
        return self.row_blocks * self.source_chunks

    @property
    def passes(self) -> int:
        """Blocks each consumer thread moves per stage (the last pass may leave threads idle)."""
        return ceil_div(self.blocks, self.threads)

    # Run on the host (tests) and, traced, in the kernel (device integers): one source.
    def block(self, index):
        """(row block, chunk) of block `index`: source rows row_block*vector.., chunk `chunk`;
        staging rows chunk*vector.., chunk `row_block`."""
        chunk = index % self.source_chunks
        return (index // self.source_chunks + chunk) % self.row_blocks, chunk


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
    sm_count: int = H200_SMS
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
        if not 1 <= self.consumer_warps <= 31:
            raise TmaConfigError(f"consumer warps is {self.consumer_warps}; a block has 1 producer + 1..31")
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
        staging = self.staging_bytes + STAGING_ALIGNMENT if self.transpose else 0
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
        return ceil_div(self.ring_bytes + self.barrier_bytes, STAGING_ALIGNMENT) * STAGING_ALIGNMENT

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
        return 32 * (1 + self.consumer_warps)

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
        vector = 16 // load.config.element.nbytes
        chunks = tile_cols // vector
        threads = 32 * self.consumer_warps
        per_row = 1
        while per_row * 2 * tile_rows <= threads and chunks % (per_row * 2) == 0 and per_row < 32:
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
        vector = 16 // load.config.element.nbytes
        return TransposeMapping(vector, source_rows, source_width // vector, 32 * self.consumer_warps)

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
        bad = [extent for extent in load.config.tile if extent * nbytes % 128]
        if bad:
            raise TmaConfigError(
                f"tile {load.config.tile} of {load.config.dtype}: a layout-changing copy needs both "
                f"tile extents to be multiples of {128 // nbytes} elements (128 bytes)"
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


CLUSTER_SHAPES = ((1, 2), (2, 1), (2, 2), (1, 4))  # the original author's examples


@dataclass(frozen=True)
class MulticastPlan:
    """A `LoadPlan` where every CTA of a cluster needs the same tiles (as all CTAs in a row of a
    GEMM read the same operand tiles): each cluster walks one strip of rows; each CTA issues only
    its slice of every tile and multicasts it to all CTAs of the cluster, so every CTA's barrier
    expects the whole tile's bytes. `multicast=False` is the baseline: the same CTAs, each loading
    the whole tile itself. `stages` > 1 runs each CTA as an N-stage ring (`pipeline`): a producer
    warp and a consumer warp, a stage reused only once every CTA's consumer released it."""

    load: LoadPlan
    cluster: tuple[int, int] = (1, 2)
    multicast: bool = True
    stages: int = 1

    def __post_init__(self) -> None:
        if tuple(self.cluster) not in CLUSTER_SHAPES:
            raise TmaConfigError(f"cluster {self.cluster} is not one of {CLUSTER_SHAPES}")
        if self.stages > 1:
            self.pipeline  # noqa: B018 - validates the stage count
        if not self.multicast:
            return
        if self.load.rows_contiguous or len(self.load.config.shape) != 2:
            raise TmaConfigError(
                "multicast takes row-major 2-D tensors for now (tma_partition slices a column-major "
                "tile along its columns, which tmakit's slice arithmetic does not describe)"
            )
        if self.load.config.tile[0] % self.cluster_size:
            raise TmaConfigError(
                f"tile rows {self.load.config.tile[0]} do not split into {self.cluster_size} equal slices "
                "(one per CTA of the cluster)"
            )
        if self.issued_bytes_per_cta % self.load.tile_alignment:
            raise TmaConfigError(
                f"each CTA's slice is {self.issued_bytes_per_cta} bytes; its shared destination must stay "
                f"{self.load.tile_alignment}-byte aligned (use more tile rows)"
            )

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]

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
    def grid(self) -> int:
        """CTAs launched: one cluster per strip of rows."""
        return self.load.grid * self.cluster_size

    @property
    def launch_grid(self) -> tuple[int, int, int]:
        """The launch's grid: clusters side by side along x, so that (cx, cy, 1) clusters tile it
        and a CTA's strip is its cluster's x index."""
        return (self.load.grid * self.cluster[0], self.cluster[1], 1)

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

    def summary(self) -> str:
        rows = [
            f"cluster           {self.cluster[0]}x{self.cluster[1]} = {self.cluster_size} CTAs; "
            f"{self.grid} CTAs in {self.load.grid} clusters, one strip of rows per cluster",
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
