"""Shape-generic copies on a CPU: which classes a workload of many shapes compiles, the checks a
new shape of a compiled class still meets, and the kernels compiled for sm_90a with run-time
extents and strides (their PTX)."""

from __future__ import annotations

import random
import re

import pytest

from tmakit import TmaConfigError
from tmakit.api import tensors as api_tensors
from tmakit.config import LoadConfig
from tmakit.copies import api as copies_api
from tmakit.copies import call as copies_call
from tmakit.copies import plan as copies_plan
from tmakit.load.launch import compile_tile_load
from tmakit.plan import CopyOptions, LoadPlan, copy_class, copy_destination, stand_in_config
from tmakit.ptx import expect_tx_byte_counts
from tmakit.runtime.dispatch import CallTable, Dispatch
from tmakit.runtime.launch import Launcher, compile_copy


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the torch API needs torch (pip install 'tmakit[gpu]')")


class Classes:
    """Stand-in compiled classes: every `copy_launcher` call is a compile, recorded with its class;
    every launch is recorded with the tensors' shape and strides."""

    def __init__(self) -> None:
        self.compiled: list[tuple] = []
        self.launched: list[tuple] = []

    def copy_launcher(self, copy, destination, tensor_shape, device, shape_generic=False):
        self.compiled.append((copy, destination, shape_generic))

        def launch(dst, src):
            self.launched.append((tuple(src.shape), src.stride(), dst.stride()))

        return Launcher(launch, checks_arguments=True, shape_generic=shape_generic)


@pytest.fixture
def classes(torch, monkeypatch):
    """CPU tensors pass as GPU ones on an H200 (132 SMs, 60 MiB of L2) with TVM-FFI installed;
    compiles and launches are recorded, not run."""
    recorder = Classes()
    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(copies_call, "device_facts", lambda device: (132, 60 * 2**20))
    monkeypatch.setattr(copies_call, "tvm_ffi_available", lambda: True)
    monkeypatch.setattr(copies_call, "copy_launcher", recorder.copy_launcher)
    copies = Dispatch(copies_call.plan_copy, copies_call.check_copy_tensors)
    monkeypatch.setattr(copies_api, "_COPIES", copies)
    monkeypatch.setattr(copies_call, "_CLASSES", CallTable())
    return recorder


