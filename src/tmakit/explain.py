"""`tmakit explain`: the seed's three questions answered for any configuration, from the real
CuTe objects. The host-side view construction is traced for sm_90a (no GPU) and every layout,
coordinate and view is recorded as the DSL prints it; the numbers come from those objects or from
the plan - none is retyped here.

1. Why a coordinate tensor? -> the TMA tensor and the selected tile's coordinates.
2. Why group modes before partitioning? -> the views before and after `group_modes`, and the two
   views `tma_partition` returns.
3. Why an arrival count and a byte count? -> bytes per transfer, shared memory requested vs bytes
   each phase expects, the parity sequence (per stage when pipelined).

With a reduce op (`tmakit.reduce_into_`), also: the reduce store of the selected tile (its box and
origin, the bytes the TMA unit reads out of shared memory, the instruction) and what it leaves in
each destination element.

For an im2col (`tmakit.im2col`, `explain_im2col`): the selected box of the patch matrix - its tap
and channels, the descriptor's corners and the tap's offsets, the input pixel its first row
reads (the coordinates the load names, traced from the DSL's own im2col TMA tensor beside the
plan's), how much of it is padding, the bytes each phase expects (the whole box) and its store.
"""

import json
from typing import Any

from .model.im2col import im2col_box
from .model.reduce import ELEMENT_RULES
from .plan import Im2colPlan, LoadPlan, MulticastPlan, PipelinePlan, check_reduce
from .runtime.compile import compile_kernel, fake_source, fake_tensor

SEED_HIGHLIGHT = (1, 2)  # the tile the seed walkthrough marks

# What multicast bought on the H200: load-only rings on the seed shape, L2 hot, 4 stages; the
# multicast ring's time over the same kernel's without multicast, (one cluster per strip,
# persistent clusters). From benchmarks/results/multicast-hot-l2.json; a CPU test keeps them in
# step with that file. `tmakit explain --cluster` prints them.
H200_HOT_L2_TIME_RATIO = {
    (1, 2): (1.05, 1.03),
    (2, 1): (1.05, 1.03),
    (2, 2): (1.09, 1.03),
    (1, 4): (1.09, 1.03),
}
# Where it paid: the cluster row dot (`ClusterDotPlan`: each CTA multiplies the shared X tile with
# its own rows of A), inputs rotated past the L2, persistent clusters; the time without multicast
# over the time with it. From benchmarks/results/cluster-dot.json (a CPU test keeps it in step).
H200_SHARED_TILE_SPEEDUP = {(1, 2): 1.02, (2, 2): 1.03}


def highlight_tile(plan: LoadPlan, highlight: tuple[int, ...] | None = None) -> tuple[int, int]:
    """The tile to mark: `highlight` if it is one of the plan's tiles (TmaConfigError naming the
    grid if not); by default the seed's tile (1, 2), moved into a smaller grid."""
    if highlight is None:
        return min(SEED_HIGHLIGHT[0], plan.row_blocks - 1), min(SEED_HIGHLIGHT[1], plan.tiles_per_block - 1)
    row_block, column_tile = highlight
    plan.check_tile(row_block, column_tile, "highlight")
    return row_block, column_tile


def describe_plan(
    plan: LoadPlan, highlight: tuple[int, int] | None = None, multicast: MulticastPlan | None = None
) -> dict[str, Any]:
    """`tmakit plan --json`: the plan's numbers (no tracing, no DSL), in explain's vocabulary."""
    highlight = highlight_tile(plan, highlight)
    return {
        "configuration": _configuration(plan),
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
        "clusters": None if multicast is None else _cluster_numbers(multicast),
    }


def _configuration(plan: LoadPlan) -> dict[str, Any]:
    config = plan.config
    return {
        "shape": list(config.shape),
        "dtype": config.dtype,
        "strides": list(config.element_strides),
        "tile": list(config.tile),
        "swizzle_bytes": config.swizzle,
    }


def _cluster_numbers(multicast: MulticastPlan) -> dict[str, Any]:
    measured = H200_HOT_L2_TIME_RATIO.get(tuple(multicast.cluster))  # None: a shape not measured
    return {
        "cluster": list(multicast.cluster),
        "h200_hot_l2_time_ratio": None
        if measured is None
        else {"one_cluster_per_strip": measured[0], "persistent_clusters": measured[1]},
        "multicast_mask": multicast.multicast_mask,
        "expected_tx_bytes_per_cta": multicast.load.expected_tx_bytes,
        "ctas": [
            {
                "rank": rank,
                "tile_rows": list(multicast.slice_of(rank)),
                "issued_bytes": multicast.issued_bytes_per_cta,
            }
            for rank in range(multicast.cluster_size)
        ],
    }


