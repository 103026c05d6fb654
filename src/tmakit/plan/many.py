"""Many tensors, one launch: the plan of a grouped copy (`copy_many_`, `pack`, `unpack_`) of
compact pairs as chunks of contiguous bytes, each a non-tensor bulk copy in and out of a ring
stage, the chunks of every pair walked by one persistent grid.

The chunks are a table encoded on the host (`chunk_table`: source address, destination address,
bytes; int64), copied to the device once per set of tensors and kept for the next call with the
same tensors: a table is three words a chunk, where a tensor map built on the device is 128 bytes
written, fenced and acquired per tensor before its first use (`model.descriptors`), and bulk copies
need no map at all. A chunk moves at most a stage's bytes; its 16-byte multiple goes by bulk copy,
the last 1-15 bytes of an odd-sized tensor by the consumer's lanes, one byte each.

`pack_offsets` lays tensors out in one flat buffer, each at an offset aligned for TMA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, GLOBAL_BASE_ALIGN, MBARRIER_BYTES, SMEM_PER_BLOCK
from ..validate import check_field_types
from .copy import MIN_STORES_IN_FLIGHT
from .ring import PipelinePlan
from .rows import STAGE_TARGET_BYTES, stand_in_ring

DEFAULT_MANY_STAGES = 6
TABLE_WORDS = 3  # a chunk: source address, destination address, bytes
PACK_ALIGN = GLOBAL_BASE_ALIGN  # each tensor of a packed buffer starts 16-byte aligned


def pack_offsets(nbytes: Sequence[int]) -> tuple[list[int], int]:
    """(byte offset of each tensor in a packed buffer, the buffer's bytes): in order, each offset
    rounded up to `PACK_ALIGN`."""
    offsets, end = [], 0
    for size in nbytes:
        start = -(-end // PACK_ALIGN) * PACK_ALIGN
        offsets.append(start)
        end = start + size
    return offsets, end


@dataclass(frozen=True)
class ManyPlan:
    """A grouped copy's ring: chunks of up to `chunk_bytes`, one per stage of a `stages`-deep
    ring, dealt to a persistent grid of at most `sm_count` blocks."""

    stages: int = DEFAULT_MANY_STAGES
    sm_count: int = DEFAULT_SM_COUNT
    chunk_bytes: int = STAGE_TARGET_BYTES

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.chunk_bytes < GLOBAL_BASE_ALIGN or self.chunk_bytes % 1024:
            raise TmaConfigError(f"chunk_bytes is {self.chunk_bytes}; a chunk is a whole number of KiB")
        if self.stages < 1 or self.sm_count < 1:
            raise TmaConfigError(f"stages {self.stages}, sm_count {self.sm_count}: at least one of each")
        if self.smem_bytes > SMEM_PER_BLOCK:
            raise TmaConfigError(
                f"{self.stages} stages of {self.chunk_bytes} bytes do not fit the {SMEM_PER_BLOCK}-byte "
                f"shared memory of a block; {SMEM_PER_BLOCK // (self.chunk_bytes + 2 * MBARRIER_BYTES)} fit"
            )

    @property
    def smem_bytes(self) -> int:
        return self.stages * (self.chunk_bytes + 2 * MBARRIER_BYTES)

    @property
    def stores_in_flight(self) -> int:
        """Store groups in flight before the oldest must have read its stage (as a copy's)."""
        return min(max(MIN_STORES_IN_FLIGHT, self.stages // 2), self.stages)

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring the kernel runs on: stages of a stand-in tile of the chunk's bytes (int32,
        256 wide), a producer and a consumer warp, persistent."""
        return stand_in_ring(self.chunk_bytes, self.stages, self.sm_count)

    def chunk_table(self, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int]) -> np.ndarray:
        """The chunks of copying `nbytes[i]` bytes from address `src[i]` to `dst[i]`, in order, as
        (chunks, 3) int64 rows (source, destination, bytes); a pair of no bytes has none."""
        size = np.asarray(nbytes, dtype=np.int64)
        if len(size) != len(src) or len(size) != len(dst):
            raise TmaConfigError(f"{len(src)} sources, {len(dst)} destinations, {len(size)} sizes: one each")
        if (size < 0).any():
            raise TmaConfigError("a pair has a negative byte count")
        counts = -(-size // self.chunk_bytes)
        pair = np.repeat(np.arange(len(size)), counts)
        first = np.cumsum(counts) - counts
        offset = (np.arange(len(pair)) - np.repeat(first, counts)) * self.chunk_bytes
        table = np.empty((len(pair), TABLE_WORDS), dtype=np.int64)
        table[:, 0] = np.asarray(src, dtype=np.int64)[pair] + offset
        table[:, 1] = np.asarray(dst, dtype=np.int64)[pair] + offset
        table[:, 2] = np.minimum(size[pair] - offset, self.chunk_bytes)
        return table

    def describe_first_fills(self, nbytes: Sequence[int]) -> list[str]:
        """Block 0's first `stages` steps for tensors of `nbytes` (packed one after another, as
        `pack` lays them out, into a second buffer): what each chunk moves, the bulk copies and the
        bytes its stage's full barrier expects."""
        grid = self.grid(chunks_of(nbytes, self.chunk_bytes))
        shown, needed = [], self.stages * grid  # the tensors the first fills reach
        for size in nbytes:
            if needed <= 0:
                break
            shown.append(size)
            needed -= math.ceil(size / self.chunk_bytes)
        nbytes = shown
        offsets, total = pack_offsets(nbytes)
        table = self.chunk_table(offsets, [total + offset for offset in offsets], nbytes)
        pair = np.repeat(np.arange(len(nbytes)), -(-np.asarray(nbytes, dtype=np.int64) // self.chunk_bytes))
        lines = []
        for step, chunk in enumerate(range(0, len(table), grid)):
            if step == self.stages:
                break
            source, _, size = (int(v) for v in table[chunk])
            tensor = int(pair[chunk])
            first = source - offsets[tensor]
            bulk, tail = size & ~(GLOBAL_BASE_ALIGN - 1), size % GLOBAL_BASE_ALIGN
            moves = f"cp.async.bulk of {bulk} bytes in and out" if bulk else "no bulk copy"
            lines.append(
                f"  step {step}, chunk {chunk} -> stage {step % self.stages}: tensor {tensor} bytes "
                f"{first}-{first + size - 1}; {moves}; its full barrier expects {bulk} bytes"
                + (f"; its last {tail} byte(s) copied by as many lanes" if tail else "")
            )
        return lines or ["  (no bytes: nothing moves)"]

    def grid(self, chunks: int) -> int:
        return max(1, min(chunks, self.sm_count))

    def summary(self, chunks: int | None = None) -> str:
        lines = [
            f"grouped copy      chunks of up to {self.chunk_bytes} bytes, one per stage: a bulk copy in "
            "(cp.async.bulk, the 16-byte multiple), a bulk copy out, the last 1-15 bytes by the lanes",
            f"stages            {self.stages} x {self.chunk_bytes} bytes; {self.smem_bytes} bytes of "
            "shared memory",
            "each stage        its full barrier expects the chunk's 16-byte multiple",
            f"table             {TABLE_WORDS} int64 words a chunk (source, destination, bytes), "
            "encoded on the host, kept on the device for the same tensors",
        ]
        if chunks is not None:
            lines.append(f"grid              {self.grid(chunks)} persistent block(s), {chunks} chunk(s)")
        return "\n".join(lines)


def pairs_disjoint(
    src: Sequence[int],
    dst: Sequence[int],
    nbytes: Sequence[int],
    dst_nbytes: Sequence[int] | None = None,
    unchanged: Sequence[bool] | None = None,
) -> bool:
    """Whether the pairs may be copied in any order, all at once: no pair's destination (`dst[i]`,
    `dst_nbytes[i]` bytes, or `nbytes[i]`) shares a byte with its own source (`src[i]`, `nbytes[i]`
    bytes) or another pair's source or destination. Sources shared between pairs are excepted,
    and so is a pair that is its own source (the same address and bytes) where `unchanged[i]` says
    its copy leaves the bytes as they are (None: every such pair; a dtype or layout change or a
    lazily applied bit rewrites them)."""
    size = np.asarray(nbytes, dtype=np.int64)
    dst_size = size if dst_nbytes is None else np.asarray(dst_nbytes, dtype=np.int64)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    itself = (src == dst) & (size == dst_size)
    if unchanged is not None:
        itself &= np.asarray(unchanged, dtype=bool)
    moving = (dst_size > 0) & ~itself
    starts = np.concatenate([src[moving & (size > 0)], dst[moving]])
    if len(starts) < 2:
        return True
    ends = starts + np.concatenate([size[moving & (size > 0)], dst_size[moving]])
    writes = np.arange(len(starts)) >= (moving & (size > 0)).sum()
    order = np.argsort(starts, kind="stable")
    starts, ends, writes = starts[order], ends[order], writes[order]
    # the furthest end of the ranges (of the writes) that start at or before each range
    reach = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(ends)[:-1]])
    written = np.concatenate(
        [[np.iinfo(np.int64).min], np.maximum.accumulate(np.where(writes, ends, 0))[:-1]]
    )
    return not np.any(np.where(writes, starts < reach, starts < written))


def aligned_pair(src_address: int, dst_address: int) -> bool:
    """Whether bulk copies can move a pair: both addresses 16-byte aligned."""
    return src_address % GLOBAL_BASE_ALIGN == 0 and dst_address % GLOBAL_BASE_ALIGN == 0


def chunks_of(nbytes: Sequence[int], chunk_bytes: int = STAGE_TARGET_BYTES) -> int:
    """How many chunks the pairs of `nbytes` make."""
    return sum(math.ceil(int(size) / chunk_bytes) for size in nbytes)
