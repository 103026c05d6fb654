"""`tmakit.im2col` on a CPU: the plan (output extents, the patch matrix, the box and the walk, the
descriptor's fields), every refusal naming value, rule and fix, the NumPy model against
`torch.nn.functional.unfold`, and the kernel compiled for sm_90a with its PTX read back."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.patches.launch import compile_im2col
from tmakit.patches.model import box_values, im2col_box, patch_matrix
from tmakit.patches.plan import Im2colPlan, default_channel_tile, output_extent
from tmakit.ptx import expect_tx_byte_counts

RESNET = Im2colPlan((2, 56, 56, 64), "fp16", 3, padding=1)


# -- the plan -----------------------------------------------------------------------------------
def test_a_resnet_3x3_layer_is_planned_as_boxes_of_128_pixels_by_one_swizzle_span():
    plan = RESNET
    assert plan.output_shape == (56, 56)
    assert plan.patch_shape == (2 * 56 * 56, 9 * 64)
    assert plan.tile == (128, 64) and plan.swizzle == 128
    assert plan.expected_tx_bytes == 128 * 64 * 2  # the whole box, padding included
    assert (plan.row_blocks, plan.column_tiles) == (49, 9)
    assert plan.copy.load.expected_tx_bytes == plan.expected_tx_bytes  # one number, the ring reads it
    assert plan.smem_bytes == plan.copy.smem_bytes
    assert plan.descriptor == {
        "lower_corner_whd": (-1, -1),
        "upper_corner_whd": (-1, -1),
        "lower_padding_whd": (1, 1),
        "upper_padding_whd": (1, 1),
        "stride_whd": (1, 1),
        "lower_srt": (0, 0),
        "stride_srt": (1, 1),
    }


def test_pairs_are_height_then_width_and_the_descriptor_is_width_then_height():
    plan = Im2colPlan((1, 15, 17, 32), "fp32", (3, 2), stride=(2, 3), padding=(1, 0), dilation=(2, 1))
    assert plan.output_shape == (output_extent(15, 3, 2, 1, 2), output_extent(17, 2, 3, 0, 1)) == (7, 6)
    assert plan.descriptor["lower_corner_whd"] == (0, -1)
    assert plan.descriptor["upper_corner_whd"] == (0 - 1 * 1, 1 - 2 * 2)
    assert plan.descriptor["stride_whd"] == (3, 2)
    assert plan.descriptor["stride_srt"] == (1, 2)


@pytest.mark.parametrize(
    "channels, nbytes, expected", [(64, 2, 64), (256, 2, 64), (32, 2, 32), (24, 2, 24), (96, 2, 48),
                                   (8, 4, 8), (64, 4, 32), (40, 2, 40), (3, 2, None)],
)  # fmt: skip
def test_the_channel_tile_is_the_widest_divisor_of_whole_chunks_within_one_span(channels, nbytes, expected):
    assert default_channel_tile(channels, nbytes) == expected


def test_the_swizzle_follows_the_channel_rows_width():
    assert Im2colPlan((1, 8, 8, 16), "fp32", 1).swizzle == 64
    assert Im2colPlan((1, 8, 8, 8), "fp32", 1).swizzle == 32
    assert Im2colPlan((1, 8, 8, 24), "fp16", 1).swizzle == 0  # 48-byte rows: no swizzle mode
    assert Im2colPlan((1, 8, 8, 8), "fp16", 1).swizzle == 0  # 16 bytes


def test_column_tiles_walk_channel_tiles_then_s_then_r():
    plan = Im2colPlan((1, 8, 8, 128), "bf16", (2, 3))
    assert plan.channel_tiles == 2 and plan.column_tiles == 12
    assert [plan.tap_of(j) for j in range(4)] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert plan.tap_of(6) == (1, 0, 0)
    assert plan.tap_offsets(1, 2) == (2, 1)  # (w, h)


def test_a_single_pixel_output_is_refused_naming_what_to_compute_instead():
    # One row needs a one-row store box and a load box of 2+ pixels: CuTe's im2col atom has none.
    with pytest.raises(TmaConfigError, match=r"is \(1, 144\): one row .*x\[:, 0:3, 0:3\]\.reshape\(1, 144\)"):
        Im2colPlan((1, 3, 3, 16), "fp16", 3)


def test_the_window_corner_of_a_row_is_its_first_taps_input_pixel():
    plan = Im2colPlan((2, 10, 10, 16), "fp16", 3, stride=2, padding=1)
    assert plan.output_shape == (5, 5)
    assert plan.pixel(0) == (0, 0, 0) and plan.window_corner(0) == (0, -1, -1)
    assert plan.pixel(31) == (1, 1, 1) and plan.window_corner(31) == (1, 1, 1)


# -- refusals -----------------------------------------------------------------------------------
REFUSALS = [
    (
        dict(shape=(1, 8, 8, 16), dtype="int8", filter=3),
        r"dtype int8; tmakit.im2col takes fp16, bf16, fp32",
    ),
    (
        dict(shape=(8, 8, 16), dtype="fp16", filter=3),
        r"rank 3; .*NHWC .*add a batch dim",
    ),
    (
        dict(shape=(1, 8, 8, 3), dtype="fp16", filter=3),
        r"C = 3 channels .* 6 bytes .*multiple of 16 bytes: pad the channels to a multiple of 8",
    ),
    (
        dict(shape=(1, 8, 8, 6), dtype="fp32", filter=3),
        r"C = 6 channels of fp32 is 24 bytes .*multiple of 4",
    ),
    (
        dict(shape=(1, 8, 0, 16), dtype="fp16", filter=3),
        r"extent below 1",
    ),
    (
        dict(shape=(1, 32, 32, 16), dtype="fp16", filter=3, stride=9),
        r"stride 9 along height; .*element stride is 1..8",
    ),
    (
        dict(shape=(1, 32, 32, 16), dtype="fp16", filter=3, stride=(1, 16)),
        r"stride 16 along width",
    ),
    (
        dict(shape=(1, 300, 300, 16), dtype="fp16", filter=3, padding=129),
        r"lower corner along height is -129 \(-padding\); .*-128..127: use less padding",
    ),
    (
        dict(shape=(1, 300, 300, 16), dtype="fp16", filter=3, dilation=100),
        r"upper corner along height is -200 \(padding - \(kernel - 1\) \* dilation\)",
    ),
    (
        dict(shape=(1, 4, 4, 16), dtype="fp16", filter=5),
        r"the height 4 with padding 0 is smaller than the dilated filter \(5\): no output pixel",
    ),
    (
        dict(shape=(1, 8, 8, 16), dtype="fp16", filter=0),
        r"kernel \(0, 0\) has a value below 1",
    ),
    (
        dict(shape=(1, 8, 8, 16), dtype="fp16", filter=3, padding=-1),
        r"padding \(-1, -1\) has a value below 0",
    ),
    (
        dict(shape=(1, 8, 8, 16), dtype="fp16", filter=(3, 3, 3)),
        r"has 3 values; a 2-D convolution takes one int or \(height, width\)",
    ),
    (
        dict(shape=(1, 8, 8, 16), dtype="fp16", filter="3"),
        r"kernel '3' is not an int or a pair of ints",
    ),
    (
        dict(shape=(1, 8, 8, 64), dtype="fp16", filter=3, tile=(512, 64)),
        r"tile of 512 pixels; pixelsPerColumn .*1024.*at most 256 rows",
    ),
    (
        dict(shape=(1, 8, 8, 64), dtype="fp16", filter=3, tile=(128, 12)),
        r"tile of 12 channels \(24 bytes\); channelsPerPixel .* multiple of 16 bytes",
    ),
    (
        dict(shape=(1, 8, 8, 96), dtype="fp16", filter=3, tile=(128, 64)),
        r"tile of 64 channels does not divide C = 96; .*next tap's columns.*default 48",
    ),
    (
        dict(shape=(1, 8, 8, 256), dtype="fp16", filter=3, tile=(128, 128)),
        r"tile of 128 channels is 256 bytes; .*one 128-byte swizzle span",
    ),
    (
        dict(shape=(1, 8, 8, 64), dtype="fp16", filter=3, stages=99),
        r"99 stages of 16384 bytes .*do not fit",
    ),
]


@pytest.mark.parametrize("fields, message", REFUSALS, ids=[m[:30] for _, m in REFUSALS])
def test_every_rule_is_refused_naming_value_rule_and_fix(fields, message):
    with pytest.raises(TmaConfigError, match=message):
        Im2colPlan(**fields)


def test_the_refusals_come_before_anything_compiles(monkeypatch):
    import tmakit.runtime.compile as compile_module

    monkeypatch.setattr(compile_module, "compiled_once", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(TmaConfigError):
        compile_im2col(Im2colPlan((1, 8, 8, 3), "fp16", 3))


def test_the_strict_api_refuses_what_is_not_a_cuda_nhwc_tensor():
    torch = pytest.importorskip("torch")
    import tmakit

    with pytest.raises(TmaConfigError, match="x is not on a CUDA device; TMA loads GPU memory"):
        tmakit.im2col(torch.zeros((1, 8, 8, 16), dtype=torch.float16), 3, strict=True)
    with pytest.raises(TmaConfigError, match="takes torch tensors"):
        tmakit.im2col(np.zeros((1, 8, 8, 16), dtype=np.float16), 3)


# -- the model ----------------------------------------------------------------------------------
MODEL_CASES = [
    ((2, 9, 9, 16), 3, 1, 1, 1),
    ((2, 11, 7, 8), (3, 2), (2, 1), (1, 0), (1, 2)),
    ((1, 13, 21, 16), (3, 5), (2, 1), (1, 2), 1),
    ((3, 7, 9, 24), 3, 1, 0, 1),
    ((1, 20, 20, 16), 7, 2, 3, 1),
    ((2, 9, 11, 32), (3, 2), (1, 2), (2, 1), (2, 3)),
]


def unfold_reference(torch, x: np.ndarray, plan: Im2colPlan) -> np.ndarray:
    """torch's unfold of the NCHW view, (N, C*R*S, P*Q) with channels slowest, permuted to the
    patch matrix's (N*P*Q, R*S*C) with channels fastest."""
    batch, _, _, channels = x.shape
    unfolded = torch.nn.functional.unfold(
        torch.from_numpy(x).permute(0, 3, 1, 2),
        plan.filter,
        dilation=plan.dilation,
        padding=plan.padding,
        stride=plan.stride,
    )
    taps_h, taps_w = plan.filter
    return (
        unfolded.view(batch, channels, taps_h, taps_w, -1)
        .permute(0, 4, 2, 3, 1)
        .reshape(plan.patch_shape)
        .numpy()
    )


