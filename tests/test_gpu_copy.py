"""TMA store and tmakit.copy on the device: a 100-configuration random sweep (every dtype x
swizzle x layout cell, partial tiles, 1/2/4 stages, persistent or not) and the torch API."""

import importlib
import math
import random

import pytest

import tmakit
from tmakit import LoadPlan, TmaConfigError
from tmakit.check.sweep import sweep_configs
from tmakit.plan import CopyPlan, PipelinePlan

pytestmark = pytest.mark.gpu


def test_a_random_sweep_of_copies_verifies():
    from tmakit.check.run import verify_copy

    rng = random.Random(6)
    for config in sweep_configs(100, seed=6):
        load = LoadPlan(config)
        stages = min(rng.choice((1, 2, 4)), PipelinePlan(load, stages=1).max_stages)  # large tiles: fewer fit
        pipeline = PipelinePlan(load, stages=stages, persistent=rng.random() < 0.5)
        verdict = verify_copy(CopyPlan(pipeline), hang_guard=True)
        assert verdict.ok, f"{config}: {verdict}"


def test_copy_api_on_torch_tensors():
    import torch

    x = torch.randn(1000, 776, device="cuda").to(torch.bfloat16)
    y = tmakit.copy(x)
    assert y.data_ptr() != x.data_ptr() and torch.equal(y.view(torch.int16), x.view(torch.int16))
    odd = tmakit.padded_empty((3, 999, 777), torch.float16)
    odd.copy_(torch.randn(3, 999, 777, device="cuda"))
    out = tmakit.padded_empty((3, 999, 777), torch.float16)
    assert tmakit.copy_(out, odd) is out and torch.equal(out, odd)
    with pytest.raises(TmaConfigError, match="they must match"):
        tmakit.copy_(torch.empty(10, 16, device="cuda", dtype=torch.bfloat16), x)


@pytest.mark.parametrize("specialised", [False, True], ids=["shape-generic", "shape-specialised"])
def test_a_repeated_copy_still_meets_each_tensor_on_its_own_terms(specialised):
    """`copy_` first tries the compiled function that served the last calls (shape-generic: pinned
    to the shape and strides it checked; specialised: its compiled function checks its arguments
    itself): another shape, layout, dtype (of the same width: a bit copy either way), misaligned
    pointer or mismatched destination after it must still be copied exactly or get a clear error."""
    import torch

    copies_api = importlib.import_module("tmakit.copies.api")
    dispatch = copies_api._SPECIALISED_COPIES if specialised else copies_api.copy_dispatch()
    copy_ = copies_api.specialised_copy_ if specialised else tmakit.copy_

    def poisoned_like(x):  # x's shape and strides over memory filled with 0xFF bytes
        extent = 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride(), strict=True))
        memory = torch.full((extent * x.element_size(),), 0xFF, dtype=torch.uint8, device="cuda")
        return memory.view(x.dtype).as_strided(x.shape, x.stride())

    def bits(x):
        return x.contiguous().view(torch.uint8)

    def position_dependent(shape, dtype):
        return (torch.arange(math.prod(shape), device="cuda") % 1021 - 510).view(shape).to(dtype)

    half = position_dependent((256, 512), torch.float16)
    sources = [
        half,
        position_dependent((256, 1024), torch.float16),  # another shape
        half.view(torch.bfloat16),  # the same bits as another dtype of the same width
        byte := position_dependent((256, 1024), torch.int8),
        byte.view(torch.uint8),  # 1-byte types: four codes of one width
        byte.view(torch.float8_e4m3fn),
        byte.view(torch.float8_e5m2),
        position_dependent((512, 256), torch.float16).t(),  # a column-major view
        tmakit.padded_empty((255, 511), torch.float16).copy_(half[:255, :511]),  # padded strides
        half,  # back to the first
    ]
    # Three calls each: the first meets the launcher the last configuration left to be tried
    # first, the second makes its own that launcher, the third is served by it.
    for source in sources * 2:
        for streak in dispatch.streaks():  # each rejection doubled it; 2 for this test
            streak.needed = 2
        for _ in range(3):
            out = poisoned_like(source)
            assert copy_(out, source) is out
            torch.cuda.synchronize()
            assert torch.equal(bits(out), bits(source)), (source.shape, source.stride(), source.dtype)
    storage = torch.empty(256 * 512 + 8, dtype=torch.float16, device="cuda")
    # (destination, the strict refusal, whether torch's copy_ serves it when not strict)
    for wrong, message, served in [
        (storage[1 : 1 + 256 * 512].view(256, 512), "16", True),  # 2 bytes past a 16-byte boundary
        (torch.empty(256, 512, dtype=torch.float32, device="cuda"), "they must match", True),
        (torch.empty(256, 256, dtype=torch.float16, device="cuda"), "they must match", False),
    ]:
        for _ in range(64):  # enough calls in a row for half's launcher to be tried first again
            copy_(poisoned_like(half), half)
        key = (None, None)  # no options
        tried_first = dispatch.tried_first()[key]
        if specialised:
            assert dispatch.streak(key).launcher is tried_first
        if served and not specialised:  # the fallback: torch's copy_ (a dtype change converts)
            expected = wrong.clone().copy_(half)
            assert copy_(wrong, half) is wrong
            torch.cuda.synchronize()
            assert torch.equal(wrong, expected)
        else:
            with pytest.raises(TmaConfigError, match=message):
                copy_(wrong, half)
        if not specialised:
            with pytest.raises(TmaConfigError, match=message):
                tmakit.copy_(wrong, half, strict=True)


