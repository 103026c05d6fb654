"""`tmakit plan` and `tmakit explain` of im2col: `--kernel im2col --im2col SPEC` (explain also
takes `--im2col SPEC` alone), the plan and route `tmakit.im2col` takes for the convolution SPEC
names over the --shape activation (NHWC) and, explained, one box of the patch matrix
(`explain_im2col`): its tap and channels, the descriptor's corners and the tap's offsets, the
input pixel its first row reads (the coordinates the load names, traced from the DSL's own im2col
TMA tensor beside the plan's), how much of it is padding, the bytes each phase expects (the whole
box) and its store; or, where the windows copy serves the call, one of its tiles
(`explain_windows`).
"""

# No `from __future__ import annotations`: the DSL reads the traced function's annotations
# (`trace_im2col_views`), which must be objects, not strings.
import argparse
from dataclasses import dataclass, replace
from typing import Any

from ..cli.args import CommandError, emit, needed, refuse_given
from ..cli.kernels import described_route, family_flags, route_lines
from ..config import compact_strides, dtype_named
from ..explain.common import seed_tile
from ..limits import GPUS
from ..plan.budget import budget_grid
from ..plan.route import TensorFacts
from ..runtime.compile import compile_kernel, fake_tensor
from .model import im2col_box
from .plan import Im2colConv, Im2colPlan, im2col_windows, spec_fields
from .route import (
    IM2COL_KERNELS,
    Im2colCall,
    Im2colFacts,
    im2col_call,
    loads_reason,
    planned_route,
    windows_summary,
)