def position_values(shape) -> np.ndarray:
    """1, 2, 3, ... by position: never zero, so a zero is padding."""
    return (np.arange(math.prod(shape), dtype=np.float64) + 1).reshape(shape)


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", MODEL_CASES)
def test_the_models_patch_matrix_is_unfold_permuted(shape, kernel, stride, padding, dilation):
    torch = pytest.importorskip("torch")
    plan = Im2colPlan(shape, "fp32", kernel, stride, padding, dilation)
    x = position_values(shape)
    np.testing.assert_array_equal(patch_matrix(plan, x), unfold_reference(torch, x, plan))


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation", MODEL_CASES)
def test_the_boxes_assemble_the_patch_matrix(shape, kernel, stride, padding, dilation):
    plan = Im2colPlan(shape, "fp16", kernel, stride, padding, dilation, tile=(32, 8))
    x = position_values(shape)
    rows, cols = plan.patch_shape
    assembled = np.full((plan.row_blocks * 32, cols), np.nan)
    for row_block in range(plan.row_blocks):
        for column_tile in range(plan.column_tiles):
            assembled[row_block * 32 : (row_block + 1) * 32, column_tile * 8 : (column_tile + 1) * 8] = (
                box_values(plan, x, row_block, column_tile)
            )
    np.testing.assert_array_equal(assembled[:rows], patch_matrix(plan, x))
    assert (assembled[rows:] == 0).all()  # past the last image: TMA's zeros, which the store clips


