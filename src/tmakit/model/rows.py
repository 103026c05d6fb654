"""What a rows plan's bulk copies do, replayed on NumPy arrays: each step's loads fill a stage,
its stores copy the stage out or
reduce it into the destination (`model.reduce.reduce_reference`, one reduction per index
entry, repeated entries reducing in turn). The reference a row kernel will be checked against."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..plan.rows import RowsPlan
from .reduce import reduce_reference


@dataclass
class RowsReplay:
    """The array after the replay, and the index entries skipped (out of range, in order)."""

    out: np.ndarray
    skipped: list[int] = field(default_factory=list)


def replay_rows(
    plan: RowsPlan, index: np.ndarray, src: np.ndarray, dst: np.ndarray, dtype: str | None = None
) -> RowsReplay:
    """Replay `plan` on `src` and `dst` (2-D arrays of rows of `plan.row_bytes`; left unchanged)
    with `index`: gather returns `out` of `len(index)` rows, whose rows of skipped entries are
    `dst`'s (the `out` given); scatter and the reduces return the new `dst`. `dtype` names the
    element type a reduce works on (tmakit's names; bf16 as its uint16 bits)."""
    index = [int(value) for value in np.asarray(index).reshape(-1)]
    out = dst.copy()
    source = np.ascontiguousarray(src).view(np.uint8).reshape(len(src), -1)
    target = out.view(np.uint8).reshape(len(out), -1)
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
                element = out.dtype
                current = target[first].view(element)
                incoming = stage[span].view(element)
                target[first] = reduce_reference(move.op, dtype, current, incoming).view(np.uint8)
    return replay
