"""`tmakit explain` of a load or a ring (and `tmakit plan --json`): the seed's three questions
answered for any configuration, from the real CuTe objects. The host-side view construction is
traced for sm_90a (no GPU) and every layout, coordinate and view is recorded as the DSL prints it;
the numbers come from those objects or from the plan - none is retyped here.

1. Why a coordinate tensor? -> the TMA tensor and the selected tile's coordinates.
2. Why group modes before partitioning? -> the views before and after `group_modes`, and the two
   views `tma_partition` returns.
3. Why an arrival count and a byte count? -> bytes per transfer, shared memory requested vs bytes
   each phase expects, the parity sequence (per stage when pipelined).

With a cluster or a reduce op, their sections (`clusters`, `reduce`) follow: a cluster's is the
cluster family's explain part (`cluster_numbers`, `cluster_section`, `cluster_lines`, read by name
through `tmakit.registry`), a multicast plan the cluster family's `MulticastPlan`.
"""

from types import ModuleType
from typing import Any

from .. import registry
from ..plan import LoadPlan, PipelinePlan, check_reduce
from ..runtime.compile import compile_kernel, fake_source
from .common import configuration, highlight_tile
from .reduce_store import reduce_lines, reduce_store

SINGLE_CTA = "single CTA: no multicast (pass --cluster to see each CTA's slice)"  # no cluster section


def cluster_explain() -> ModuleType:
    """The cluster family's explain part: the cluster section of a load's explanation."""
    return registry.exporting("cluster_section", "explain")


def describe_plan(
    plan: LoadPlan, highlight: tuple[int, int] | None = None, multicast: Any = None
) -> dict[str, Any]:
    """`tmakit plan --json`: the plan's numbers (no tracing, no DSL), in explain's vocabulary;
    `multicast`, a `MulticastPlan`, adds its cluster's."""
    highlight = highlight_tile(plan, highlight)
    return {
        "configuration": configuration(plan),
        "decomposition": {
            "grid": plan.grid,
            "row_blocks": plan.row_blocks,
            "batch": plan.batch_count,
            "tiles_per_block": plan.tiles_per_block,
            "total_tile_loads": plan.total_tile_loads,
            "partial_tiles": plan.has_partial_tiles,
            "highlight": list(highlight),
            "highlight_element_origin": list(plan.tile_origin(*highlight)),
        },
        "bytes": {
            "tensor_bytes": plan.tensor_bytes,
            "expected_tx_bytes_per_phase": plan.expected_tx_bytes,
            "shared_memory_requested": plan.smem_bytes,
            "barrier_bytes": plan.barrier_bytes,
        },
        "phases": {"block_0_parity": [plan.phase_parity(j) for j in range(plan.tiles_per_block)]},
        "clusters": None if multicast is None else cluster_explain().cluster_numbers(multicast),
    }