def test_a_box_names_the_input_pixels_it_reads_and_its_zero_fill():
    plan = Im2colPlan((1, 4, 4, 16), "fp16", 3, padding=1, tile=(4, 16))
    box = im2col_box(plan, 0, 0)  # tap (0, 0), output row 0: the window's corner is in the padding
    assert box.tap == (0, 0)
    assert [int(v) for v in box.h[:, 0]] == [-1, -1, -1, -1]
    assert [int(v) for v in box.w[:, 0]] == [-1, 0, 1, 2]
    assert box.zero_filled == 4 * 16  # the whole first row of windows reads the top padding
    centre = im2col_box(plan, 1, 4)  # tap (1, 1): no padding for output row 1
    assert centre.tap == (1, 1) and centre.zero_filled == 0
    assert [int(v) for v in centre.h[:, 0]] == [1, 1, 1, 1]


# -- the kernel, compiled for sm_90a ---------------------------------------------------------------
@pytest.mark.parametrize(
    "plan",
    [
        RESNET,
        Im2colPlan((1, 13, 21, 16), "bf16", (3, 5), (2, 1), (1, 2)),
        Im2colPlan((3, 7, 9, 24), "fp32", 3),
    ],
    ids=["resnet-fp16", "uneven-bf16", "noswizzle-fp32"],
)
def test_the_kernel_issues_one_4d_im2col_load_and_one_2d_tiled_store_per_box(plan):
    ptx = compile_im2col(plan, keep_ptx=True).ptx
    assert ".target sm_90a" in ptx
    loads = [line for line in ptx.splitlines() if "cp.async.bulk.tensor" in line and ".global.im2col" in line]
    stores = [line for line in ptx.splitlines() if "cp.async.bulk.tensor.2d.global.shared::cta" in line]
    assert len(loads) == 1 and len(stores) == 1  # one box, one instruction: never split
    assert (
        loads[0]
        .strip()
        .startswith("cp.async.bulk.tensor.4d.shared::cta.global.im2col.mbarrier::complete_tx::bytes")
    )
    assert "{%rs" in loads[0]  # the tap's two 16-bit im2col offsets
    assert expect_tx_byte_counts(ptx) == [plan.expected_tx_bytes]


