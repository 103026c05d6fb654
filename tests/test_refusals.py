"""Served or refused, never a raw exception: each hole a CPU fuzz found in the plans, the options,
the copy's overlap rule, the fakes and unusual tensors, reproduced. Every call here either
returns or raises a TmaConfigError that names the argument, the value and the fix."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

import tmakit
from tmakit import CopyOptions, LoadConfig, LoadPlan, PipelinePlan, TmaConfigError
from tmakit.copies import call as copies_call
from tmakit.plan import copy_class
from tmakit.runtime.dispatch import Dispatch
from tmakit.runtime.launch import Launcher
from tmakit.validate import overlap_verdict

LOAD = LoadPlan(LoadConfig())


# -- the planners take whole numbers, flags and names, nothing that merely looks like them ------------
@pytest.mark.parametrize(
    "fields, message",
    [
        ({"stages": 2.5}, "PipelinePlan stages is 2.5 (float); it must be a whole number"),
        ({"stages": None}, "PipelinePlan stages is None (None); it must be a whole number"),
        ({"stages": "8"}, "PipelinePlan stages is '8' (str); it must be a whole number"),
        ({"stages": True}, "PipelinePlan stages is True (bool); it must be a whole number"),
        ({"consumer_warps": 1.5}, "PipelinePlan consumer_warps is 1.5 (float)"),
        ({"blocks_per_sm": 2.0}, "PipelinePlan blocks_per_sm is 2.0 (float)"),
        ({"persistent": "no"}, "PipelinePlan persistent is 'no' (str); it must be True or False"),
        ({"load_hint": {}}, "PipelinePlan load_hint is {} (dict); it must be a name"),
        ({"tile_order": ["columns"]}, "PipelinePlan tile_order is ['columns'] (list); it must be a name"),
        ({"load": LoadConfig()}, "(tmakit.config.LoadConfig); it must be a LoadPlan"),
    ],
)
def test_a_pipeline_plan_names_a_field_of_the_wrong_type(fields, message):
    with pytest.raises(TmaConfigError) as refused:
        PipelinePlan(**{"load": LOAD, **fields})
    assert message in str(refused.value)


def test_numpy_integers_are_whole_numbers_and_become_ints():
    plan = PipelinePlan(LOAD, stages=np.int64(3), consumer_warps=np.int32(2))
    assert (plan.stages, plan.consumer_warps) == (3, 2) and type(plan.stages) is int
    assert PipelinePlan(LOAD, stages=3, consumer_warps=2) == plan
    config = LoadConfig((np.int64(8448), 1792), tile=(np.uint16(64), 256))
    assert LoadPlan(config).total_tile_loads == 924
    assert type(config.shape[0]) is int and type(config.tile[0]) is int  # normalised by the check


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"bulk": "false"}, r"copy option bulk is 'false' \(str\); it must be True or False"),
        ({"as_rows": "no"}, r"copy option as_rows is 'no' \(str\); it must be True or False"),
        ({"evict_first": "no"}, r"copy option evict_first is 'no' \(str\); it must be True or False"),
        ({"tile": (16,)}, r"copy option tile is \(16,\) \(tuple\); it must be a tuple of 2 whole numbers"),
        ({"tile": (16, 256, 1)}, r"copy option tile is \(16, 256, 1\) \(tuple\)"),
        ({"tile": "16x256"}, r"copy option tile is '16x256' \(str\)"),
        (
            {"tile": (0, 256)},
            r"copy option tile \(0, 256\): its rows are 0; a TMA box dimension must be 1..256",
        ),
        ({"stages": "8"}, r"copy option stages is '8' \(str\); it must be a whole number"),
        ({"store_depth": "2"}, r"copy option store_depth is '2' \(str\)"),
        ({"store_hint": {"a": 1}}, r"copy option store_hint is \{'a': 1\} \(dict\); it must be a name"),
        ({"store_hint": "nope"}, "copy option store_hint 'nope' is not one of none, evict_first"),
    ],
)
def test_copy_options_name_a_value_of_the_wrong_type(fields, message):
    with pytest.raises(TmaConfigError, match=message):
        CopyOptions.of(**fields)


def test_numpy_booleans_are_flags_and_numpy_strings_are_names():
    options = CopyOptions.of(pdl=np.bool_(False), tile_order=np.str_("columns"))
    assert options.pdl is False and options.tile_order == "columns"
    with pytest.raises(TmaConfigError, match=r"copy options None \(NoneType\) must be text"):
        CopyOptions.parse(None)


def test_a_list_tile_is_the_tuple_it_means():
    assert CopyOptions(tile=[16, 256]) == CopyOptions(tile=(16, 256))
    plan = copy_class(CopyOptions(), "fp16", 2, "row", False, [16, 256], 132, False)
    assert plan == copy_class(CopyOptions(), "fp16", 2, "row", False, (16, 256), 132, False)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (("fp64", 2, "row", False), "dtype 'fp64' is not supported; tmakit knows fp16"),
        (("fp16", 1, "row", False), "rank is 1; it must be 2..5"),
        (("fp16", 2.5, "row", False), r"rank is 2.5 \(float\)"),
        (("fp16", 2, "diagonal", False), "major 'diagonal' is not one of row, col"),
        (("fp16", 2, "row", "yes"), r"transpose is 'yes' \(str\); it must be True or False"),
        ((np.float16, 2, "row", False), "dtype is .* pass a name such as 'fp16'"),
    ],
)
def test_copy_class_names_a_wrong_argument(arguments, message):
    dtype, rank, major, transpose = arguments
    with pytest.raises(TmaConfigError, match=message):
        copy_class(CopyOptions(), dtype, rank, major, transpose, (16, 256), 132, False)


def test_a_tile_whose_staging_leaves_no_stage_says_so_and_names_a_smaller_tile():
    with pytest.raises(TmaConfigError) as refused:
        copy_class(CopyOptions(), "fp16", 2, "row", True, (256, 256), 132, False)
    message = str(refused.value)
    assert "one stage of 131072 bytes" in message and "two staging tiles (262144 bytes)" in message
    assert "use a smaller tile, e.g. (128, 128)" in message and "-1" not in message


# -- overlap: what torch's copy_ refuses, tmakit refuses; disjoint slices of one tensor pass -------------
def partial_overlap(*args) -> bool:
    return overlap_verdict(*args) != "disjoint"


def test_partial_overlap_is_exact_for_slices_of_one_tensor():
    shape, rows = (64, 64), ((64, 1), 0)  # element strides, base address (bytes)
    assert partial_overlap(shape, rows, ((64, 1), 64 * 2), 2)  # 32 elements on: the rows interleave
    assert partial_overlap(shape, rows, ((64, 1), 2), 2)  # one element on
    assert not partial_overlap(shape, rows, rows, 2)  # the very same view
    assert not partial_overlap(shape, ((128, 1), 0), ((128, 1), 64 * 2), 2)  # left and right halves
    assert not partial_overlap(shape, rows, ((64, 1), 64 * 64 * 2), 2)  # back to back
    assert partial_overlap(shape, rows, ((1, 64), 0), 2)  # the transpose into its own memory
    assert partial_overlap(shape, rows, ((64, 1), 1), 2)  # half an element on


@pytest.fixture
def stub_copies(monkeypatch):
    """copy_'s dispatch with a launcher that records its calls (no compile, no GPU)."""
    pytest.importorskip("torch")
    calls = []

    def launch(dst, src):
        calls.append((src.data_ptr(), dst.data_ptr()))

    launcher = Launcher(launch, shape_generic=True)
    dispatch = Dispatch(lambda dst, src, options, facts: launcher, copies_call.check_copy_tensors)

    def copy_(dst, src, tile=None, stages=None, **options):
        return dispatch.call(dst, src, tile, stages, options)

    return SimpleNamespace(copy_=copy_, calls=calls)


