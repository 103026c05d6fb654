"""`tmakit.im2col`'s route: TMA where `Im2colPlan` accepts the call, torch's expression (`F.pad` +
`as_strided`) with the rule that failed where it does not; `im2col_path` names which.

On a CPU: the route of many facts (pure Python), the fallback against `F.unfold` of the NCHW view
reordered to (N*P*Q, R*S*C) - every element, position-dependent inputs, the padding's zeros
told from the data - and the strict refusals' messages (`nn.functional.unfold`'s OpInfo samples
are tests/test_opinfo.py's).
On a Hopper GPU (`gpu`): the TMA route and each fallback against the same reference."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re

import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.patches.api import copy_windows, gathered
from tmakit.patches.plan import Im2colPlan, im2col_conv
from tmakit.patches.route import Im2colFacts, PatchFacts, im2col_call, im2col_route
from tmakit.plan.route import PATHS, TensorFacts
from tmakit.runtime.launch import Launcher

torch = pytest.importorskip("torch")
F = torch.nn.functional

# -- the route, from facts alone -------------------------------------------------------------------
ALIGNED = 1 << 20  # a 16-byte aligned base address


def facts(shape=(2, 8, 8, 16), kernel=3, strides=None, dtype="float16", nbytes=2, **changes) -> Im2colFacts:
    """The facts of a contiguous CUDA tensor of `shape` (element strides from it unless given)."""
    if strides is None:
        strides = tuple(math.prod(shape[d + 1 :]) for d in range(len(shape)))
    x = dict(shape=shape, strides=strides, dtype=dtype, nbytes=nbytes, address=ALIGNED, device=0)
    x.update({name: value for name, value in changes.items() if name in X_FIELDS})
    rest = {name: value for name, value in changes.items() if name not in X_FIELDS}
    return Im2colFacts(TensorFacts(**x), kernel=kernel, **rest)


X_FIELDS = {field.name for field in dataclasses.fields(TensorFacts)}


# (facts, path, the start or a piece of the reason)
ROUTES = [
    (facts(im2col_by="loads"), "tma", "im2col loads of 128 pixels x 16 channels"),
    (facts(), "tma", "im2col loads of 128 pixels x 16 channels"),  # 96-byte runs: the loads
    (facts(im2col_by="windows"), "tma", "the zero-padded input's overlapping windows copied, 64 runs of 48"),
    (facts((1, 20, 20, 16), 7, stride=2, padding=3), "tma", "windows copied, 64 runs of 112 elements"),
    (facts((2, 8, 8, 32)), "tma", "im2col loads of 128 pixels x 32 channels"),  # 64-byte channels
    (facts(dtype="float32", nbytes=4), "tma", "im2col loads"),  # 64-byte channels
    (facts((2, 8, 8, 8), 7, dtype="float32", nbytes=4, padding=3), "tma", "windows copied, 64 runs of 56"),
    (facts(dilation=2, padding=2), "tma", "im2col loads"),  # windows are runs of undilated taps
    (facts((2, 8, 8, 24)), "tma", "im2col loads"),  # 48-byte channels
    (facts(device=-2), "torch", "a tensor is on a GPU that is not a Hopper (compute capability 9.0)"),
    (facts(padding=1, stride=2, dilation=(1, 2)), "tma", "im2col loads"),
    (facts((1, 1, 2, 8), 1), "tma", "a 1x1 patch matrix: x copied as 2 x 8 rows"),
    (facts(device=-1), "torch", "x is not on a CUDA device"),
    (facts(dtype="float64", nbytes=8), "torch", "dtype float64; TMA im2col takes float16, bfloat16, float32"),
    (facts(dtype="int8", nbytes=1), "torch", "dtype int8; TMA im2col takes"),
    (facts(dtype="bool", nbytes=1), "torch", "dtype bool"),
    (facts((2, 8, 8, 4)), "torch", "C = 4 channels of fp16 is 8 bytes per pixel"),
    (
        facts(strides=(1024, 16, 128, 1)),
        "torch",
        "has strides (1024, 16, 128, 1); TMA im2col takes a contiguous",
    ),
    (facts(address=ALIGNED + 2), "torch", "x's tensor base address 0x100002 is not 16-byte aligned"),
    (facts(out=PatchFacts((1, 128), ALIGNED)), "torch", "out has strides (1, 128)"),
    (facts(out=PatchFacts((144, 1), ALIGNED + 8)), "torch", "out's tensor base address"),
    (facts(out=PatchFacts((144, 1), ALIGNED)), "tma", "im2col loads"),
    (facts((1, 40, 40, 16), stride=9), "torch", "stride 9 along height"),
    (facts((1, 300, 300, 16), padding=200), "torch", "im2col lower corner along height is -200"),
    (facts((1, 3, 3, 16)), "torch", "x[:, 0:3, 0:3].reshape(1, 144)"),  # one window
    (facts((1, 1, 3, 8), 1, stride=2), "torch", "x[:, 0:1:2, 0:3:2]"),  # 1x1 strided, too small
    (facts((0, 8, 8, 16)), "torch", "activation of shape (0, 8, 8, 16) has an extent below 1"),
    (facts((2, 8, 8, 0)), "torch", "an extent below 1"),
]


@pytest.mark.parametrize("given, path, reason", ROUTES, ids=[r for _, _, r in ROUTES])
def test_the_route_names_the_path_and_the_rule(given, path, reason):
    route = im2col_route(given)
    assert (route.op, route.path) == ("im2col", path) and path in PATHS
    assert reason in route.reason, route.reason
    assert route.by_tma == (path == "tma")


def test_the_route_is_tma_exactly_where_the_planner_accepts_a_contiguous_aligned_tensor():
    """The planner is the route's source of truth: no rule restated that could drift from it."""
    for shape in [(1, 5, 5, 16), (2, 9, 11, 64), (1, 1, 1, 8), (2, 8, 8, 24), (1, 3, 3, 16), (4, 2, 2, 8)]:
        for kernel, stride, padding, dilation in [(1, 1, 0, 1), (3, 1, 1, 1), (3, 2, 0, 2), (2, 3, 1, 1)]:
            given = facts(shape, kernel, stride=stride, padding=padding, dilation=dilation)
            try:
                call = im2col_call(given)
            except TmaConfigError:
                continue  # no output pixel: the convolution's own argument
            try:
                accepted = Im2colPlan(shape, "fp16", kernel, stride, padding, dilation) is not None
            except TmaConfigError as refused:
                accepted = getattr(refused, "is_reshape", False)  # served as x's rows
            assert call.route.by_tma == accepted, (shape, kernel, stride, padding, dilation, call.route)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(kernel=0), r"kernel \(0, 0\) has a value below 1"),
        (dict(kernel=3.0), r"kernel 3.0 is not an int"),
        (dict(padding=-1), r"padding \(-1, -1\) has a value below 0"),
        (dict(stride=(1, 2, 3)), r"stride \(1, 2, 3\) has 3 values"),
        (dict(dilation="2"), r"dilation '2' is not an int"),
        (dict(kernel=9), r"the height 8 with padding 0 is smaller than the dilated filter \(9\)"),
        (
            dict(kernel=3, dilation=(1, 5)),
            r"the width 8 with padding 0 is smaller than the dilated filter \(11\)",
        ),
        (
            dict(shape=(8, 8, 16), strides=(128, 16, 1)),
            r"rank 3; tmakit.im2col takes a 2-D convolution's NHWC",
        ),
    ],
)
def test_the_convolutions_own_arguments_are_refused_on_every_route(changes, message):
    for device in (0, -1):
        with pytest.raises(TmaConfigError, match=message):
            im2col_route(facts(device=device, **changes))