# -- tmakit explain --im2col -------------------------------------------------------------------------
def test_explain_names_the_box_its_tap_its_first_pixel_and_the_whole_box_as_the_phases_bytes():
    from tmakit.patches.explain import explain_im2col, im2col_to_text

    plan = Im2colPlan((2, 10, 10, 64), "fp16", 3, stride=2, padding=1, tile=(16, 32))
    report = explain_im2col(plan, (1, 3))
    box = report["box"]
    assert box["tap"] == [0, 1] and box["channels"] == [32, 63]
    assert box["patch_element_origin"] == [16, 96]
    assert box["output_pixel_npq"] == [0, 3, 1] and box["first_pixel_nhw"] == [0, 5, 1]
    assert box["load_coordinates_cwhn"] == [32, 1, 5, 0]
    # The DSL's own im2col TMA tensor names the same first coordinate: (c, (w, h), n, (s, r)).
    assert report["views"]["tile_first_coordinate"] == "(32, (1, 5), 0, (1, 0))"
    assert report["bytes"]["expected_tx_bytes_per_phase"] == 16 * 32 * 2 == plan.expected_tx_bytes
    zero = im2col_box(plan, 1, 3).zero_filled
    assert report["bytes"]["zero_fill_bytes"] == zero * 2
    assert report["bytes"]["input_bytes_read"] + report["bytes"]["zero_fill_bytes"] == plan.expected_tx_bytes
    text = im2col_to_text(report)
    assert "each barrier phase expects 1024 bytes: the whole box" in text
    assert "{c, w, h, n} = {32, 1, 5, 0}" in text


def test_explain_cli_takes_an_im2col_spec_and_refuses_before_tracing(capsys):
    from tmakit.cli import main

    assert (
        main(["explain", "--shape", "2x56x56x64", "--im2col", "kernel=3,padding=1", "--highlight", "0,0"])
        == 0
    )
    out = capsys.readouterr().out
    assert "tap (r, s) = (0, 0)" in out and "16384 bytes" in out
    # Rows 0-127: output row p=0 all in the top padding (56 pixels), then q=0 of p=1 and p=2.
    assert f"{(56 + 1 + 1) * 64} of its 8192 elements are TMA's zero fill" in out
    assert (
        main(["explain", "--shape", "2x56x56x64", "--im2col", "kernel=3,padding=1", "--highlight", "99,0"])
        == 2
    )
    assert "outside the 49 x 9 boxes" in capsys.readouterr().err
    assert main(["explain", "--shape", "2x56x56x64", "--im2col", "padding=1"]) == 2
    assert "names no kernel" in capsys.readouterr().err
    assert main(["explain", "--shape", "2x56x56x64", "--im2col", "kernel=3,groups=2"]) == 2
    assert "'groups' is not one of kernel, stride" in capsys.readouterr().err


def test_parse_reads_ints_pairs_and_the_tile():
    plan = Im2colPlan.parse(
        (1, 16, 16, 64), "bf16", "kernel=3x5,stride=2,padding=1x2,dilation=1,tile=64x32,stages=3"
    )
    assert (plan.filter, plan.stride, plan.padding, plan.tile, plan.stages) == (
        (3, 5),
        (2, 2),
        (1, 2),
        (64, 32),
        3,
    )
    with pytest.raises(TmaConfigError, match="stride='two' is not an integer or HxW"):
        Im2colPlan.parse((1, 16, 16, 64), "bf16", "kernel=3,stride=two")