def trace_cluster_slices(multicast: MulticastPlan, highlight: tuple[int, int]) -> list[dict[str, str]]:
    """Each CTA's share of the highlighted tile, from the multicast kernel's own atom and
    `slice_views` (a shared tile built as the kernel builds it, swizzle included): the real slices."""
    import cutlass
    import cutlass.cute as cute

    from .kernels.multicast import MulticastLoadKernel, make_cluster_load_atom

    plan = multicast.load
    kernel = MulticastLoadKernel(multicast)
    slices: list[dict[str, str]] = []

    @cute.jit
    def trace(src: cute.Tensor):
        load_atom, coordinate_view, shared_layout = make_cluster_load_atom(multicast, src)
        tile_ptr = cute.make_ptr(kernel.element_type, 0, cute.AddressSpace.smem, assumed_align=1024)
        shared_tile = cute.make_tensor(
            cute.recast_ptr(tile_ptr, shared_layout.inner, dtype=kernel.element_type), shared_layout.outer
        )
        for rank in cutlass.range_constexpr(multicast.cluster_size):
            global_part, shared_part = kernel.slice_views(
                load_atom, coordinate_view, shared_tile, highlight, rank
            )
            slices.append({"shared": str(shared_part), "global": str(global_part)})

    compile_kernel(trace, fake_source(plan.config))
    return slices


def trace_views(plan: LoadPlan, highlight: tuple[int, int]) -> dict[str, Any]:
    """Trace the host-side TMA construction for `plan` and record the real objects as text."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import cpasync

    from .kernels.tma import matrix_first_view, shared_tile_layout

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
    multicast: MulticastPlan | None = None,
    reduce_op: str | None = None,
) -> dict[str, Any]:
    """Everything `tmakit explain` prints, as a dict (the `--json` output). `highlight` defaults
    as in `highlight_tile`; a tile outside the grid, or a `reduce_op` TMA does not apply to the
    dtype, is refused before anything is traced."""
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
            **_configuration(plan),
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
        "clusters": _clusters(highlight, multicast),
        "reduce": _reduce(plan, highlight, reduce_op),
    }


def _reduce(plan: LoadPlan, highlight: tuple[int, int], op: str | None) -> dict[str, Any] | None:
    """The reduce store of the highlighted tile: it writes back the box the load read (same
    coordinates, same bytes), combining each element with the destination's in L2."""
    if op is None:
        return None
    return {
        "op": op,
        "instruction": f"cp.reduce.async.bulk.tensor.{len(plan.config.shape)}d.global.shared::cta.{op}"
        ".tile.bulk_group",
        "box": list(plan.config.tile),
        "destination_element_origin": list(plan.tile_origin(*highlight)),
        "bytes_read_from_shared_memory": plan.expected_tx_bytes,
        "element_rule": ELEMENT_RULES[op],
    }


def _clusters(highlight: tuple[int, int], multicast: MulticastPlan | None) -> Any:
    if multicast is None:
        return "single CTA: no multicast (pass --cluster to see each CTA's slice)"
    numbers = _cluster_numbers(multicast)
    for cta, traced in zip(numbers["ctas"], trace_cluster_slices(multicast, highlight), strict=True):
        cta.update(traced)
    return numbers


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
    if isinstance(clusters, str):
        lines += ["", f"clusters: {clusters}"]
    else:
        lines += [
            "",
            f"clusters: {clusters['cluster'][0]}x{clusters['cluster'][1]}, multicast mask "
            f"{clusters['multicast_mask']:#06b}; every CTA's barrier expects "
            f"{clusters['expected_tx_bytes_per_cta']} bytes (its own slice and every peer's land in it)",
        ]
        for cta in clusters["ctas"]:
            first, last = cta["tile_rows"]
            lines.append(f"  CTA {cta['rank']} issues tile rows {first}-{last - 1}: global {cta['global']}")
        ratio = clusters["h200_hot_l2_time_ratio"]
        lines += [
            "  does it pay? Not for loads alone on the H200. The CTAs of a cluster read each tile at about",
            "  the same time, and Nsight Compute counts about the same L2 read requests with multicast and",
            "  without: the identical requests are already served once, so multicast has no L2 traffic to",
            "  save. It adds a cluster barrier at the start and a drain at the exit of every CTA.",
        ]
        if ratio is None:
            shapes = ", ".join(f"{r}x{c}" for r, c in H200_HOT_L2_TIME_RATIO)
            lines += [
                f"  This shape was not measured on the H200 (measured: {shapes}; "
                "benchmarks/results/multicast-hot-l2.json).",
            ]
        else:
            lines += [
                f"  Measured (seed shape, L2 hot, 4 stages), time over the same kernel without multicast: "
                f"{ratio['one_cluster_per_strip']:.2f}x",
                f"  with one cluster per strip, {ratio['persistent_clusters']:.2f}x with persistent clusters "
                "(benchmarks/results/multicast-hot-l2.json).",
            ]
        lines += [
            "  Where it paid: CTAs that each combine the shared tile with their own rows (the cluster row",
            "  dot, plan.ClusterDotPlan), reading from DRAM, persistent clusters: without multicast the",
            "  same kernel took "
            + " and ".join(f"{s:.2f}x ({r}x{c})" for (r, c), s in H200_SHARED_TILE_SPEEDUP.items())
            + " the time; with the L2 hot, multicast lost there too",
            "  (benchmarks/results/cluster-dot.json).",
        ]
    reduce = report["reduce"]
    if reduce is not None:
        box, origin = reduce["box"], tuple(reduce["destination_element_origin"])
        lines += [
            "",
            f"4. What does a reduce store ({reduce['op']}) do with the tile?",
            f"  {reduce['instruction']}",
            f"  it reads the {box[0]}x{box[1]} box back out of shared memory "
            f"({reduce['bytes_read_from_shared_memory']} bytes) into the destination's box at",
            f"  element origin {origin}: the tile the load read, at the same coordinates. The L2",
            "  combines each element s with the destination's d, which becomes",
            f"  {reduce['element_rule']}.",
            "  No barrier completes: the issuing thread commits a bulk group and waits for it to have read",
            "  the stage before the stage is released.",
        ]
    return "\n".join(lines)


