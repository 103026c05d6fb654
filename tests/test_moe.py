"""Mixture-of-experts movement on the CPU: the plans (what a stage holds, what a barrier expects,
what is refused), the routing the device builds (against a plain-Python reference, for drawn
routings), the combine in fp32 against float64, gradients (gradcheck in float64), the checks of
bad input before anything is written, the ops' fakes (make_fx) and the kernels compiled for
sm_90a with the instructions their plans name; the routing kernels' plan, their algorithm's CPU
model against torch's routing, and their PTX."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_reference import (
    ROUTING_CASES,
    assert_routings_equal,
    combine_reference,
    expected_rows,
    mask_ids,
    routing_ids,
    within_output_rounding,
)
from tmakit import TmaConfigError
from tmakit.moe.plan import (
    COMBINE_TARGET_BYTES,
    MAX_ROUTING_EXPERTS,
    ROUTING_BLOCK_SLOTS,
    ROUTING_MAX_BLOCKS,
    ROUTING_ROUNDS,
    ROUTING_SMEM_BYTES,
    ROUTING_WARPS,
    CombinePlan,
    DispatchPlan,
    QuantizePlan,
    RoutingPlan,
    combine_chunk_bytes,
    dispatch_rows,
    routing_block_slots,
    routing_blocks,
    routing_rule,
)

torch = pytest.importorskip("torch")
import tmakit  # noqa: E402


# -- plans ----------------------------------------------------------------------------------------
def test_a_combine_step_is_a_chunk_of_every_slot_that_divides_the_row():
    assert combine_chunk_bytes(14336, 8) == 2048  # DeepSeek: 7168 bf16, 7 chunks a token
    assert combine_chunk_bytes(8192, 2) == 8192  # Mixtral: a whole row a slot
    assert combine_chunk_bytes(4096, 6) == 4096  # 256 vectors: two a consumer thread
    for row_bytes in (16, 48, 1040, 14336, 65536):
        for topk in (1, 2, 3, 8, 32):
            chunk = combine_chunk_bytes(row_bytes, topk)
            assert row_bytes % chunk == 0 and chunk % 16 == 0
            assert topk * chunk <= max(COMBINE_TARGET_BYTES, topk * 16)


def test_plans_say_what_each_barrier_phase_expects():
    plan = CombinePlan(14336, 8, "bf16")
    assert (plan.chunks, plan.vectors, plan.vector_elements) == (7, 128, 8)
    assert plan.expected_bytes([0, 5, -1, 9, 100, 3, 2, 1], y_rows=10) == 6 * 2048  # -1 and 100: none
    assert plan.pipeline.consumer_warps == 4 and plan.pipeline.stages == plan.stages
    dispatch = DispatchPlan(14336, 8)
    assert dispatch.tokens_per_stage >= 1
    assert dispatch.expected_bytes(tokens=3, step=0) == min(3, dispatch.tokens_per_stage) * 14336
    assert dispatch.expected_bytes(tokens=3, step=5) == 0
    assert "top-8" in dispatch.summary(4096) and "fp32" in plan.summary(4096)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: DispatchPlan(10, 2), "multiple of 16"),
        (lambda: DispatchPlan(1 << 20, 2), "do not fit"),
        (lambda: DispatchPlan(64, 33), "at most 32"),
        (lambda: CombinePlan(64, 2, "int32"), "combine dtype"),
        (lambda: CombinePlan(64, 0, "bf16"), "topk"),
    ],
)
def test_plans_their_kernels_cannot_run_are_refused(make, match):
    with pytest.raises(TmaConfigError, match=match):
        make()


def test_the_output_size_is_known_before_the_routing_is_read():
    assert dispatch_rows(4096, 8, 256, 1) == 32768
    assert dispatch_rows(4096, 8, 256, 128) == 32768 + 256 * 127
    with pytest.raises(TmaConfigError, match="32-bit"):
        tmakit.moe_dispatch(
            torch.zeros(1, 16), torch.zeros(1, 1, dtype=torch.int32), num_experts=1, align=2**31
        )


# -- the routing and the torch path ------------------------------------------------------------
ROUTINGS = st.tuples(
    st.integers(1, 40),  # tokens
    st.integers(1, 6),  # topk
    st.integers(1, 9),  # experts
    st.sampled_from([1, 2, 16, 128]),
    st.sampled_from([torch.int32, torch.int64]),
    st.randoms(use_true_random=False),
)


@settings(max_examples=60, deadline=None)
@given(ROUTINGS)
def test_the_row_map_is_expert_major_with_tokens_in_order(routing):
    tokens, topk, experts, align, dtype, rng = routing
    ids_rows = [[rng.randrange(experts) for _ in range(topk)] for _ in range(tokens)]
    x = torch.arange(tokens * 16, dtype=torch.float32).reshape(tokens, 16)
    result = tmakit.moe_dispatch(x, torch.tensor(ids_rows, dtype=dtype), num_experts=experts, align=align)
    row_map, counts, offsets = expected_rows(ids_rows, experts, align)
    assert result.row_map.dtype == torch.int32 and result.row_map.tolist() == row_map
    assert result.tokens_per_expert.tolist() == counts and result.expert_offsets.tolist() == offsets
    expected = torch.zeros(dispatch_rows(tokens, topk, experts, align), 16)
    for token, slots in enumerate(row_map):
        for row in slots:
            expected[row] = x[token]
    assert torch.equal(result.out, expected)  # padding and the tail zero


# -- the routing kernels: plan, CPU model, PTX ------------------------------------------------------
def test_the_routing_grid_covers_every_slot_within_its_limits():
    for slots in (1, 31, 2047, 2048, 2049, 131072, ROUTING_BLOCK_SLOTS * ROUTING_MAX_BLOCKS,
                  ROUTING_BLOCK_SLOTS * ROUTING_MAX_BLOCKS + 1, 10**9, 2**31 - 1):  # fmt: skip
        per_block, blocks = routing_block_slots(slots), routing_blocks(slots)
        assert (
            per_block % ROUTING_BLOCK_SLOTS == 0 and (per_block // ROUTING_WARPS) % (32 * ROUTING_ROUNDS) == 0
        )
        assert 1 <= blocks <= ROUTING_MAX_BLOCKS and (blocks - 1) * per_block < slots <= blocks * per_block
    assert (routing_block_slots(131072), routing_blocks(131072)) == (2048, 64)  # 16384 tokens x top-8
    assert routing_blocks(16384) == 8  # 8192 tokens x top-2
    assert RoutingPlan(256, 128).workspace_shape(131072) == (64, 257)
    assert "64 block(s)" in RoutingPlan(256, 128, "int64").summary(131072)


def test_routings_the_kernels_cannot_count_are_torchs():
    assert MAX_ROUTING_EXPERTS == 1024
    assert 4 * ROUTING_WARPS * MAX_ROUTING_EXPERTS <= ROUTING_SMEM_BYTES  # the assign's counters fit
    assert RoutingPlan(MAX_ROUTING_EXPERTS, 1).smem_bytes <= ROUTING_SMEM_BYTES
    with pytest.raises(TmaConfigError, match="at most 1024"):
        RoutingPlan(MAX_ROUTING_EXPERTS + 1, 1)
    with pytest.raises(TmaConfigError, match="routing id dtype"):
        RoutingPlan(8, 1, "int16")
    with pytest.raises(TmaConfigError, match="experts"):
        RoutingPlan(0, 1)
    assert routing_rule(0, 8, 1) == "no slot to route"
    assert "at most 1024" in routing_rule(16, 2048, 1)
    assert "32-bit" in routing_rule(2**31 - 1, 8, 2)
    assert routing_rule(2**31 - 1, 1, 1) is None and routing_rule(1, 1024, 128) is None


def test_cpu_ids_and_traces_take_torchs_routing(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tmakit.moe import call

    ids = torch.tensor([[0, 1], [1, -1]])
    assert not call.routes_by_kernel(ids, 2, 1)
    assert_routings_equal(call.route_ids(ids, 2, 1), call.route_ids_by_torch(ids, 2, 1), "cpu ids")
    # ids that pass for a Hopper's: the kernels route them, unless a trace runs
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda tensor: True))
    monkeypatch.setattr(call, "cuda_index", lambda tensor: 0)
    assert call.routes_by_kernel(ids, 2, 1) and not call.routes_by_kernel(ids, 1025, 1)
    assert not call.routes_by_kernel(ids.double(), 2, 1)
    seen = []
    make_fx(lambda ids: seen.append(call.routes_by_kernel(ids, 2, 1)) or ids + 1)(ids)
    assert seen == [False]


@pytest.mark.parametrize("tokens, topk, experts, align", ROUTING_CASES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_the_routing_kernels_model_is_torchs_routing(tokens, topk, experts, align, dtype):
    import random

    from tmakit.moe.call import route_ids_by_torch
    from tmakit.moe.model import replay_routing

    ids = routing_ids(random.Random(tokens * 31 + experts), tokens, topk, experts, dtype)
    plan = RoutingPlan(experts, align, "int64" if dtype == torch.int64 else "int32")
    what = f"{tokens} x top-{topk} of {experts}, align {align}, {dtype}"
    assert_routings_equal(replay_routing(plan, ids.numpy()), route_ids_by_torch(ids, experts, align), what)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 700),
    st.integers(1, 8),
    st.sampled_from([1, 2, 5, 8, 64, 256, 512]),
    st.sampled_from([1, 16, 128]),
    st.sampled_from([torch.int32, torch.int64]),
    st.floats(0, 0.5),
    st.randoms(use_true_random=False),
)
def test_drawn_routings_model_as_torch_routes_them(tokens, topk, experts, align, dtype, spoiled, rng):
    from tmakit.moe.call import route_ids_by_torch
    from tmakit.moe.model import replay_routing

    ids = routing_ids(rng, tokens, topk, experts, dtype, spoiled / 2)
    plan = RoutingPlan(experts, align, "int64" if dtype == torch.int64 else "int32")
    assert_routings_equal(replay_routing(plan, ids.numpy()), route_ids_by_torch(ids, experts, align), "drawn")


def test_a_grid_of_larger_blocks_models_as_torch_routes_it():
    """Past ROUTING_MAX_BLOCKS blocks of the least share each block takes two: the block and
    warp ranges the kernel computes at run time."""
    from tmakit.moe.call import route_ids_by_torch
    from tmakit.moe.model import replay_routing

    slots = ROUTING_BLOCK_SLOTS * ROUTING_MAX_BLOCKS + 33
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(-1, 300, (slots, 1), generator=generator)
    assert routing_block_slots(slots) == 2 * ROUTING_BLOCK_SLOTS
    routed = replay_routing(RoutingPlan(300, 16, "int64"), ids.numpy())
    assert_routings_equal(routed, route_ids_by_torch(ids, 300, 16), "a grid of two-share blocks")


def test_the_routing_kernels_compile_for_sm90a_with_shared_counters_and_warp_ranks():
    pytest.importorskip("cutlass")
    from tmakit.moe.launch import compile_routing

    for plan in (RoutingPlan(256, 16, "int64"), RoutingPlan(8, 1), RoutingPlan(MAX_ROUTING_EXPERTS, 128)):
        ptx = compile_routing(plan, keep_ptx=True).ptx
        entries = re.findall(r"\.entry (kernel_cutlass_(\w+?)_tmakit)", ptx)
        assert [name for _, name in entries] == ["count", "scan", "assign"]
        count, scan, assign = re.split(r"\.visible \.entry", ptx)[1:]
        assert ".local" not in ptx and "atom.global" not in ptx and "red.global" not in ptx  # in registers
        load = "ld.global.b64" if plan.id_dtype == "int64" else "ld.global.b32"
        for kernel in (count, assign):  # a thread's rounds loaded together, then matched
            assert len(re.findall(load, kernel)) >= ROUTING_ROUNDS
            first_match = kernel.index("match.any.sync.b32")
            assert len(re.findall(load, kernel[:first_match])) >= ROUTING_ROUNDS
        # count: one shared atomic add a group of lanes a round, per block in shared memory
        assert len(re.findall(r"match\.any\.sync\.b32", count)) == ROUTING_ROUNDS
        assert len(re.findall(r"atom\.shared\.add\.u32", count)) == ROUTING_ROUNDS
        # scan: warp prefixes by shuffles (a lane's and the warps' sums), a block's counts batched
        assert len(re.findall(r"shfl\.sync\.up\.b32", scan)) == 10
        assert "match" not in scan and "atom" not in scan
        # assign: a warp's count and its ranks, no atomics (each warp's counters its own), the
        # group's first row broadcast from the lane that moved it on
        assert len(re.findall(r"match\.any\.sync\.b32", assign)) == 2 * ROUTING_ROUNDS
        assert "atom" not in assign and len(re.findall(r"bar\.warp\.sync", assign)) == 2 * ROUTING_ROUNDS
        assert len(re.findall(r"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, %r\d+", assign)) == ROUTING_ROUNDS
        assert "%lanemask_lt" in assign and "popc.b32" in assign
    # the shared bytes each launch asks for are what the kernels' allocations take
    from tmakit.linter.capture import capture

    plan = RoutingPlan(MAX_ROUTING_EXPERTS, 16)
    built = compile_routing.__wrapped__(plan)
    mlir = capture(built[0], *built[1:]).mlir
    sizes = [plan.count_smem_bytes, plan.scan_smem_bytes, plan.smem_bytes]
    assert [int(v) for v in re.findall(r"smem_size = (\d+) : i64", mlir)] == sizes
    assert [int(v) for v in re.findall(r"dynamicSmemBytes = %c(\d+)_i64", mlir)] == sizes


def test_a_mask_gives_each_token_its_experts_in_order_and_probs_per_slot():
    mask = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 1, 0]], dtype=torch.bool)
    probs = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 16
    x = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    result = tmakit.moe_dispatch(x, mask, topk=3, probs=probs, align=2)
    ids = mask_ids(mask.tolist(), 3)
    row_map, counts, offsets = expected_rows(ids, 4, 2)
    assert result.row_map.tolist() == row_map and result.tokens_per_expert.tolist() == counts
    assert result.token_probs.tolist() == [
        [probs[t, e].item() if e >= 0 else 0.0 for e in slots] for t, slots in enumerate(ids)
    ]
    for token, slots in enumerate(row_map):
        for slot, row in enumerate(slots):
            if row >= 0:
                assert result.probs[row] == result.token_probs[token, slot]
    assert int(result.dropped) == 0
    combined = tmakit.moe_combine(result.out, result.row_map, result.token_probs)
    assert combined[1].tolist() == [0.0, 0.0]  # a token with no expert


def test_bad_routing_is_refused_before_anything_is_written():
    x = torch.zeros(4, 16)
    ids = torch.tensor([[0, 1], [1, 2], [2, 5], [0, 0]])
    with pytest.raises(TmaConfigError, match=r"topk_ids\[2, 1\] is 5; with num_experts=3"):
        tmakit.moe_dispatch(x, ids, num_experts=3)
    with pytest.raises(TmaConfigError, match=r"mask row 0 names 3 experts; with topk=2"):
        tmakit.moe_dispatch(x, torch.tensor([[1, 1, 1]] * 4, dtype=torch.bool), topk=2)
    with pytest.raises(TmaConfigError, match="num_experts="):
        tmakit.moe_dispatch(x, ids)
    with pytest.raises(TmaConfigError, match="topk="):
        tmakit.moe_dispatch(x, ids > 0)
    with pytest.raises(TmaConfigError, match="float16"):
        tmakit.moe_dispatch(x, ids.half(), num_experts=3)
    with pytest.raises(TmaConfigError, match=r"probs is \(4, 3\)"):
        tmakit.moe_dispatch(x, ids, num_experts=6, probs=torch.zeros(4, 3))
    with pytest.raises(TmaConfigError, match="row_map"):
        tmakit.moe_combine(x, ids)
    with pytest.raises(TmaConfigError, match="the bulk-copy kernels cannot serve"):
        tmakit.moe_dispatch(x, ids, num_experts=6, strict=True)  # a CPU tensor


def test_unchecked_bad_ids_are_skipped_and_counted():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ids = torch.tensor([[0, 7], [1, -2], [1, 0]])
    result = tmakit.moe_dispatch(x, ids, num_experts=2, check_ids=False)
    assert int(result.dropped) == 2
    assert result.row_map.tolist() == [[0, -1], [2, -1], [3, 1]]
    assert torch.equal(result.out[4:], torch.zeros(2, 4))  # the two rows no slot took


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_combine_sums_in_fp32_in_slot_order(dtype):
    generator = torch.Generator().manual_seed(1)
    y = torch.randn(40, 24, generator=generator).to(dtype)
    row_map = torch.randint(-1, 40, (13, 5), generator=generator, dtype=torch.int32)
    probs = torch.rand(13, 5, generator=generator)
    for weights in (probs, None):
        out = tmakit.moe_combine(y, row_map, weights)
        total, bound = combine_reference(y, row_map, weights)
        assert out.dtype == dtype and within_output_rounding(out, total, bound)


def test_gradients_are_torchs_of_the_same_layer():
    generator = torch.Generator().manual_seed(2)
    tokens, topk, experts, hidden = 9, 3, 5, 6
    ids = torch.stack([torch.randperm(experts, generator=generator)[:topk] for _ in range(tokens)])
    weight = torch.randn(hidden, dtype=torch.float64, generator=generator)

    def layer(x, probs):
        routed = tmakit.moe_dispatch(x, ids, num_experts=experts, probs=probs, align=4)
        return tmakit.moe_combine(routed.out * weight, routed.row_map, routed.token_probs)

    x = torch.randn(tokens, hidden, dtype=torch.float64, generator=generator, requires_grad=True)
    probs = torch.rand(tokens, topk, dtype=torch.float64, generator=generator, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x, probs))
    # a second backward (create_graph) through the combine's backward's own graph, with no op
    # left without an autograd kernel on the way
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*autograd kernel was not registered.*")
        assert torch.autograd.gradgradcheck(layer, (x, probs))
    expected = sum(x * weight * probs[:, slot, None] for slot in range(topk))
    assert torch.allclose(layer(x, probs), expected)


def test_the_ops_trace_with_their_fakes():
    from torch.fx.experimental.proxy_tensor import make_fx

    import tmakit.ops  # noqa: F401  registers the ops

    ids = torch.tensor([[0, 1], [1, 2], [2, 0]])

    def layer(x, ids, probs):
        routed = tmakit.moe_dispatch(x, ids, num_experts=3, probs=probs, align=4)
        return tmakit.moe_combine(routed.out, routed.row_map, routed.token_probs)

    graph = make_fx(layer, tracing_mode="fake")(torch.zeros(3, 8), ids, torch.ones(3, 2))
    code = graph.code
    assert "tmakit.moe_permute" in code and "tmakit.moe_combine" in code
    assert "aminmax" not in code  # no host check while tracing


# -- the kernels on the CPU -----------------------------------------------------------------------
def test_the_kernels_compile_for_sm90a_with_their_plans_instructions():
    pytest.importorskip("cutlass")
    from tmakit.moe.launch import compile_combine, compile_dispatch

    dispatch = compile_dispatch(DispatchPlan(14336, 8), keep_ptx=True).ptx
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in dispatch
    assert "cp.async.bulk.global.shared::cta.bulk_group" in dispatch
    assert "mbarrier.arrive.expect_tx" in dispatch
    combine = compile_combine(CombinePlan(14336, 8, "bf16"), keep_ptx=True).ptx
    # a slot's 16 bytes read once, its eight bf16 values converted and fused into the sum; the
    # step's rows read from the stage's table (two 16-byte loads), not from global memory
    assert len(re.findall(r"ld\.shared\.v4\.b32", combine)) == 8 + 2
    assert len(re.findall(r"ld\.global\.", combine)) == 2  # the producer's row map and weight
    assert len(re.findall(r"fma\.rn\.f32", combine)) == 64
    assert re.search(r"st\.global\.v4\.b32", combine)
    assert "mbarrier.expect_tx" in combine
    unweighted = compile_combine(CombinePlan(8192, 2, "fp32", weighted=False), keep_ptx=True).ptx
    assert "fma.rn.f32" not in unweighted and re.search(r"add\.(rn\.)?f32", unweighted)


def test_the_combine_backward_compiles_with_a_load_a_slot_and_the_gradients_chunk():
    pytest.importorskip("cutlass")
    from tmakit.moe.launch import compile_combine_grad

    ptx = compile_combine_grad(CombinePlan(14336, 8, "bf16", grad=True), keep_ptx=True).ptx
    # lane j's load of slot j's chunk and the gradient's, each declared: two load sites
    assert ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
    assert ptx.count("mbarrier.expect_tx") == 2
    # the gradient's 16 bytes and each slot's read once, the table's rows in two; a store of y's
    # gradient a slot; only the producer reads the row map and the weights from global memory
    assert len(re.findall(r"ld\.shared\.v4\.b32", ptx)) == 9 + 2
    assert len(re.findall(r"ld\.global\.", ptx)) == 2 + 1  # and a row's flag, before its zeros
    assert ptx.count(".entry") == 2  # the zeroing of the rows no slot names, then the ring
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == 8 + 1  # and the unnamed rows' zeros
    assert "cp.async.bulk.global" not in ptx  # y's gradient leaves by plain stores, not bulk ones
    # top-32: the slots take the whole warp, lane 0 loads the gradient's chunk beside slot 0's
    wide = compile_combine_grad(CombinePlan(4096, 32, "bf16", grad=True), keep_ptx=True).ptx
    assert wide.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
    assert wide.count("mbarrier.expect_tx") == 2
    assert len(re.findall(r"shfl\.sync\.bfly", ptx)) >= 8 * 5  # each slot's sum across a warp


def test_the_combine_backward_plan_loads_the_gradient_beside_the_slots():
    plan = CombinePlan(14336, 8, "bf16", grad=True)
    assert (plan.loads, plan.chunk_bytes, plan.loaded_bytes) == (9, 2048, 9 * 2048)
    assert plan.stage_bytes == 9 * 2048 + 8 * 8  # the slot table after the chunks
    assert plan.partials == plan.chunks * plan.consumer_warps == 28
    assert plan.expected_bytes([0, -1, 5], 4) == 2 * 2048  # row 5 is outside y's 4 rows
    assert plan.grad_lane == 8 and CombinePlan(4096, 32, "bf16", grad=True).grad_lane == 0
    with pytest.raises(TmaConfigError, match="unweighted combine's backward"):
        CombinePlan(14336, 8, "bf16", weighted=False, grad=True)


def test_a_combine_ring_of_two_blocks_a_sm_doubles_the_persistent_grid():
    plan = CombinePlan(14336, 8, "bf16", blocks_per_sm=2, sm_count=132)
    assert plan.pipeline.persistent_blocks == 264
    assert "264 persistent block(s), 28672 steps" in plan.summary(4096)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.integers(1, 40),
    topk=st.integers(1, 4),
    experts=st.integers(1, 9),
    align=st.sampled_from([1, 2, 16, 128]),
    seed=st.integers(0, 2**16),
)
def test_the_unnamed_rows_are_every_row_no_slot_names_each_once(tokens, topk, experts, align, seed):
    from tmakit.moe import call

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, experts, (tokens, topk), generator=generator)
    routed = call.route_ids_by_torch(ids, experts, align)
    listed = call.unnamed_rows(routed, topk, align).tolist()
    rows = dispatch_rows(tokens, topk, experts, align)
    named = set(routed.row_map.reshape(-1).tolist())
    assert len(listed) == experts * (align - 1) == len(set(listed))  # a static size, no repeat
    assert set(listed) == set(range(rows)) - named  # every unnamed row, nothing else


def test_the_model_replays_the_combine_backward_to_torchs_gradients():
    import numpy as np

    from tmakit.moe.model import replay_combine_grad

    rng = np.random.default_rng(6)
    tokens, topk, experts, align = 29, 3, 5, 4
    ids = [[int(v) for v in rng.choice(experts, topk, replace=False)] for _ in range(tokens)]
    ids[3][1] = -1  # a slot with no expert: nothing loaded, no gradient
    row_map = np.array(expected_rows(ids, experts, align)[0])
    rows = dispatch_rows(tokens, topk, experts, align)
    y = rng.standard_normal((rows, 1024)).astype(np.float32)
    grad = rng.standard_normal((tokens, 1024)).astype(np.float32)
    probs = rng.random((tokens, topk)).astype(np.float32)
    plan = CombinePlan(4096, topk, "fp32", grad=True, stages=3, sm_count=5)
    grad_y, partials = replay_combine_grad(plan, row_map, probs, y, grad)
    y_t = torch.from_numpy(y).requires_grad_()
    probs_t = torch.from_numpy(probs).requires_grad_()
    out = tmakit.moe_combine(y_t, torch.from_numpy(row_map).int(), probs_t)
    out.backward(torch.from_numpy(grad))
    assert np.array_equal(grad_y, y_t.grad.numpy())  # one fp32 product each: the same bits
    unnamed = np.setdiff1d(np.arange(rows), row_map[row_map >= 0])
    assert len(unnamed) and not grad_y[unnamed].any()
    assert np.allclose(partials.sum(axis=2), probs_t.grad.numpy(), rtol=1e-5, atol=1e-4)
    assert partials[3, 1].sum() == 0 == probs_t.grad[3, 1]


# -- the CPU model of the rings -------------------------------------------------------------------
def test_the_model_replays_both_rings_to_the_reference():
    import numpy as np

    from tmakit.moe.model import ModelHang, Ring, replay_combine, replay_dispatch

    rng = np.random.default_rng(4)
    tokens, topk, experts, align = 37, 3, 5, 4
    ids = [[int(v) for v in rng.choice(experts, topk, replace=False)] for _ in range(tokens)]
    row_map = np.array(expected_rows(ids, experts, align)[0], np.int64)
    rows = dispatch_rows(tokens, topk, experts, align)
    x = rng.integers(0, 255, (tokens, 48), dtype=np.uint8)
    plan = DispatchPlan(48, topk, sm_count=4)
    out = replay_dispatch(plan, row_map, x, rows)
    expected = torch.zeros(rows, 48, dtype=torch.uint8)
    result = tmakit.moe_dispatch(torch.from_numpy(x), torch.tensor(ids), num_experts=experts, align=align)
    assert np.array_equal(out, result.out.numpy()) and not np.array_equal(out, expected.numpy())
    y = rng.standard_normal((rows, 64)).astype(np.float32)
    probs = rng.random((tokens, topk)).astype(np.float32)
    sums = replay_combine(CombinePlan(256, topk, "fp32", stages=2, sm_count=3), row_map, probs, y)
    combined = tmakit.moe_combine(
        torch.from_numpy(y), torch.from_numpy(row_map).int(), torch.from_numpy(probs)
    )
    assert np.allclose(sums, combined.numpy(), rtol=1e-6, atol=1e-6)
    ring = Ring(stages=2, consumer_warps=1)
    with pytest.raises(ModelHang, match="declared 2048 bytes and its loads delivered 1024"):
        ring.fill(0, [2048], [1024])  # a slot counted that no load fills: the phase never completes
    with pytest.raises(ModelHang, match="never freed"):
        Ring(stages=1, consumer_warps=1).fill(1, [16], [16])  # a stage the consumer never released


def test_explain_shows_the_combine_backwards_ring_and_its_gradient_load(capsys):
    from tmakit.cli import main

    args = ["explain", "--kernel", "moe", "--moe", "combine-grad:8:256", "--shape", "4096x7168"]
    assert main([*args, "--dtype", "bf16"]) == 0
    text = capsys.readouterr().out
    assert "6 x 9 chunks of 2048 bytes" in text and "lane 8: the output's gradient g row 0" in text
    assert "18432 for a token with 8" in text and "28 a slot" in text


def test_plan_and_explain_show_the_ring_and_its_first_step(capsys):
    from tmakit.cli import main

    assert (
        main(
            [
                "explain",
                "--kernel",
                "moe",
                "--moe",
                "combine:8:256",
                "--shape",
                "4096x7168",
                "--dtype",
                "bf16",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "tma-rows-bulk" in text
        and "6 x 8 chunks of 2048 bytes" in text
        and "16384 for a token with 8" in text
    )
    assert (
        main(
            ["plan", "--kernel", "moe", "--moe", "dispatch:8:256", "--shape", "4096x7168", "--dtype", "bf16"]
        )
        == 0
    )
    assert "each stored to its top-8 rows" in capsys.readouterr().out
    assert (
        main(["plan", "--kernel", "moe", "--moe", "dispatch:2:8", "--shape", "64x5", "--dtype", "bf16"]) == 0
    )
    assert "torch (a row is 10 bytes" in capsys.readouterr().out
    assert main(["plan", "--kernel", "moe", "--moe", "gather:2:8", "--shape", "64x64"]) != 0
    assert "OP is dispatch, combine, combine-grad" in capsys.readouterr().err
    wide = ["plan", "--kernel", "moe", "--moe", "dispatch:8:8", "--shape", "64x32768", "--dtype", "bf16"]
    assert main(wide) == 0  # four stages of a 64 KiB row do not fit: torch's, as the call takes it
    assert "torch (4 stages of 65536 bytes" in capsys.readouterr().out


def route_on_a_gpu(op, shape, dtype, out_rows, topk):
    """`moe_route` of compact rows of `shape` and torch `dtype` on GPU 0 (the facts a Hopper
    call would read), writing `out_rows` rows."""
    from tmakit.moe.plan import MoeFacts, moe_route
    from tmakit.plan.route import TensorFacts

    element = getattr(torch, dtype)
    rows = TensorFacts(shape, (shape[1], 1), dtype, element.itemsize, 1 << 40, 0)
    return moe_route(MoeFacts(op, rows, out_rows, 0, topk))


def test_a_dispatch_of_rows_too_wide_for_the_ring_is_torchs_not_a_refusal():
    shape = (4, 32768)
    route = route_on_a_gpu("dispatch", shape, "bfloat16", 8, 2)
    assert not route.by_tma and "do not fit" in route.reason
    x = torch.randn(shape).bfloat16()
    out = tmakit.moe_dispatch(x, torch.zeros(4, 2, dtype=torch.int32), num_experts=2).out
    assert torch.equal(out, x.repeat_interleave(2, 0))


def test_empty_shapes_move_nothing():
    ids = torch.tensor([[0, 1], [1, 0]])
    for x in (torch.zeros(2, 0), torch.zeros(0, 8)):
        routing = ids[: x.shape[0]]
        result = tmakit.moe_dispatch(x, routing, num_experts=2, align=2)
        assert result.out.shape == (x.shape[0] * 2 + 2, x.shape[1]) and not result.out.any()
        combined = tmakit.moe_combine(result.out, result.row_map, None)
        assert combined.shape == x.shape


@pytest.mark.parametrize("align, masked", [(1, False), (4, False), (16, False), (4, True)])
def test_the_kernel_route_zeroes_exactly_the_rows_no_slot_names(monkeypatch, align, masked):
    """The kernel's route on CPU tensors standing in for GPU ones: the launch emulated (each slot's
    row written, nothing else), every allocation poisoned, so a row the call does not zero on
    purpose shows."""
    from stand_ins import gpu_stand_ins
    from tmakit.moe import call
    from tmakit.runtime.launch import Launcher

    gpu_stand_ins(monkeypatch)

    def emulated(x_bytes, row_map, out_bytes):
        for token, rows in enumerate(row_map.tolist()):
            for row in rows:
                if 0 <= row < out_bytes.shape[0]:
                    out_bytes[row] = x_bytes[token]

    poison = float("nan")

    def poisoned(shape, like, zeroed):
        return torch.zeros(shape, dtype=like.dtype) if zeroed else torch.full(shape, poison, dtype=like.dtype)

    monkeypatch.setattr(call, "dispatch_launcher", lambda *args: Launcher(emulated))
    monkeypatch.setattr(call, "_new_rows", poisoned)
    monkeypatch.setattr(call, "_device_sm_count", lambda device: 132)
    tokens, topk, experts = 23, 3, 5
    generator = torch.Generator().manual_seed(align)
    x = torch.randn(tokens, 8, generator=generator)
    if masked:
        mask = torch.rand(tokens, experts, generator=generator) < 0.4
        mask[:, 3:] &= ~mask[:, :3].all(dim=1, keepdim=True)  # at most topk a token
        mask[mask.sum(dim=1) > topk] = False
        result = tmakit.moe_dispatch(x, mask, topk=topk, align=align, strict=True)
        ids = mask_ids(mask.tolist(), topk)
    else:
        ids = [torch.randperm(experts, generator=generator)[:topk].tolist() for _ in range(tokens)]
        result = tmakit.moe_dispatch(x, torch.tensor(ids), num_experts=experts, align=align, strict=True)
    row_map = expected_rows(ids, experts, align)[0]
    expected = torch.zeros(dispatch_rows(tokens, topk, experts, align), 8)
    for token, rows in enumerate(row_map):
        for row in rows:
            if row >= 0:
                expected[row] = x[token]
    assert torch.equal(result.out, expected)  # no NaN left: every unnamed row zeroed


# -- the dispatch that quantizes to fp8 ----------------------------------------------------------
def spread_rows(tokens, hidden, dtype=torch.bfloat16, seed=0):
    """Values over many binades, with all-zero blocks and tiny values beside large ones."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(tokens, hidden, generator=generator) * torch.logspace(-6, 4, tokens).view(-1, 1)
    values[:, ::97] *= 1e-4
    values[::5, :128] = 0
    return values.to(dtype)