def test_copy_refuses_a_destination_that_partly_overlaps_its_source(stub_copies):
    import torch

    memory = torch.empty(4160, dtype=torch.float16)
    with pytest.raises(
        TmaConfigError, match=r"dst \(strides \(64, 1\)\) partly overlaps src .*src.clone\(\)"
    ):
        stub_copies.copy_(memory[64:].view(64, 64), memory[:4096].view(64, 64))
    assert stub_copies.calls == []
    square = torch.empty(64, 128, dtype=torch.float16)
    stub_copies.copy_(square[:, :64], square[:, 64:])  # disjoint halves: served
    stub_copies.copy_(square, square)  # the very same view: served
    for _ in range(3):  # the fast path too compares addresses: a shifted call is refused every time
        stub_copies.copy_(memory[:4096].view(64, 64), memory[:4096].view(64, 64))
        with pytest.raises(TmaConfigError, match="partly overlaps"):
            stub_copies.copy_(memory[64:].view(64, 64), memory[:4096].view(64, 64))
    assert len(stub_copies.calls) == 5


def test_meeting_spans_of_different_layouts_go_to_the_fallback_a_proven_overlap_is_refused():
    """Where only an element-wise check could tell (the layouts differ), the fallback (torch's
    copy_, which checks each element) serves the call; two slices of one layout that share memory
    are refused by tmakit's own rule, with a fallback or without."""
    torch = pytest.importorskip("torch")

    launched, fell_back = [], []

    launcher = Launcher(lambda dst, src: launched.append(src.data_ptr()), shape_generic=True)
    dispatch = Dispatch(
        lambda dst, src, options, facts: launcher,
        copies_call.check_copy_tensors,
        fallback=Launcher(lambda d, s: fell_back.append(d.copy_(s))),
    )
    memory = torch.arange(64 * 2 * 64, dtype=torch.float32).view(64, 2, 64)
    dst, src = memory[:, 0, :], memory[:, 1, :].t()  # interleaved rows: disjoint, spans meet
    expected = src.clone()
    dispatch.call(dst, src, None, None, {})
    assert len(fell_back) == 1 and launched == [] and torch.equal(dst, expected)
    strict = Dispatch(lambda dst, src, options, facts: launcher, copies_call.check_copy_tensors)
    with pytest.raises(TmaConfigError, match="partly overlaps"):  # no fallback: tmakit's own rule
        strict.call(dst, src, None, None, {})
    flat = torch.empty(4160, dtype=torch.float16)
    with pytest.raises(TmaConfigError, match="partly overlaps"):
        dispatch.call(flat[64:].view(64, 64), flat[:4096].view(64, 64), None, None, {})
    assert len(fell_back) == 1 and launched == []