def test_compact_tensors_copy_as_rows_of_their_memory():
    """Contiguous tensors of any shape through the rows view; sizes from a few rows to 64 MiB, 1-,
    2- and 4-byte types, bit-exact, destination poisoned."""
    import torch

    for shape, dtype in [
        ((3, 1000, 512), torch.float16),
        ((2048, 256), torch.bfloat16),
        ((64, 1024, 512), torch.float16),
        ((7, 48), torch.int8),
        ((4096, 1000), torch.float32),
        ((5, 3, 128, 96), torch.float8_e4m3fn),
    ]:
        numel = math.prod(shape)  # position-dependent values: a misplaced run shows
        source = (torch.arange(numel, device="cuda") % 251 - 125).view(shape).to(dtype)
        found = torch.empty(shape, dtype=dtype, device="cuda")
        found.view(torch.uint8).fill_(0xFF)  # poison
        tmakit.copy_(found, source, as_rows=True)
        assert torch.equal(found.view(torch.uint8), source.view(torch.uint8)), (shape, dtype)


def test_bulk_copies_move_every_byte():
    """`bulk=True`: compact tensors copied as contiguous runs by non-tensor bulk copies, every
    byte compared, destination poisoned; sizes from one run to 64 MiB, 1-, 2- and 4-byte types,
    last runs shorter than a tile, tiles of 1 to 256 rows, 1 to 8 stages."""
    import torch

    for shape, dtype, knobs in [
        ((3, 1000, 512), torch.float16, {}),
        ((2048, 256), torch.bfloat16, {"tile": (16, 256), "stages": 8}),
        ((64, 1024, 512), torch.float16, {}),
        ((7, 48), torch.int8, {}),
        ((4096, 1000), torch.float32, {"tile": (3, 256), "stages": 1}),  # 16000 rows of 256: last run 1 row
        ((5, 3, 128, 96), torch.float8_e4m3fn, {"stages": 2, "store_depth": 1}),
        ((1_000_016,), torch.float16, {"tile": (256, 16)}),  # 62501 rows of 16: last run 37 rows
        ((4099, 256), torch.float16, {"tile": (16, 256), "blocks_per_sm": 2}),
    ]:
        numel = math.prod(shape)  # position-dependent values: a misplaced run shows
        source = (torch.arange(numel, device="cuda") % 251 - 125).view(shape).to(dtype)
        found = torch.empty(shape, dtype=dtype, device="cuda")
        found.view(torch.uint8).fill_(0xFF)  # poison
        tmakit.copy_(found, source, bulk=True, **knobs)
        torch.cuda.synchronize()
        assert torch.equal(found.view(torch.uint8), source.view(torch.uint8)), (shape, dtype, knobs)
    with pytest.raises(TmaConfigError, match="compact"):
        strided = torch.empty(64, 1000, device="cuda")[:, :512]
        tmakit.copy_(strided, torch.ones(64, 512, device="cuda"), bulk=True)


