"""What the mixture-of-experts kernels do, replayed on the CPU: each block of the persistent grid
walks its steps round its ring of stages; each stage's full barrier (`model.mbarrier.MBarrier`,
one arrival) is told the bytes the producer's lanes declare and then the bytes each bulk load
delivers, and the consumer waits for the phase of the step's trip round the ring (parity = trip
mod 2) before it reads the stage, so a declaration that differs from the loads shows as a phase
that never completes (or completes early: the consumer would read a stage still landing).
Each empty barrier takes one arrival a consumer warp, the producer waits for it a trip later.

`replay_routing` is the routing kernels' algorithm (`moe.kernel.RoutingKernel`): block ranges,
per-block counts, the scan, per-warp counts and first rows, lane ranks in rounds of 32.

The replays return what the kernels write (NumPy, row bytes for the dispatch, float32 sums for
the combine), the reference the GPU tests check the kernels against, and raise `ModelHang` where a
wait could never be satisfied."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..limits import WARP_THREADS
from ..model.mbarrier import MBarrier
from .plan import (
    AMAX_FLOOR,
    FP8_MAX,
    QUANT_BLOCK,
    ROUTING_WARPS,
    CombinePlan,
    DispatchPlan,
    QuantizePlan,
    RoutingPlan,
    TokenRowStages,
    routing_block_slots,
    routing_blocks,
)


class ModelHang(RuntimeError):
    """A wait that no arrival or byte left in the replay could satisfy: the kernel would hang."""


@dataclass
class Ring:
    """One block's barriers: full[s] (one arrival and the stage's bytes), empty[s] (one arrival
    a consumer warp)."""

    stages: int
    consumer_warps: int

    def __post_init__(self) -> None:
        self.full = [MBarrier(1) for _ in range(self.stages)]
        self.empty = [MBarrier(self.consumer_warps) for _ in range(self.stages)]

    def stage_and_parity(self, step: int) -> tuple[int, int]:
        return step % self.stages, (step // self.stages) & 1

    def fill(self, step: int, declared: list[int], delivered: list[int]) -> int:
        """The producer's `step`: wait for the stage to be free (parity of the trip before), each
        lane's declaration and one arrival, then each load's bytes; the consumer's wait. Returns
        the stage."""
        stage, parity = self.stage_and_parity(step)
        if not self.empty[stage].try_wait(parity ^ 1):
            raise ModelHang(f"step {step}: stage {stage} never freed (parity {parity ^ 1})")
        barrier = self.full[stage]
        for nbytes in declared[:-1]:
            barrier.expect_tx(nbytes)
        if declared:
            barrier.arrive_expect_tx(declared[-1])
        else:
            barrier.arrive()
        landed_early = barrier.try_wait(parity) and sum(delivered) > 0
        for nbytes in delivered:
            barrier.complete_tx(nbytes)
        if landed_early or not barrier.try_wait(parity):
            how = "completed before the bytes landed" if landed_early else "never completes"
            raise ModelHang(
                f"step {step}: stage {stage}'s full barrier was declared {sum(declared)} bytes and its loads "
                f"delivered {sum(delivered)}: its phase {how}"
            )
        return stage

    def release(self, stage: int) -> None:
        for _ in range(self.consumer_warps):
            self.empty[stage].arrive()


def blocks_of(steps: int, sm_count: int) -> list[range]:
    """Each persistent block's steps: every grid-th, from its own."""
    grid = max(1, min(steps, sm_count))
    return [range(block, steps, grid) for block in range(grid)]


def token_row_steps(plan: TokenRowStages, x: np.ndarray, consumer_warps: int):
    """Each step of a ring of token rows (`TokenRowStages`) over `x`, as its blocks walk it:
    the stage filled (its declared bytes against the bytes loaded), then (the stage's rows, its
    first token) handed to the caller, then the stage released (the model's stores read it at
    once)."""
    tokens = len(x)
    stage_rows = np.zeros((plan.stages, plan.tokens_per_stage, *x.shape[1:]), x.dtype)
    for walk in blocks_of(plan.steps(tokens), plan.sm_count):
        ring = Ring(plan.stages, consumer_warps)
        for step in walk:
            first = step * plan.tokens_per_stage
            moved = min(plan.tokens_per_stage, tokens - first)
            nbytes = plan.expected_bytes(tokens, step)
            stage = ring.fill(walk.index(step), [nbytes], [moved * plan.row_bytes])
            stage_rows[stage, :moved] = x[first : first + moved]
            yield stage_rows[stage, :moved], first
            ring.release(stage)


def replay_dispatch(plan: DispatchPlan, row_map: np.ndarray, x: np.ndarray, rows: int) -> np.ndarray:
    """The dispatch of `x` (T, row_bytes) uint8 by `row_map` (T, topk) into a new (rows,
    row_bytes) uint8 array (rows no slot names stay 0, as the call zeroes them)."""
    out = np.zeros((rows, plan.row_bytes), np.uint8)
    for staged, first in token_row_steps(plan, x, 1):
        for slot, values in enumerate(staged):
            for row in row_map[first + slot]:
                if 0 <= row < rows:
                    out[row] = values
    return out