def test_an_unhashable_option_is_named_through_copy_(stub_copies):
    import torch

    src = torch.empty(64, 64, dtype=torch.float16)
    with pytest.raises(TmaConfigError, match=r"copy option store_hint is \{\} \(dict\)"):
        stub_copies.copy_(torch.empty_like(src), src, store_hint={})
    stub_copies.copy_(torch.empty_like(src), src, tile=[16, 64])  # a list tile is the tuple it means
    assert len(stub_copies.calls) == 1


# -- unusual tensors ----------------------------------------------------------------------------------
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_nested_and_quantized_tensors_are_refused_by_every_entry():
    import torch

    nested = torch.nested.nested_tensor([torch.zeros(2, 16), torch.zeros(3, 16)])
    quantized = torch.quantize_per_tensor(torch.zeros(16, 16), 0.1, 0, torch.qint8)
    index = torch.tensor([0])
    tmakit.gather_rows(torch.eye(4), index)  # a plain call first: the repeated-call lookup is armed
    for tensor, rule in (
        (nested, r"nested tensor .*\.unbind\(\)"),
        (quantized, r"quantized tensor .*int_repr"),
    ):
        for call in (
            lambda t: tmakit.config_for(t),
            lambda t: tmakit.copy(t, strict=True),
            lambda t: tmakit.copy_(t, t, strict=True),
            lambda t: tmakit.load_tiles(t),
            lambda t: tmakit.add_(t, t),
            lambda t: tmakit.im2col(t, 1),
            lambda t: tmakit.gather_rows(t, index),
            lambda t: tmakit.gather_rows(torch.eye(4), index, t),
            lambda t: tmakit.index_add_(t, index, t),
        ):
            with pytest.raises(TmaConfigError, match=rule):
                call(tensor)
    # Not strict, torch's copy_ serves what TMA cannot address: a quantized tensor's copy
    copied = torch.empty_like(quantized)
    assert tmakit.copy_(copied, quantized) is copied and torch.equal(copied.int_repr(), quantized.int_repr())
    assert tmakit.copy_path(copied, quantized).path == "torch"