def trace_views(plan: LoadPlan, highlight: tuple[int, int]) -> dict[str, Any]:
    """Trace the host-side TMA construction for `plan` and record the real objects as text."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import cpasync

    from ..kernels.tma import matrix_first_view, shared_tile_layout

    rank = len(plan.config.shape)
    element_type = getattr(cutlass, plan.config.element.cutlass_name)
    seen: dict[str, Any] = {}
    tile_coord = (*highlight, 0) if rank > 2 else highlight

    @cute.jit
    def trace(src: cute.Tensor):
        global_view = matrix_first_view(src, rank)
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), global_view, shared_layout, plan.config.tile
        )
        tile_coordinates = cute.local_tile(coordinate_view, plan.config.tile, tile_coord)
        # A stand-in shared tile at address 0 (nothing is allocated: only its layout matters).
        shared_tile = cute.make_tensor(
            cute.recast_ptr(
                cute.make_ptr(element_type, 0, cute.AddressSpace.smem, assumed_align=1024),
                shared_layout.inner,
            ),
            shared_layout.outer,
        )
        grouped_shared = cute.group_modes(shared_tile, 0, 2)
        grouped_global = cute.group_modes(tile_coordinates, 0, 2)
        shared_part, global_part = cpasync.tma_partition(
            load_atom, 0, cute.make_layout(1), grouped_shared, grouped_global
        )
        seen.update(
            global_view=str(global_view.layout),
            shared_layout=str(shared_layout),
            coordinate_view=str(coordinate_view),
            tile_coordinates=str(tile_coordinates),
            tile_first_coordinate=str(tile_coordinates[0, 0]),
            shared_tile=str(shared_tile),
            grouped_shared=str(grouped_shared),
            grouped_global=str(grouped_global),
            shared_partition=str(shared_part),
            global_partition=str(global_part),
            atom=str(load_atom),
            values_per_transfer=cute.size(load_atom.layout_src_tv),
            atom_threads=cute.size(load_atom.thr_id),
        )

    compile_kernel(trace, fake_source(plan.config))
    return seen


def explain(
    pipeline: PipelinePlan,
    highlight: tuple[int, int] | None = None,
    multicast: Any = None,
    reduce_op: str | None = None,
) -> dict[str, Any]:
    """Everything `tmakit explain` prints, as a dict (the `--json` output). `highlight` defaults
    as in `highlight_tile`; `multicast`, a `MulticastPlan`, adds each CTA's slice of the tile; a
    tile outside the grid, or a `reduce_op` TMA does not apply to the dtype, is refused before
    anything is traced."""
    plan = pipeline.load
    if reduce_op is not None:
        check_reduce(reduce_op, plan.config.dtype)
    highlight = highlight_tile(plan, highlight)
    views = trace_views(plan, highlight)
    bytes_per_transfer = views["values_per_transfer"] * plan.config.element.nbytes
    steps = pipeline.tiles_of_block(0)
    # One stage is the seed's kernel (one tile, one barrier); more are the ring's.
    shared = plan if pipeline.stages == 1 else pipeline
    return {
        "configuration": {
            **configuration(plan),
            "stages": pipeline.stages,
            "consumer_warps": pipeline.consumer_warps,
        },
        "decomposition": {
            "grid": pipeline.grid,
            "tiles_per_block": plan.tiles_per_block,
            "total_tile_loads": plan.total_tile_loads,
            "highlight": list(highlight),
            "highlight_element_origin": list(plan.tile_origin(*highlight)),
        },
        "views": views,
        "bytes": {
            "bytes_per_transfer": bytes_per_transfer,
            "transfers_per_tile": plan.expected_tx_bytes // bytes_per_transfer,
            "expected_tx_bytes_per_phase": plan.expected_tx_bytes,
            "shared_memory_requested": shared.smem_bytes,
            "barrier_bytes": shared.barrier_bytes,
        },
        "phases": {
            "block_0_parity": [plan.phase_parity(j) for j in range(steps)]
            if pipeline.stages == 1
            else [list(pipeline.stage_and_parity(j)) for j in range(steps)],
        },
        "clusters": SINGLE_CTA
        if multicast is None
        else cluster_explain().cluster_section(highlight, multicast),
        "reduce": reduce_store(plan, highlight, reduce_op),
    }


def to_text(report: dict[str, Any]) -> str:
    """The plain-text explanation, in the order of the seed's three questions."""
    cfg, dec, views, nbytes = (
        report["configuration"],
        report["decomposition"],
        report["views"],
        report["bytes"],
    )
    origin = tuple(dec["highlight_element_origin"])
    staged = cfg["stages"] > 1
    lines = [
        f"configuration: {'x'.join(map(str, cfg['shape']))} {cfg['dtype']}, strides {tuple(cfg['strides'])}, "
        f"tile {cfg['tile'][0]}x{cfg['tile'][1]}, swizzle {cfg['swizzle_bytes'] or 'none'}"
        + (f", {cfg['stages']} stages x {cfg['consumer_warps']} consumer warp(s)" if staged else ""),
        f"  {dec['grid']} blocks, {dec['tiles_per_block']} tiles per strip, "
        f"{dec['total_tile_loads']} tile loads",
        "",
        "The layouts describe storage; nothing is allocated by describing it",
        f"  global view (matrix modes first):  {views['global_view']}",
        f"  shared tile (swizzle o offset o layout):  {views['shared_layout']}",
        "",
        "1. Why a coordinate tensor?",
        f"  the TMA tensor:  {views['coordinate_view']}",
        "  Its 'strides' are basis elements (1@0, 1@1): it maps a logical (row, column) to the",
        "  coordinates a TMA instruction consumes. It is not an array in memory; no global bytes back it.",
        f"  local_tile(..., {tuple(dec['highlight'])}) picks tile {tuple(dec['highlight'])}:",
        f"    {views['tile_coordinates']}",
        f"  its first coordinate is {views['tile_first_coordinate']}: TMA lists the innermost dim first,",
        f"  so this is element origin {origin} (row, column) - the plan says {origin} too.",
        "",
        "2. Why group modes before tma_partition?",
        f"  shared tile:           {views['shared_tile']}",
        f"  after group_modes:     {views['grouped_shared']}",
        f"  tile coordinates:      {views['tile_coordinates']}",
        f"  after group_modes:     {views['grouped_global']}",
        "  group_modes(t, 0, 2) makes the whole 2-D tile mode 0 - the one mode tma_partition splits",
        "  among the atom's values; the mapping is unchanged, nothing is copied.",
        f"  tma_partition -> shared view (first):  {views['shared_partition']}",
        f"                   global view (second): {views['global_partition']}",
        "  (CTA coordinate 0 and CTA layout 1 mean one CTA, no multicast; they do not pick a tile.)",
        "",
        "3. Why does the barrier need an arrival count and a byte count?",
        f"  the copy atom moves {nbytes['bytes_per_transfer']} bytes per transfer "
        f"({views['values_per_transfer']} values, {views['atom_threads']} issuing thread): "
        f"{nbytes['transfers_per_tile']} transfer(s) per tile",
        f"  shared memory requested: {nbytes['shared_memory_requested']} bytes "
        f"(tiles + {nbytes['barrier_bytes']} bytes of barriers)",
        f"  each barrier phase expects {nbytes['expected_tx_bytes_per_phase']} bytes: the payload only; the",
        "  barrier's own storage is not transferred. One arrival (the thread that issued the copy and",
        "  declared the bytes) plus those bytes completing = the phase is done and the tile is readable.",
    ]
    parity = report["phases"]["block_0_parity"]
    if staged:
        shown = ", ".join(f"s{stage}:p{p}" for stage, p in parity[:12])
        lines.append(f"  block 0's loads (stage:parity): {shown}{', ...' if len(parity) > 12 else ''}")
        lines.append(
            "  each stage's full barrier completes once per trip round the ring, so its parity flips per trip"
        )
    else:
        lines.append(
            f"  block 0 waits on parity {', '.join(map(str, parity[:12]))}"
            + (", ..." if len(parity) > 12 else "")
        )
    clusters = report["clusters"]
    lines += (
        ["", f"clusters: {clusters}"]
        if isinstance(clusters, str)
        else cluster_explain().cluster_lines(clusters)
    )
    lines += reduce_lines(report["reduce"])
    return "\n".join(lines)
