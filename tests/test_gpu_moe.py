"""Mixture-of-experts dispatch and combine on the device, through the kernels (`strict=True`):
the row map against a plain-Python reference, every output row bit for bit (a token's row where a
slot names it, zero elsewhere, over a poisoned allocation), the combine within fp32 accumulation
of a float64 reference, ids refused eagerly and skipped under capture, gradients against torch's
autograd of the same expressions, torch.compile(fullgraph=True) and CUDA graphs; the routing
kernels against torch's routing bit for bit, eagerly and in a CUDA graph."""

from __future__ import annotations

import random

import pytest

import tmakit
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

pytestmark = pytest.mark.gpu

POISON = 0x5A


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch


def hashed(torch, shape, dtype, salt=0):
    """Values that depend on position and salt (distinct rows), exact in every float dtype."""
    count = shape[0] * shape[1]
    base = torch.arange(count, device="cuda", dtype=torch.int64) * 2654435761 + salt * 97
    return ((base % 251) - 125).to(dtype).reshape(shape) / 8


def poison_the_allocator(torch, nbytes):
    """Fill freed memory with POISON so that a new allocation starts poisoned (the caching
    allocator hands the block back)."""
    block = torch.full((nbytes + (1 << 20),), POISON, dtype=torch.uint8, device="cuda")
    del block


def random_ids(torch, rng, tokens, topk, experts, dtype):
    rows = [
        rng.sample(range(experts), topk) if topk <= experts else [rng.randrange(experts) for _ in range(topk)]
        for _ in range(tokens)
    ]
    return rows, torch.tensor(rows, dtype=dtype, device="cuda").reshape(tokens, topk)


def check_dispatch(torch, x, result, ids_rows, experts, align):
    row_map, counts, offsets = expected_rows(ids_rows, experts, align)
    assert result.row_map.tolist() == row_map
    assert result.tokens_per_expert.tolist() == counts
    assert result.expert_offsets.tolist() == offsets
    out = result.out
    assert out.shape == (len(ids_rows) * len(ids_rows[0]) + experts * (align - 1), x.shape[1])
    expected = torch.zeros_like(out)
    for token, slots in enumerate(row_map):
        for row in slots:
            if row >= 0:
                expected[row] = x[token]
    wrong = (
        out.view(torch.uint8).view(out.shape[0], -1) != expected.view(torch.uint8).view(out.shape[0], -1)
    ).any(1)
    if wrong.any():
        first = int(wrong.nonzero()[0, 0])
        pytest.fail(f"dispatch row {first} of {out.shape[0]} wrong ({int(wrong.sum())} rows wrong)")


CASES = [
    # tokens, topk, experts, hidden, dtype, align, ids dtype
    (1, 1, 1, 64, "bfloat16", 1, "int32"),
    (5, 2, 4, 2048, "bfloat16", 16, "int64"),
    (257, 8, 64, 7168, "bfloat16", 1, "int32"),
    (300, 6, 64, 2048, "float16", 128, "int64"),
    (1000, 2, 8, 4096, "float32", 16, "int32"),
    (64, 8, 256, 7168, "bfloat16", 128, "int32"),  # most experts take no token
    (33, 3, 5, 8, "float32", 1, "int64"),  # 32-byte rows
]


@pytest.mark.parametrize("tokens,topk,experts,hidden,dtype,align,ids_dtype", CASES)
def test_dispatch_and_combine_are_exact(torch, tokens, topk, experts, hidden, dtype, align, ids_dtype):
    rng = random.Random(tokens * 31 + topk)
    element = getattr(torch, dtype)
    x = hashed(torch, (tokens, hidden), element, salt=1)
    ids_rows, ids = random_ids(torch, rng, tokens, topk, experts, getattr(torch, ids_dtype))
    probs = torch.rand(tokens, topk, device="cuda")
    rows = tokens * topk + experts * (align - 1)
    poison_the_allocator(torch, rows * hidden * x.element_size())
    result = tmakit.moe_dispatch(x, ids, num_experts=experts, probs=probs, align=align, strict=True)
    check_dispatch(torch, x, result, ids_rows, experts, align)
    assert int(result.dropped) == 0
    row_map = result.row_map
    for slot in range(topk):  # the permuted probabilities follow the rows
        named = row_map[:, slot].long()
        assert torch.equal(result.probs[named], probs[:, slot])
    y = hashed(torch, (rows, hidden), element, salt=2)
    for weights in (probs, None):
        out = tmakit.moe_combine(y, row_map, weights, strict=True)
        total, bound = combine_reference(y, row_map, weights)
        assert out.dtype == element and within_output_rounding(out, total, bound), (dtype, weights is None)