# -- im2col ---------------------------------------------------------------------------------------
def explain_im2col(plan: Im2colPlan, highlight: tuple[int, int] | None = None) -> dict[str, Any]:
    """`tmakit explain --im2col` as a dict: box `highlight` (row block, column tile) of the patch
    matrix (default the seed's (1, 2), moved into a smaller grid; one outside refused before
    anything is traced)."""
    if highlight is None:
        highlight = (
            min(SEED_HIGHLIGHT[0], plan.row_blocks - 1),
            min(SEED_HIGHLIGHT[1], plan.column_tiles - 1),
        )
    row_block, column_tile = highlight
    plan.check_tile(row_block, column_tile)
    pixels, channels = plan.tile
    r, s, channel_tile = plan.tap_of(column_tile)
    first_row, first_column = row_block * pixels, column_tile * channels
    n, h, w = plan.window_corner(first_row)
    box = im2col_box(plan, row_block, column_tile)
    rows = plan.patch_shape[0]
    nbytes = plan.element.nbytes
    return {
        "configuration": {
            "shape": list(plan.shape),
            "dtype": plan.dtype,
            "filter": list(plan.filter),
            "stride": list(plan.stride),
            "padding": list(plan.padding),
            "dilation": list(plan.dilation),
            "output": list(plan.output_shape),
            "patch_shape": list(plan.patch_shape),
            "tile": list(plan.tile),
            "swizzle_bytes": plan.swizzle,
            "stages": plan.stages,
        },
        "descriptor": {name: list(value) for name, value in plan.descriptor.items()},
        "box": {
            "highlight": list(highlight),
            "patch_element_origin": [first_row, first_column],
            "tap": [r, s],
            "channels": [channel_tile * channels, (channel_tile + 1) * channels - 1],
            "tap_offsets_ws": list(plan.tap_offsets(r, s)),
            "output_pixel_npq": list(plan.pixel(first_row)),
            "first_pixel_nhw": [n, h, w],
            "load_coordinates_cwhn": [channel_tile * channels, w, h, n],
            "tapped_input_pixel_nhw": [n, h + r * plan.dilation[0], w + s * plan.dilation[1]],
            "zero_filled_elements": box.zero_filled,
            "pixels_past_the_patch_matrix": max(0, first_row + pixels - rows),
        },
        "views": trace_im2col_views(plan, highlight),
        "bytes": {
            "expected_tx_bytes_per_phase": plan.expected_tx_bytes,
            "input_bytes_read": (box.inside.size - box.zero_filled) * nbytes,
            "zero_fill_bytes": box.zero_filled * nbytes,
            "stage_bytes": plan.copy.ring.stage_bytes,
            "shared_memory_requested": plan.smem_bytes,
        },
        "store": {
            "instruction": "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
            "box": list(plan.tile),
            "destination_element_origin": [first_row, first_column],
            "rows_stored": min(pixels, rows - first_row),
        },
    }


