"""Mixture-of-experts movement on the CPU: the plans (what a stage holds, what a barrier expects,
what is refused), the routing the device builds (against a plain-Python reference, for drawn
routings), the combine in fp32 against float64, gradients (gradcheck in float64), the checks of
bad input before anything is written, the ops' fakes (make_fx) and the kernels compiled for
sm_90a with the instructions their plans name."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_reference import combine_reference, expected_rows, mask_ids, within_output_rounding
from tmakit import TmaConfigError
from tmakit.moe.plan import (
    COMBINE_TARGET_BYTES,
    CombinePlan,
    DispatchPlan,
    combine_chunk_bytes,
    dispatch_rows,
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
    # a slot's 16 bytes read once, its eight bf16 values converted and fused into the sum
    assert len(re.findall(r"ld\.shared\.v4\.b32", combine)) == 8
    assert len(re.findall(r"fma\.rn\.f32", combine)) == 64
    assert re.search(r"st\.global\.v4\.b32", combine)
    assert "mbarrier.expect_tx" in combine
    unweighted = compile_combine(CombinePlan(8192, 2, "fp32", weighted=False), keep_ptx=True).ptx
    assert "fma.rn.f32" not in unweighted and re.search(r"add\.(rn\.)?f32", unweighted)


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
    assert "OP is dispatch or combine" in capsys.readouterr().err
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
    monkeypatch.setattr(call, "_sm_count", lambda device: 132)
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


def test_a_combine_whose_steps_pass_32_bits_is_torchs():
    def route(tokens, hidden, topk=8):
        return route_on_a_gpu("combine", (tokens * topk, hidden), "float32", tokens, topk)

    assert route(1 << 20, 7168).by_tma  # 7 chunks a token: 7.3M steps
    wide = route(400_000_000, 7168)  # 2.8G steps
    assert not wide.by_tma and "counts them in 32 bits" in wide.reason
