"""Issue 3 on the CPU: every error before any launch, every dtype x swizzle x layout compiles."""

import numpy as np
import pytest

import tmakit
from tmakit import LoadConfig, LoadPlan, TmaConfigError
from tmakit.check.sweep import LAYOUTS, is_prime_or_one, sweep_configs
from tmakit.config import DTYPES, padded_strides
from tmakit.limits import SWIZZLE_MODES
from tmakit.load.launch import compile_tile_load
from tmakit.ptx import expect_tx_byte_counts, find_instructions


@pytest.fixture
def nothing_compiles(monkeypatch):
    """Any compile (and so any launch) during the test fails it."""

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was compiled for a configuration that should have been refused")

    monkeypatch.setattr("tmakit.runtime.compile.compile_kernel", refuse)


def aligned_array(shape, dtype, offset_bytes=0):
    """A numpy array at a chosen offset from a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(int(np.prod(shape)) * itemsize + 128, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    return raw[start : start + int(np.prod(shape)) * itemsize].view(dtype).reshape(shape)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: aligned_array((64, 64), np.float16, offset_bytes=8), "not 16-byte aligned"),
        (lambda: aligned_array((1000, 777), np.float16)[:, :], "stride of dim 0 is 1554 bytes"),
        (lambda: aligned_array((64, 64), np.float16)[:, ::2], "no stride 1"),
        (lambda: aligned_array((64, 64), np.float64), "dtype float64 is not supported"),
        (lambda: aligned_array((2, 2, 2, 2, 2, 16), np.float16), "6 dimensions"),
        (lambda: aligned_array((64,), np.float16), "1 dimensions"),
    ],
)
def test_tensors_tma_cannot_serve_are_refused_before_compiling(make, message, nothing_compiles):
    with pytest.raises(TmaConfigError, match=message):
        tmakit.config_for(make(), tile=(64, 64), on_gpu=False)


def test_host_tensor_is_refused_for_a_gpu_run(nothing_compiles):
    with pytest.raises(TmaConfigError, match="tensor is on cpu; TMA loads from GPU memory"):
        tmakit.config_for(aligned_array((64, 64), np.float16), tile=(64, 64))


@pytest.mark.parametrize(
    "config, message",
    [
        (LoadConfig((256, 256), "fp16", (64, 512)), "box dimension must be 1..256"),
        (LoadConfig((256, 256), "fp16", (64, 4)), "8 bytes; TMA needs a multiple of 16"),
        (
            LoadConfig((256, 256), "fp16", (64, 128), swizzle=128),
            "256 bytes; with the 128B swizzle it must be exactly 128 bytes",
        ),
        (LoadConfig((256, 256), "fp16", (64, 32), swizzle=128), "64 bytes; with the 128B swizzle"),
        (LoadConfig((256, 256), "fp16", (64, 64), swizzle=48), "not a TMA swizzle mode"),
        (LoadConfig((1, 384), "int8", (16, 128), 128), "rows extent is 1 but the tile's is 16"),
        (LoadConfig((132, 1), "fp8e4m3", (32, 32), 32, strides=(16, 1)), "columns extent is 1"),
        (LoadConfig((1024, 1024), "fp32", (256, 256)), "a Hopper block may have at most 232448"),
        (LoadConfig((777, 1000), "fp16", (64, 64), major="col"), "stride of dim 1 is 1554 bytes"),
    ],
)
def test_configs_tma_cannot_serve_are_refused(config, message, nothing_compiles):
    with pytest.raises(TmaConfigError, match=message):
        LoadPlan(config)


def test_transposed_view_is_read_as_column_major():
    storage = aligned_array((256, 128), np.float16)  # rows of 128: its transpose is 128 x 256, col-major
    config = tmakit.config_for(storage.T, tile=(64, 32), on_gpu=False)
    assert config.shape == (128, 256) and config.strides == (1, 128) and config.major == "col"
    assert LoadPlan(config).rows_contiguous


def test_padded_strides_reach_odd_extents():
    assert padded_strides((1000, 777), 2) == (784, 1)
    assert padded_strides((3, 1000, 777), 2) == (784000, 784, 1)
    assert padded_strides((1000, 777), 2, "col") == (1, 1000)
    assert padded_strides((7, 5), 1, "col") == (1, 16)
    LoadPlan(LoadConfig((1000, 777), "bf16", (64, 64), strides=padded_strides((1000, 777), 2)))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("swizzle", SWIZZLE_MODES)
@pytest.mark.parametrize("major", LAYOUTS)
def test_every_dtype_swizzle_layout_compiles_for_sm90a(dtype, swizzle, major):
    itemsize = DTYPES[dtype].nbytes
    inner = (swizzle or 128) // itemsize  # a swizzled box is one span wide
    tile = (16, inner) if major == "row" else (inner, 16)
    shape = (3, 300, 520)
    plan = LoadPlan(LoadConfig(shape, dtype, tile, swizzle, major, padded_strides(shape, itemsize, major)))
    ptx = compile_tile_load(plan, keep_ptx=True).ptx
    assert find_instructions(ptx)["cp.async.bulk.tensor"].opcode.startswith("cp.async.bulk.tensor.3d")
    assert find_instructions(ptx)["cp.async.bulk.tensor"].count == 1
    assert expect_tx_byte_counts(ptx) == [plan.expected_tx_bytes]


@pytest.mark.parametrize("shape", [(2, 64, 128), (2, 2, 2, 64, 128)])
def test_rank_3_and_5_compile_to_3d_and_5d_copies(shape):
    plan = LoadPlan(LoadConfig(shape, "fp16", (64, 64), 128))
    opcode = find_instructions(compile_tile_load(plan, keep_ptx=True).ptx)["cp.async.bulk.tensor"].opcode
    assert opcode.startswith(f"cp.async.bulk.tensor.{len(shape)}d")


def test_sweep_covers_every_cell_and_the_awkward_shapes():
    configs = sweep_configs(200, seed=7)
    cells = {(c.dtype, c.swizzle, c.major) for c in configs}
    assert len(cells) == len(DTYPES) * len(SWIZZLE_MODES) * len(LAYOUTS)
    assert sum(LoadPlan(c).has_partial_tiles for c in configs) >= 0.3 * len(configs)
    assert sum(any(is_prime_or_one(e) for e in c.shape[-2:]) for c in configs) >= 20
    assert {len(c.shape) for c in configs} == {2, 3, 4, 5}
    assert sweep_configs(200, seed=7) == configs  # the seed reproduces the sweep