# -- the fallback against F.unfold ----------------------------------------------------------------
def unfold_reference(x, kernel, stride=1, padding=0, dilation=1):
    """The patch matrix by `F.unfold` of the NCHW view, (N, C*R*S, L) reordered to tmakit's
    (N*P*Q, R*S*C); computed in float64 for dtypes unfold lacks (every value used is exact)."""
    n, _, _, c = x.shape
    r, s = (kernel, kernel) if isinstance(kernel, int) else kernel
    as_float = x.dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
    nchw = (x.double() if as_float else x).permute(0, 3, 1, 2)
    unfolded = F.unfold(nchw, (r, s), dilation, padding, stride)  # (N, C*R*S, L)
    length = unfolded.shape[-1]
    patches = unfolded.view(n, c, r, s, length).permute(0, 4, 2, 3, 1).reshape(n * length, r * s * c)
    return patches.to(x.dtype) if as_float else patches


def positions(shape, dtype, device="cpu"):
    """Each element's index, wrapped to 1..251 (exact in every dtype used, never 0: a 0 is padding)."""
    values = torch.arange(math.prod(shape), device=device) % 251 + 1
    if dtype == torch.bool:
        return (values % 2 == 0).reshape(shape)
    return values.to(dtype).reshape(shape)


# (shape, dtype, kernel, stride, padding, dilation, layout): layout "contiguous", "channels_last"
# (an NCHW tensor's permute: the same strides), "sliced" (every other channel and a column cut
# off), "transposed" (H and W swapped in memory), "offset" (a view 2 elements into its storage).
FALLBACK_CASES = [
    ((2, 7, 9, 3), torch.float32, 3, 1, 1, 1, "contiguous"),
    ((2, 7, 9, 3), torch.float16, (3, 2), (2, 1), (1, 0), (1, 2), "contiguous"),
    ((1, 10, 10, 4), torch.bfloat16, 5, 2, 2, 1, "sliced"),
    ((3, 6, 5, 2), torch.float64, 2, 3, (0, 2), 2, "transposed"),
    ((2, 8, 8, 16), torch.float16, 3, 1, 1, 1, "offset"),
    ((2, 6, 6, 5), torch.int8, 3, 1, 1, 1, "channels_last"),
    ((2, 6, 6, 5), torch.int32, 1, 2, 0, 1, "sliced"),
    ((1, 4, 6, 3), torch.bool, (2, 3), 1, 1, (2, 1), "contiguous"),
    ((1, 4, 6, 3), torch.complex64, 3, 1, 2, 1, "transposed"),
    ((0, 5, 5, 3), torch.float32, 3, 1, 1, 1, "contiguous"),  # no image: an empty patch matrix
    ((2, 1, 1, 2), torch.float32, 1, 1, 3, 1, "contiguous"),  # a pixel in padding only
    ((1, 3, 3, 16), torch.float16, 3, 1, 0, 1, "contiguous"),  # one window
]


