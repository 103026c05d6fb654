"""Many tensors, one launch on the device (`tmakit.copy_many_`, `pack`, `unpack_`): random lists
exact against torch's copies (poisoned destinations, position-dependent sources, the bytes around
each destination guarded), odd sizes with tails, mixed dtypes and layouts, empty tensors, the
drop-in paths beside the grouped one, and a CUDA-graph replay."""

from __future__ import annotations

import math
import random

import pytest

import tmakit

pytestmark = pytest.mark.gpu
POISON = 0x5A
DTYPES = ("float32", "float16", "bfloat16", "int8", "int64", "bool", "float64", "complex64")


def guarded(shape, dtype, rng, transposed=False):
    """A poisoned tensor inside poisoned memory: (tensor, memory, span of the tensor in bytes)."""
    import torch

    element = torch.empty(0, dtype=dtype).element_size()
    count = 1
    for extent in shape:
        count *= extent
    pad = rng.choice((0, 16, 48)) if rng.random() < 0.8 else rng.choice((1, 2, 4)) * element
    memory = torch.full((pad + count * element + 64,), POISON, dtype=torch.uint8, device="cuda")
    flat = memory[pad : pad + count * element].view(dtype)
    if transposed and len(shape) == 2:
        return flat.view(shape[::-1]).t(), memory, (pad, pad + count * element)
    return flat.view(shape), memory, (pad, pad + count * element)


def source(shape, dtype, seed):
    import torch

    count = 1
    for extent in shape:
        count *= extent
    values = (torch.arange(count, device="cuda", dtype=torch.int64) * 2654435761 + seed) % 251
    if dtype == torch.bool:
        return (values % 2 == 1).reshape(shape)
    if dtype.is_complex:
        return torch.complex(values.float(), -values.float()).to(dtype).reshape(shape)
    return values.to(dtype).reshape(shape)


def check_list(rng, count, seed):
    import torch

    dsts, srcs, guards = [], [], []
    for i in range(count):
        dtype = getattr(torch, rng.choice(DTYPES))
        rank = rng.choice((1, 2, 3))
        shape = tuple(rng.choice((0, 1, 3, 7, 16, 129, 1000)) for _ in range(rank))
        while math.prod(shape) > 1 << 20:  # a million elements at most: many lists, little memory
            shape = shape[1:]
        if rng.random() < 0.1:
            shape = (rng.randrange(1, 300_000),)  # chunks of 32 KiB and a tail
        dst, memory, span = guarded(shape, dtype, rng, transposed=rng.random() < 0.1)
        dsts.append(dst)
        srcs.append(source(shape, dtype, seed + i))
        guards.append((memory, memory.clone(), span))
    tmakit.copy_many_(dsts, srcs, grouped=True)
    torch.cuda.synchronize()
    for i, (dst, src, (memory, before, (start, end))) in enumerate(zip(dsts, srcs, guards, strict=True)):
        assert torch.equal(dst, src), f"list of {count}, pair {i}: {tuple(dst.shape)} {dst.dtype} differs"
        assert torch.equal(memory[:start], before[:start]) and torch.equal(memory[end:], before[end:]), (
            f"list of {count}, pair {i}: bytes around the destination written"
        )


def test_two_hundred_random_lists_match_torch():
    rng = random.Random(34)
    for case in range(200):
        count = rng.choice((1, 2, 5, 40, 300)) if case % 50 else 2000
        check_list(rng, count, case * 7919)


def test_pack_and_unpack_round_trip_and_match_cat():
    import torch

    shapes = [(4096, 64), (1000,), (3, 5), (0,), (11008, 16), (7,)]
    tensors = [source(shape, torch.bfloat16, i) for i, shape in enumerate(shapes)]
    flat, offsets = tmakit.pack(tensors, grouped=True)
    for tensor, offset in zip(tensors, offsets, strict=True):
        assert offset * 2 % 16 == 0
        assert torch.equal(flat[offset : offset + tensor.numel()], tensor.reshape(-1))
    back = [torch.full_like(t, 7) for t in tensors]
    tmakit.unpack_(flat, back, grouped=True)
    assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True))
    dense = [source((rng_size,), torch.float32, rng_size) for rng_size in (8, 16, 1024)]  # 16-byte multiples
    flat, _ = tmakit.pack(dense, grouped=True)
    assert torch.equal(flat, torch.cat(dense))


