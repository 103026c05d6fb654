"""What a rows plan's bulk copies do, replayed on NumPy arrays: each step's loads fill a stage,
its stores copy the stage out or reduce it into the destination, one reduction per index entry,
repeated entries in turn (integers: wrapping adds, signed or unsigned min/max as the dtype is;
floats: `model.reduce_ops.reduce_reference`). The reference a row kernel will be checked against."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import TmaConfigError
from ..model.reduce_ops import STORAGE, reduce_reference
from .plan import RowsPlan

_INTEGER_REDUCES = {"add": np.add, "min": np.minimum, "max": np.maximum}


@dataclass
class RowsReplay:
    """The array after the replay, and the index entries skipped (out of range, in order)."""

    out: np.ndarray
    skipped: list[int] = field(default_factory=list)


def _rows(array: np.ndarray, count: int, row_bytes: int, name: str) -> np.ndarray:
    """`array` as `count` rows of `row_bytes` bytes (a view); TmaConfigError if it is not that."""
    if len(array) != count or array.nbytes != count * row_bytes:
        raise TmaConfigError(
            f"{name} is {array.shape} {array.dtype} ({array.nbytes} bytes); the plan moves {count} "
            f"rows of {row_bytes} bytes there"
        )
    return np.ascontiguousarray(array).view(np.uint8).reshape(count, row_bytes)


def replay_rows(plan: RowsPlan, index: np.ndarray, src: np.ndarray, dst: np.ndarray) -> RowsReplay:
    """Replay `plan` on `src` and `dst` (left unchanged) with `index` (`plan.count` entries):
    a gather returns `out` (`dst` is its initial value: the rows of skipped entries keep it);
    scatter and the reduces return the new `dst`. Reduces read the rows as `plan.dtype`'s
    storage (bf16 as its uint16 bits)."""
    index = [int(value) for value in np.asarray(index).reshape(-1)]
    if len(index) != plan.count:
        raise TmaConfigError(f"the index has {len(index)} entries; the plan moves {plan.count}")
    gather = plan.op == "gather"
    source = _rows(src, plan.rows if gather else plan.count, plan.row_bytes, "src")
    out = dst.copy()
    target = _rows(out, plan.count if gather else plan.rows, plan.row_bytes, "dst")
    stage = np.zeros(plan.stage_bytes, np.uint8)
    replay = RowsReplay(out, [i for i, row in enumerate(index) if not 0 <= row < plan.rows])
    for step in range(plan.steps):
        for move in plan.moves(step, index):
            first, rows = move.row, move.nbytes // plan.row_bytes
            span = slice(move.offset, move.offset + move.nbytes)
            if move.load:
                stage[span] = source[first : first + rows].reshape(-1)
            elif move.op is None:
                target[first : first + rows] = stage[span].reshape(rows, -1)
            else:
                storage = STORAGE[plan.dtype]
                current, incoming = target[first].view(storage), stage[span].view(storage)
                if np.issubdtype(storage, np.integer) and plan.dtype != "bf16":
                    with np.errstate(over="ignore"):
                        reduced = _INTEGER_REDUCES[move.op](current, incoming).astype(storage)
                else:
                    reduced = reduce_reference(move.op, plan.dtype, current, incoming)
                target[first] = reduced.view(np.uint8)
    return replay
