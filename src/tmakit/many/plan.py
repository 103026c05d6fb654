"""Many tensors, one launch: the plan of a grouped copy (`copy_many_`, `pack`, `unpack_`) of
compact pairs as chunks of contiguous bytes, each a non-tensor bulk copy in and out of a ring
stage, the stages of every pair walked by one persistent grid.

The pairs' bulk bytes (each pair's 16-byte multiple) are laid end to end as one stream and the
stream is cut into stages of `stage_bytes`: a step fills one stage, and a chunk is one pair's
bytes inside one stage, so many small tensors share a stage (one barrier round for all of them)
and a large one spans many. A pair takes at least a 31st of a stage of the stream, so a stage
holds at most 32 chunks, one a lane. A step's chunks are loaded and stored by the lanes of a warp, a chunk
a lane. The last 1-15 bytes of an odd-sized tensor go from global memory to global memory by the
lane that stores its last chunk.

The chunks are a table encoded on the host (`ManyPlan.chunk_table`: source address, destination
address, bytes, offset in the stage; int64) beside the first chunk of each step, copied to the
device once per set of tensors and kept for the next call with the same tensors: a table is four
words a chunk, where a tensor map built on the device is 128 bytes written, fenced and acquired per
tensor before its first use (`model.descriptors`), and bulk copies need no map at all.

`pack_offsets` lays tensors out in one flat buffer, each at an offset aligned for TMA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import TmaConfigError
from ..limits import DEFAULT_SM_COUNT, GLOBAL_BASE_ALIGN, WARP_THREADS
from ..plan.budget import budget_grid, budget_stages
from ..plan.copy_defaults import MIN_STORES_IN_FLIGHT
from ..plan.ring import STAGE_TARGET_BYTES, PipelinePlan, check_bulk_ring, stages_fitting, stand_in_ring
from ..plan.tuning import TUNING
from ..validate import check_field_types

DEFAULT_MANY_STAGES: int = TUNING["DEFAULT_MANY_STAGES"].value  # measured: `plan.tuning`
TABLE_WORDS = 4  # a chunk: source address, destination address, bytes, offset in its stage
PACK_ALIGN = GLOBAL_BASE_ALIGN  # each tensor of a packed buffer starts 16-byte aligned
_BULK = ~(GLOBAL_BASE_ALIGN - 1)  # a byte count's bulk part: its 16-byte multiple


def pack_offsets(nbytes: Sequence[int]) -> tuple[list[int], int]:
    """(byte offset of each tensor in a packed buffer, the buffer's bytes): in order, each offset
    rounded up to `PACK_ALIGN`."""
    offsets, end = [], 0
    for size in nbytes:
        start = -(-end // PACK_ALIGN) * PACK_ALIGN
        offsets.append(start)
        end = start + size
    return offsets, end


def has_gaps(offsets: Sequence[int], nbytes: Sequence[int], buffer_bytes: int) -> bool:
    """Whether spans of `nbytes` at `offsets` (in order, as `pack_offsets` lays them) leave bytes
    of a `buffer_bytes` buffer uncovered: bytes a new packed buffer must zero."""
    ends = [offset + size for offset, size in zip(offsets, nbytes, strict=True)]
    return ends[:-1] != list(offsets[1:]) or ends[-1] != buffer_bytes


def call_plan(sm_count: int, sms: int | None = None) -> ManyPlan:
    """The grouped copy's ring on a GPU of `sm_count` SMs: on an SM budget of `sms`
    (`plan.budget`), that many blocks, one an SM, each ring as deep as `budget_stages` says."""
    if sms is None:
        return ManyPlan(sm_count=sm_count)
    stages = budget_stages(STAGE_TARGET_BYTES, DEFAULT_MANY_STAGES, stages_fitting(STAGE_TARGET_BYTES))
    return ManyPlan(stages=stages, **budget_grid(sms, sm_count))


@dataclass(frozen=True)
class ManyPlan:
    """A grouped copy's ring: `stages` stages of `stage_bytes`, each filled by a step's chunks,
    the steps dealt to a persistent grid of at most `sm_count` blocks."""

    stages: int = DEFAULT_MANY_STAGES
    sm_count: int = DEFAULT_SM_COUNT
    stage_bytes: int = STAGE_TARGET_BYTES
    one_block_per_sm: bool = False  # an SM budget's grid (`plan.budget`)

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.stage_bytes < GLOBAL_BASE_ALIGN or self.stage_bytes % 1024:
            raise TmaConfigError(f"stage_bytes is {self.stage_bytes}; a stage is a whole number of KiB")
        check_bulk_ring(self.stages, self.sm_count, self.stage_bytes, "", "use smaller stages")

    @property
    def smem_bytes(self) -> int:
        """The shared memory the kernel requests: its ring's (`pipeline`)."""
        return self.pipeline.smem_bytes

    @property
    def stores_in_flight(self) -> int:
        """Store groups in flight before the oldest must have read its stage (as a copy's)."""
        return min(max(MIN_STORES_IN_FLIGHT, self.stages // 2), self.stages)

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring the kernel runs on: stages of a stand-in tile of the stage's bytes (int32,
        256 wide), a producer and a consumer warp, persistent."""
        return stand_in_ring(
            self.stage_bytes, self.stages, self.sm_count, one_block_per_sm=self.one_block_per_sm
        )

    def chunk_table(
        self, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The chunks of copying `nbytes[i]` bytes from address `src[i]` to `dst[i]`: (chunks,
        starts). `chunks`: (count, 4) int64 rows (source, destination, bytes, offset in the
        stage), in stream order; a pair's last chunk carries its 1-15 tail bytes, and a pair of
        fewer than 16 bytes is a chunk of no bulk bytes. `starts`: (steps + 1,) int64, the first
        chunk of each step, then the count. A pair of no bytes has no chunk."""
        size = np.asarray(nbytes, dtype=np.int64)
        if len(size) != len(src) or len(size) != len(dst):
            raise TmaConfigError(f"{len(src)} sources, {len(dst)} destinations, {len(size)} sizes: one each")
        stage, bulk = self.stage_bytes, size & _BULK
        start, steps, first, counts = self._stream(size)
        pair = np.repeat(np.arange(len(size)), counts)
        nth = np.arange(len(pair)) - np.repeat(np.cumsum(counts) - counts, counts)
        step = first[pair] + nth
        low = np.maximum(start[pair], step * stage)
        high = np.maximum(np.minimum(start[pair] + bulk[pair], (step + 1) * stage), low)
        chunks = np.empty((len(pair), TABLE_WORDS), dtype=np.int64)
        chunks[:, 0] = np.asarray(src, dtype=np.int64)[pair] + low - start[pair]
        chunks[:, 1] = np.asarray(dst, dtype=np.int64)[pair] + low - start[pair]
        chunks[:, 2] = high - low + np.where(nth == counts[pair] - 1, (size - bulk)[pair], 0)
        chunks[:, 3] = low - step * stage
        return chunks, np.searchsorted(step, np.arange(steps + 1)).astype(np.int64)

    def counts(self, nbytes: Sequence[int]) -> tuple[int, int]:
        """(steps, chunks) of a grouped copy of pairs of `nbytes`."""
        _, steps, _, counts = self._stream(np.asarray(nbytes, dtype=np.int64))
        return steps, int(counts.sum())

    @property
    def least_stream_bytes(self) -> int:
        """The stream bytes a tensor takes at least (its bulk bytes, padded): so that at most 31
        tensors start in a stage and a stage holds at most a warp's 32 chunks, one a lane."""
        return -(-self.stage_bytes // (WARP_THREADS - 1) // GLOBAL_BASE_ALIGN) * GLOBAL_BASE_ALIGN

    def _stream(self, size: np.ndarray) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
        """The pairs' bulk bytes end to end, each pair taking at least `least_stream_bytes`:
        (each pair's start in the stream, the steps, each pair's first step, its chunks)."""
        if (size < 0).any():
            raise TmaConfigError("a pair has a negative byte count")
        stage, bulk = self.stage_bytes, size & _BULK
        taken = np.where(size > 0, np.maximum(bulk, self.least_stream_bytes), 0)
        start = np.cumsum(taken) - taken
        first = start // stage
        last = np.where(bulk > 0, (start + bulk - 1) // stage, first)
        counts = np.where(size > 0, last - first + 1, 0)
        steps = int(last[size > 0].max()) + 1 if (size > 0).any() else 0
        return start, steps, first, counts

    def describe_first_fills(self, nbytes: Sequence[int]) -> list[str]:
        """Block 0's first `stages` steps for tensors of `nbytes` (packed one after another, as
        `pack` lays them out, into a second buffer): the chunks each step moves, its bulk copies
        and the bytes its stage's full barrier expects."""
        offsets, total = pack_offsets(nbytes)
        chunks, starts = self.chunk_table(offsets, [total + offset for offset in offsets], nbytes)
        grid = self.grid(len(starts) - 1)
        tensor = np.searchsorted(np.asarray(offsets), chunks[:, 0], side="right") - 1
        lines = []
        for step, row in enumerate(range(0, len(starts) - 1, grid)):
            if step == self.stages:
                break
            rows = range(int(starts[row]), int(starts[row + 1]))
            bulk = [int(chunks[i, 2]) & _BULK for i in rows]
            moved = [
                f"tensor {int(tensor[i])} bytes {int(chunks[i, 0]) - offsets[int(tensor[i])]}-"
                f"{int(chunks[i, 0]) - offsets[int(tensor[i])] + int(chunks[i, 2]) - 1}"
                for i in rows
            ]
            shown = moved if len(moved) <= 3 else [*moved[:2], f"... {len(moved) - 2} more"]
            copies = sum(1 for b in bulk if b)
            tails = sum(1 for i in rows if int(chunks[i, 2]) % GLOBAL_BASE_ALIGN)
            lines.append(
                f"  step {step} (the walk's step {row}) -> stage {step % self.stages}: "
                f"{len(moved)} chunk(s) ({'; '.join(shown)}); {copies} cp.async.bulk in and out; its "
                f"full barrier expects {sum(bulk)} bytes"
                + (f"; {tails} tail(s) of 1-15 bytes copied by their lanes" if tails else "")
            )
        return lines or ["  (no bytes: nothing moves)"]

    def grid(self, steps: int) -> int:
        return max(1, min(steps, self.sm_count))

    def summary(self, steps: int | None = None, chunks: int | None = None) -> str:
        lines = [
            f"grouped copy      the tensors' bytes end to end, cut into stages of {self.stage_bytes} "
            "bytes; a chunk (one tensor's bytes in one stage) a lane: a bulk copy in (cp.async.bulk, "
            "the 16-byte multiple), a bulk copy out, the last 1-15 bytes by the lane",
            f"stages            {self.stages} x {self.stage_bytes} bytes; {self.smem_bytes} bytes of "
            "shared memory",
            "each stage        its full barrier expects its chunks' 16-byte multiples",
            f"table             {TABLE_WORDS} int64 words a chunk (source, destination, bytes, offset in "
            "the stage) and the first chunk of each step, encoded on the host, kept on the device "
            "for the same tensors",
        ]
        if steps is not None:
            lines.append(
                f"grid              {self.grid(steps)} persistent block(s), {steps} step(s)"
                + ("" if chunks is None else f", {chunks} chunk(s)")
                + self.pipeline.budget_note
            )
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