def test_a_mask_routes_tokens_to_no_expert_and_fewer_than_topk(torch):
    tokens, experts, topk, hidden = 40, 6, 3, 256
    rng = random.Random(7)
    mask_rows = [[rng.random() < 0.3 for _ in range(experts)] for _ in range(tokens)]
    for row in mask_rows:  # at most topk a token
        while sum(row) > topk:
            row[row.index(True)] = False
    mask_rows[0] = [False] * experts  # a token routed to no expert
    mask = torch.tensor(mask_rows, device="cuda")
    x = hashed(torch, (tokens, hidden), torch.bfloat16)
    probs = torch.rand(tokens, experts, device="cuda")
    poison_the_allocator(torch, (tokens * topk + experts * 15) * hidden * 2)
    result = tmakit.moe_dispatch(x, mask, topk=topk, probs=probs, align=16, strict=True)
    ids_rows = mask_ids(mask_rows, topk)
    check_dispatch(torch, x, result, ids_rows, experts, 16)
    for token, slots in enumerate(ids_rows):
        for slot, expert in enumerate(slots):
            assert float(result.token_probs[token, slot]) == (
                float(probs[token, expert]) if expert >= 0 else 0.0
            )
    out = tmakit.moe_combine(result.out, result.row_map, result.token_probs, strict=True)
    total, bound = combine_reference(result.out, result.row_map, result.token_probs)
    assert within_output_rounding(out, total, bound)
    assert not out[0].any()  # no expert: zero