E4M3_MANTISSA_BITS = 3
E4M3_MIN_EXPONENT = -6  # the least normal exponent; below it the quantum stays 2^(-6 - 3)


def e4m3_values(values: np.ndarray) -> np.ndarray:
    """float32 values (|v| <= FP8_MAX) rounded to e4m3fn's nearest, ties to even, as float64:
    the quantum of v's binade (2^(e - 3), subnormals' 2^-9), `np.rint` rounding half to even."""
    wide = values.astype(np.float64)
    magnitude = np.abs(wide)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    quantum = np.exp2(np.maximum(exponent, E4M3_MIN_EXPONENT) - E4M3_MANTISSA_BITS)
    rounded = np.rint(wide / quantum) * quantum
    return np.minimum(np.abs(rounded), FP8_MAX) * np.sign(wide)


def quantize_blocks(row: np.ndarray, ue8m0: bool) -> tuple[np.ndarray, np.ndarray]:
    """A row of float32 values quantized by 1 x 128 blocks as the kernel does: (its e4m3 values
    as float64, each block's scale as float32: amax / FP8_MAX, or that rounded up to a power of
    two with `ue8m0`)."""
    blocks = row.astype(np.float32).reshape(-1, QUANT_BLOCK)
    amax = np.maximum(np.abs(blocks).max(axis=1), np.float32(AMAX_FLOOR))
    scale = amax / np.float32(FP8_MAX)
    if ue8m0:
        bits = scale.view(np.int32)
        exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0)
        scale = (exponent << 23).astype(np.int32).view(np.float32)
        inverse = ((254 - exponent) << 23).astype(np.int32).view(np.float32)
    else:
        inverse = np.float32(FP8_MAX) / amax
    return e4m3_values(blocks * inverse[:, None]).reshape(-1), scale


