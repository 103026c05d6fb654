"""`tmakit.im2col`'s edges on a CPU: the small patch matrices CuTe's im2col atom cannot build (a
box of one pixel: an MLIRError; a patch matrix of one box: an LLVM abort that kills the process)
planned around or refused before anything compiles, the 1x1 stride-1 unpadded ones that small
served as the copy they are, the types of every argument, and the messages of the size and
dilation rules.

The compiles run in one child process, which must exit normally: a case that aborted the DSL
would end it with SIGABRT instead of a line of JSON."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.patches.api import torch_im2col
from tmakit.patches.model import box_values, patch_matrix
from tmakit.patches.plan import Im2colPlan, Im2colTooSmall
from tmakit.runtime.launch import Launcher

# (shape, dtype, kernel, options, expected): "compiled" with the tile tmakit chooses, or the
# start of the refusal's message.
COMPILE_CASES = [
    # 1x1, 25 rows: one 128-pixel box held the whole patch matrix and aborted; now two row blocks.
    ((1, 5, 5, 16), "fp16", 1, {}, ("compiled", [13, 16])),
    # 1x1 padded on a one-pixel image: 9 rows, two row blocks of 5 pixels.
    ((1, 1, 1, 16), "fp16", 1, {"padding": 1}, ("compiled", [5, 16])),
    # Two rows of two 16-byte chunks: the channels split instead (2 column tiles).
    ((1, 1, 2, 16), "fp16", 1, {}, ("compiled", [128, 8])),
    ((2, 1, 1, 8), "fp32", 1, {}, ("compiled", [128, 4])),
    # 3 rows at stride 2: two row blocks of 2 pixels.
    ((1, 1, 5, 8), "bf16", 1, {"stride": 2}, ("compiled", [2, 8])),
    # A box of one pixel: an empty G-basis in the DSL; refused.
    ((1, 8, 8, 16), "fp16", 3, {"tile": (1, 16)}, ("refused", "tile of 1 pixel")),
    # A patch matrix of one box asked for: refused.
    ((1, 5, 5, 16), "fp16", 1, {"tile": (32, 16)}, ("refused", "tile (32, 16) holds the whole")),
    # One row (a one-pixel output): the plan's old default box of one pixel; refused.
    ((1, 3, 3, 16), "fp16", 3, {}, ("refused", "the patch matrix of (1, 3, 3, 16)")),
    # What the H200 raised on: a 1x1 of one pixel (tmakit.im2col copies it instead).
    ((1, 1, 1, 8), "fp16", 1, {}, ("refused", "the patch matrix of (1, 1, 1, 8)")),
]

CHILD = textwrap.dedent(
    """
    import json, sys
    from tmakit import TmaConfigError
    from tmakit.patches.plan import Im2colPlan
    from tmakit.ptx import expect_tx_byte_counts
    from tmakit.patches.launch import compile_im2col

    for shape, dtype, kernel, options in json.loads(sys.stdin.read()):
        if "tile" in options:
            options["tile"] = tuple(options["tile"])
        try:
            plan = Im2colPlan(tuple(shape), dtype, kernel, **options)
            ptx = compile_im2col(plan, keep_ptx=True).ptx
        except TmaConfigError as error:
            print(json.dumps(["refused", str(error)]), flush=True)
            continue
        lines = ptx.splitlines()
        loads = [line for line in lines if "cp.async.bulk.tensor.4d" in line and ".im2col" in line]
        # A box as wide as the patch matrix over contiguous rows may be stored as one 1-D run
        # (CuTe merges the modes): still one instruction a box.
        stores = [line for line in lines if "d.global.shared::cta.tile" in line
                  and ("tensor.2d" in line or "tensor.1d" in line)]
        facts = {"loads": len(loads), "stores": len(stores), "tx": expect_tx_byte_counts(ptx),
                 "expected_tx": plan.expected_tx_bytes, "boxes": [plan.row_blocks, plan.column_tiles]}
        print(json.dumps(["compiled", list(plan.tile), facts]), flush=True)
    """
)


def test_the_small_plans_compile_or_are_refused_and_nothing_aborts():
    cases = [[list(shape), dtype, kernel, options] for shape, dtype, kernel, options, _ in COMPILE_CASES]
    child = subprocess.run(
        [sys.executable, "-c", CHILD], input=json.dumps(cases), capture_output=True, text=True, timeout=240
    )
    assert child.returncode == 0, child.stderr[-2000:]
    results = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(results) == len(COMPILE_CASES)
    for (shape, _, kernel, options, (outcome, detail)), result in zip(COMPILE_CASES, results, strict=True):
        assert result[0] == outcome, (shape, kernel, options, result)
        if outcome == "refused":
            assert result[1].startswith(detail), result[1]
            continue
        tile, facts = result[1], result[2]
        assert tile == detail, (shape, kernel, options)
        assert tile[0] >= 2 and facts["boxes"] != [1, 1]
        # The kernel is the copy's with an im2col load: one 4-D im2col load, one tiled store,
        # and the barrier expects the whole box.
        assert facts["loads"] == 1 and facts["stores"] == 1, facts
        assert facts["tx"] == [facts["expected_tx"]], facts


# -- the plan never picks what CuTe's im2col atom cannot build --------------------------------------
def small_plans():
    """Every plan of small shapes, filters, strides, paddings and dilations that is not refused."""
    for shape in ((1, 1, 1, 8), (1, 1, 2, 8), (2, 1, 1, 16), (1, 2, 3, 8), (2, 3, 3, 16), (1, 5, 5, 8)):
        for kernel in (1, 2, 3, (1, 2), (2, 1)):
            for stride in (1, 2):
                for padding in (0, 1):
                    for dilation in (1, 2):
                        try:
                            yield Im2colPlan(shape, "fp16", kernel, stride, padding, dilation)
                        except TmaConfigError:
                            continue


def test_the_default_box_is_never_one_pixel_and_never_the_whole_patch_matrix():
    plans = list(small_plans())
    assert len(plans) > 100
    for plan in plans:
        assert plan.tile[0] >= 2, plan
        assert (plan.row_blocks, plan.column_tiles) != (1, 1), plan
        assert plan.patch_shape[0] >= 2, plan


def test_what_is_refused_as_too_small_is_exactly_one_row_or_one_unsplittable_box():
    for shape in ((1, 1, 1, 8), (1, 1, 2, 8), (2, 1, 1, 16), (1, 1, 3, 8), (1, 3, 3, 16), (1, 4, 4, 8)):
        for kernel in (1, 3):
            for stride in (1, 2, 3):
                try:
                    plan = Im2colPlan(shape, "fp16", kernel, stride)
                except Im2colTooSmall as small:
                    batch, height, width, channels = shape
                    p = (height - kernel) // stride + 1
                    q = (width - kernel) // stride + 1
                    rows = batch * p * q
                    assert rows == 1 or (rows == 2 and kernel == 1 and channels == 8), (shape, kernel, stride)
                    assert small.is_reshape == (kernel == 1 and stride == 1)
                    continue
                except TmaConfigError:
                    continue  # no output pixel
                assert plan.patch_shape[0] >= 2


@pytest.mark.parametrize(
    "shape, kernel, stride, padding, dilation, expression",
    [
        ((1, 1, 1, 8), 1, 1, 0, 1, "x.reshape(1, 8)"),
        ((2, 1, 1, 4), 1, 1, 0, 3, "x.reshape(2, 4)"),
        ((1, 3, 3, 16), 3, 1, 0, 1, "x[:, 0:3, 0:3].reshape(1, 144)"),
        ((1, 4, 4, 16), 3, 2, 0, 1, "x[:, 0:3, 0:3].reshape(1, 144)"),
        ((1, 4, 4, 8), 2, 1, 0, 3, "x[:, 0:4:3, 0:4:3].reshape(1, 32)"),
        (
            (1, 1, 1, 8),
            3,
            1,
            1,
            1,
            "torch.nn.functional.pad(x, (0, 0, 1, 1, 1, 1))[:, 0:3, 0:3].reshape(1, 72)",
        ),
        ((1, 1, 3, 4), 1, 2, 0, 1, "x[:, 0:1:2, 0:3:2].reshape(2, 4)"),
    ],
)
def test_a_refused_small_patch_matrix_names_the_torch_expression_that_computes_it(
    shape, kernel, stride, padding, dilation, expression
):
    torch = pytest.importorskip("torch")
    with pytest.raises(Im2colTooSmall) as refused:
        Im2colPlan(shape, "fp32", kernel, stride, padding, dilation)
    assert refused.value.args[0].endswith(f"compute it as {expression}")
    # The expression is the patch matrix: torch's unfold, permuted to (N*P*Q, R*S*C).
    x = torch.arange(1, math.prod(shape) + 1, dtype=torch.float32).reshape(shape)
    got = eval(expression, {"x": x, "torch": torch})
    unfolded = torch.nn.functional.unfold(
        x.permute(0, 3, 1, 2), kernel, dilation=dilation, padding=padding, stride=stride
    )
    taps = (kernel, kernel)
    reference = unfolded.view(shape[0], shape[3], *taps, -1).permute(0, 4, 2, 3, 1).reshape(got.shape)
    assert torch.equal(got, reference)


@pytest.mark.parametrize(
    "shape, dtype, kernel, padding, stride",
    [((1, 5, 5, 16), "fp16", 1, 0, 1), ((1, 1, 1, 16), "fp16", 1, 1, 1), ((1, 1, 2, 16), "fp16", 1, 0, 1),
     ((2, 1, 1, 8), "fp32", 1, 0, 1), ((1, 1, 5, 8), "bf16", 1, 0, 2)],
)  # fmt: skip
def test_the_repaired_boxes_assemble_the_patch_matrix(shape, dtype, kernel, padding, stride):
    plan = Im2colPlan(shape, dtype, kernel, stride, padding)
    x = np.arange(1, math.prod(shape) + 1, dtype=np.float64).reshape(shape)
    (rows, cols), (pixels, channels) = plan.patch_shape, plan.tile
    assembled = np.full((plan.row_blocks * pixels, cols), np.nan)
    for row_block in range(plan.row_blocks):
        for column_tile in range(plan.column_tiles):
            assembled[
                row_block * pixels : (row_block + 1) * pixels,
                column_tile * channels : (column_tile + 1) * channels,
            ] = box_values(plan, x, row_block, column_tile)
    np.testing.assert_array_equal(assembled[:rows], patch_matrix(plan, x))


# -- tmakit.im2col on the small 1x1s: the copy ---------------------------------------------------
@pytest.fixture
def cpu_im2col(monkeypatch):
    """`tmakit.im2col` with its GPU facts stood in, so that a CPU tensor reaches its checks; the
    TMA copy is replaced by a recording torch copy, and a launch fails the test."""
    import importlib

    from tmakit.api import tensors as api_tensors

    api_im2col = importlib.import_module("tmakit.patches.api")  # the module: tmakit.im2col is the function
    copies = []

    def copy_(dst, src, strict=False, sms=None):
        copies.append((tuple(dst.shape), tuple(src.shape), strict))
        return dst.copy_(src)

    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(importlib.import_module("tmakit.api.tensors"), "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_im2col, "device_facts", lambda device: (132, 50 << 20))
    monkeypatch.setattr(api_im2col, "copy_", copy_)
    monkeypatch.setattr(api_im2col, "im2col_launcher", lambda *a: pytest.fail("launched"))
    monkeypatch.setattr(api_im2col, "copy_windows", lambda *a: pytest.fail("launched"))
    return api_im2col.im2col, copies


def test_a_1x1_too_small_for_the_im2col_atom_is_the_copy_of_x_as_rows(cpu_im2col):
    torch = pytest.importorskip("torch")
    im2col, copies = cpu_im2col
    for shape in ((1, 1, 1, 8), (2, 1, 1, 8), (1, 1, 2, 8)):
        x = torch.arange(math.prod(shape), dtype=torch.float16).reshape(shape)
        out = im2col(x, 1)
        assert torch.equal(out, x.reshape(-1, 8)) and copies[-1] == (shape, shape, False)
        given = torch.empty((math.prod(shape[:3]), 8), dtype=torch.float16)
        assert im2col(x, (1, 1), dilation=2, out=given) is given and torch.equal(given, x.reshape(-1, 8))
        im2col(x, 1, out=given, strict=True)  # strict reaches the copy: it may not fall back either
        assert copies[-1] == (shape, shape, True)
    with pytest.raises(TmaConfigError, match=r"out is \(2, 8\).*writes a \(1, 8\)"):
        im2col(
            torch.zeros((1, 1, 1, 8), dtype=torch.float16), 1, out=torch.zeros((2, 8), dtype=torch.float16)
        )
    strided = torch.arange(32, dtype=torch.float16).reshape(1, 1, 2, 16)[..., :8]
    with pytest.raises(TmaConfigError, match="contiguous NHWC"):
        im2col(strided, 1, strict=True)
    assert torch.equal(im2col(strided, 1), strided.reshape(2, 8))  # torch's expression instead
    # Not a reshape (stride 2, or a 3x3 of one window): strict refuses naming the expression;
    # else torch's expression computes it, and nothing is copied by TMA.
    copied = len(copies)
    for x, arguments, expression in [
        (torch.arange(24, dtype=torch.float16).reshape(1, 1, 3, 8), (1, 2), r"x\[:, 0:1:2, 0:3:2\]"),
        (
            torch.arange(144, dtype=torch.float16).reshape(1, 3, 3, 16),
            (3,),
            r"x\[:, 0:3, 0:3\]\.reshape\(1, 144\)",
        ),
    ]:
        with pytest.raises(TmaConfigError, match=expression):
            im2col(x, *arguments, strict=True)
        kernel, stride = (*arguments, 1)[:2]
        assert torch.equal(
            im2col(x, *arguments), x[:, ::stride, ::stride].reshape(-1, kernel * kernel * x.shape[3])
        )
    assert len(copies) == copied


# -- types ---------------------------------------------------------------------------------------
TYPE_REFUSALS = [
    (dict(tile=(128,)), r"tile is \(128,\) \(tuple\); it must be a tuple of 2 whole numbers"),
    (dict(tile=128), r"tile is 128 \(int\); it must be a tuple of 2 whole numbers"),
    (dict(tile=(128.0, 16)), r"tile is \(128.0, 16\)"),
    (dict(tile=(True, 16)), r"tile is \(True, 16\)"),
    (dict(filter=True), r"kernel True is not an int or a pair of ints \(it is a bool\)"),
    (dict(filter=3.0), r"kernel 3.0 is not an int or a pair of ints \(it is a float\)"),
    (dict(filter=(3, "3")), r"kernel \(3, '3'\) is not an int"),
    (dict(filter=None), r"kernel None is not an int"),
    (dict(stride=(1, 2.5)), r"stride \(1, 2.5\) is not an int .*pass e.g. stride=2 or stride=\(2, 1\)"),
    (dict(padding=False), r"padding False is not an int"),
    (dict(padding=[1]), r"padding \[1\] has 1 values; .*one int or \(height, width\)"),
    (dict(dilation="2"), r"dilation '2' is not an int"),
    (dict(dtype="float16"), r"dtype float16; tmakit.im2col takes fp16, bf16, fp32"),
    (dict(dtype=None), r"dtype None \(None\); tmakit.im2col takes"),
    (dict(dtype=["fp16"]), r"dtype \['fp16'\] \(list\)"),
    (dict(shape=(1, 8, 8)), r"rank 3; .*NHWC"),
    (
        dict(shape=(1, 8, 8.0, 16)),
        r"shape is \(1, 8, 8.0, 16\) \(tuple\); it must be a tuple of whole numbers",
    ),
    (dict(shape="1x8x8x16"), r"shape is '1x8x8x16' \(str\)"),
    (dict(shape=(1, 8, True, 16)), r"shape is \(1, 8, True, 16\)"),
    (dict(stages=2.0), r"stages is 2.0 \(float\); it must be a whole number"),
    (dict(stages=0), r"stages is 0; it must be >= 1"),
    (dict(sm_count=None), r"sm_count is None \(None\); it must be a whole number"),
    (dict(sm_count=0), r"sm_count is 0; it must be >= 1"),
]


@pytest.mark.parametrize("change, message", TYPE_REFUSALS, ids=[m[:28] for _, m in TYPE_REFUSALS])
def test_every_field_of_the_plan_has_its_type_checked(change, message):
    fields = {"shape": (1, 8, 8, 16), "dtype": "fp16", "filter": 3, **change}
    with pytest.raises(TmaConfigError, match=message):
        Im2colPlan(**fields)


def test_numpy_integers_and_lists_are_whole_numbers():
    i = np.int64
    plan = Im2colPlan(
        [i(2), i(8), i(8), i(16)], "fp16", (i(3), i(3)), i(1), [i(1), 1], np.int32(1), tile=[i(16), i(16)],
        stages=i(3), sm_count=np.int16(132),
    )  # fmt: skip
    assert plan == Im2colPlan((2, 8, 8, 16), "fp16", 3, 1, 1, 1, tile=(16, 16), stages=3, sm_count=132)
    assert all(type(v) is int for v in (*plan.shape, *plan.filter, *plan.padding, *plan.tile, plan.stages))


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "kernel=3,tile=128",
            r"im2col tile='128' has 1 number; tile takes PIXELSxCHANNELS, e.g. tile=128x64",
        ),
        ("kernel=3,tile=1x2x3", r"tile='1x2x3' has 3 numbers"),
        ("kernel=3x3x3", r"kernel='3x3x3' has 3 numbers; kernel takes an integer or HxW"),
        ("kernel=3,stages=2x2", r"stages='2x2' has 2 numbers; stages takes one integer"),
        ("kernel=3,tile=1x16", r"tile of 1 pixel"),
    ],
)
def test_parse_refuses_a_wrong_count_of_numbers(spec, message):
    with pytest.raises(TmaConfigError, match=message):
        Im2colPlan.parse((1, 8, 8, 16), "fp16", spec)


def test_parse_takes_only_a_string():
    with pytest.raises(TmaConfigError, match=r"im2col spec 3 \(int\) is not a string"):
        Im2colPlan.parse((1, 8, 8, 16), "fp16", 3)


def test_explain_cli_names_the_tile_rule_not_an_unpacking_error(capsys):
    from tmakit.cli import main

    assert main(["explain", "--shape", "1x8x8x16", "--im2col", "kernel=3,tile=128"]) == 2
    err = capsys.readouterr().err
    assert "tile takes PIXELSxCHANNELS" in err and "unpack" not in err
    # A patch matrix of one row: the call takes torch's expression, and explain says so, with why.
    assert main(["explain", "--shape", "1x3x3x16", "--im2col", "kernel=3"]) == 0
    assert "route             torch (" in (out := capsys.readouterr().out) and "one row" in out


def test_the_api_checks_every_argument_before_anything_compiles(cpu_im2col):
    torch = pytest.importorskip("torch")
    im2col, _ = cpu_im2col
    x = torch.zeros((1, 8, 8, 16), dtype=torch.float16)
    for arguments, message in [
        ((3.0,), r"kernel 3.0 is not an int"),
        ((True,), r"kernel True is not an int"),
        ((3, "1"), r"stride '1' is not an int"),
        ((3, 1, (1, None)), r"padding \(1, None\) is not an int"),
        ((3, 1, 0, 1.5), r"dilation 1.5 is not an int"),
    ]:
        with pytest.raises(TmaConfigError, match=message):
            im2col(x, *arguments)
    for out, message in [
        (np.zeros((36, 144), np.float16), r"takes torch tensors on a CUDA device; got numpy.ndarray"),
        ([[0.0]], r"got list as out"),
        (torch.zeros((36, 144), dtype=torch.float32), r"out is \(36, 144\) torch.float32"),
    ]:
        for strict in (False, True):  # the arguments themselves: refused on every path
            with pytest.raises(TmaConfigError, match=message):
                im2col(x, 3, out=out, strict=strict)
    with pytest.raises(TmaConfigError, match=r"out has strides \(1, 36\); TMA stores a contiguous"):
        im2col(x, 3, out=torch.zeros((144, 36), dtype=torch.float16).t(), strict=True)
    with pytest.raises(TmaConfigError, match="takes torch tensors"):
        im2col(x.numpy(), 3)
    with pytest.raises(TmaConfigError, match="dtype int8; TMA im2col takes float16, bfloat16, float32"):
        im2col(torch.zeros((1, 8, 8, 16), dtype=torch.int8), 3, strict=True)
    with pytest.raises(TmaConfigError, match=r"strict is 'false' \(str\); it must be True or False"):
        im2col(x, 3, strict="false")


# -- the size and dilation rules name the rule that binds, and the fix ----------------------------------
def test_a_patch_matrix_too_tall_is_named_as_its_rows_with_images_per_call():
    with pytest.raises(TmaConfigError) as refused:
        Im2colPlan((2**28 + 2**27, 3, 3, 8), "fp16", 1, padding=1)  # 25 rows an image
    message = str(refused.value)
    assert message.startswith("the patch matrix has M = N*P*Q = 402653184 * 25 = 10066329600 rows")
    assert "at most 2147483648 (2^31)" in message
    assert "call it on at most 21474836 images at a time (x[i:i + 21474836])" in message


def test_a_patch_matrix_past_two_to_the_32_elements_says_how_many_images_a_call():
    with pytest.raises(TmaConfigError) as refused:
        Im2colPlan((3630303504 // 16, 4, 4, 16), "fp16", 3)
    message = str(refused.value)
    assert message.startswith("the patch matrix has 130690926144 elements; tmakit.im2col compiles")
    assert "call it on at most 7456540 images at a time" in message and "tmakit.copy_" not in message
    with pytest.raises(TmaConfigError, match="one image is already too large"):
        Im2colPlan((1, 2**16, 2**16, 8), "fp16", 3, padding=1)


def test_a_huge_dilation_is_refused_by_the_corner_rule_with_the_largest_dilation_that_fits():
    with pytest.raises(TmaConfigError) as refused:
        Im2colPlan((1, 300, 300, 16), "fp16", 3, dilation=40000)
    message = str(refused.value)
    assert message.startswith(
        "im2col upper corner along height is -80000 (padding - (kernel - 1) * dilation)"
    )
    assert "use a dilation of at most 64 here" in message and "16-bit" not in message
    with pytest.raises(TmaConfigError, match=r"upper corner along width .* at most 43 here"):
        Im2colPlan((1, 300, 300, 16), "fp16", (1, 4), padding=(0, 1), dilation=(1, 100))
    # The largest dilation named fits.
    assert (
        Im2colPlan((1, 300, 300, 16), "fp16", (1, 4), padding=(0, 1), dilation=(1, 43)).output_shape[1] >= 1
    )


def test_a_repeated_im2col_skips_the_planning_not_the_checks_of_where_x_and_out_lie(cpu_im2col, monkeypatch):
    torch = pytest.importorskip("torch")
    import importlib

    api_im2col = importlib.import_module("tmakit.patches.api")
    plans, launches = [], []
    planned = api_im2col.im2col_call
    monkeypatch.setattr(api_im2col, "im2col_call", lambda facts: plans.append(facts) or planned(facts))
    monkeypatch.setattr(
        api_im2col, "im2col_launcher", lambda plan, device: Launcher(lambda x, out: launches.append(x))
    )
    monkeypatch.setattr(api_im2col, "copy_windows", lambda conv, x, out: launches.append(x))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    im2col = api_im2col.im2col
    x = torch.zeros((2, 8, 8, 16), dtype=torch.float16)
    for _ in range(3):
        assert im2col(x, 3, padding=1).shape == (2 * 8 * 8, 9 * 16)
    assert len(plans) == 1 and len(launches) == 3  # planned once, launched every call
    im2col(x, (3, 3), padding=1)  # another spelling of the convolution: planned anew
    im2col(torch.zeros((2, 8, 8, 16), dtype=torch.float16), 3, padding=1)  # another tensor, same key
    assert len(plans) == 2 and len(launches) == 5
    with pytest.raises(TmaConfigError, match="kernel"):
        im2col(x, 3.0, padding=1)  # equal to 3, of another type: the full checks refuse it
    storage = torch.arange(2 * 8 * 8 * 16 + 1, dtype=torch.float32).half()
    misaligned = storage[1:].view(2, 8, 8, 16)  # the same key 2 bytes off its alignment
    with pytest.raises(TmaConfigError, match="x's tensor base address .* is not 16-byte aligned"):
        im2col(misaligned, 3, padding=1, strict=True)
    assert torch.equal(im2col(misaligned, 3, padding=1), torch_im2col(misaligned, 3, padding=1))
    assert len(plans) == 3 and len(launches) == 5  # 3.0's refused planning; the fallback: found, no launch
    for strict in (False, True):
        with pytest.raises(TmaConfigError, match=r"out is \(1, 1\)"):
            im2col(x, 3, padding=1, out=torch.zeros((1, 1), dtype=torch.float16), strict=strict)
