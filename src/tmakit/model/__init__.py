"""Pure-NumPy CPU models of TMA loads and mbarrier semantics: no cutlass, torch or DSL import.

- `tensor_map`: which bytes a TMA tiled load writes into shared memory, swizzle included.
- `mbarrier`: one mbarrier's arrival / transaction / phase accounting, as PTX defines it.
- `reduce`: what a TMA reduce store leaves in each destination element, per op and dtype.
- `schedule`: replay a load schedule (seed loop, N-stage ring, multicast) against mbarrier models
  and report hangs, races and overwrites.
"""

from .mbarrier import MBarrier, MBarrierError
from .reduce import reduce_reference
from .schedule import (
    Arrive,
    ArriveExpectTx,
    Consume,
    ExpectTx,
    Finding,
    Init,
    Release,
    ScheduleReport,
    TmaCopy,
    Wait,
    multicast_schedule,
    pipeline_schedule,
    replay,
    seed_schedule,
)
from .tensor_map import swizzle, swizzled_offset, tma_load_box, unswizzle

__all__ = [
    "Arrive",
    "ArriveExpectTx",
    "Consume",
    "ExpectTx",
    "Finding",
    "Init",
    "MBarrier",
    "MBarrierError",
    "Release",
    "ScheduleReport",
    "TmaCopy",
    "Wait",
    "multicast_schedule",
    "pipeline_schedule",
    "reduce_reference",
    "replay",
    "seed_schedule",
    "swizzle",
    "swizzled_offset",
    "tma_load_box",
    "unswizzle",
]
