"""The load-add-store ring (`reduce_by="ring"`): its plan (two tiles a stage, four consumer warps,
what it refuses), its sm_90a PTX (both tiles loaded on one barrier, the add, the fence before the
consumer warps meet, one plain TMA store), the rule table that chooses it, and the API's route to
it. The device run is tests/test_gpu_reduce.py's."""

from __future__ import annotations

import re

import pytest

from route_facts import flat_pair
from tmakit import TmaConfigError
from tmakit.config import LoadConfig
from tmakit.limits import SMEM_PER_BLOCK
from tmakit.plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan
from tmakit.plan.copy_defaults import copy_tile
from tmakit.plan.route import BeyondL2
from tmakit.ptx import expect_tx_byte_counts
from tmakit.reduce import plan as plan_reduce
from tmakit.reduce.launch import compile_reduce
from tmakit.reduce.plan import (
    RING_CONSUMER_WARPS,
    RING_DTYPES,
    ReducePlan,
    chosen_kernel,
    reduce_class,
    reduce_kernel,
)

RING_PAIRS = [("add", dtype) for dtype in RING_DTYPES["add"]]


def ring_class(dtype: str, **options) -> ReducePlan:
    tile = options.get("tile") or copy_tile(dtype)
    return reduce_class(
        CopyOptions(**options), "add", dtype, 2, "row", False, tile, 132, False, kernel="ring"
    )


# -- the plan ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", RING_DTYPES["add"])
def test_a_ring_stage_holds_both_tiles_and_four_warps_add_them(dtype):
    ring = ring_class(dtype)
    tile_bytes = ring.load.expected_tx_bytes
    assert ring.by_ring and ring.copy.ring.consumer_warps == RING_CONSUMER_WARPS
    assert ring.expected_tx_bytes == 2 * tile_bytes
    assert ring.smem_bytes == ring.copy.ring.barrier_bytes + 2 * ring.copy.ring.ring_bytes <= SMEM_PER_BLOCK
    assert not ring.copy.transpose
    assert "load-add-store ring" in ring.summary()
    store = reduce_class(CopyOptions(), "add", dtype, 2, "row", False, copy_tile(dtype), 132, False)
    assert store.kernel == "store" and store.copy.ring.consumer_warps == 1  # the copy's, unchanged


def test_a_deep_ring_of_large_tiles_keeps_the_stages_that_fit_two_tiles_unless_asked():
    ring = ring_class("fp32", tile=(64, 128))  # 32 KiB tiles: the copy's default depth does not fit twice
    stage = ring.copy.ring.stage_bytes
    assert (
        ring.copy.ring.stages * (2 * stage + 16)
        <= SMEM_PER_BLOCK
        < (ring.copy.ring.stages + 1) * (2 * stage + 16)
    )
    with pytest.raises(TmaConfigError, match="the source's tile and the destination's"):
        ring_class("fp32", tile=(64, 128), stages=6)  # asked for: refused, not shortened


def test_the_ring_refuses_what_it_does_not_compute():
    copy = CopyPlan(PipelinePlan(LoadPlan(LoadConfig((64, 64), "fp32", (16, 64))), persistent=True))
    assert ReducePlan(copy, "add", "ring").by_ring
    with pytest.raises(TmaConfigError, match="load-add-store ring.*computes add on fp32"):
        ReducePlan(copy, "max", "ring")
    int64 = CopyPlan(PipelinePlan(LoadPlan(LoadConfig((64, 64), "int64", (16, 32))), persistent=True))
    with pytest.raises(TmaConfigError, match="dtype int64 on the load-add-store ring"):
        ReducePlan(int64, "add", "ring")
    transposing = reduce_class(
        CopyOptions(), "add", "fp32", 2, "row", True, copy_tile("fp32", True), 132, False
    )
    with pytest.raises(TmaConfigError, match="combines tiles of one layout"):
        ReducePlan(transposing.copy, "add", "ring")
    with pytest.raises(TmaConfigError, match="reduce kernel 'fast' is not one of"):
        ReducePlan(copy, "add", "fast")
    with pytest.raises(TmaConfigError, match="reduce_by 'fast' is not one of"):
        chosen_kernel("fast")
    assert chosen_kernel(None) is None and chosen_kernel("ring") == "ring"