KERNELS = ("im2col",)  # the --kernel names this family plans and explains
FLAGS = ("im2col",)  # the options only it reads: every other kernel refuses them
WHAT = "im2col with --im2col SPEC"  # what --kernel im2col plans, for the help
# What `explain --im2col SPEC` explains without --kernel im2col (`cli.explain`: a family's flag
# given alone picks the family that says so here).
EXPLAINS_ALONE = "an im2col box"
IM2COL_SPEC = (
    "kernel=K[,stride=S][,padding=P][,dilation=D][,tile=PIXELSxCHANNELS][,stages=N][,by=loads|windows]"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--im2col`, on `plan` and `explain` alike."""
    parser.add_argument(
        "--im2col",
        metavar=IM2COL_SPEC,
        help="--kernel im2col (explain: also without it, a box of tmakit.im2col): the convolution; "
        "--shape is the NHWC activation (NxHxWxC), explain's --highlight picks (row block, column "
        "tile) of the patch matrix; K, S, P, D an int or HxW",
    )


@dataclass(frozen=True)
class Im2colChoice:
    """What `--im2col SPEC` plans: the `call` `tmakit.im2col` makes of the convolution on --gpu
    (its route; `windows`: the windows copy serves it; its loads' plan, None on torch's path or for
    x's rows), the loads' `plan` (SPEC's box where given, else the call's) and `how` that kernel
    was chosen (the rule, SPEC's `by=`, or a box given)."""

    plan: Im2colPlan | None
    call: Im2colCall
    how: str
    dtype: str
    sms: int | None = None  # --sms: the call's SM budget (the windows copy's copy_ takes it)

    @property
    def reason(self) -> str:
        """The route's reason, the loads' with SPEC's own box and stages."""
        if self.call.windows or self.plan is None:
            return self.call.route.reason
        return loads_reason(self.plan)

    def lines(self, gpu: str) -> list[str]:
        """The route on `gpu`, the facts assumed, how the kernel was chosen, then its plan."""
        if self.call.windows:
            summary = windows_summary(self.call.conv, self.dtype, self.sms).splitlines()
        else:
            summary = [] if self.plan is None else self.plan.summary().splitlines()
        route = replace(self.call.route, reason=self.reason)
        return route_lines(route, gpu, [f"chosen            {self.how}", *summary] if summary else [])


def im2col_plan(args: argparse.Namespace, why: str) -> Im2colChoice:
    """`--im2col SPEC`'s convolution on the --shape NHWC tensor and the kernel `tmakit.im2col`
    takes for it on --gpu (by SPEC's `by=`, else by the rule: `im2col_call`, what `im2col_path`
    reads): the box SPEC's tile, so the load's, ring's, cluster's, copy's, reduce's and the other
    families' flags are refused if given (`why`: where). A tile or a stage count given is the
    im2col loads' box: the loads, unless `by=windows`, which refuses them."""
    given = (
        "tile",
        "swizzle",
        "layout",
        "pad",
        "stages",
        "consumer_warps",
        "cluster",
        "reduce",
        "copy",
        *family_flags(but=FLAGS),
    )
    refuse_given(
        args, given, f"{why}: the box is SPEC's tile=PIXELSxCHANNELS (and stages=N), of an NHWC tensor"
    )
    text = needed(args.im2col, "--im2col", "im2col", IM2COL_SPEC, "kernel=3,padding=1 --shape 2x56x56x64")
    items = [item.strip() for item in text.split(",")]
    chosen = [item.partition("=")[2].strip() for item in items if item.partition("=")[0].strip() == "by"]
    spec = ",".join(item for item in items if item.partition("=")[0].strip() != "by")
    if len(chosen) > 1 or any(by not in IM2COL_KERNELS for by in chosen):
        raise CommandError(f"--im2col by={','.join(chosen)}: give one of {', '.join(IM2COL_KERNELS)}, once")
    by = chosen[0] if chosen else None
    element, sm_count = dtype_named(args.dtype), GPUS[args.gpu][1]
    fields = spec_fields(spec)
    box_given = "tile" in fields or "stages" in fields
    if box_given and by == "windows":
        raise CommandError("--im2col by=windows copies runs of taps: tile= and stages= are the loads' box")
    how = f"by={by}" if by else "tile=/stages= given: the loads" if box_given else "the rule"
    if box_given:  # the loads of SPEC's own box
        grid = budget_grid(args.sms, sm_count)  # the call's, on --sms's budget
        plan = Im2colPlan(tuple(args.shape), element.name, **grid, **fields)  # type: ignore[arg-type]
        return Im2colChoice(plan, planned_route(plan, "loads"), how, element.name)
    shape = tuple(args.shape)
    x = TensorFacts(shape, compact_strides(shape), element.torch_name, element.nbytes, 0, 0)
    conv = {"filter": "kernel"}
    arguments = {conv.get(k, k): v for k, v in fields.items()}
    facts = Im2colFacts(x, **arguments, sm_count=sm_count, im2col_by=by, sms=args.sms)
    call = im2col_call(facts)
    return Im2colChoice(call.plan, call, how, element.name, args.sms)


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel im2col --im2col SPEC`: the route on --gpu and the plan of the kernel it takes."""
    refuse_given(args, ("highlight",), "to plan --kernel im2col (explain marks a box)")
    choice = im2col_plan(args, "to --kernel im2col")
    lines = choice.lines(args.gpu)
    kernel = {"kind": "im2col", "by": "windows" if choice.call.windows else "loads", "chosen": choice.how}
    route = replace(choice.call.route, reason=choice.reason)
    emit(args, {"kernel": {**kernel, **described_route(route, args.gpu, lines)}}, "\n".join(lines))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --im2col SPEC` (or `--kernel im2col`): one box of the patch matrix, or one tile of
    the windows copy where that serves the call."""
    choice = im2col_plan(args, "with --im2col")
    if choice.plan is None and not choice.call.windows:  # torch's expression, or x's rows
        lines = choice.lines(args.gpu)
        emit(args, {"kernel": {"kind": "im2col", **described_route(choice.call.route, args.gpu, lines)}},
             "\n".join(lines))  # fmt: skip
        return 0
    if choice.call.windows:
        if args.highlight is not None:
            raise CommandError(
                "--highlight marks a box of the im2col loads; this call takes the windows copy "
                "(add by=loads to the --im2col spec to explain the loads)"
            )
        result = {
            "route": choice.reason,
            "chosen": choice.how,
            **explain_windows(choice.call.conv, choice.dtype),
        }
        emit(args, result, f"route: {choice.reason} ({choice.how})\n{windows_to_text(result)}")
        return 0
    result = explain_im2col(choice.plan, args.highlight)
    emit(args, result, im2col_to_text(result))
    return 0


def explain_im2col(plan: Im2colPlan, highlight: tuple[int, int] | None = None) -> dict[str, Any]:
    """`tmakit explain --im2col` as a dict: box `highlight` (row block, column tile) of the patch
    matrix (default the seed's (1, 2), moved into a smaller grid; one outside refused before
    anything is traced)."""
    if highlight is None:
        highlight = seed_tile(plan.row_blocks, plan.column_tiles)
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

    from ..kernels.tma import shared_tile_layout
    from .kernel import activation_view, make_im2col_load_atom

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


def explain_windows(conv: Im2colConv, dtype: str) -> dict[str, Any]:
    """`tmakit explain --im2col` where the windows copy serves the call, as a dict: its plan
    (`route.windows_summary`) and its first tile of output row p = 1 and filter row
    r = 1 (0 where there is one): the runs it moves, the padded input they read and the patch
    elements they write, and how many of those elements are the padding's zeros."""
    windows = im2col_windows(conv)
    _, height, width, channels = conv.shape
    (rows_p, cols_q), (taps_r, taps_s) = conv.output_shape, conv.filter
    (stride_h, stride_w), (pad_h, pad_w) = conv.stride, conv.padding
    p, r = min(1, rows_p - 1), min(1, taps_r - 1)
    runs = min(windows.tile[0], cols_q)
    padded_row = p * stride_h + r
    inside_row = pad_h <= padded_row < pad_h + height
    zero_taps = sum(
        not (inside_row and pad_w <= q * stride_w + s < pad_w + width)
        for q in range(runs)
        for s in range(taps_s)
    )
    run = windows.shape[-1]
    return {
        "kernel": "windows",
        "summary": windows_summary(conv, dtype).splitlines(),
        "tile": {
            "npr": [0, p, r],
            "output_pixels_q": [0, runs - 1],
            "patch_rows": [p * cols_q, p * cols_q + runs - 1],
            "patch_columns": [r * run, (r + 1) * run - 1],
            "padded_row": padded_row,
            "input_row": padded_row - pad_h if inside_row else None,
            "padded_columns": [0, (runs - 1) * stride_w + taps_s - 1],
            "source_element_origin": p * windows.src_strides[1] + r * windows.src_strides[2],
            "elements": runs * run,
            "zero_elements": zero_taps * channels,
        },
    }


def windows_to_text(report: dict[str, Any]) -> str:
    """The plain-text explanation of the windows copy's plan and one of its tiles."""
    tile = report["tile"]
    n, p, r = tile["npr"]
    q0, q1 = tile["output_pixels_q"]
    row = tile["input_row"]
    read = f"input row {row}" if row is not None else "a padding row (all zeros)"
    return "\n".join(
        [
            *report["summary"],
            "",
            f"Tile (n, p, r) = ({n}, {p}, {r}), output pixels q = {q0}-{q1}: one run of filter row {r}'s "
            "taps a pixel",
            f"  reads padded row {tile['padded_row']} ({read}), padded columns {tile['padded_columns'][0]}-"
            f"{tile['padded_columns'][1]}, from padded element {tile['source_element_origin']}",
            f"  writes patch rows {tile['patch_rows'][0]}-{tile['patch_rows'][1]}, columns "
            f"{tile['patch_columns'][0]}-{tile['patch_columns'][1]}",
            f"  {tile['zero_elements']} of its {tile['elements']} elements are the padding's zeros (the "
            "padded input's, written once before the copy)",
        ]
    )