@needs_torch
def test_padded_empty_refuses_what_no_tensor_can_span_and_a_device_torch_lacks():
    import torch

    with pytest.raises(
        TmaConfigError, match=r"spans \d+ bytes; a tensor can span at most 9223372036854775807"
    ):
        tmakit.padded_empty((2**62, 2**62), torch.float16, device="meta")
    assert tmakit.padded_empty((1000, 777), torch.bfloat16, device="meta").stride() == (784, 1)
    if not torch.cuda.is_available():
        with pytest.raises(TmaConfigError, match="padded_empty cannot allocate on device 'cuda'"):
            tmakit.padded_empty((4, 4), torch.float16)
    for index in (2**63, -1):  # past torch's 64-bit index, or negative: torch's ValueError and RuntimeError
        with pytest.raises(TmaConfigError, match=f"padded_empty cannot allocate on device {index}"):
            tmakit.padded_empty((4, 4), torch.float16, device=index)


# -- the fakes refuse what the ops refuse ---------------------------------------------------------------
@needs_torch
def test_the_fakes_refuse_mismatched_pairs_and_layouts_the_ops_refuse():
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    import tmakit.ops  # noqa: F401  (registers the ops)

    with FakeTensorMode():
        a = torch.empty(64, 64, dtype=torch.float16, device="cuda")
        b = torch.empty(64, 32, dtype=torch.float16, device="cuda")
        expanded = torch.empty(1, 64, dtype=torch.float16, device="cuda").expand(64, 64)
        with pytest.raises(TmaConfigError, match=r"copy_: destination is \(64, 64\) .* source \(64, 32\)"):
            torch.ops.tmakit.copy_(a, b)
        with pytest.raises(TmaConfigError, match=r"reduce_into_: destination is \(64, 64\)"):
            torch.ops.tmakit.reduce_into_(a, b)
        with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\)"):
            torch.ops.tmakit.copy(expanded)
        with pytest.raises(TmaConfigError, match=r"stride of dim 0 is 0 \(a broadcast view\)"):
            torch.ops.tmakit.copy_(a, expanded)
        with pytest.raises(TmaConfigError, match="bulk copy of .* needs both tensors compact"):
            torch.ops.tmakit.copy_(a, a.t(), "bulk")
        odd = torch.empty(3, 5, 7, dtype=torch.float16, device="cuda")  # 105 elements: no rows view
        with pytest.raises(TmaConfigError, match="bulk copy of"):
            torch.ops.tmakit.copy(odd, "bulk")
        assert torch.ops.tmakit.copy(a).shape == (64, 64)
        torch.ops.tmakit.copy_(a, a.t())  # a layout change the op serves
        rows = torch.empty(2, 3, 4, 8, 16, 2, dtype=torch.float16, device="cuda")  # rank 6: a rows view only
        torch.ops.tmakit.copy_(torch.empty_like(rows), rows, "as_rows")
