"""Tile loads: the seed's kernel (one warp, one shared tile, one mbarrier: `load_tiles` returns what
it put in shared memory) and the pipelined load (an N-stage ring, load-only, stored back or summed
by row). Their plans are the core's (`plan.LoadPlan`, `plan.PipelinePlan`: every family loads with
them), and so is the seed's explanation of a load or a ring (`tmakit.explain`).

    kernel   TileLoadKernel (the seed's kernel), PipelinedLoadKernel (the ring)
    launch   compile_tile_load, compile_pipelined_load
    api      load_tiles (config_for and padded_empty, which describe and allocate, are the core's)
    op       torch.ops.tmakit.load_tiles
    bench    the load study against torch's sum and copy_; --pipeline's ring variants
    check    verify_tile_load, check_on_gpu (`tmakit verify`'s worker), verify_pipelined_load
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="load",
    summary="tile loads, one stage (the seed's kernel) or an N-stage ring",
    parts=frozenset({"kernel", "launch", "api", "op", "bench", "check"}),
)
