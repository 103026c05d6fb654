"""Pure-NumPy CPU models of TMA loads and mbarrier semantics: no cutlass, torch or DSL import.

- `tensor_map`: which bytes a TMA tiled load writes into shared memory, swizzle included.
- `mbarrier`: one mbarrier's arrival / transaction / phase accounting, as PTX defines it.
- `reduce_ops`: what a TMA reduce store leaves in each destination element, per op and dtype.
- `events`: the steps of a load schedule (inits, arrivals, expect-tx, copies, waits, reads).
- `schedule`: the schedules replayed (seed loop, N-stage ring, multicast) and how many tiles of one.
- `replayer`: `replay`, which runs a schedule against mbarrier models.
- `report`: what a replay found (hangs, races, overwrites) and its trace, walked tile by tile.
"""

from .events import Arrive, ArriveExpectTx, Consume, Event, ExpectTx, Init, Release, TmaCopy, Wait
from .mbarrier import MBarrier, MBarrierError
from .reduce_ops import reduce_reference
from .replayer import replay
from .report import Finding, ScheduleReport, ends
from .schedule import (
    REPLAYED_TILES,
    SHOWN_TILES,
    multicast_schedule,
    pipeline_schedule,
    seed_schedule,
    tiles_to_replay,
)
from .tensor_map import swizzle, swizzled_offset, tma_load_box, unswizzle

__all__ = [
    "REPLAYED_TILES",
    "SHOWN_TILES",
    "Arrive",
    "ArriveExpectTx",
    "Consume",
    "Event",
    "ExpectTx",
    "Finding",
    "Init",
    "MBarrier",
    "MBarrierError",
    "Release",
    "ScheduleReport",
    "TmaCopy",
    "Wait",
    "ends",
    "multicast_schedule",
    "pipeline_schedule",
    "reduce_reference",
    "replay",
    "seed_schedule",
    "swizzle",
    "swizzled_offset",
    "tma_load_box",
    "tiles_to_replay",
    "unswizzle",
]