def test_the_fp8_plan_stages_rows_beside_their_fp8_rows_and_refuses_what_it_cannot_quantize():
    plan = QuantizePlan(7168, 8)
    assert (plan.row_bytes, plan.blocks, plan.tokens_per_stage) == (14336, 56, 2)  # as the dispatch's
    assert plan.loaded_bytes == 2 * 14336 and plan.stage_bytes == 2 * 14336 + 2 * 7168
    assert plan.expected_bytes(5, 2) == 14336 and plan.steps(5) == 3  # the last stage's one row
    assert plan.pipeline.consumer_warps == 4
    assert "quantized to e4m3 in 56 blocks of 128" in plan.summary(4096)
    for make, match in (
        (lambda: QuantizePlan(7000, 8), "whole blocks of 128"),
        (lambda: QuantizePlan(7168, 8, "fp32"), "quantizes bf16, fp16"),
        (lambda: QuantizePlan(7168, 33), "at most 32"),
        (lambda: QuantizePlan(7168, 8, scale_format="e5m2"), "scale format"),
        (lambda: QuantizePlan(1 << 20, 8), "do not fit"),
    ):
        with pytest.raises(TmaConfigError, match=match):
            make()


@pytest.mark.parametrize("scale_format", ["fp32", "ue8m0"])
def test_the_fp8_model_is_torchs_reference_quantizer(scale_format):
    import numpy as np

    from tmakit.moe.call import quantize_rows_by_torch
    from tmakit.moe.model import replay_quantize_dispatch

    tokens, topk, experts, align, hidden = 41, 3, 6, 8, 512
    rng = np.random.default_rng(5)
    ids = [[int(v) for v in rng.choice(experts, topk, replace=False)] for _ in range(tokens)]
    row_map = np.array(expected_rows(ids, experts, align)[0], np.int64)
    rows = dispatch_rows(tokens, topk, experts, align)
    x = spread_rows(tokens, hidden)
    plan = QuantizePlan(hidden, topk, scale_format=scale_format, stages=2, sm_count=3)
    values, scales = replay_quantize_dispatch(plan, row_map, x.float().numpy(), rows)
    quantized, stored = quantize_rows_by_torch(x, scale_format)
    result = tmakit.moe_dispatch(
        x, torch.tensor(ids), num_experts=experts, align=align, quantize="fp8", scale_format=scale_format
    )
    assert result.out.dtype == torch.float8_e4m3fn and result.scales.stride() == (1, result.scales.stride(1))
    assert np.array_equal(values, result.out.double().numpy())  # the model's e4m3 rounding is torch's
    unnamed = np.setdiff1d(np.arange(rows), row_map.reshape(-1))
    assert np.array_equal(scales[row_map.reshape(-1)], result.scales.float().numpy()[row_map.reshape(-1)])
    assert not result.scales[unnamed].view(torch.uint8 if scale_format == "ue8m0" else torch.int32).any()
    named = row_map[:, 0]
    assert np.array_equal(values[named], quantized.double().numpy())
    assert np.array_equal(scales[named], stored.float().numpy())
    dequantized = result.out.float().view(rows, -1, 128) * result.scales.float().view(rows, -1, 1)
    relative = (dequantized.view(rows, -1)[named] - x.float()).abs() / x.float().abs().clamp(min=1e-30)
    assert float(relative[x.float().abs() > 1e-3 * x.float().abs().amax(1, keepdim=True)].max()) <= 1 / 16


