"""The seed's correctness experiment, on the host side: inputs that name their position, a poison
value the kernel cannot produce, and an element-by-element comparison that names the first wrong
tile. NumPy on the host (so the verifier itself is tested on a CPU); the same functions compare
GPU tensors in place for inputs too large to copy back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..limits import POISON as POISON_SIGNED
from ..model.tensor_map import swizzled_offset
from ..plan import LoadPlan

# Input bit patterns keep the bit below the sign clear (for floats: exponent never all ones, so no
# Inf/NaN that a register move might canonicalise); the poison has it set, so no input equals it.
# A 64-bit element takes the hash's 32 bits (its upper half zero): the mask fits an int64 array.
_FINITE_MASK = {8: 0xBF, 16: 0xBFFF, 32: 0xBFFFFFFF, 64: 0xBFFFFFFF}
POISON = {bits: POISON_SIGNED & ((1 << bits) - 1) for bits in (8, 16, 32, 64)}  # as unsigned bits


_LOW32 = 0xFFFFFFFF


def position_hash(rows, cols, bits: int, batch=0):
    """A bit pattern for each (batch, row, column): a 32-bit integer mix (murmur3's finaliser) of
    the position, truncated to `bits`. Unlike a linear index modulo 2**bits, which repeats after
    one row block at the seed's shape, no whole-tile shift of the data leaves it unchanged - even
    for 1-byte types, where a value cannot name its position.

    Works on int64 numpy arrays and int64 torch tensors alike (products wrap; only the low 32
    bits are kept), so large inputs can be made on the GPU itself; returns int64 values."""
    h = ((rows * 0x9E3779B1) ^ (cols * 0x85EBCA77) ^ (batch * 0x27D4EB2F)) & _LOW32
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _LOW32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _LOW32
    h = h ^ (h >> 16)
    return h & _FINITE_MASK[bits]


def make_input_bits(plan: LoadPlan) -> np.ndarray:
    """The input tensor's logical values as raw bit patterns (uint8/16/32 of the dtype's width),
    shape `plan.config.shape`; the GPU copy gets the plan's strides."""
    rows, cols = plan.matrix_shape
    batch = np.arange(plan.batch_count, dtype=np.int64)[:, None, None]
    r = np.arange(rows, dtype=np.int64)[None, :, None]
    c = np.arange(cols, dtype=np.int64)[None, None, :]
    bits = plan.config.element.bits
    return position_hash(r, c, bits, batch).astype(f"uint{bits}").reshape(plan.config.shape)


def make_poisoned_output_bits(plan: LoadPlan) -> np.ndarray:
    """The scratch output, every element the poison pattern."""
    bits = plan.config.element.bits
    return np.full(plan.padded_shape, POISON[bits], dtype=f"uint{bits}")


def expected_output_bits(plan: LoadPlan, input_bits: np.ndarray) -> np.ndarray:
    """What the store-back must produce: the input where the tensor is, zeros where a partial
    edge tile reaches past it (TMA fills out-of-bounds elements with zero)."""
    expected = np.zeros(plan.padded_shape, dtype=input_bits.dtype)
    rows, cols = plan.matrix_shape
    expected[..., :rows, :cols] = input_bits
    return expected


def _to_numpy(array) -> np.ndarray:
    return array.cpu().numpy() if hasattr(array, "cpu") else np.asarray(array)


@dataclass(frozen=True)
class TileMismatch:
    row_block: int
    column_tile: int
    row: int
    col: int
    expected: int
    found: int
    wrong_elements: int
    batch: tuple[int, ...] = ()

    def __str__(self) -> str:
        batch = f"batch={self.batch}, " if self.batch else ""
        return (
            f"tile ({batch}row_block={self.row_block}, column_tile={self.column_tile}) is wrong: "
            f"first at element ({self.row}, {self.col}) expected {self.expected:#x}, "
            f"found {self.found:#x}; {self.wrong_elements} wrong elements in that tile"
        )


@dataclass(frozen=True)
class Verdict:
    """Of `tiles_total` tiles, how many are right (`what` they were checked for), and the first
    that is not."""

    tiles_total: int
    tiles_correct: int
    first_mismatch: TileMismatch | str | None
    what: str = "tiles correct"

    @property
    def ok(self) -> bool:
        return self.first_mismatch is None

    def __str__(self) -> str:
        text = f"{self.tiles_correct}/{self.tiles_total} {self.what}"
        return text if self.ok else f"{text}; {self.first_mismatch}"