def padded(torch, rows, cols):
    """A row-major fp16 matrix with rows padded to 16 bytes; its memory is never touched."""
    pitch = -(-cols // 8) * 8
    return torch.empty_strided((rows, cols), (pitch, 1), dtype=torch.float16)


def test_a_hundred_random_shapes_compile_at_most_four_classes(classes, torch):
    rng = random.Random(20)
    for _ in range(100):
        rows, cols = rng.randint(1, 16384), rng.randint(8, 16384)
        src, dst = padded(torch, rows, cols), padded(torch, rows, cols)
        copies_api.copy_(dst, src)
    names = [
        f"{copy.load.config.dtype} {copy.load.config.major}-major rank {len(copy.load.config.shape)}, "
        f"tile {copy.load.config.tile}, {copy.ring.stages} stages, evict_first={copy.ring.evict_first}"
        for copy, _, _ in classes.compiled
    ]
    print("\n".join(names))
    assert len(classes.launched) == 100
    assert 1 <= len(classes.compiled) <= 4, names
    assert all(generic for _, _, generic in classes.compiled)
    # The classes differ only where the defaults depend on size: evict-first when both tensors fit
    # the L2; beyond it, compact tensors whose elements fill 256-wide rows copied as those rows.
    kinds = {(copy.ring.evict_first, copy.load.config.tile) for copy, _, _ in classes.compiled}
    assert len(kinds) == len(classes.compiled)
    rows_classes = [copy for copy, _, _ in classes.compiled if copy.load.config.tile == (64, 256)]
    assert len(rows_classes) == 1 and not rows_classes[0].ring.evict_first


def test_a_new_shape_breaking_a_rule_in_a_warm_class_raises_before_launch(classes, torch):
    good = padded(torch, 64, 64)
    copies_api.copy_(torch.empty_like(good), good)
    odd = torch.empty(64, 63, dtype=torch.float16)  # 126-byte rows: the class takes it, TMA does not
    with pytest.raises(TmaConfigError, match="src: global stride of dim 0 is 126 bytes"):
        copies_api.copy_(torch.empty_like(odd), odd)
    expanded = torch.empty(1, 64, dtype=torch.float16).expand(64, 64)
    with pytest.raises(TmaConfigError, match=r"src: stride of dim 0 is 0 \(a broadcast view\)"):
        copies_api.copy_(torch.empty(64, 64, dtype=torch.float16), expanded)
    assert len(classes.compiled) == 1 and len(classes.launched) == 1  # only the good copy launched


def test_an_extent_one_dim_gets_a_stride_tma_accepts(classes, torch):
    row = torch.empty(1, 777, dtype=torch.float16)  # a 1554-byte row stride that is never stepped
    copies_api.copy_(torch.empty_like(row), row)
    assert classes.launched == [((1, 777), (8, 1), (8, 1))]  # 16 bytes' worth stands in


def test_a_new_shape_of_a_known_class_is_only_checked(classes, torch, monkeypatch):
    """With the class seen once, a new shape goes through `known_class` (read off the tensors)
    and its own checks: no planning, no compile, and a bad stride is still refused."""

    class OnDevice0(torch.Tensor):  # a CPU tensor that reports device 0, as a CUDA tensor does
        def get_device(self):
            return 0

    def on_device0(tensor):
        return torch.Tensor._make_subclass(OnDevice0, tensor)

    first = on_device0(padded(torch, 64, 64))
    copies_api.copy_(on_device0(padded(torch, 64, 64)), first)

    def no_planning(*args, **kwargs):
        raise AssertionError("a new shape of a known class was planned again")

    monkeypatch.setattr(copies_plan, "copy_class", no_planning)  # the class's plan (its layout is read)
    for rows, cols in [(1000, 776), (3, 8), (2048, 4096)]:  # all in the class that fits L2
        copies_api.copy_(on_device0(padded(torch, rows, cols)), on_device0(padded(torch, rows, cols)))
    odd = on_device0(torch.empty(64, 63, dtype=torch.float16))
    with pytest.raises(TmaConfigError, match="src: global stride of dim 0 is 126 bytes"):
        copies_api.copy_(on_device0(torch.empty(64, 63, dtype=torch.float16)), odd)
    assert len(classes.compiled) == 1
    assert [shape for shape, _, _ in classes.launched] == [(64, 64), (1000, 776), (3, 8), (2048, 4096)]


@pytest.mark.parametrize("options", [{"as_rows": True}, {"bulk": True}], ids=["as_rows", "bulk"])
def test_a_new_shape_of_a_known_rows_view_class_is_only_checked(classes, torch, monkeypatch, options):
    """A rows view's class is found by what picks it too (its width and tile), so a compact
    copy's new shape of a seen rows class is checked, not planned or compiled again; a shape
    whose rows take another tile is another class."""

    class OnDevice0(torch.Tensor):  # a CPU tensor that reports device 0, as a CUDA tensor does
        def get_device(self):
            return 0

    def pair(elements):
        memory = torch.empty(2 * elements, dtype=torch.float16)
        return [torch.Tensor._make_subclass(OnDevice0, half.view(-1, 256)) for half in memory.chunk(2)]

    copies_api.copy_(*pair(256 * 4096), **options)  # 4096 rows of 512 bytes: 4 KiB tiles reach every SM
    planned = copies_plan.copy_class
    monkeypatch.setattr(copies_plan, "copy_class", lambda *a, **k: pytest.fail("a known rows class planned"))
    copies_api.copy_(*pair(256 * 8192), **options)  # twice the rows, the same tile: the same class
    assert len(classes.compiled) == 1 and len(classes.launched) == 2
    monkeypatch.setattr(copies_plan, "copy_class", planned)
    copies_api.copy_(*pair(256 * 40000), **options)  # rows enough for 32 KiB tiles: another class
    assert len(classes.compiled) == 2 and classes.compiled[0][0] != classes.compiled[1][0]


def test_the_plain_path_never_calls_a_shape_generic_kernel(monkeypatch):
    """Shape-generic kernels are called only through TVM-FFI, which reads each tensor's layout:
    the plain path's static-layout tensors would silently copy the wrong memory (seen on the H200)."""
    from tmakit.runtime import launch

    monkeypatch.setattr(launch, "tvm_ffi_available", lambda: False)
    copy = copy_class(CopyOptions(), "fp16", 2, "row", False, (16, 256), 132, True)
    with pytest.raises(ValueError, match="launch through TVM-FFI"):
        launch.copy_launcher(copy, None, None, "cpu", shape_generic=True)


@pytest.mark.parametrize(
    "rank, major, transpose, bulk",
    [(2, "row", False, False), (3, "col", False, False), (2, "col", True, False), (2, "row", False, True)],
    ids=["row", "rank3-col", "transpose", "bulk"],
)
def test_shape_generic_kernels_compile_for_sm90a(rank, major, transpose, bulk):
    tile = (128, 128) if transpose else (16, 256)
    options = CopyOptions(bulk=bulk)
    copy = copy_class(
        options, "fp16", rank, major, transpose, tile, 132, False, rows_width=256 if bulk else None
    )
    destination = copy_destination(copy) if transpose else None
    compiled = compile_copy(
        copy,
        keep_ptx=True,
        destination=destination,
        tensor_shape=(1, 256) if bulk else None,
        shape_generic=True,
    )
    ptx = compiled.ptx
    # The plan's byte count per stage (bulk: run-time, one per run), and a tile walk that divides
    # by the run-time tile counts through fast divisors: a multiply-high, no division instruction.
    if not bulk:
        assert set(expect_tx_byte_counts(ptx)) == {copy.load.expected_tx_bytes}
    assert "mul.hi.u32" in ptx
    assert not re.search(r"\bdiv\.[su](32|64)", ptx)


def test_a_shape_generic_tile_load_compiles_for_sm90a():
    plan = LoadPlan(stand_in_config(3, "bf16", (64, 64), "row", swizzle=128))
    compiled = compile_tile_load(plan, "store", keep_ptx=True, shape_generic=True)
    assert set(expect_tx_byte_counts(compiled.ptx)) == {plan.expected_tx_bytes}


def test_stand_in_configurations_are_valid_for_every_class():
    for rank in (2, 3, 5):
        for major in ("row", "col"):
            config = stand_in_config(rank, "fp8e4m3", (16, 256), major)
            assert LoadPlan(config).config == config
    assert stand_in_config(2, "fp16", (8, 256), "row", rows_width=256).shape == (16, 256)
    assert isinstance(stand_in_config(2, "fp16", (8, 256), "row"), LoadConfig)


def test_kernels_compiled_for_one_shape_refuse_more_than_2_to_the_32_elements():
    """On the H200 a shape-specialised kernel was exact at 2^32 elements and silently wrong at
    2^33 (benchmarks/probes/gpu_edges.py); the shape-generic ones were exact at 2^35."""
    from tmakit.plan import PipelinePlan

    over = LoadPlan(LoadConfig((2**29, 16), "uint8", (1, 16)))
    rule = r"8589934592 elements; a kernel compiled for one shape handles at most 4294967296 \(2\^32\)"
    with pytest.raises(TmaConfigError, match=rule):
        compile_tile_load(over)
    with pytest.raises(TmaConfigError, match="a kernel compiled for one shape"):
        compile_copy(CopyOptions().plan(over, False, 132, False))
    with pytest.raises(TmaConfigError, match="a kernel compiled for one shape"):
        from tmakit.load.launch import compile_pipelined_load

        compile_pipelined_load(PipelinePlan(over, 2, persistent=True))
    LoadPlan(LoadConfig((2**28, 16), "uint8", (1, 16))).check_specialised()  # 2^32: exact on the H200


def test_a_warm_class_refuses_a_tensor_without_a_stride_1_dim(classes, torch):
    good = padded(torch, 64, 64)
    copies_api.copy_(torch.empty_like(good), good)
    every_other = torch.empty(64, 128, dtype=torch.float16)[:, ::2]  # strides (128, 2)
    with pytest.raises(TmaConfigError, match=r"src: strides \(128, 2\) have no stride 1"):
        copies_api.copy_(torch.empty(64, 64, dtype=torch.float16), every_other)
    assert len(classes.launched) == 1


def test_run_time_tile_counts_fit_32_bit_integers():
    """The shape-generic kernels compute ceil(extent / tile) in 32-bit integers on the device."""
    from tmakit.plan import check_copy_shape

    copy = copy_class(CopyOptions(), "fp16", 2, "row", False, (16, 256), 132, False)
    with pytest.raises(TmaConfigError, match="tensor columns extent is 2147483640; .* at most 2147483392"):
        check_copy_shape(copy, (1, 2**31 - 8), ((2**31, 1), (2**31, 1)), (1, 1), 2)
    check_copy_shape(copy, (1, 2**31 - 256), ((2**31, 1), (2**31, 1)), (1, 1), 2)


def test_a_small_transposing_copy_takes_its_own_tile_and_class(classes, torch):
    """A layout-changing fp16 copy smaller than one default tile per SM takes 64 x 64 tiles
    (`plan.copy_defaults.SMALL_TRANSPOSE_TILES`), a class of its own; a larger one, and fp32, the
    default."""
    from tmakit.plan.copy_defaults import (
        SMALL_TRANSPOSE_TILES,
        TRANSPOSE_TILE_BYTES,
        copy_tile,
        small_transpose,
    )

    def transposing(rows, cols, dtype=torch.float16):
        src = torch.empty(cols, rows, dtype=dtype).t()  # column-major (rows, cols)
        copies_api.copy_(torch.empty(rows, cols, dtype=dtype), src)
        copy = classes.compiled[-1][0]
        return copy.load.config.tile

    assert transposing(512, 1024) == SMALL_TRANSPOSE_TILES[2] == (64, 64)  # 1 MiB
    assert transposing(256, 512) == (64, 64) and len(classes.compiled) == 1  # the small class again
    assert transposing(4096, 2048) == copy_tile("fp16", True) == (128, 128)  # 16 MiB
    assert len(classes.compiled) == 2
    assert transposing(512, 1024, torch.float32) == copy_tile("fp32", True)  # not measured: the default
    limit = 132 * TRANSPOSE_TILE_BYTES  # one 32 KiB tile per SM
    assert small_transpose(2, True, limit - 2, 132) and not small_transpose(2, True, limit, 132)
    assert not small_transpose(2, False, 1024, 132) and not small_transpose(2, True, None, 132)


def test_compact_copies_beyond_the_l2_are_copied_as_rows_whatever_came_first(classes, torch, monkeypatch):
    """A padded pair beyond the L2 compiles the tensors' own class; a compact pair of the same
    rank, dtype and size after it is not found as that class but copied as rows of its memory."""
    rows, cols = 8192, 4096  # 64 MiB of fp16: beyond the stand-in's 60 MiB L2 for two tensors
    src = padded(torch, rows, cols - 4)  # rows of 4092 elements 4096 apart
    copies_api.copy_(padded(torch, rows, cols - 4), src)
    compact = torch.empty(rows, cols, dtype=torch.float16)
    copies_api.copy_(torch.empty_like(compact), compact)
    (own, _, _), (as_rows, _, _) = classes.compiled
    assert own.load.config.tile == (16, 256) and as_rows.load.config.tile == (64, 256)
    assert as_rows.load.config.shape[-1] == 256 and len(classes.launched) == 2
    monkeypatch.setattr(api_tensors, "cuda_index", lambda tensor: 0)  # the route's stand-in GPU
    reason = copies_api.copy_path(torch.empty_like(compact), compact).reason
    assert reason.endswith("as rows of its memory: beyond the L2"), reason
    assert "rows" not in copies_api.copy_path(padded(torch, rows, cols - 4), src).reason
