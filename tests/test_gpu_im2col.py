"""`tmakit.im2col` on the device: the patch matrix gathered by TMA im2col loads and tiled TMA stores,
every element compared with `torch.nn.functional.unfold` (permuted to (N*P*Q, R*S*C), channels
fastest, then s, then r) and, bit for bit, with the NumPy model (`patches.model.patch_matrix`).

Inputs are position-dependent bit patterns, every one a finite non-zero number, so a zero can
only be padding; the output is poisoned with all-ones bits (a NaN in every float type) first, so
an element no store wrote is seen. A mismatch names the first wrong box: its row block, column
tile, tap and channel tile.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tmakit
from tmakit.config import DTYPES
from tmakit.patches.model import patch_matrix
from tmakit.patches.plan import Im2colPlan
from tmakit.patches.route import WINDOWS_MIN_RUN_BYTES

pytestmark = pytest.mark.gpu

# (shape NHWC, dtype, kernel, stride, padding, dilation)
CASES = [
    ((2, 56, 56, 64), "fp16", 3, 1, 1, 1),  # ResNet-50's 3x3 layers, small batch
    ((2, 56, 56, 64), "bf16", 3, 2, 1, 1),  # stride 2
    ((1, 30, 30, 32), "fp32", 3, 1, 2, 2),  # dilation 2
    ((2, 14, 14, 128), "fp16", 1, 1, 0, 1),  # 1x1, two channel tiles a tap
    ((1, 13, 21, 16), "bf16", (3, 5), (2, 1), (1, 2), 1),  # non-square; M = 147, a partial last box
    ((3, 7, 9, 24), "fp16", 3, 1, 0, 1),  # padding 0; 48-byte rows: no swizzle; M = 105 < one box
    ((2, 10, 10, 8), "fp32", (2, 3), 3, (0, 1), 1),  # 32-byte rows: the 32B swizzle; stride 3
    ((1, 20, 20, 16), "fp16", 7, 2, 3, 1),  # a stem-like 7x7, stride 2, padding 3
    ((2, 9, 11, 64), "bf16", (3, 2), (1, 2), (2, 1), (2, 3)),  # everything uneven
    # Small patch matrices, whose one default box CuTe's im2col atom cannot tile: the plan splits
    # the rows into two row blocks, or the channels into two tiles.
    ((1, 5, 5, 16), "fp16", 1, 1, 0, 1),  # 25 rows: two boxes of 13 pixels
    ((1, 1, 1, 16), "fp16", 1, 1, 1, 1),  # one pixel padded: 9 rows, all but one zero fill
    ((1, 1, 2, 16), "fp16", 1, 1, 0, 1),  # 2 rows: two channel tiles of 8
    ((2, 1, 1, 8), "fp32", 1, 1, 0, 1),  # 2 rows: two channel tiles of 4
    ((1, 1, 5, 8), "bf16", 1, 2, 0, 1),  # 3 rows: boxes of 2 pixels, stored as 1-D runs
]
BITS = {2: np.uint16, 4: np.uint32}
# Bit masks that keep a value finite, positive and normal: the exponent's top bit cleared, its
# lowest bit set.
KEEP = {"fp16": (0x3BFF, 0x0400), "bf16": (0x3F7F, 0x0080), "fp32": (0x3F7FFFFF, 0x00800000)}


def position_bits(shape, dtype: str) -> np.ndarray:
    """Bits that depend on each element's index (splitmix64's finaliser), kept finite and non-zero."""
    with np.errstate(over="ignore"):
        h = (np.arange(math.prod(shape), dtype=np.uint64) + np.uint64(12345)) * np.uint64(0x9E3779B97F4A7C15)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(29)
    keep, set_bits = KEEP[dtype]
    bits = BITS[DTYPES[dtype].nbytes]
    return ((h.astype(bits) & bits(keep)) | bits(set_bits)).reshape(shape)


def activation(torch, shape, dtype: str):
    """(`position_bits`, the CUDA tensor of `dtype` holding them)."""
    bits = position_bits(shape, dtype)
    nbytes = DTYPES[dtype].nbytes
    x = torch.from_numpy(bits.view(BITS[nbytes]).astype(bits.dtype)).view(signed(torch, nbytes))
    return bits, x.view(getattr(torch, DTYPES[dtype].torch_name)).cuda()


def signed(torch, nbytes):
    return {2: torch.int16, 4: torch.int32}[nbytes]


def first_wrong_box(plan: Im2colPlan, wrong: np.ndarray) -> str:
    row, col = map(int, np.argwhere(wrong)[0])
    row_block, column_tile = row // plan.tile[0], col // plan.tile[1]
    r, s, channel_tile = plan.tap_of(column_tile)
    return (
        f"{int(wrong.sum())} wrong elements; first at ({row}, {col}): box (row block {row_block}, "
        f"column tile {column_tile}) = tap (r={r}, s={s}), channel tile {channel_tile}"
    )


@pytest.mark.parametrize("shape, dtype, kernel, stride, padding, dilation", CASES)
def test_im2col_matches_unfold_on_every_element(shape, dtype, kernel, stride, padding, dilation):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    element = DTYPES[dtype]
    bits, x = activation(torch, shape, dtype)
    plan = Im2colPlan(shape, dtype, kernel, stride, padding, dilation)
    out = torch.full(plan.patch_shape, -1, dtype=signed(torch, element.nbytes), device="cuda")
    out = out.view(x.dtype)  # all-ones bits: NaN
    # The im2col loads' kernel on every case (the rule gives narrow channels to the windows copy)
    route = tmakit.im2col_path(x, kernel, stride, padding, dilation, out=out, im2col_by="loads")
    assert route.path == "tma" and "windows" not in route.reason, route  # not the fallback
    result = tmakit.im2col(x, kernel, stride, padding, dilation, out=out, strict=True, im2col_by="loads")
    torch.cuda.synchronize()
    assert result.data_ptr() == out.data_ptr()

    got_bits = out.view(signed(torch, element.nbytes)).cpu().numpy().view(BITS[element.nbytes])
    model = patch_matrix(plan, bits)
    wrong = got_bits != model
    assert not wrong.any(), (
        f"{plan.summary().splitlines()[1]}\nagainst the model: {first_wrong_box(plan, wrong)}"
    )

    # torch's own unfold: (N, C*R*S, P*Q), channels slowest -> (N*P*Q, R*S*C), channels fastest.
    batch, _, _, channels = shape
    taps_h, taps_w = plan.filter
    unfolded = F.unfold(
        x.permute(0, 3, 1, 2).float(),
        plan.filter,
        dilation=plan.dilation,
        padding=plan.padding,
        stride=plan.stride,
    )
    reference = (
        unfolded.view(batch, channels, taps_h, taps_w, -1).permute(0, 4, 2, 3, 1).reshape(plan.patch_shape)
    )
    wrong = (out.float() != reference).cpu().numpy()
    assert not wrong.any(), f"against F.unfold: {first_wrong_box(plan, wrong)}"
    zeros = int((reference == 0).sum())
    assert zeros == int((model == 0).sum())  # the padding, and only it, reads as zero


WINDOWS = [case for case in CASES if case[5] == 1 and DTYPES[case[1]].nbytes * case[0][3] <= 32]


@pytest.mark.parametrize("shape, dtype, kernel, stride, padding, dilation", WINDOWS)
@pytest.mark.parametrize("im2col_by", [None, "windows"])
def test_the_windows_copy_matches_the_model_on_every_element(
    shape, dtype, kernel, stride, padding, dilation, im2col_by
):
    """Narrow channels: the zero-padded input's overlapping windows copied by TMA (chosen, or the
    rule's choice for long runs, else its im2col loads), against the model on every element, into
    a poisoned `out` and into a new tensor."""
    torch = pytest.importorskip("torch")
    element = DTYPES[dtype]
    bits, x = activation(torch, shape, dtype)
    plan = Im2colPlan(shape, dtype, kernel, stride, padding, dilation)
    out = torch.full(plan.patch_shape, -1, dtype=signed(torch, element.nbytes), device="cuda").view(x.dtype)
    route = tmakit.im2col_path(x, kernel, stride, padding, dilation, out=out, im2col_by=im2col_by)
    run_bytes = (kernel if isinstance(kernel, int) else kernel[1]) * shape[3] * element.nbytes
    by_rule = "windows copied" if run_bytes >= WINDOWS_MIN_RUN_BYTES else "im2col loads"
    assert route.path == "tma" and (by_rule if im2col_by is None else "windows copied") in route.reason, route
    conv = (kernel, stride, padding, dilation)
    assert tmakit.im2col(x, *conv, out=out, strict=True, im2col_by=im2col_by) is out
    fresh = tmakit.im2col(x, kernel, stride, padding, dilation, im2col_by=im2col_by)
    torch.cuda.synchronize()
    model = patch_matrix(plan, bits)
    for got in (out, fresh):
        got_bits = got.view(signed(torch, element.nbytes)).cpu().numpy().view(BITS[element.nbytes])
        wrong = got_bits != model
        assert not wrong.any(), f"{route.reason}: {int(wrong.sum())} wrong, first at {np.argwhere(wrong)[0]}"


def test_repeated_calls_and_a_second_shape_reuse_nothing_stale():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for shape in ((2, 8, 8, 32), (1, 9, 7, 32), (2, 8, 8, 32)):
        x = torch.randn(shape, device="cuda").half()
        out = tmakit.im2col(x, 3, padding=1)
        unfolded = F.unfold(x.permute(0, 3, 1, 2).float(), 3, padding=1)
        batch, _, _, channels = shape
        reference = unfolded.view(batch, channels, 3, 3, -1).permute(0, 4, 2, 3, 1).reshape(out.shape)
        assert torch.equal(out.float(), reference), shape


def test_strict_refusals_come_before_any_launch_on_gpu_tensors():
    torch = pytest.importorskip("torch")
    x = torch.zeros((1, 8, 8, 3), dtype=torch.float16, device="cuda")
    with pytest.raises(tmakit.TmaConfigError, match="C = 3 channels"):
        tmakit.im2col(x, 3, strict=True)
    x = torch.zeros((1, 8, 8, 16), dtype=torch.float16, device="cuda").permute(0, 2, 1, 3)
    with pytest.raises(tmakit.TmaConfigError, match="contiguous NHWC"):
        tmakit.im2col(x, 3, strict=True)


@pytest.mark.parametrize(
    "shape, dtype, kernel, dilation",
    [((1, 1, 1, 8), "fp16", 1, 1), ((2, 1, 1, 8), "bf16", (1, 1), 2), ((1, 1, 2, 4), "fp32", 1, 1)],
)
def test_a_1x1_too_small_for_the_im2col_atom_is_x_as_rows(shape, dtype, kernel, dilation):
    """A 1x1 stride-1 unpadded im2col of at most two pixels of one 16-byte chunk is x.reshape(N*H*W,
    C): copied by TMA (`tmakit.copy_`), into a new tensor or `out`."""
    torch = pytest.importorskip("torch")
    element = DTYPES[dtype]
    bits, x = activation(torch, shape, dtype)
    rows = math.prod(shape[:3])
    out = tmakit.im2col(x, kernel, dilation=dilation)
    torch.cuda.synchronize()
    assert out.shape == (rows, shape[3]) and out.dtype == x.dtype
    assert torch.equal(
        out.view(signed(torch, element.nbytes)), x.reshape(rows, -1).view(signed(torch, element.nbytes))
    )
    given = torch.full((rows, shape[3]), -1, dtype=signed(torch, element.nbytes), device="cuda").view(x.dtype)
    assert tmakit.im2col(x, kernel, dilation=dilation, out=given) is given
    torch.cuda.synchronize()
    assert torch.equal(
        given.view(signed(torch, element.nbytes)), x.reshape(rows, -1).view(signed(torch, element.nbytes))
    )


def test_a_patch_matrix_of_one_row_is_refused_by_strict_before_any_launch_on_gpu_tensors():
    torch = pytest.importorskip("torch")
    x = torch.zeros((1, 3, 3, 16), dtype=torch.float16, device="cuda")
    with pytest.raises(tmakit.TmaConfigError, match=r"one row .*x\[:, 0:3, 0:3\]\.reshape\(1, 144\)"):
        tmakit.im2col(x, 3, strict=True)
    with pytest.raises(tmakit.TmaConfigError, match=r"x\[:, 0:1:2, 0:3:2\]\.reshape\(2, 8\)"):
        tmakit.im2col(torch.zeros((1, 1, 3, 8), dtype=torch.float16, device="cuda"), 1, stride=2, strict=True)