def test_a_random_sweep_of_transposing_copies_verifies():
    """Column-major sources into row-major destinations and back, every dtype, partial tiles,
    batches, 1-8 consumer warps, 1-4 stages: every element compared, destination poisoned."""
    from tmakit.check.run import verify_copy
    from tmakit.check.sweep import transpose_configs

    rng = random.Random(7)
    for config in transpose_configs(60, seed=7):
        load = LoadPlan(config)
        stages = rng.choice((1, 2, 4))
        pipeline = PipelinePlan(
            load, stages=stages, consumer_warps=rng.choice((1, 2, 4, 8)), persistent=rng.random() < 0.5,
        )  # fmt: skip
        verdict = verify_copy(CopyPlan(pipeline, transpose=True), hang_guard=True)
        assert verdict.ok, f"{config} {pipeline.stages} stages x{pipeline.consumer_warps}w: {verdict}"


def test_layout_changing_copies_through_the_api():
    import torch

    bits = lambda t: t.view(torch.int16)  # noqa: E731
    x = torch.randn(1000, 776, device="cuda").to(torch.bfloat16)
    column_major = tmakit.copy_(torch.empty(776, 1000, device="cuda", dtype=torch.bfloat16).t(), x)
    assert column_major.stride() == (1, 1000) and torch.equal(bits(column_major), bits(x))
    back = tmakit.copy_(torch.empty(1000, 776, device="cuda", dtype=torch.bfloat16), column_major)
    assert torch.equal(bits(back), bits(x))
    odd = tmakit.padded_empty((3, 999, 777), torch.float16, major="col")
    odd.copy_(torch.randn(3, 999, 777, device="cuda"))
    row_major = tmakit.padded_empty((3, 999, 777), torch.float16)
    assert torch.equal(bits(tmakit.copy_(row_major, odd)), bits(odd))
    for dtype in (torch.float32, torch.int8, torch.float8_e4m3fn):
        source = torch.randint(-100, 100, (512, 384), device="cuda").to(dtype).t()  # (384, 512) column-major
        found = tmakit.copy_(torch.empty(384, 512, device="cuda", dtype=dtype), source)
        assert torch.equal(found.view(torch.uint8), source.contiguous().view(torch.uint8)), dtype