def laid_out(shape, dtype, layout):
    """A tensor of `shape` holding `positions`, laid out as `layout` says."""
    n, h, w, c = shape
    if layout == "contiguous":
        return positions(shape, dtype)
    if layout == "channels_last":
        return positions((n, c, h, w), dtype).permute(0, 2, 3, 1)
    if layout == "sliced":
        return positions((n, h, w + 1, 2 * c), dtype)[:, :, :w, ::2]
    if layout == "transposed":
        return positions((n, w, h, c), dtype).transpose(1, 2)
    storage = positions((math.prod(shape) + 2,), dtype)
    return storage[2:].view(shape)


@pytest.mark.parametrize("shape, dtype, kernel, stride, padding, dilation, layout", FALLBACK_CASES)
def test_the_fallback_is_unfolds_patch_matrix_on_every_element(
    shape, dtype, kernel, stride, padding, dilation, layout
):
    x = laid_out(shape, dtype, layout)
    expected = unfold_reference(x, kernel, stride, padding, dilation)
    route = tmakit.im2col_path(x, kernel, stride, padding, dilation)
    assert route.path == "torch" and "x is not on a CUDA device" in route.reason
    got = tmakit.im2col(x, kernel, stride, padding, dilation)
    assert got.shape == expected.shape and got.dtype == x.dtype and got.is_contiguous()
    assert torch.equal(got, expected), first_wrong(got, expected)
    # Into a caller's out: a contiguous one, and one of other strides (torch writes either).
    for out in (torch.empty_like(expected), torch.empty(expected.shape[::-1], dtype=dtype).t()):
        assert tmakit.im2col(x, kernel, stride, padding, dilation, out=out) is out
        assert torch.equal(out, expected), first_wrong(out, expected)
    if shape[0]:
        assert got.data_ptr() != x.data_ptr()  # a new tensor, never x's memory (a 1x1 is a reshape of it)


def first_wrong(got, expected) -> str:
    """The first wrong element as (row, column) = (output pixel, tap and channel)."""
    wrong = (got != expected).nonzero()
    return f"{len(wrong)} wrong, first at {tuple(wrong[0].tolist())}" if len(wrong) else "equal"