def test_a_list_packed_again_takes_its_kept_table_on_every_buffer():
    """The second `pack` of a list launches its kept table on a new buffer, on an `out` given,
    and (an `out` sharing bytes with a tensor) falls back; `unpack_` likewise into poisoned
    tensors from two buffers; random odd sizes with tails, in graphs too."""
    import torch

    from tmakit.many import kept as many_kept

    rng = random.Random(35)
    for case in range(20):
        dtype = getattr(torch, rng.choice(("bfloat16", "float32", "int8", "float64")))
        shapes = [(rng.choice((0, 1, 3, 17, 1000, 40_000)),) for _ in range(rng.choice((1, 7, 300)))]
        tensors = [source(shape, dtype, case * 101 + i) for i, shape in enumerate(shapes)]
        first, offsets = tmakit.pack(tensors)
        kept = many_kept.kept_packing(torch, tensors, "destination", True)
        assert kept is not None and kept.offsets == offsets, f"case {case}: the list's table was not kept"
        out = torch.full_like(first, 5)
        again, again_offsets = tmakit.pack(tensors, out=out)
        fresh, _ = tmakit.pack(tensors)
        assert again is out and again_offsets == offsets and torch.equal(fresh, first)
        for tensor, offset in zip(tensors, offsets, strict=True):
            span = slice(offset, offset + tensor.numel())
            assert torch.equal(out[span], tensor.reshape(-1)), f"case {case}: a span of `out` differs"
        back = [torch.full_like(t, 7) for t in tensors]
        tmakit.unpack_(first, back)
        for poisoned in back:
            poisoned.fill_(3)
        tmakit.unpack_(out, back)  # the kept table, another buffer
        assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True)), f"case {case}"
    # an `out` that holds a tensor: the kept table refuses it, the pairs are copied in order
    flat = torch.zeros(1 << 16, dtype=torch.float32, device="cuda")
    inside = [flat[:4096], flat[8192:8200]]
    inside[0].copy_(torch.arange(4096.0, device="cuda"))
    inside[1].copy_(torch.arange(8.0, device="cuda") + 1)
    expected = torch.cat(inside)
    tmakit.pack(inside)  # kept
    packed, _ = tmakit.pack(inside, out=flat)
    assert torch.equal(packed[: 4096 + 8], expected), "an out holding its own tensors"
    graph, static = torch.cuda.CUDAGraph(), [source((5000,), torch.bfloat16, 9)]
    out = torch.empty(5000, dtype=torch.bfloat16, device="cuda")
    tmakit.pack(static, out=out)  # kept before the capture
    with torch.cuda.graph(graph):
        tmakit.pack(static, out=out)
    out.zero_()
    static[0].copy_(source((5000,), torch.bfloat16, 10))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, static[0])


def test_a_captured_grouped_copy_replays_with_new_values():
    import torch

    srcs = [source((1000 + i,), torch.float32, i) for i in range(50)]
    dsts = [torch.empty_like(s) for s in srcs]
    tmakit.copy_many_(dsts, srcs, grouped=True)  # the table is kept: the capture encodes nothing
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tmakit.copy_many_(dsts, srcs, grouped=True)
    for s in srcs:
        s.add_(1)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    fresh = [torch.empty_like(s) for s in srcs]  # no table kept: captured as torch's copies
    second = torch.cuda.CUDAGraph()
    with torch.cuda.graph(second):
        tmakit.copy_many_(fresh, srcs, grouped=True)
    second.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(d, s) for d, s in zip(fresh, srcs, strict=True))


def test_a_prepared_grouped_copy_runs_eagerly_and_in_a_graph_and_refuses_moved_tensors():
    import torch

    rng = random.Random(7)
    srcs = [source((rng.randrange(1, 70_000),), torch.bfloat16, i) for i in range(300)]
    dsts = [torch.full_like(s, float("nan")) for s in srcs]
    prepared = tmakit.GroupedCopy(dsts, srcs)
    assert prepared._route.launches, "the pairs take the grouped kernel"
    prepared()
    torch.cuda.synchronize()
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        prepared()
        with pytest.raises(tmakit.TmaConfigError, match="inside a CUDA-graph capture"):
            tmakit.GroupedCopy(dsts, srcs)
    for s in srcs:
        s.add_(3)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    srcs[17].untyped_storage().resize_(0)  # freed under it, as FSDP frees a shard
    with pytest.raises(tmakit.TmaConfigError, match=r"srcs\[17\] moved"):
        prepared()


def test_overlapping_pairs_copy_in_order_or_are_refused():
    """Pairs that share bytes never race in one launch: a chain copies one pair at a time in the
    list's order, a pair onto itself moves nothing, a pair overlapping its own source is refused."""
    import torch

    buf = source((3 * 4096,), torch.float32, 1)
    a, b, c = buf[:4096], buf[4096:8192], buf[8192:]
    old_b, old_c = b.clone(), c.clone()
    tmakit.copy_many_([a, b, c], [b, c, c])  # a <- b, then b <- c, c onto itself
    torch.cuda.synchronize()
    assert torch.equal(a, old_b) and torch.equal(b, old_c) and torch.equal(c, old_c)
    with pytest.raises(tmakit.TmaConfigError):
        tmakit.copy_many_([buf[4:]], [buf[:-4]])
    wide = source((4096,), torch.float64, 2)  # one destination by two paths: the later pair wins
    tmakit.copy_many_([a, a], [wide, c])
    torch.cuda.synchronize()
    assert torch.equal(a, c)


def test_a_list_refused_by_its_last_pair_writes_nothing_on_the_gpu():
    """Grouped pairs first, a pair torch's copy_ refuses last: refused before the grouped launch,
    every destination's memory as it was; the ops refuse a pair no TMA path serves (strict)."""
    import torch

    import tmakit.ops  # noqa: F401  registers the ops

    rng = random.Random(61)
    guarded_pairs = [guarded((129, 16), torch.float32, rng) for _ in range(3)]
    dsts = [tensor for tensor, _, _ in guarded_pairs] + [torch.zeros(3, device="cuda")]
    srcs = [source((129, 16), torch.float32, seed) for seed in range(3)] + [torch.ones(5, device="cuda")]
    memories = [memory.clone() for _, memory, _ in guarded_pairs]
    for call in (
        lambda: tmakit.copy_many_(dsts, srcs),
        lambda: tmakit.GroupedCopy(dsts, srcs)(),
        lambda: torch.ops.tmakit.copy_many_(dsts, srcs),
    ):
        with pytest.raises(tmakit.TmaConfigError, match=r"dsts\[3\]|srcs\[3\]"):
            call()
        torch.cuda.synchronize()
        assert all(torch.equal(m, b) for (_, m, _), b in zip(guarded_pairs, memories, strict=True))
        assert not dsts[3].any()
    with pytest.raises(tmakit.TmaConfigError, match="strict=True"):
        torch.ops.tmakit.copy_many_(dsts[:1], [srcs[0].double()])