def test_the_rule_table_chooses_the_ring_past_its_share_of_the_l2_and_a_choice_overrides_it(monkeypatch):
    l2 = 50 << 20
    monkeypatch.setattr(plan_reduce, "RING_BEYOND_L2", {"add": BeyondL2(0.5, ("float32",))})
    assert reduce_kernel(None, "add", "float32", l2, l2) == "ring"
    assert reduce_kernel(None, "add", "float32", l2 // 4, l2) == "store"  # within its share
    assert reduce_kernel(None, "add", "float16", l2, l2) == "store"  # a dtype not measured
    assert reduce_kernel(None, "add", "float32", l2, None) == "store"  # no L2 size: a strict call
    assert reduce_kernel("store", "add", "float32", l2, l2) == "store"
    assert reduce_kernel("ring", "max", "uint32", 0, None) == "ring"  # chosen: checked by the plan
    monkeypatch.setattr(plan_reduce, "RING_BEYOND_L2", {})
    assert reduce_kernel(None, "add", "float32", l2, l2) == "store"


def test_a_route_on_the_ring_says_so_and_skips_the_torch_faster_rule():
    shape = (8192, 8192)  # 768 MiB moved: past every L2's share
    facts = flat_pair(shape, shape, (8192, 1), (8192, 1), "float32", "float32", 4, 0, 0, 0, 0)
    assert plan_reduce.reduce_route(facts, "add", 50 << 20).path == "torch"  # TORCH_FASTER_BEYOND_L2
    route = plan_reduce.reduce_route(facts, "add", 50 << 20, "ring")
    assert route.path == "tma" and route.reason.endswith("the load-add-store ring")


# -- the kernel, compiled for sm_90a -------------------------------------------------------------
# fp16 and bf16: in fp32 and rounded once, or (where the compiler folds the conversions) the
# 16-bit add, which rounds the exact sum once: the same bits (24 >= 2 x 11 + 2).
ADDS = {
    "fp32": r"add\.f32",
    "fp16": r"add(\.rn)?\.f32|add\.f16x2",
    "bf16": r"add(\.rn)?\.f32|add\.bf16x2",
    "int32": r"add\.s32",
}


@pytest.mark.parametrize("op, dtype", RING_PAIRS, ids=[dtype for _, dtype in RING_PAIRS])
def test_the_ring_loads_both_tiles_on_one_barrier_adds_fences_meets_and_stores_once(op, dtype):
    ring = ring_class(dtype)
    ptx = compile_reduce(ring, keep_ptx=True, shape_generic=True).ptx
    lines = [line.strip() for line in ptx.splitlines() if not line.strip().startswith("$L__")]
    loads = [line for line in lines if line.startswith("cp.async.bulk.tensor.2d.shared::cta.global.tile")]
    assert len(loads) == 2  # the source's tile and the destination's
    assert len({re.search(r"\],\s*\[(%r\d+)\]", line).group(1) for line in loads}) == 1  # one barrier
    assert set(expect_tx_byte_counts(ptx)) == {2 * ring.load.expected_tx_bytes}
    assert not any("cp.reduce" in line for line in lines)  # the sum is made in registers
    stores = [
        i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor.2d.global.shared::cta")
    ]
    assert len(stores) == 1
    fence = lines.index("fence.proxy.async.shared::cta;")
    threads = 32 * RING_CONSUMER_WARPS
    meet = next(i for i, line in enumerate(lines) if re.fullmatch(rf"bar\.sync\s+1, {threads};", line))
    assert fence < meet < stores[0]  # the adds are visible to the store's proxy before it is issued
    assert lines[stores[0] + 1] == "cp.async.bulk.commit_group;"
    assert lines[stores[0] + 2].startswith("cp.async.bulk.wait_group.read")  # read before the release
    assert any(re.match(ADDS[dtype], line) for line in lines)
    passes = -(-ring.load.expected_tx_bytes // (16 * 32 * RING_CONSUMER_WARPS))  # 16 bytes a thread each
    assert sum(line.startswith("ld.shared.v4") for line in lines) == 2 * passes  # a vector of each tile


# -- the API's route -----------------------------------------------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the torch API needs torch (pip install 'tmakit[gpu]')")


def test_reduce_by_ring_launches_the_ring_and_reduce_path_names_it(reduces_as_gpu, torch):
    import tmakit

    compiled, launched = reduces_as_gpu
    dst, src = torch.empty(1000, 776), torch.empty(1000, 776)
    assert tmakit.add_(dst, src, reduce_by="ring") is dst
    tmakit.add_(dst, src, reduce_by="ring")
    tmakit.add_(dst, src)  # the rule's choice: reduce stores within the L2
    kernels = [reduce.kernel for reduce, _, _ in compiled]
    assert kernels == ["ring", "store"] and len(launched) == 3
    assert tmakit.reduce_path(dst, src, reduce_by="ring").reason.endswith("the load-add-store ring")
    with pytest.raises(TmaConfigError, match="reduce_by 'fast' is not one of"):
        tmakit.add_(dst, src, reduce_by="fast")


def test_reduce_by_ring_where_the_ring_cannot_is_refused_strict_or_not(reduces_as_gpu, torch):
    """A kernel the call chose is what it gets, or a TmaConfigError naming why not: never torch's op
    in its place (nor, for uint32, torch's refusal)."""
    import tmakit

    compiled, launched = reduces_as_gpu
    dst, src = torch.ones(64, 64, dtype=torch.float16), torch.ones(64, 64, dtype=torch.float16)
    column_major = torch.ones(64, 32).t()
    counters = torch.zeros(64, 64, dtype=torch.uint32)
    for strict in (True, False):
        with pytest.raises(TmaConfigError, match="computes add on"):
            tmakit.reduce_into_(dst, src, "max", strict=strict, reduce_by="ring")
        with pytest.raises(TmaConfigError, match="combines tiles of one layout"):
            tmakit.add_(column_major, torch.ones(32, 64), strict=strict, reduce_by="ring")
        with pytest.raises(TmaConfigError, match="dtype uint32 on the load-add-store ring"):
            tmakit.add_(counters, counters.clone(), strict=strict, reduce_by="ring")
    assert compiled == [] and launched == []
    tmakit.add_(counters, counters.clone())  # without the choice: reduce stores serve uint32
    assert [reduce.kernel for reduce, _, _ in compiled] == ["store"]


def test_where_the_rules_ring_cannot_take_a_strict_call_reduce_stores_do(reduces_as_gpu, torch):
    import tmakit

    compiled, launched = reduces_as_gpu  # an L2 of 60 MiB: past 24 MiB moved the rule says ring
    big = (2048, 1280)
    src = torch.ones(big)
    dst = torch.zeros(big[::-1]).t()  # column-major: layouts that differ
    tmakit.add_(dst, src, strict=True)
    route = tmakit.reduce_path(dst, src, strict=True)
    assert route.path == "tma" and "ring" not in route.reason
    row_major = torch.zeros(big)
    tmakit.add_(row_major, src, strict=True, tile=(64, 128), stages=6)  # a depth for one tile a stage
    tmakit.add_(row_major, src, strict=True)  # the ring
    assert [(reduce.kernel, reduce.copy.transpose) for reduce, _, _ in compiled] == [
        ("store", True),
        ("store", False),
        ("ring", False),
    ]
    with pytest.raises(TmaConfigError, match="6 stages of 65536 bytes"):  # chosen: refused, named
        tmakit.add_(row_major, src, strict=True, tile=(64, 128), stages=6, reduce_by="ring")


def test_a_tile_two_of_which_no_stage_holds_is_refused_as_such():
    with pytest.raises(TmaConfigError, match="one stage of 262144 bytes .* does not fit"):
        ring_class("fp32", tile=(256, 128))  # 128 KiB tiles


def test_past_its_share_of_the_l2_a_strict_add_runs_the_ring_and_a_plain_one_torchs_add(
    reduces_as_gpu, torch
):
    import tmakit

    compiled, launched = reduces_as_gpu  # an L2 of 60 MiB: the rules' 40% is 24 MiB moved
    big = (2048, 1280)  # 10 MiB a tensor, 30 MiB moved
    dst, src = torch.zeros(big), torch.ones(big)
    tmakit.add_(dst, src)  # torch's add_ (TORCH_FASTER_BEYOND_L2), on these CPU stand-ins
    assert compiled == [] and torch.equal(dst, src)
    assert "measured faster than TMA's kernels" in tmakit.reduce_path(dst, src).reason
    tmakit.add_(dst, src, strict=True)  # TMA asked for: its faster kernel there, the ring
    tmakit.add_(dst[:512], src[:512], strict=True)  # 7.5 MiB moved: reduce stores
    assert [reduce.kernel for reduce, _, _ in compiled] == ["ring", "store"]
    assert tmakit.reduce_path(dst, src, strict=True).reason.endswith("the load-add-store ring")
    tmakit.add_(dst, src, reduce_by="store")  # a kernel chosen: TMA runs it (the class compiled above)
    assert len(compiled) == 2 and len(launched) == 3
    assert tmakit.reduce_path(dst, src, reduce_by="store").reason == "the tensors as laid out"