def test_the_fallback_takes_the_argument_forms_the_tma_path_takes():
    import numpy as np

    x = positions((2, 9, 9, 4), torch.float32)
    expected = unfold_reference(x, (3, 3), (2, 2), (1, 1), (1, 1))
    for forms in [(3, 2, 1, 1), ((3, 3), (2, 2), (1, 1), (1, 1)), ([3, 3], [2, 2], [1, 1], [1, 1]),
                  (np.int64(3), np.int32(2), (np.int16(1), 1), 1)]:  # fmt: skip
        assert torch.equal(tmakit.im2col(x, *forms), expected)


def test_a_1x1_fallback_is_a_new_tensor_not_a_view_of_x():
    x = positions((2, 4, 4, 8), torch.float16)
    patches = tmakit.im2col(x, 1)
    assert torch.equal(patches, x.reshape(32, 8)) and patches.data_ptr() != x.data_ptr()


def test_torchs_own_refusal_is_a_tmaconfigerror():
    x = torch.zeros((1, 4, 4, 2), dtype=torch.float32)
    out = torch.zeros((16, 18), dtype=torch.float32, device="meta")
    with pytest.raises(TmaConfigError, match="out is on the meta device"):  # out's own check, first
        tmakit.im2col(x, 3, padding=1, out=out)
    conv = im2col_conv((1, 4, 4, 2), 3, 1, 1)
    with pytest.raises(TmaConfigError, match=r"torch's im2col expression \(F.pad \+ as_strided\) of x"):
        gathered(x, conv, torch.zeros((3, 3), dtype=torch.float32))  # a view torch refuses


# -- strict: today's refusals, naming the value, the rule and the fix ------------------------------
def test_strict_raises_what_tma_cannot_serve_naming_the_fix_and_the_fallback():
    with pytest.raises(TmaConfigError) as refused:
        tmakit.im2col(positions((1, 8, 8, 16), torch.float16), 3, strict=True)
    assert str(refused.value) == (
        "x is not on a CUDA device; TMA loads GPU memory: move it with .cuda() first "
        "(strict=False computes it with torch's expression instead)"
    )