def test_the_kernel_compiles_for_tvm_ffi_and_its_launcher_passes_torch_tensors(monkeypatch):
    """`im2col` launches as `copy_` does: TVM-FFI's compiled function takes the torch tensors and
    the guard words (no DLPack conversion, no stream read in Python) and checks every argument."""
    pytest.importorskip("tvm_ffi")
    torch = pytest.importorskip("torch")
    from tmakit.patches import launch as im2col_launch
    from tmakit.runtime import launch

    compiled = compile_im2col(Im2colPlan((3, 7, 9, 24), "fp32", 3), tvm_ffi=True)
    kind = type(compiled.function)  # compiled now, or loaded from the disk cache (tvm_ffi's Function)
    assert kind.__name__.startswith("TVMFFI") or kind.__module__.startswith("tvm_ffi"), kind
    calls = []
    stand_in = type("Compiled", (), {"function": staticmethod(lambda *args: calls.append(args))})()
    monkeypatch.setattr(launch, "tvm_ffi_available", lambda: True)
    monkeypatch.setattr(im2col_launch, "compile_im2col", lambda plan, tvm_ffi: stand_in if tvm_ffi else None)
    launcher = im2col_launch.im2col_launcher(RESNET, "cpu")
    x, out = torch.zeros(2), torch.zeros(3)
    launcher(x, out)
    (args,) = calls
    assert args[0] is x and args[1] is out and args[2].dtype == torch.int32 and len(args) == 3
    assert launcher.checks_arguments and launcher.compiled is stand_in


# -- the windows copy's plan and explanation --------------------------------------------------------
@pytest.mark.parametrize(
    "shape, spec",
    [
        ((2, 224, 224, 16), "kernel=7,stride=2,padding=3"),
        ((1, 9, 11, 8), "kernel=3x2,stride=2x1,padding=2x1"),
    ],
)
def test_explain_windows_counts_the_tiles_zeros_on_the_padded_input(shape, spec):
    """The explained tile (n, p, r) = (0, 1, 1), its runs read from a padded input built in numpy:
    the source origin, the rows and columns it names and the zeros it counts are the padding's."""
    from tmakit.patches.explain import explain_windows
    from tmakit.patches.plan import im2col_windows
    from tmakit.patches.route import planned_route

    plan = Im2colPlan.parse(shape, "fp16", spec)
    call = planned_route(plan, "windows")
    assert call.windows
    conv, windows = call.conv, im2col_windows(call.conv)
    tile = explain_windows(conv, "fp16")["tile"]
    n, h, w, c = shape
    (pad_h, pad_w), (stride_h, stride_w), (_, taps_s) = conv.padding, conv.stride, conv.filter
    padded = np.zeros(windows.padded_shape, dtype=np.int64)  # 0: the padding's zeros
    padded[:, pad_h : pad_h + h, pad_w : pad_w + w, :] = 1 + np.arange(n * h * w * c).reshape(shape)
    _, p, r = tile["npr"]
    q0, q1 = tile["output_pixels_q"]
    # The tile's runs by the definition: output pixel (0, p, q)'s taps of filter row r are the
    # padded input's row p*stride_h + r, columns q*stride_w .. q*stride_w + S - 1, all channels.
    row = tile["padded_row"]
    assert row == p * stride_h + r
    runs = np.stack([padded[0, row, q * stride_w : q * stride_w + taps_s].ravel() for q in range(q0, q1 + 1)])
    assert tile["elements"] == runs.size and tile["zero_elements"] == int((runs == 0).sum())
    assert tile["padded_columns"] == [q0 * stride_w, q1 * stride_w + taps_s - 1]
    # The plan's windows view reads the same runs from where the tile says it starts.
    view = np.lib.stride_tricks.as_strided(
        padded, windows.shape, [stride * padded.itemsize for stride in windows.src_strides]
    )
    assert np.array_equal(view[0, p, r, q0 : q1 + 1], runs)
    assert (
        padded.ravel()[tile["source_element_origin"] : tile["source_element_origin"] + runs.shape[1]].tolist()
        == runs[0].tolist()
    )
    p_extent, q_extent = conv.output_shape
    assert tile["patch_rows"] == [p * q_extent + q0, p * q_extent + q1]
