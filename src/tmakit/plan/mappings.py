"""How a pipelined kernel's consumer threads split a tile in shared memory: the row sum's and
the transposing copy's thread mappings. Pure Python; the kernels trace the same methods."""

from __future__ import annotations

from dataclasses import dataclass

from .load import ceil_div


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