def compare_tiles(plan: LoadPlan, expected: np.ndarray, found: np.ndarray) -> Verdict:
    """Compare every element's bits; count correct tiles; name the first wrong tile
    (in batch, row_block, column_tile order). numpy arrays or GPU tensors (compared in place)."""
    tile_rows, tile_cols = plan.config.tile
    wrong = (expected != found).reshape(
        plan.batch_count, plan.row_blocks, tile_rows, plan.tiles_per_block, tile_cols
    )
    per_tile = _to_numpy(wrong.sum((2, 4)))
    bad_tiles = np.argwhere(per_tile)
    first = None
    if len(bad_tiles):
        batch, row_block, column_tile = (int(v) for v in bad_tiles[0])
        dr, dc = (int(v) for v in np.argwhere(_to_numpy(wrong[batch, row_block, :, column_tile, :]))[0])
        r0, c0 = plan.tile_origin(row_block, column_tile)
        batch_index = (
            tuple(int(v) for v in np.unravel_index(batch, plan.batch_shape)) if plan.batch_shape else ()
        )
        at = (*batch_index, r0 + dr, c0 + dc)
        value_mask = (1 << plan.config.element.bits) - 1  # GPU tensors hold bits as signed ints
        first = TileMismatch(
            row_block,
            column_tile,
            r0 + dr,
            c0 + dc,
            int(expected[at]) & value_mask,
            int(found[at]) & value_mask,
            int(per_tile[batch, row_block, column_tile]),
            batch_index,
        )
    return Verdict(plan.total_tile_loads, plan.total_tile_loads - len(bad_tiles), first)


def expected_shared_bytes(plan: LoadPlan, input_bits: np.ndarray) -> np.ndarray:
    """The raw shared-memory bytes each tile load must leave, as the hardware places them:
    (total tile loads, tile bytes), ordered (batch, row_block, column_tile).

    The tile's bytes in its shared layout's order (row-major, or column-major when the rows are
    contiguous), zeros past the tensor's edge, permuted by TMA's swizzle as the CPU model of the
    hardware computes it - never from the kernel's own CuTe layout."""
    tile_rows, tile_cols = plan.config.tile
    padded = expected_output_bits(plan, input_bits).reshape(
        plan.batch_count, plan.row_blocks, tile_rows, plan.tiles_per_block, tile_cols
    )
    tiles = padded.transpose(0, 1, 3, 2, 4)  # (batch, row_block, column_tile, rows, cols)
    if plan.rows_contiguous:
        tiles = tiles.swapaxes(-1, -2)
    logical = (
        np.ascontiguousarray(tiles).view(np.uint8).reshape(plan.total_tile_loads, plan.expected_tx_bytes)
    )
    # Swizzle<B,4,3> is an involution: the byte at physical offset p is logical byte swizzle(p).
    return logical[:, swizzled_offset(np.arange(plan.expected_tx_bytes), plan.config.swizzle)]


def compare_shared_bytes(plan: LoadPlan, found: np.ndarray) -> Verdict:
    """Compare a raw shared-memory dump (the load family's `dump_shared_bytes`) with the model,
    byte for byte."""
    expected = expected_shared_bytes(plan, make_input_bits(plan))
    wrong = expected != found
    bad = np.flatnonzero(wrong.any(axis=1))
    first = None
    if len(bad):
        load = int(bad[0])
        offset = int(np.flatnonzero(wrong[load])[0])
        batch, row_block, column_tile = np.unravel_index(
            load, (plan.batch_count, plan.row_blocks, plan.tiles_per_block)
        )
        first = (
            f"tile (batch={int(batch)}, row_block={int(row_block)}, column_tile={int(column_tile)}): "
            f"byte {offset} expected {int(expected[load, offset]):#04x}, "
            f"found {int(found[load, offset]):#04x} ({int(wrong[load].sum())} wrong bytes)"
        )
    what = "tiles' shared-memory bytes match the model"
    return Verdict(plan.total_tile_loads, plan.total_tile_loads - len(bad), first, what)


def index_add_wrong_rows(got, start, index, src):
    """The rows of `got` (a float `start.index_add_(0, index, src)` done in some order) beyond the
    bound of a different summation order: per element, (the row's adds + 1) x eps x (|start| +
    the sum of the |src| added), against the sum in float64. Returns their indices (a tensor)."""
    import torch

    index = index.long()
    reference = start.double().index_add_(0, index, src.double())
    magnitude = start.double().abs().index_add_(0, index, src.double().abs())
    adds = torch.zeros(start.shape[0], dtype=torch.float64, device=start.device)
    adds.index_add_(0, index, torch.ones(index.numel(), dtype=torch.float64, device=start.device))
    bound = (adds.reshape((-1,) + (1,) * (start.dim() - 1)) + 1) * torch.finfo(got.dtype).eps * magnitude
    beyond = (got.double() - reference).abs() > bound
    return beyond.reshape(start.shape[0], -1).any(dim=1).nonzero().reshape(-1)