def trace_im2col_views(plan: Im2colPlan, highlight: tuple[int, int]) -> dict[str, str]:
    """The im2col kernel's host-side views traced for sm_90a: the activation as the atom takes
    it, the im2col TMA tensor, the highlighted box's coordinates and the first of them."""
    import cutlass.cute as cute

    from .kernels.im2col import activation_view, make_im2col_load_atom
    from .kernels.tma import shared_tile_layout

    load = plan.copy.load
    seen: dict[str, str] = {}

    @cute.jit
    def trace(x: cute.Tensor):
        shared_layout = shared_tile_layout(load.config.tile, False, load.swizzle_bits)
        _, coordinate_view = make_im2col_load_atom(plan, x, shared_layout)
        tile_coordinates = cute.local_tile(coordinate_view, plan.tile, highlight)
        seen.update(
            activation_view=str(activation_view(x).layout),
            shared_layout=str(shared_layout),
            coordinate_view=str(coordinate_view),
            tile_coordinates=str(tile_coordinates),
            tile_first_coordinate=str(tile_coordinates[0, 0]),
        )

    compile_kernel(trace, fake_tensor(plan.element, plan.shape))
    return seen


def im2col_to_text(report: dict[str, Any]) -> str:
    """The plain-text explanation of one im2col box."""
    cfg, box, views, nbytes, store = (report[k] for k in ("configuration", "box", "views", "bytes", "store"))
    descriptor = report["descriptor"]
    pixels, channels = cfg["tile"]
    r, s = box["tap"]
    n, h, w = box["first_pixel_nhw"]
    m0, k0 = box["patch_element_origin"]

    def extents(name: str) -> str:
        return "x".join(map(str, cfg[name]))

    rows, cols = cfg["patch_shape"]
    return "\n".join(
        [
            f"im2col: {extents('shape')} (NHWC) {cfg['dtype']}, kernel {extents('filter')}, "
            f"stride {extents('stride')}, padding {extents('padding')}, dilation {extents('dilation')}",
            f"  output {extents('output')} pixels per image; patch matrix {rows} x {cols} "
            "(N*P*Q, R*S*C: channels fastest, then s, then r)",
            f"  boxes of {pixels} pixels x {channels} channels, swizzle {cfg['swizzle_bytes'] or 'none'}, "
            f"{cfg['stages']} stages",
            "",
            "The descriptor (w, h order): the pixel box of a window's first tap and the taps' spacing",
            f"  lower corner {tuple(descriptor['lower_corner_whd'])} (-padding), upper corner "
            f"{tuple(descriptor['upper_corner_whd'])} (padding - (kernel - 1) * dilation)",
            f"  element strides {tuple(descriptor['stride_whd'])} (the conv stride), tap offsets from "
            f"{tuple(descriptor['lower_srt'])}, {tuple(descriptor['stride_srt'])} apart (the dilation)",
            f"  the activation as the atom takes it, ((W, H, N), C):  {views['activation_view']}",
            f"  the im2col TMA tensor (N*P*Q, (C, S, R)):  {views['coordinate_view']}",
            "",
            f"Box {tuple(box['highlight'])}: patch rows {m0}-{m0 + pixels - 1}, "
            f"columns {k0}-{k0 + channels - 1}",
            f"  tap (r, s) = ({r}, {s}), channels {box['channels'][0]}-{box['channels'][1]}; "
            f"im2col offsets (s, r) = {tuple(box['tap_offsets_ws'])}",
            f"  its first row is output pixel (n, p, q) = {tuple(box['output_pixel_npq'])}, "
            f"whose window starts at input (h, w) = ({h}, {w});",
            f"  the load names {{c, w, h, n}} = {{{', '.join(map(str, box['load_coordinates_cwhn']))}}} "
            f"and that tap reads input pixel (n, h, w) = {tuple(box['tapped_input_pixel_nhw'])}",
            f"  traced from the DSL: first coordinate {views['tile_first_coordinate']} "
            "(c, (w, h), n, (s, r))",
            f"  {box['zero_filled_elements']} of its {pixels * channels} elements are TMA's zero fill "
            f"(padding, or {box['pixels_past_the_patch_matrix']} pixels past the last image)",
            "",
            "Bytes per phase",
            f"  each barrier phase expects {nbytes['expected_tx_bytes_per_phase']} bytes: the whole box, the "
            f"zero fill ({nbytes['zero_fill_bytes']} bytes) included;",
            f"  {nbytes['input_bytes_read']} bytes come from the activation. Stages of "
            f"{nbytes['stage_bytes']} bytes, {nbytes['shared_memory_requested']} bytes of shared memory "
            "requested.",
            "",
            "The store",
            f"  {store['instruction']}: the {pixels}x{channels} box to patch element "
            f"{tuple(store['destination_element_origin'])}, {store['rows_stored']} rows written "
            "(the store clips past the last row)",
        ]
    )


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1)