@pytest.mark.parametrize("graph_memcpy_most", [None, 0], ids=["memcpy-node", "element-wise-in-graphs"])
def test_a_copy_past_the_l2_is_the_drivers_eagerly_and_exact_in_a_graph(monkeypatch, graph_memcpy_most):
    """A row-major copy of one layout past the L2 takes torch's copy_ eagerly and, captured in a
    CUDA graph, a memcpy node up to `GRAPH_MEMCPY_MOST_BYTES` and torch's element-wise kernel on
    the same bits past it (here the limit is also lowered to 0, so that kernel serves the captured
    copies, an odd byte count among them):
    bit-exact both ways into a poisoned destination; strict stays TMA's."""
    import torch

    from tmakit.copies import api as copies_api
    from tmakit.copies import call as copies_call
    from tmakit.copies import views as copy_views
    from tmakit.copies.plan import BY_THE_DRIVER
    from tmakit.runtime.dispatch import Dispatch

    if graph_memcpy_most is not None:  # launchers made from now on, by a dispatch of their own
        monkeypatch.setattr(copy_views, "GRAPH_MEMCPY_MOST_BYTES", graph_memcpy_most)
        fresh = Dispatch(copies_call.routed_copy_launcher, copies_call.check_copy_tensors,
                             fallback=copies_call.TORCH_COPY, guard_of=copies_api.pair_guard)  # fmt: skip
        monkeypatch.setattr(copies_api, "_COPIES", fresh)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    cases = ((l2 // 2 + 4096, torch.float16), (l2 // 2 + 8, torch.bfloat16), (l2 + 17, torch.uint8))
    for numel, dtype in cases:
        source = (torch.arange(numel, device="cuda") % 251 - 125).to(dtype)
        found = torch.empty_like(source)
        route = tmakit.copy_path(found, source)
        assert route.path == "torch" and route.reason == BY_THE_DRIVER, (numel, route)
        for strict in (False, True) if dtype is torch.float16 else (False,):  # strict: no tail by torch
            found.view(torch.uint8).fill_(0xFF)
            tmakit.copy_(found, source, strict=strict)
            assert torch.equal(found.view(torch.uint8), source.view(torch.uint8)), (numel, dtype, strict)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tmakit.copy_(found, source)
        source.add_(1)
        found.view(torch.uint8).fill_(0xFF)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(found.view(torch.uint8), source.view(torch.uint8)), (numel, dtype, "graph")


def test_copy_runs_on_the_callers_stream_and_in_cuda_graphs():
    """The TVM-FFI launch takes torch's current stream: a copy queued behind other work on a side
    stream waits for it, and a captured copy replays (with the source changed in between)."""
    import torch

    x = torch.randn(2048, 2048, device="cuda").to(torch.float16)
    side = torch.cuda.Stream()
    y = torch.empty_like(x)
    with torch.cuda.stream(side):
        torch.cuda._sleep(10_000_000)  # keeps the side stream busy while the copy is queued behind it
        x.mul_(2)
        tmakit.copy_(y, x)
    side.synchronize()
    assert torch.equal(y, x)
    z = torch.empty_like(x)
    tmakit.copy_(z, x)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tmakit.copy_(z, x)
    x.add_(1)
    z.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, x)


def test_programmatic_dependent_launches_keep_back_to_back_copies_ordered():
    """Copies launched with PDL start before the previous kernel ends: each must still see what
    the previous one wrote (a chain) and not overwrite what it still reads (a -> b, then x -> a),
    on a stream and replayed in a CUDA graph."""
    import torch

    x = (torch.arange(2048 * 4096, device="cuda") % 4093).view(2048, 4096).half()
    chain = [torch.empty_like(x) for _ in range(6)]
    old = (torch.arange(2048 * 4096, device="cuda") % 3001 + 7).view(2048, 4096).half()
    a, b = old.clone(), torch.empty_like(x)

    def copies():
        source = x
        for buffer in chain:
            tmakit.copy_(buffer, source, pdl=True)
            source = buffer
        tmakit.copy_(b, a, pdl=True)
        tmakit.copy_(a, x, pdl=True)  # overwrites what the copy before it reads

    for buffer in (*chain, b):
        buffer.view(torch.int16).fill_(-1)  # poison
    copies()
    torch.cuda.synchronize()
    assert torch.equal(chain[-1], x) and torch.equal(b, old) and torch.equal(a, x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        copies()
    for _ in range(3):
        a.copy_(old)
        for buffer in (*chain, b):
            buffer.view(torch.int16).fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(chain[-1], x) and torch.equal(b, old) and torch.equal(a, x)


def test_the_disk_cache_serves_a_fresh_process(tmp_path):
    """Two processes copy the same configuration: the first compiles and keeps the kernel on
    disk, the second loads it (no compilation) and copies correctly."""
    import os
    import subprocess
    import sys

    script = (
        "import time, torch, tmakit\n"
        "x = torch.randn(3000, 1000, device='cuda').to(torch.float16).t()\n"
        "y = torch.empty(1000, 3000, device='cuda', dtype=torch.float16)\n"
        "start = time.perf_counter(); tmakit.copy_(y, x); torch.cuda.synchronize()\n"
        "first = time.perf_counter() - start\n"
        "assert torch.equal(y, x)\n"
        "(launcher,) = tmakit.copies.api.copy_dispatch().launchers()\n"
        "print(round(launcher.compiled.compile_seconds, 3), launcher.compiled.from_disk, round(first, 3))\n"
    )
    env = {**os.environ, "TMAKIT_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    (first_build, first_from_disk, first_seconds), (second_build, second_from_disk, second_seconds) = (
        run.stdout.split()[-3:] for run in runs
    )
    assert (first_from_disk, second_from_disk) == ("False", "True")
    assert float(second_build) < float(first_build)
    print(
        f"first process: compiled in {first_build} s (first call {first_seconds} s); fresh process: "
        f"loaded from disk in {second_build} s (first call {second_seconds} s)"
    )


def test_overlapping_views_copy_exactly_or_are_refused_on_every_path():
    """Disjoint halves of one tensor copy exactly; a destination partly overlapping its source is
    refused on the lookup and on the fast path alike (the call repeated, then shifted)."""
    import torch

    square = torch.arange(256 * 512, device="cuda", dtype=torch.int32).view(256, 512).to(torch.float32)
    expected = square.clone()
    expected[:, :256] = expected[:, 256:]
    for _ in range(3):  # the third call goes through the fast path
        tmakit.copy_(square[:, :256], square[:, 256:])
    assert torch.equal(square, expected)
    memory = torch.arange(4160 * 2, device="cuda", dtype=torch.int16).view(torch.float16)
    before = memory.clone()
    same = memory[:4096].view(64, 64)
    for _ in range(3):
        tmakit.copy_(same, same)  # the very same view: every element copied onto itself
        with pytest.raises(TmaConfigError, match="partly overlaps"):
            tmakit.copy_(memory[64 : 64 + 4096].view(64, 64), memory[:4096].view(64, 64))
    torch.cuda.synchronize()
    assert torch.equal(memory.view(torch.int16), before.view(torch.int16))


def test_options_are_checked_on_every_path_as_on_a_cpu():
    """Options the planner refuses raise whatever path then serves the pair (here the driver's
    memcpy past the L2), with the message the same call on CPU tensors gets, and nothing is
    written."""
    import torch

    big = 2 * torch.cuda.get_device_properties(0).L2_cache_size // 4  # fp32 elements past the L2
    dst, src = torch.zeros(big // 1024, 1024, device="cuda"), torch.ones(big // 1024, 1024, device="cuda")
    assert tmakit.copy_path(dst, src).reason.startswith("a row-major copy of one layout past the L2")
    for options in ({"stages": 1000}, {"tile": (7, 7)}, {"stages": 0}):
        with pytest.raises(TmaConfigError) as on_gpu:
            tmakit.copy_(dst, src, **options)
        with pytest.raises(TmaConfigError) as on_cpu:
            tmakit.copy_(dst[:64].cpu(), src[:64].cpu(), **options)
        assert str(on_gpu.value) == str(on_cpu.value)
    torch.cuda.synchronize()
    assert not dst.any()


def test_non_blocking_copies_between_the_host_and_the_gpu_are_torchs():
    """`non_blocking=True`, as torch's copy_: a pinned host tensor to the GPU and back by torch's
    copy_ (two devices), every byte; on one GPU the TMA copy, as without it."""
    import torch

    host = torch.arange(1000 * 776, dtype=torch.int32).view(1000, 776).pin_memory()
    gpu = torch.full((1000, 776), -1, dtype=torch.int32, device="cuda")
    assert tmakit.copy_path(gpu, host).path == "torch"
    assert tmakit.copy_(gpu, host, non_blocking=True) is gpu
    back = torch.full((1000, 776), -1, dtype=torch.int32).pin_memory()
    tmakit.copy_(back, gpu * 3, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(gpu.cpu(), host) and torch.equal(back, host * 3)
    transposed = torch.full((776, 1000), -1, dtype=torch.int32, device="cuda")
    assert tmakit.copy_path(transposed, gpu.t()).by_tma
    tmakit.copy_(transposed, gpu.t(), non_blocking=True)
    assert torch.equal(transposed, gpu.t())
    with pytest.raises(TmaConfigError, match="no TMA path"):
        tmakit.copy_(gpu, host, non_blocking=True, strict=True)