def test_strict_names_each_rule_where_the_gpu_is_stood_in(monkeypatch):
    """With the device rule waived (a CPU tensor taken as on GPU 0), strict refuses each of TMA's
    other rules by its value, rule and fix; non-strict computes the same matrix by torch."""
    import importlib

    api_im2col = importlib.import_module("tmakit.patches.api")
    monkeypatch.setattr(importlib.import_module("tmakit.api.tensors"), "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_im2col, "device_facts", lambda device: (132, 50 << 20))
    monkeypatch.setattr(api_im2col, "im2col_launcher", lambda *a: pytest.fail("launched"))
    monkeypatch.setattr(api_im2col, "copy_windows", lambda *a: pytest.fail("launched"))
    half = torch.float16
    for x, arguments, message in [
        (
            positions((1, 8, 8, 16), torch.float64),
            (3,),
            r"dtype float64; TMA im2col takes float16, bfloat16, float32: convert x",
        ),
        (
            positions((1, 8, 8, 4), half),
            (3,),
            r"C = 4 channels of fp16 is 8 bytes .* multiple of 16 bytes: pad the channels to a multiple of 8",
        ),
        (
            laid_out((1, 8, 8, 16), half, "transposed"),
            (3,),
            r"strides \(1024, 16, 128, 1\); TMA im2col takes a contiguous NHWC tensor: pass x.contiguous\(\)",
        ),
        (
            laid_out((1, 8, 8, 16), half, "offset"),
            (3,),
            r"x's tensor base address 0x[0-9a-f]+ is not 16-byte aligned",
        ),
        (
            positions((1, 40, 40, 16), half),
            (3, 9),
            r"stride 9 along height; an im2col tensor map's element stride is 1..8: gather at stride 1",
        ),
        (
            positions((1, 3, 3, 16), half),
            (3,),
            r"is \(1, 144\): one row .* compute it as x\[:, 0:3, 0:3\]",
        ),
    ]:
        with pytest.raises(TmaConfigError, match=message) as refused:
            api_im2col.im2col(x, *arguments, strict=True)
        route = api_im2col.im2col_path(x, *arguments)
        assert route.path == "torch" and str(refused.value).startswith(route.reason)
        assert torch.equal(api_im2col.im2col(x, *arguments), unfold_reference(x, *arguments))


@pytest.fixture
def gpu_stood_in(monkeypatch):
    """tmakit.patches.api with CPU tensors taken as on GPU 0 and a launch that records its tensors
    (nothing runs): what a TMA call would launch, and what takes torch's path instead."""
    import importlib

    api_im2col = importlib.import_module("tmakit.patches.api")
    launched = []
    monkeypatch.setattr(importlib.import_module("tmakit.api.tensors"), "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_im2col, "device_facts", lambda device: (132, 50 << 20))
    monkeypatch.setattr(
        api_im2col, "im2col_launcher", lambda plan, device: Launcher(lambda x, out: launched.append(x))
    )
    monkeypatch.setattr(api_im2col, "copy_windows", lambda conv, x, out: launched.append(x))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    return api_im2col, launched


def test_an_out_sharing_memory_with_x_is_refused_on_every_path(gpu_stood_in):
    api_im2col, launched = gpu_stood_in
    memory = torch.zeros(2 * 8 * 8 * 16 + 128 * 144, dtype=torch.float16)
    x = memory[: 2 * 8 * 8 * 16].view(2, 8, 8, 16)
    for start in (16, 2 * 8 * 8 * 16 - 8):  # inside x, and x's last pixel under out's first row
        out = memory[start : start + 128 * 144].view(128, 144)
        for strict in (False, True):
            with pytest.raises(
                TmaConfigError,
                match=r"shares memory with x \(0x[0-9a-f]+\.\.0x[0-9a-f]+\); im2col reads x while it",
            ):
                api_im2col.im2col(x, 3, padding=1, out=out, strict=strict)
            with pytest.raises(TmaConfigError, match="shares memory with x"):
                api_im2col.im2col_path(x, 3, padding=1, out=out)
    after = memory[2 * 8 * 8 * 16 :].view(128, 144)  # the next bytes: its own memory
    assert api_im2col.im2col(x, 3, padding=1, out=after) is after and len(launched) == 1


def test_a_call_autograd_records_takes_torchs_path_each_call(gpu_stood_in):
    api_im2col, launched = gpu_stood_in
    x = positions((2, 8, 8, 16), torch.float16)
    assert api_im2col.im2col_path(x, 3, padding=1).path == "tma"
    api_im2col.im2col(x, 3, padding=1)
    leaf = x.clone().requires_grad_()  # the same key: the route is decided again for this call
    route = api_im2col.im2col_path(leaf, 3, padding=1)
    assert route.path == "torch" and "requires grad" in route.reason
    patches = api_im2col.im2col(leaf, 3, padding=1)
    patches.float().sum().backward()  # torch's expression recorded the graph
    assert leaf.grad is not None and leaf.grad.shape == leaf.shape and len(launched) == 1
    with pytest.raises(TmaConfigError, match=r"requires grad with grad mode on.*torch.no_grad\(\)"):
        api_im2col.im2col(leaf, 3, padding=1, strict=True)
    with torch.no_grad():  # autograd records nothing: TMA's, on a detached view of the same memory
        assert api_im2col.im2col_path(leaf, 3, padding=1).path == "tma"
        api_im2col.im2col(leaf, 3, padding=1, strict=True)
    assert (
        len(launched) == 2 and not launched[-1].requires_grad and launched[-1].data_ptr() == leaf.data_ptr()
    )


def test_a_negative_view_takes_torchs_expression_each_call(gpu_stood_in):
    api_im2col, launched = gpu_stood_in
    x = positions((2, 8, 8, 16), torch.float32)
    api_im2col.im2col(x, 3, padding=1)
    negative = torch._neg_view(x)  # the same key; a bit torch applies as it reads
    route = api_im2col.im2col_path(negative, 3, padding=1)
    assert route.path == "torch" and "a negative view" in route.reason
    assert torch.equal(api_im2col.im2col(negative, 3, padding=1), -unfold_reference(x, 3, 1, 1))
    with pytest.raises(TmaConfigError, match="a negative view"):
        api_im2col.im2col(negative, 3, padding=1, strict=True)
    assert len(launched) == 1


def test_a_zero_d_tensor_argument_is_planned_every_call_not_looked_up(gpu_stood_in):
    """A 0-d tensor passes as an int but can change in place: no call finds another's plan by it."""
    api_im2col, _ = gpu_stood_in
    x = positions((1, 6, 6, 4), torch.float32)
    kernel = torch.tensor(3)
    assert api_im2col.im2col(x, kernel).shape == (16, 36)
    kernel.fill_(1)
    assert api_im2col.im2col(x, kernel).shape == (36, 4)
    with pytest.raises(TmaConfigError, match=r"kernel tensor\(True\) is not an int"):  # a bool is no int
        api_im2col.im2col(x, torch.tensor(True))


@pytest.mark.parametrize("name", ["kernel", "stride", "padding", "dilation"])
def test_arguments_past_any_extent_are_refused_naming_them(name):
    x = positions((1, 6, 6, 4), torch.float32)
    arguments = {"kernel": 1, name: (1, 2**70)}
    with pytest.raises(
        TmaConfigError, match=rf"{name} \(1, 1180591620717411303424\) has a value above 2147483648"
    ):
        tmakit.im2col(x, **arguments)


def test_running_out_of_memory_is_torchs_own_error(monkeypatch):
    import importlib

    api_im2col = importlib.import_module("tmakit.patches.api")

    def exhausted(x, conv, out=None):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(api_im2col, "strided_patches", exhausted)
    with pytest.raises(torch.OutOfMemoryError):
        tmakit.im2col(positions((1, 6, 6, 4), torch.float32), 3)


def test_im2col_path_names_the_route_and_raises_for_the_arguments():
    x = positions((2, 8, 8, 16), torch.float16)
    route = tmakit.im2col_path(x, 3, 1, 1)
    assert (
        str(route)
        == "im2col: torch (x is not on a CUDA device; TMA loads GPU memory: move it with .cuda() first)"
    )
    with pytest.raises(TmaConfigError, match=r"padding \(-1, -1\) has a value below 0"):
        tmakit.im2col_path(x, 3, padding=-1)
    with pytest.raises(TmaConfigError, match=r"out is \(1, 1\)"):
        tmakit.im2col_path(x, 3, out=torch.zeros((1, 1), dtype=torch.float16))
    with pytest.raises(TmaConfigError, match="takes torch tensors"):
        tmakit.im2col_path(x.numpy(), 3)


# -- on a Hopper GPU: TMA and each fallback against the reference ------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape, dtype, layout, kernel, stride, padding, path",
    [
        ((2, 9, 11, 16), torch.float16, "contiguous", 3, 1, 1, "tma"),
        ((2, 9, 11, 32), torch.bfloat16, "contiguous", (3, 2), 2, (1, 0), "tma"),
        ((1, 4, 4, 8), torch.float32, "contiguous", 1, 1, 0, "tma"),  # 16 rows: im2col loads
        ((1, 1, 2, 8), torch.float16, "contiguous", 1, 1, 0, "tma"),  # x copied as rows
        ((2, 9, 11, 16), torch.float16, "transposed", 3, 1, 1, "torch"),
        ((2, 9, 11, 16), torch.float16, "offset", 3, 1, 1, "torch"),
        ((2, 9, 11, 16), torch.float64, "contiguous", 3, 1, 1, "torch"),
        ((2, 9, 11, 3), torch.float32, "contiguous", 3, 1, 1, "torch"),  # 12-byte pixels
        ((1, 40, 40, 16), torch.float16, "contiguous", 3, 9, 1, "torch"),  # stride past 8
        ((1, 3, 3, 16), torch.float16, "contiguous", 3, 1, 0, "torch"),  # one window
    ],
)
def test_on_the_gpu_each_route_is_unfolds_patch_matrix(shape, dtype, layout, kernel, stride, padding, path):
    x = laid_out(shape, dtype, layout).cuda()
    if layout == "offset":
        x = torch.empty(math.prod(shape) + 2, dtype=dtype, device="cuda")[2:].view(shape).copy_(x)
    expected = unfold_reference(x, kernel, stride, padding)
    route = tmakit.im2col_path(x, kernel, stride, padding)
    assert route.path == path, route
    got = tmakit.im2col(x, kernel, stride, padding)
    torch.cuda.synchronize()
    assert torch.equal(got, expected), f"{route}: {first_wrong(got, expected)}"
    out = torch.full_like(expected, float("nan") if dtype.is_floating_point else 0)
    assert tmakit.im2col(x, kernel, stride, padding, out=out) is out
    torch.cuda.synchronize()
    assert torch.equal(out, expected), f"{route}, into out: {first_wrong(out, expected)}"
    if path == "tma":
        assert torch.equal(tmakit.im2col(x, kernel, stride, padding, strict=True), expected)
        # A non-contiguous out: the same call takes torch's path (strict refuses it).
        strided_out = torch.empty(expected.shape[::-1], dtype=dtype, device="cuda").t()
        assert tmakit.im2col_path(x, kernel, stride, padding, out=strided_out).path == "torch"
        tmakit.im2col(x, kernel, stride, padding, out=strided_out)
        assert torch.equal(strided_out, expected)
        with pytest.raises(TmaConfigError, match="out has strides"):
            tmakit.im2col(x, kernel, stride, padding, out=strided_out, strict=True)
    else:
        with pytest.raises(TmaConfigError, match=re.escape(route.reason)):
            tmakit.im2col(x, kernel, stride, padding, strict=True)


# -- the windows copy (narrow channels) ------------------------------------------------------------
WINDOWS_CASES = [
    ((2, 9, 11, 16), torch.float16, 3, 1, 1),
    ((1, 20, 20, 16), torch.float16, 7, 2, 3),  # a stem-like 7x7, stride 2, padding 3
    ((2, 7, 10, 8), torch.float32, (3, 2), (2, 1), (1, 0)),  # non-square, uneven
    ((1, 6, 6, 16), torch.bfloat16, 3, 1, 0),  # no padding: x's own windows
    ((2, 5, 9, 8), torch.float16, (2, 5), (1, 3), (0, 2)),  # 16-byte channels
]


@pytest.mark.parametrize("shape, dtype, kernel, stride, padding", WINDOWS_CASES)
def test_the_windows_view_is_the_patch_matrix(shape, dtype, kernel, stride, padding):
    """`patches.plan.Im2colWindows`' arithmetic, copied by torch on the CPU: the padded input's
    overlapping windows land on every element of the patch matrix (position-dependent values,
    the padding's zeros told from the data)."""
    from tmakit.patches.plan import im2col_windows

    x = positions(shape, dtype)
    conv = im2col_conv(shape, kernel, stride, padding)
    windows = im2col_windows(conv)
    pad_h, pad_w = conv.padding
    padded = F.pad(x, (0, 0, pad_w, pad_w, pad_h, pad_h))
    assert tuple(padded.shape) == windows.padded_shape
    entered = torch.zeros(windows.padded_shape, dtype=dtype)  # x as whole image rows, the interior
    rows = windows.interior_shape
    entered.as_strided(rows, windows.interior_strides, windows.interior_offset).copy_(x.view(rows))
    assert torch.equal(entered, padded)
    out = torch.full(conv.patch_shape, -1, dtype=dtype)
    view = padded.as_strided(windows.shape, windows.src_strides)
    out.as_strided(windows.shape, windows.dst_strides).copy_(view)
    expected = unfold_reference(x, kernel, stride, padding)
    assert torch.equal(out, expected), first_wrong(out, expected)


@pytest.mark.parametrize("shape, dtype, kernel, stride, padding", WINDOWS_CASES)
def test_the_windows_route_copies_the_padded_input_as_tmakit_copy_would(
    gpu_stood_in, monkeypatch, shape, dtype, kernel, stride, padding
):
    """`im2col` on the windows route, its two TMA copies stood in by torch's copy_ with the same
    arguments: the patch matrix, into a new tensor and into `out`; the copies are strict, the
    windows copy's tile a run of taps wide."""
    api_im2col, _ = gpu_stood_in
    monkeypatch.setattr(api_im2col, "copy_windows", copy_windows)  # the fixture's stand-in undone
    copies = []

    def copy_(dst, src, tile=None, stages=None, *, strict=False, sms=None):
        copies.append((tile, strict))
        return dst.copy_(src)

    monkeypatch.setattr(api_im2col, "copy_", copy_)
    x = positions(shape, dtype)
    route = api_im2col.im2col_path(x, kernel, stride, padding, im2col_by="windows")
    assert route.by_tma and "windows copied" in route.reason, route
    expected = unfold_reference(x, kernel, stride, padding)
    got = api_im2col.im2col(x, kernel, stride, padding, im2col_by="windows")
    assert torch.equal(got, expected), first_wrong(got, expected)
    out = torch.full_like(expected, -1)
    assert api_im2col.im2col(x, kernel, stride, padding, out=out, strict=True, im2col_by="windows") is out
    assert torch.equal(out, expected), first_wrong(out, expected)
    run = (kernel if isinstance(kernel, int) else kernel[1]) * shape[3]
    assert all(strict for _, strict in copies) and copies[-1][0] == (64, run)
    assert len(copies) == (2 if padding == 0 else 4)  # x into the padded input, then the windows


def test_im2col_by_chooses_the_kernel_and_a_kernel_that_cannot_serve_is_named():
    stem = facts((1, 20, 20, 16), 7, stride=2, padding=3)
    assert "windows copied" in im2col_route(stem).reason
    assert "im2col loads" in im2col_route(dataclasses.replace(stem, im2col_by="loads")).reason
    assert "windows copied" in im2col_route(dataclasses.replace(stem, im2col_by="windows")).reason
    assert "im2col loads" in im2col_route(facts((1, 20, 20, 16), 3)).reason  # 96-byte runs
    wide = facts((1, 20, 20, 32), 3)  # 64-byte channels: the rule's loads
    assert "im2col loads" in im2col_route(wide).reason
    with pytest.raises(TmaConfigError, match=r"im2col_by='windows' cannot serve .* at most 32 bytes"):
        im2col_route(dataclasses.replace(wide, im2col_by="windows"))
    with pytest.raises(TmaConfigError, match=r"im2col_by='windows' cannot serve .*no dilation"):
        im2col_route(facts((1, 20, 20, 16), 3, dilation=2, im2col_by="windows"))
    with pytest.raises(TmaConfigError, match=r"im2col_by='loads': TMA does not serve this call: x is not on"):
        im2col_route(facts((1, 20, 20, 16), 7, stride=2, padding=3, device=-1, im2col_by="loads"))
    with pytest.raises(TmaConfigError, match=r"im2col_by='gather'; im2col's kernels are 'loads', 'windows'"):
        im2col_route(dataclasses.replace(stem, im2col_by="gather"))
    with pytest.raises(TmaConfigError, match=r"im2col_by='loads': .* x is not on a CUDA device"):
        tmakit.im2col(positions((1, 8, 8, 16), torch.float64), 3, im2col_by="loads")


def test_a_chosen_kernel_never_falls_back_where_the_tensors_lie(gpu_stood_in):
    """`im2col_by` refuses torch's path for the per-call rules too (x's address, out's strides,
    autograd) and for a 1x1 patch matrix that is x's own rows; None falls back as before."""
    import numpy as np

    api_im2col, _ = gpu_stood_in
    storage = positions((1 * 20 * 20 * 16 + 1,), torch.float16)
    misaligned = storage[1:].view(1, 20, 20, 16)
    stem = dict(kernel=7, stride=2, padding=3)
    assert api_im2col.im2col_path(misaligned, **stem).path == "torch"
    for kernel in ("windows", "loads"):
        with pytest.raises(TmaConfigError, match=rf"im2col_by='{kernel}': TMA does not serve .* not 16-byte"):
            api_im2col.im2col(misaligned, **stem, im2col_by=kernel)
        tracked = positions((1, 20, 20, 16), torch.float16).requires_grad_()
        with pytest.raises(TmaConfigError, match=rf"im2col_by='{kernel}': .* requires grad"):
            api_im2col.im2col_path(tracked, **stem, im2col_by=kernel)
    with pytest.raises(TmaConfigError, match=r"im2col_by='loads': this 1x1 patch matrix is too small"):
        api_im2col.im2col(positions((1, 1, 2, 8), torch.float16), 1, im2col_by="loads")
    x = positions((1, 20, 20, 16), torch.float16)
    for wrong in (np.array(["windows", "loads"]), np.array(["windows"]), ["windows"], 1, b"windows"):
        with pytest.raises(TmaConfigError, match="im2col's kernels are 'loads', 'windows'"):
            api_im2col.im2col_path(x, **stem, im2col_by=wrong)
    assert "windows" in api_im2col.im2col_path(x, **stem, im2col_by=np.str_("windows")).reason