def test_the_fp8_dispatch_refuses_what_it_cannot_quantize_before_any_write():
    x = spread_rows(8, 256)
    ids = torch.zeros(8, 2, dtype=torch.int32)
    for kwargs, match in (
        ({"quantize": "fp4"}, "takes None or 'fp8'"),
        ({"quantize": "fp8", "scale_format": "e8m0"}, "scale_format"),
        ({"quantize": "fp8", "scales": torch.ones(8, 2)}, "makes the scales"),
    ):
        with pytest.raises(TmaConfigError, match=match):
            tmakit.moe_dispatch(x, ids, num_experts=2, **kwargs)
    with pytest.raises(TmaConfigError, match="multiple of 128"):
        tmakit.moe_dispatch(x[:, :200], ids, num_experts=2, quantize="fp8")
    from tmakit import ops  # noqa: F401  registers the ops

    with pytest.raises(TmaConfigError, match="quantizes float"):
        torch.ops.tmakit.moe_permute_fp8(torch.ones(8, 256, dtype=torch.int32), ids, 16)


def test_the_fp8_dispatch_compiles_with_e4m3_conversions_and_correctly_rounded_divisions():
    pytest.importorskip("cutlass")
    from tmakit.moe.launch import compile_quantize_dispatch

    for scale_format, divisions, scale_store in (("fp32", 2, "st.global.b32"), ("ue8m0", 1, "st.global.b8")):
        ptx = compile_quantize_dispatch(QuantizePlan(7168, 8, scale_format=scale_format), keep_ptx=True).ptx
        # a lane's eight values: one 16-byte shared load, four e4m3 pairs (round to nearest even,
        # saturating), one 8-byte shared store; the block's amax across its half-warp in 4 steps
        assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 4
        assert len(re.findall(r"ld\.shared\.v4\.b32", ptx)) == 1
        assert len(re.findall(r"st\.shared\.v2\.b32", ptx)) == 1
        assert len(re.findall(r"shfl\.sync\.bfly", ptx)) == 4
        # the scale and its reciprocal each one IEEE division (the reference's), none approximate
        assert ptx.count("div.rn.f32") == divisions and "div.approx" not in ptx and "div.full" not in ptx
        assert ptx.count(scale_store) == 1
        # the fp8 rows fenced to the async proxy, the 4 consumer warps met, then bulk stores
        assert "fence.proxy.async.shared::cta" in ptx and re.search(r"bar\.sync\s+1, 128;", ptx)
        assert "cp.async.bulk.global.shared::cta.bulk_group" in ptx
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx


def test_explain_shows_the_fp8_dispatchs_quantize_between_its_load_and_its_stores(capsys):
    from tmakit.cli import main

    arguments = ["explain", "--kernel", "moe", "--moe", "fp8-dispatch:8:256", "--shape", "4096x7168"]
    assert main([*arguments, "--dtype", "bf16"]) == 0
    text = capsys.readouterr().out
    assert "quantized to e4m3 in 56 blocks of 128" in text and "4 x 2 token row(s) (28672 bytes" in text
    assert "quantize 112 blocks of 128" in text and "bar.sync 1" in text and "7168 bytes each" in text
    assert main([*arguments, "--dtype", "fp32"]) == 0
    assert "torch (a row of float32: the fp8 dispatch quantizes bf16, fp16)" in capsys.readouterr().out
    wide = ["plan", "--kernel", "moe", "--moe", "fp8-dispatch:8:8", "--shape", "64x20480", "--dtype", "bf16"]
    assert main(wide) == 0  # four stages of 1.5 rows of 40 KiB do not fit: torch's, not a refusal
    assert "torch (4 stages of" in capsys.readouterr().out
    assert main(["plan", "--kernel", "moe", "--moe", "fp8-dispatch:2:8", "--shape", "64x100"]) != 0
    assert "scales cover blocks of 128" in capsys.readouterr().err


def test_a_combine_whose_steps_pass_32_bits_is_torchs():
    def route(tokens, hidden, topk=8):
        return route_on_a_gpu("combine", (tokens * topk, hidden), "float32", tokens, topk)

    assert route(1 << 20, 7168).by_tma  # 7 chunks a token: 7.3M steps
    wide = route(400_000_000, 7168)  # 2.8G steps
    assert not wide.by_tma and "counts them in 32 bits" in wide.reason
