"""An SM budget on the device: every budgeted op exact for k in {1, 8, 16, 32, the SM count}
(position-dependent inputs, poisoned outputs, every element compared), a captured graph of a
budgeted op replaying on its budget, the context equal to `sms=`, a budget past the GPU refused
naming its SM count before anything is written."""

import pytest

import tmakit
from tmakit import TmaConfigError

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


def sm_count() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def budgets() -> list[int]:
    return [1, 8, 16, 32, sm_count()]


def positions(shape, dtype=torch.float16) -> torch.Tensor:
    """Each element's own position, as exact integers of `dtype` (bits where its range ends)."""
    count = 1
    for extent in shape:
        count *= extent
    values = torch.arange(count, device="cuda", dtype=torch.int64) % 2039
    return values.to(dtype).reshape(shape)


def poisoned(shape, dtype=torch.float16) -> torch.Tensor:
    out = torch.empty(shape, device="cuda", dtype=dtype)
    out.view(torch.uint8).fill_(0xFF)
    return out


def first_wrong(out: torch.Tensor, want: torch.Tensor) -> str:
    wrong = (out.view(torch.int16) != want.view(torch.int16)).nonzero()
    return "exact" if wrong.numel() == 0 else f"first wrong element at {tuple(wrong[0].tolist())}"


@pytest.mark.parametrize("strict", [False, True], ids=["engine", "tma"])
def test_budgeted_copies_are_exact_on_every_budget(strict):
    x = positions((3000, 1536))
    for sms in budgets():
        out = poisoned(x.shape)
        tmakit.copy_(out, x, sms=sms, strict=strict)  # same layout: the copy engine, or TMA when strict
        assert torch.equal(out.view(torch.int16), x.view(torch.int16)), (sms, first_wrong(out, x))
        transposed = poisoned((1536, 3000))
        tmakit.copy_(transposed, x.t(), sms=sms, strict=True)
        assert torch.equal(transposed, x.t()), (sms, first_wrong(transposed, x.t().contiguous()))
    route = tmakit.copy_path(out, x, sms=16)
    assert route.path == "torch" and "copy engine" in route.reason


def test_budgeted_reduce_stores_and_rows_are_exact_on_every_budget():
    table = positions((4096, 256), torch.float32)
    index = torch.randperm(4096, device="cuda")[:3000]
    repeated = torch.randint(0, 512, (3000,), device="cuda")
    for sms in budgets():
        dst = positions((3000, 1024), torch.float32)
        src = positions((3000, 1024), torch.float32) * 2
        want = dst + src
        tmakit.add_(dst, src, sms=sms, strict=True)
        assert torch.equal(dst, want), sms
        out = poisoned((3000, 256), torch.float32)
        tmakit.gather_rows(table, index, out, sms=sms, strict=True)
        assert torch.equal(out, table[index]), sms
        scattered = poisoned((4096, 256), torch.float32)
        tmakit.scatter_rows_(scattered, index, table[:3000], sms=sms, strict=True)
        assert torch.equal(scattered[index], table[:3000]), sms
        sums = torch.zeros(512, 256, device="cuda")
        tmakit.index_add_(sums, repeated, table[:3000], sms=sms, strict=True)
        assert torch.equal(sums, torch.zeros_like(sums).index_add_(0, repeated, table[:3000])), sms


def test_the_context_is_the_calls_budget_and_a_graph_replays_on_it():
    x = positions((2048, 2048))
    out = poisoned((2048, 2048))
    with tmakit.sm_budget(8):
        tmakit.copy_(out, x.t(), strict=True)
    assert torch.equal(out, x.t())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        tmakit.copy_(out, x.t(), sms=16, strict=True)  # compiled before the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tmakit.copy_(out, x.t(), sms=16, strict=True)
    for _ in range(3):
        out.view(torch.uint8).fill_(0xFF)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, x.t())


def test_a_budget_past_the_gpu_is_refused_before_anything_is_written():
    count = sm_count()
    x = positions((1024, 1024))
    out = poisoned((1024, 1024))
    before = out.clone()
    for call in (
        lambda: tmakit.copy_(out, x.t(), sms=count + 1),
        lambda: tmakit.add_(out, x, sms=count + 1),
        lambda: tmakit.gather_rows(x, torch.arange(4, device="cuda"), out[:4], sms=count + 1),
    ):
        with pytest.raises(TmaConfigError, match=f"this GPU has {count} SMs"):
            call()
        assert torch.equal(out.view(torch.int16), before.view(torch.int16))


def test_budgeted_lists_im2col_and_moe_are_exact_on_every_budget():
    srcs = [positions((n, 64), torch.float32) for n in (1, 1000, 37, 4096, 3)]
    x = positions((4, 28, 28, 64))
    want = tmakit.im2col(x, 3, padding=1, strict=True)
    tokens = positions((4096, 1024), torch.bfloat16)
    ids = torch.randint(0, 8, (4096, 2), device="cuda", dtype=torch.int32)
    reference = tmakit.moe_dispatch(tokens, ids, num_experts=8, strict=True)
    combined = tmakit.moe_combine(reference.out, reference.row_map, strict=True)
    for sms in budgets():
        dsts = [torch.full_like(t, float("nan")) for t in srcs]
        tmakit.copy_many_(dsts, srcs, sms=sms, strict=True)
        assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True)), sms
        flat, _ = tmakit.pack(srcs, sms=sms, strict=True)
        back = [torch.full_like(t, float("nan")) for t in srcs]
        tmakit.unpack_(flat, back, sms=sms, strict=True)
        assert all(torch.equal(b, s) for b, s in zip(back, srcs, strict=True)), sms
        out = poisoned(want.shape)
        tmakit.im2col(x, 3, padding=1, out=out, sms=sms, strict=True)
        assert torch.equal(out, want), (sms, first_wrong(out, want))
        routed = tmakit.moe_dispatch(tokens, ids, num_experts=8, sms=sms, strict=True)
        assert torch.equal(routed.out.view(torch.int16), reference.out.view(torch.int16)), sms
        summed = tmakit.moe_combine(routed.out, routed.row_map, sms=sms, strict=True)
        assert torch.equal(summed.view(torch.int16), combined.view(torch.int16)), sms