def replay_quantize_dispatch(
    plan: QuantizePlan, row_map: np.ndarray, x: np.ndarray, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """The fp8 dispatch of `x` (T, hidden) values (bf16 or fp16 as float32) by `row_map` (T,
    topk): (each of `rows` rows' e4m3 values as float64, (rows, blocks) float32 scales; rows no
    slot names 0). The ring as the dispatch's, `plan.consumer_warps` consumer warps."""
    out = np.zeros((rows, plan.hidden), np.float64)
    scales = np.zeros((rows, plan.blocks), np.float32)
    for staged, first in token_row_steps(plan, x.astype(np.float32), plan.consumer_warps):
        for slot, row_values in enumerate(staged):
            values, row_scales = quantize_blocks(row_values, plan.scale_format == "ue8m0")
            for row in row_map[first + slot]:
                if 0 <= row < rows:
                    out[row], scales[row] = values, row_scales
    return out, scales


def replay_combine(
    plan: CombinePlan, row_map: np.ndarray, probs: np.ndarray | None, y: np.ndarray
) -> np.ndarray:
    """The combine's fp32 sums (T, row elements) of `y` (rows, row elements) of the plan's dtype
    (bf16 as float32 values) by `row_map` (T, topk), weighted by `probs` (T, topk) or 1."""
    tokens, topk = row_map.shape
    rows = len(y)
    width = plan.chunk_bytes // plan.element_bytes
    out = np.zeros((tokens, y.shape[1]), np.float32)
    stage_values = np.zeros((plan.stages, topk, width), np.float32)
    for walk in blocks_of(plan.steps(tokens), plan.sm_count):
        ring = Ring(plan.stages, plan.consumer_warps)
        for step in walk:
            token, chunk = divmod(step, plan.chunks)
            named = [int(row) for row in row_map[token]]
            declared = [plan.chunk_bytes for row in named if 0 <= row < rows]
            stage = ring.fill(walk.index(step), declared, list(declared))
            columns = slice(chunk * width, (chunk + 1) * width)
            for slot, row in enumerate(named):
                if 0 <= row < rows:
                    stage_values[stage, slot] = y[row, columns]
            total = np.zeros(width, np.float32)
            for slot, row in enumerate(named):
                if 0 <= row < rows:
                    weight = np.float32(1.0 if probs is None else probs[token, slot])
                    total = (total + stage_values[stage, slot] * weight).astype(np.float32)
            out[token, columns] = total
            ring.release(stage)
    return out


def replay_combine_grad(
    plan: CombinePlan, row_map: np.ndarray, probs: np.ndarray, y: np.ndarray, grad: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The combine's backward (a `grad` plan) of `y` (rows, row elements) and the output's
    gradient `grad` (T, row elements), float32 values, by `row_map` (T, topk) weighted by `probs`:
    (y's gradient (rows, row elements) float32, the rows no slot names 0; the partial sums (T,
    topk, plan.partials), each consumer warp's share of a chunk: the vectors of 16 bytes
    `consumer * 32 + lane`, then every `consumer_warps * 32`-th)."""
    tokens, topk = row_map.shape
    rows = len(y)
    width = plan.chunk_bytes // plan.element_bytes
    per_vector = plan.vector_elements
    threads = plan.consumer_warps * WARP_THREADS
    grad_y = np.zeros(y.shape, np.float32)
    partials = np.zeros((tokens, topk, plan.partials), np.float32)
    stage_values = np.zeros((plan.stages, plan.loads, width), np.float32)
    for walk in blocks_of(plan.steps(tokens), plan.sm_count):
        ring = Ring(plan.stages, plan.consumer_warps)
        for step in walk:
            token, chunk = divmod(step, plan.chunks)
            named = [int(row) for row in row_map[token]]
            declared = [plan.chunk_bytes for row in named if 0 <= row < rows] + [plan.chunk_bytes]
            stage = ring.fill(walk.index(step), declared, list(declared))
            columns = slice(chunk * width, (chunk + 1) * width)
            for slot, row in enumerate(named):
                if 0 <= row < rows:
                    stage_values[stage, slot] = y[row, columns]
            stage_values[stage, topk] = grad[token, columns]
            g = stage_values[stage, topk]
            for slot, row in enumerate(named):
                if not 0 <= row < rows:
                    continue
                grad_y[row, columns] = g * np.float32(probs[token, slot])
                products = (
                    (g * stage_values[stage, slot]).reshape(-1, per_vector).sum(axis=1, dtype=np.float32)
                )
                for consumer in range(plan.consumer_warps):
                    mine = [v for v in range(len(products)) if (v % threads) // WARP_THREADS == consumer]
                    partials[token, slot, chunk * plan.consumer_warps + consumer] = products[mine].sum(
                        dtype=np.float32
                    )
            ring.release(stage)
    return grad_y, partials


def routing_keys(ids: np.ndarray, experts: int) -> np.ndarray:
    """Each slot's key as the kernels form it (int64 compared whole): its expert, `experts` for a
    dropped id, `experts + 1` for -1 (no expert)."""
    flat = np.asarray(ids).reshape(-1).astype(np.int64)
    keys = np.where(flat == -1, experts + 1, experts)
    return np.where((flat >= 0) & (flat < experts), flat, keys)


def lane_ranks(keys: np.ndarray) -> np.ndarray:
    """One round's ranks: each lane's count of the lanes below it with its key (what the
    kernel's `match.any` mask below the lane counts)."""
    peers = keys[:, None] == keys[None, :]  # [lane, other]: the lanes of one match.any mask
    return np.tril(peers, -1).sum(axis=1)


def replay_routing(plan: RoutingPlan, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """What the three routing kernels write for `ids` (T, topk), one slot or more: (row map (T,
    topk), tokens per expert (E,), expert offsets (E + 1,), dropped), all int64 values."""
    experts, align = plan.experts, plan.align
    keys = routing_keys(ids, experts)
    slots = keys.size
    per_block, blocks = routing_block_slots(slots), routing_blocks(slots)
    # count: each block's range, per expert and the dropped
    workspace = np.zeros((blocks, experts + 1), np.int64)
    for block in range(blocks):
        share = keys[block * per_block : (block + 1) * per_block]
        workspace[block] = np.bincount(share[share <= experts], minlength=experts + 1)
    # scan: each block's first rank in each expert, each expert's padded group
    totals = workspace.sum(axis=0)
    workspace = np.cumsum(workspace, axis=0) - workspace
    counts = totals[:experts]
    padded = (counts + (align - 1)) // align * align
    offsets = np.concatenate([[0], np.cumsum(padded)])
    # assign: each warp's share, counted, given its first rows, then walked in rounds of 32
    row_map = np.full(slots, -1, np.int64)
    warp_slots = per_block // ROUTING_WARPS
    for block in range(blocks):
        block_first = block * per_block
        block_share = min(per_block, slots - block_first)
        shares = []
        for warp in range(ROUTING_WARPS):
            before = min(warp * warp_slots, block_share)
            shares.append(keys[block_first + before : block_first + min(before + warp_slots, block_share)])
        warp_counts = np.array([np.bincount(s[s < experts], minlength=experts) for s in shares])
        firsts = offsets[:experts] + workspace[block, :experts] + np.cumsum(warp_counts, axis=0) - warp_counts
        for warp, share in enumerate(shares):
            first = block_first + min(warp * warp_slots, block_share)
            for start in range(0, len(share), WARP_THREADS):
                round_keys = share[start : start + WARP_THREADS]
                routed = round_keys < experts
                lanes = first + start + np.flatnonzero(routed)
                row_map[lanes] = firsts[warp, round_keys[routed]] + lane_ranks(round_keys)[routed]
                firsts[warp] += np.bincount(round_keys[routed], minlength=experts)  # the speakers' adds
    return row_map.reshape(np.shape(ids)), counts, offsets, int(totals[experts])