def test_bad_ids_are_refused_before_anything_is_written_and_skipped_under_capture(torch):
    tokens, topk, experts, hidden = 64, 2, 8, 512
    x = hashed(torch, (tokens, hidden), torch.bfloat16)
    ids = torch.randint(0, experts, (tokens, topk), device="cuda", dtype=torch.int32)
    ids[17, 1] = experts
    with pytest.raises(TmaConfigError, match=r"topk_ids\[17, 1\] is 8"):
        tmakit.moe_dispatch(x, ids, num_experts=experts, strict=True)
    static = tmakit.moe_dispatch(x, ids.clamp(max=experts - 1), num_experts=experts, strict=True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (compiles) outside the capture
        tmakit.moe_dispatch(x, ids, num_experts=experts, strict=True, check_ids=False)
        with torch.cuda.graph(graph, stream=stream):
            captured = tmakit.moe_dispatch(x, ids, num_experts=experts, strict=True)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert int(captured.dropped) == 1
    assert int(captured.row_map[17, 1]) == -1
    ids_rows = ids.tolist()
    ids_rows[17][1] = -1
    check_dispatch(torch, x, captured, ids_rows, experts, 1)
    del static


def test_gradients_match_torchs_autograd_of_the_same_expressions(torch):
    tokens, topk, experts, hidden = 96, 4, 16, 1024
    rng = random.Random(3)
    _, ids = random_ids(torch, rng, tokens, topk, experts, torch.int64)
    x = hashed(torch, (tokens, hidden), torch.float32).requires_grad_()
    probs = torch.rand(tokens, topk, device="cuda", requires_grad=True)
    weight = torch.randn(hidden, device="cuda")
    result = tmakit.moe_dispatch(x, ids, num_experts=experts, probs=probs, align=16, strict=True)
    y = result.out * weight  # an identity expert, scaled
    out = tmakit.moe_combine(y, result.row_map, result.token_probs, strict=True)
    grad = torch.randn_like(out)
    out.backward(grad)
    # The same layer in torch: each slot's row, scaled, summed with its weight.
    x2 = x.detach().clone().requires_grad_()
    probs2 = probs.detach().clone().requires_grad_()
    expected = sum((x2 * weight) * probs2[:, slot, None] for slot in range(topk))
    expected.backward(grad)
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert torch.allclose(x.grad, x2.grad, rtol=1e-5, atol=1e-4)
    assert torch.allclose(probs.grad, probs2.grad, rtol=1e-4, atol=1e-3)


GRAD_CASES = [
    # tokens, topk, experts, hidden, dtype, align
    (1, 1, 1, 64, "bfloat16", 1),
    (257, 8, 64, 7168, "bfloat16", 16),
    (300, 6, 64, 2048, "float16", 128),
    (100, 2, 8, 4096, "float32", 1),
    (33, 3, 5, 8, "float32", 4),  # 32-byte rows
    (64, 32, 64, 2048, "bfloat16", 1),  # the slots take the whole warp: lane 0 loads g's chunk too
]


@pytest.mark.parametrize("tokens,topk,experts,hidden,dtype,align", GRAD_CASES)
def test_the_combine_backward_kernel_is_exact(torch, tokens, topk, experts, hidden, dtype, align):
    dtype = getattr(torch, dtype)
    rng = random.Random(tokens)
    _, ids = random_ids(torch, rng, tokens, topk, experts, torch.int32)
    routed = tmakit.moe_dispatch(
        hashed(torch, (tokens, hidden), dtype), ids, num_experts=experts, align=align, strict=True
    )
    row_map = routed.row_map.clone()
    rows = routed.out.shape[0]
    if topk > 1:
        row_map[0, 1] = -1  # a slot that names no row: no load, no gradient
        row_map[-1, 0] = rows + 3  # one past y's rows: the same
    y = hashed(torch, (rows, hidden), dtype, salt=1)
    grad = hashed(torch, (tokens, hidden), dtype, salt=2)
    probs = torch.rand(tokens, topk, device="cuda")
    poison_the_allocator(torch, rows * hidden * y.element_size())  # the rows no slot names
    grad_y, grad_probs = torch.ops.tmakit.moe_combine_grad(grad, y, row_map, probs, True)
    # y's gradient: a named row is probs * grad in fp32 rounded once; every other row zero
    flat = row_map.reshape(-1).long()
    valid = (flat >= 0) & (flat < rows)
    token_of = torch.arange(tokens * topk, device="cuda") // topk
    expected = torch.zeros_like(y)
    expected[flat[valid]] = (grad.float()[token_of[valid]] * probs.reshape(-1)[valid, None]).to(dtype)
    wrong = (grad_y.view(torch.uint8).view(rows, -1) != expected.view(torch.uint8).view(rows, -1)).any(1)
    if wrong.any():
        first = int(wrong.nonzero()[0, 0])
        pytest.fail(f"y's gradient row {first} of {rows} wrong ({int(wrong.sum())} rows wrong)")
    # probs' gradient: within fp32 accumulation of a float64 reference, 0 where no row is named
    named = y.double()[torch.where(valid, flat, 0)].view(tokens, topk, hidden) * grad.double()[:, None, :]
    reference = torch.where(valid.view(tokens, topk), named.sum(-1), 0)
    bound = named.abs().sum(-1) * hidden * 2.0**-24 + 1e-30
    error = (grad_probs.double() - reference).abs()
    if (error > bound).any():
        token, slot = (int(v) for v in (error > bound).nonzero()[0])
        pytest.fail(
            f"probs' gradient [{token}, {slot}] {float(grad_probs[token, slot])} against "
            f"{float(reference[token, slot])}"
        )
    again = torch.ops.tmakit.moe_combine_grad(grad, y, row_map, probs, True)
    assert torch.equal(again[0], grad_y) and torch.equal(again[1], grad_probs)  # a fixed order
    # every partial sum written, a slot that names no row's as 0: the kernel on NaN-filled partials
    from tmakit.moe import call
    from tmakit.moe.launch import combine_launcher
    from tmakit.moe.plan import COMBINE_TORCH_DTYPES, CombinePlan

    sms = torch.cuda.get_device_properties(y.device).multi_processor_count
    dtype_name = COMBINE_TORCH_DTYPES[str(y.dtype).removeprefix("torch.")]
    plan = CombinePlan(hidden * y.element_size(), topk, dtype_name, grad=True, sm_count=sms)
    partials = torch.full((tokens, topk, plan.partials), float("nan"), device="cuda")
    spare = torch.full_like(y, float("nan"))  # the rows no slot names zeroed by the kernel too
    named = call.named_rows(row_map, rows)
    launch = combine_launcher(plan, str(y.device)).launch
    launch(call._bytes(y), call._bytes(grad), row_map, probs, spare, partials, named)
    assert torch.isfinite(partials).all() and torch.equal(spare, grad_y)
    assert torch.equal(partials.sum(dim=2), grad_probs)


def test_torch_compile_fullgraph_and_cuda_graphs_take_the_ops(torch):
    tokens, topk, experts, hidden = 128, 2, 8, 2048
    rng = random.Random(5)
    _, ids = random_ids(torch, rng, tokens, topk, experts, torch.int32)
    x = hashed(torch, (tokens, hidden), torch.bfloat16)
    probs = torch.rand(tokens, topk, device="cuda")

    def layer(x, ids, probs):
        routed = tmakit.moe_dispatch(x, ids, num_experts=experts, probs=probs, align=16)
        return tmakit.moe_combine(routed.out * 2, routed.row_map, routed.token_probs)

    eager = layer(x, ids, probs)
    compiled = torch.compile(layer, fullgraph=True)(x, ids, probs)
    assert torch.equal(compiled, eager)
    total, bound = combine_reference(
        x.float() * 2,
        torch.arange(tokens, device="cuda", dtype=torch.int32)[:, None].expand(tokens, topk).contiguous(),
        probs,
    )
    assert within_output_rounding(eager, total, bound)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = layer(x, ids, probs)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_paths(torch):
    x = torch.zeros(8, 64, dtype=torch.bfloat16, device="cuda")
    row_map = torch.zeros(8, 2, dtype=torch.int32, device="cuda")
    assert tmakit.moe_path("dispatch", x, row_map, 16).path == "tma-rows-bulk"
    assert tmakit.moe_path("combine", x, row_map).path == "tma-rows-bulk"
    odd = torch.zeros(8, 5, dtype=torch.bfloat16, device="cuda")  # 10-byte rows
    assert tmakit.moe_path("dispatch", odd, row_map, 16).path == "torch"
    with pytest.raises(TmaConfigError, match="16"):
        tmakit.moe_dispatch(odd, row_map.long(), num_experts=8, strict=True)


# -- the routing kernels --------------------------------------------------------------------------
LARGE_ROUTINGS = [
    (16384, 8, 256, 1),  # 131072 slots: 64 blocks
    (16384, 8, 256, 128),
    (8192, 2, 8, 16),  # Mixtral
    (4096, 8, 256, 128),  # DeepSeek
    ((1 << 17) + 1, 8, 64, 16),  # past ROUTING_MAX_BLOCKS blocks of the least share: two a block
]


def route_both(torch, ids, experts, align):
    """(the kernels' routing, torch's) of `ids` on the GPU, the allocator poisoned first so that
    a slot the kernels leave unwritten shows."""
    from tmakit.moe import call

    assert call.routes_by_kernel(ids, experts, align)
    poison_the_allocator(torch, 8 * ids.numel() + (1 << 16))
    return call.route_ids_by_kernel(ids, experts, align), call.route_ids_by_torch(ids, experts, align)


@pytest.mark.parametrize("tokens, topk, experts, align", ROUTING_CASES + LARGE_ROUTINGS)
@pytest.mark.parametrize("ids_dtype", ["int32", "int64"])
def test_the_routing_kernels_route_as_torch_does(torch, tokens, topk, experts, align, ids_dtype):
    rng = random.Random(tokens * 131 + experts * 7 + align)
    ids = routing_ids(rng, tokens, topk, experts, getattr(torch, ids_dtype)).cuda()
    got, expected = route_both(torch, ids, experts, align)
    assert_routings_equal(got, expected, f"{tokens} x top-{topk} of {experts}, align {align}, {ids_dtype}")
    clean = torch.randint(0, experts, (tokens, topk), device="cuda", dtype=getattr(torch, ids_dtype))
    got, expected = route_both(torch, clean, experts, align)  # every slot routed, none dropped
    assert_routings_equal(got, expected, f"clean {tokens} x top-{topk} of {experts}, align {align}")
    assert int(got.dropped) == 0


def test_one_compiled_routing_serves_every_size_and_a_strided_view(torch):
    from tmakit.moe import call

    rng = random.Random(3)
    for tokens in (1, 5, 2048, 2049, 40000, 3):
        ids = routing_ids(rng, tokens, 2, 8, torch.int32).cuda()
        assert_routings_equal(*route_both(torch, ids, 8, 16), f"{tokens} tokens")
    wide = routing_ids(rng, 999, 6, 8, torch.int64).cuda()[:, ::2]  # not contiguous
    assert_routings_equal(*route_both(torch, wide, 8, 16), "a strided view")
    assert call.route_ids(wide, 8, 16).row_map.shape == (999, 3)
    assert not call.routes_by_kernel(wide, 1025, 1)  # more experts than the kernels count: torch's
    assert_routings_equal(call.route_ids(wide, 1025, 1), call.route_ids_by_torch(wide, 1025, 1), "1025")


def test_the_routing_kernels_in_a_cuda_graph_route_each_replays_ids(torch):
    from tmakit.moe import call

    rng = random.Random(11)
    tokens, topk, experts, align = 16384, 8, 256, 128
    ids = routing_ids(rng, tokens, topk, experts, torch.int64).cuda()
    call.route_ids_by_kernel(ids, experts, align)  # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = call.route_ids(ids, experts, align)
    torch.cuda.current_stream().wait_stream(stream)
    for replay in range(3):
        ids.copy_(routing_ids(rng, tokens, topk, experts, torch.int64, spoiled=0.05 * replay).cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert_routings_equal(captured, call.route_ids_by_torch(ids, experts, align), f"replay {replay}")


def test_moe_dispatch_routes_through_the_kernels_and_a_trace_through_torch(torch, monkeypatch):
    from tmakit.moe import call

    taken = []
    kernel = call.route_ids_by_kernel
    monkeypatch.setattr(call, "route_ids_by_kernel", lambda *args: taken.append(args[1:]) or kernel(*args))
    x = hashed(torch, (64, 256), torch.bfloat16)
    ids = torch.randint(0, 8, (64, 2), device="cuda")
    eager = tmakit.moe_dispatch(x, ids, num_experts=8, align=16)
    assert taken == [(8, 16)]
    assert_routings_equal(
        (eager.row_map, eager.tokens_per_expert, eager.expert_offsets, eager.dropped),
        call.route_ids_by_torch(ids, 8, 16),
        "moe_dispatch",
    )
    compiled = torch.compile(lambda x, ids: tmakit.moe_dispatch(x, ids, num_experts=8, align=16).row_map)
    assert torch.equal(compiled(x, ids), eager.row_map) and taken == [(8, 16)]  # traced: torch's sort


# -- the dispatch that quantizes to fp8 ----------------------------------------------------------
QUANTIZE_CASES = [  # tokens, topk, experts, hidden, dtype, align, ids dtype, scale format
    (200, 8, 16, 7168, "bfloat16", 1, "int32", "fp32"),
    (200, 8, 16, 7168, "bfloat16", 128, "int64", "ue8m0"),
    (1, 1, 4, 128, "bfloat16", 1, "int32", "fp32"),
    (333, 6, 64, 2048, "float16", 16, "int32", "fp32"),
    (97, 2, 8, 4096, "float16", 1, "int64", "ue8m0"),
    (65, 32, 40, 256, "bfloat16", 1, "int32", "fp32"),
]


def spread(torch, tokens, hidden, dtype):
    """Values over many binades (a row's scale from 1e-6 to 1e4), with all-zero blocks, tiny
    values beside large ones in a block (e4m3's subnormals) and exact ties of rounding."""
    values = torch.randn(tokens, hidden, device="cuda", generator=torch.Generator("cuda").manual_seed(7))
    values *= torch.logspace(-6, 4, tokens, device="cuda").view(-1, 1)
    values[:, ::97] *= 1e-4  # tiny beside large: below e4m3's least normal once scaled
    values[::5, :128] = 0  # all-zero blocks: amax takes the floor
    return values.to(getattr(torch, dtype))


def check_quantized(torch, x, result, ids_rows, experts, align, scale_format):
    """out and scales bit for bit against torch's reference quantizer (`quantize_rows_by_torch`)
    scattered by the plain-Python row map: a slot's row holds its token's e4m3 bytes and scales,
    every other row zero bytes and scale 0."""
    from tmakit.moe.call import quantize_rows_by_torch

    row_map, _, _ = expected_rows(ids_rows, experts, align)
    assert result.row_map.tolist() == row_map
    quantized, scales = quantize_rows_by_torch(x, scale_format)
    rows = result.out.shape[0]
    blocks = x.shape[1] // 128
    expected = torch.zeros((rows, x.shape[1]), dtype=torch.uint8, device="cuda")
    scale_dtype = torch.uint8 if scale_format == "ue8m0" else torch.float32
    expected_scales = torch.zeros((rows, blocks), dtype=scale_dtype, device="cuda")
    raw_scales = scales.view(torch.uint8) if scale_format == "ue8m0" else scales
    for token, slots in enumerate(row_map):
        for row in slots:
            if row >= 0:
                expected[row] = quantized[token].view(torch.uint8)
                expected_scales[row] = raw_scales[token]
    assert result.out.dtype == torch.float8_e4m3fn
    got_scales = result.scales
    assert got_scales.shape == (rows, blocks) and got_scales.stride(0) == 1
    lead = got_scales.stride(1)
    assert lead >= rows and (lead * got_scales.element_size()) % 16 == 0  # TMA-aligned columns
    wrong = (result.out.view(torch.uint8) != expected).any(1)
    if wrong.any():
        first = int(wrong.nonzero()[0, 0])
        column = int((result.out[first].view(torch.uint8) != expected[first]).nonzero()[0, 0])
        pytest.fail(
            f"fp8 row {first} of {rows} wrong from block {column // 128} ({int(wrong.sum())} rows wrong)"
        )
    raw = got_scales.view(torch.uint8) if scale_format == "ue8m0" else got_scales
    bad = (raw != expected_scales).any(1)
    if bad.any():
        pytest.fail(f"scales of row {int(bad.nonzero()[0, 0])} wrong ({int(bad.sum())} rows wrong)")


@pytest.mark.parametrize("tokens,topk,experts,hidden,dtype,align,ids_dtype,scale_format", QUANTIZE_CASES)
def test_the_fp8_dispatch_is_the_reference_quantizer_bit_for_bit(
    torch, tokens, topk, experts, hidden, dtype, align, ids_dtype, scale_format
):
    rng = random.Random(tokens * 31 + hidden)
    ids_rows, ids = random_ids(torch, rng, tokens, topk, experts, getattr(torch, ids_dtype))
    x = spread(torch, tokens, hidden, dtype)
    rows = tokens * topk + experts * (align - 1)
    poison_the_allocator(torch, rows * hidden * 2)
    result = tmakit.moe_dispatch(
        x, ids, num_experts=experts, align=align, quantize="fp8", scale_format=scale_format, strict=True
    )
    from tmakit.moe.call import facts
    from tmakit.moe.plan import QUANTIZE_OP, moe_route

    path = moe_route(facts(QUANTIZE_OP, x, rows, result.row_map))
    assert path.by_tma, path.reason
    check_quantized(torch, x, result, ids_rows, experts, align, scale_format)


def test_the_fp8_dispatch_of_a_mask_and_in_a_cuda_graph(torch):
    """Tokens routed to no expert (a mask's empty rows) and an expert with no token; then the
    same call captured in a CUDA graph and replayed on new values, still bit for bit."""
    tokens, experts, topk, hidden = 300, 12, 4, 1024
    generator = torch.Generator("cuda").manual_seed(3)
    mask = torch.rand(tokens, experts, device="cuda", generator=generator) < 0.2
    mask[:, 5] = False  # an expert no token takes
    mask[::7] = False  # tokens routed to no expert
    mask &= torch.rand(tokens, experts, device="cuda", generator=generator).argsort(1).argsort(1) < topk
    ids_rows = mask_ids(mask.tolist(), topk)
    x = spread(torch, tokens, hidden, "bfloat16")
    result = tmakit.moe_dispatch(x, mask, topk=topk, quantize="fp8", strict=True)
    check_quantized(torch, x, result, ids_rows, experts, 1, "fp32")
    ids = torch.tensor([[e if e >= 0 else 0 for e in row] for row in ids_rows], device="cuda")
    ids_rows = [[e if e >= 0 else 0 for e in row] for row in ids_rows]
    static_x = x.clone()
    tmakit.moe_dispatch(static_x, ids, num_experts=experts, quantize="fp8", scale_format="ue8m0", strict=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = tmakit.moe_dispatch(
            static_x, ids, num_experts=experts, quantize="fp8", scale_format="ue8m0", strict=True
        )
    static_x.copy_(spread(torch, tokens, hidden, "bfloat16").flip(0))
    graph.replay()
    torch.cuda.synchronize()
    check_quantized(torch, static_x, captured, ids_rows, experts, 1, "ue8m0")


def test_the_fp8_dispatch_traces_with_its_fake(torch):
    tokens, experts, topk, hidden = 64, 8, 2, 512
    x = spread(torch, tokens, hidden, "bfloat16")
    ids = torch.randint(0, experts, (tokens, topk), device="cuda", dtype=torch.int32)

    def layer(x, ids):
        routed = tmakit.moe_dispatch(x, ids, num_experts=experts, quantize="fp8", check_ids=False)
        return routed.out, routed.scales

    compiled = torch.compile(layer, fullgraph=True)
    got, eager = compiled(x, ids), layer(x, ids)
    assert got[0].dtype == torch.float8_e4m3fn and got[1].shape == eager[1].shape
    assert torch.equal(got[0].view(torch.uint8), eager[0].view(torch.uint8))
    assert torch.equal(got[1], eager[1])
