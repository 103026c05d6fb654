"""`tmakit.enable()` on the CPU: the overrides installed under torch's own aten ops (here on the
CPU key, which the CUDA key's kernels mirror), every call a family's `serve` hands back served by
the kernel that was there, a served call's result returned, no re-entry into an override from
inside a `serve`, the counts per op and path, the names checked, and torch's kernels back after
`disable`. Small models written in torch expressions give the same outputs and gradients with
and without the overrides. The GPU tests run the same on a Hopper, bit for bit."""

from __future__ import annotations

import pytest

import tmakit
from tmakit import TmaConfigError

torch = pytest.importorskip("torch")
from tmakit import overrides  # noqa: E402  imports torch

CPU = "CPU"


@pytest.fixture(autouse=True)
def clean():
    overrides.disable()
    overrides.stats(reset=True)
    yield
    overrides.disable()
    overrides.stats(reset=True)


def test_every_family_override_is_listed_and_names_are_checked():
    assert {"copy_", "index_select", "index_add_", "index_copy_", "index_reduce_"} <= set(
        overrides.available()
    )
    with pytest.raises(TmaConfigError, match=r"'nope' is not an op tmakit overrides; it overrides .*copy_"):
        tmakit.enable(["nope"])
    with pytest.raises(TmaConfigError, match="ops is a list of aten op names"):
        tmakit.enable(3)
    assert tmakit.disable() == []


def test_calls_a_serve_hands_back_run_torchs_kernel_and_are_counted_with_why():
    x = torch.arange(12.0).reshape(3, 4)
    table = torch.arange(40.0).reshape(10, 4)
    index = torch.tensor([3, 0, 9])
    assert overrides.enable(["copy_", "index_select"], key=CPU) == ["copy_", "index_select"]
    out = torch.empty(4, 3).copy_(x.t())
    assert torch.equal(out, x.t()) and torch.equal(x.t().contiguous(), x.t())
    assert torch.equal(table.index_select(0, index), table[[3, 0, 9]])
    counts = tmakit.stats()
    assert counts[("copy_", "torch", "not two dense CUDA tensors")] >= 2
    assert counts[("index_select", "torch", "not dense CUDA tensors")] == 1
    assert tmakit.disable() == []
    torch.empty(4, 3).copy_(x.t())
    assert tmakit.stats() == counts  # torch's kernel again: nothing counted


def test_a_served_call_returns_what_serve_returns_and_a_serve_never_reenters(monkeypatch):
    """A stand-in serve on the CPU: it serves index_select by calling index_select itself (as a
    family's fallback to torch's op would), which the guard sends to the kept kernel."""
    calls = []

    def serve(table, dim, index):
        calls.append(index.numel())
        return torch.index_select(table, dim, index) * 1  # re-enters aten::index_select

    monkeypatch.setattr(overrides, "available", lambda: {"index_select": serve})
    table = torch.arange(40.0).reshape(10, 4)
    with overrides.enabled(key=CPU) as installed:
        assert installed == ["index_select"]
        got = table.index_select(0, torch.tensor([1, 1, 7]))
    assert torch.equal(got, table[[1, 1, 7]]) and calls == [3]  # one serve: the inner call was torch's
    assert tmakit.stats() == {("index_select", "tmakit", ""): 1}
    assert overrides.disable() == []


def test_a_serve_that_fails_hands_its_call_to_torchs_kernel_warning_once(monkeypatch):
    def serve(table, dim, index):
        raise RuntimeError("a launch failed")

    monkeypatch.setattr(overrides, "available", lambda: {"index_select": serve})
    table = torch.arange(40.0).reshape(10, 4)
    with overrides.enabled(key=CPU):
        with pytest.warns(RuntimeWarning, match="index_select handed to torch's kernel: a launch failed"):
            first = table.index_select(0, torch.tensor([2, 5]))
        second = table.index_select(0, torch.tensor([9]))  # counted, not warned again
    assert torch.equal(first, table[[2, 5]]) and torch.equal(second, table[[9]])
    assert tmakit.stats() == {("index_select", "torch", "tmakit's path failed: RuntimeError"): 2}


def test_enable_names_the_torch_it_needs_where_torch_lacks_get_kernel(monkeypatch):
    monkeypatch.delattr(torch.library, "get_kernel")
    with pytest.raises(TmaConfigError, match=r"needs torch 2\.9 or newer"):
        tmakit.enable()


def test_enabled_removes_only_what_it_installed():
    rows_ops = {"index_select", "index_add_", "index_add", "index_copy_", "index_reduce_"}
    overrides.enable(["copy_"], key=CPU)
    with overrides.enabled(key=CPU) as installed:
        assert installed == ["copy_", *sorted(rows_ops)]
    assert overrides.disable([]) == ["copy_"]  # the outer enable's stays


def test_the_rows_overrides_rules_on_cpu_tensors_standing_in_for_a_hoppers(monkeypatch):
    """The rows overrides' rules (`tmakit.rows.op`) on CPU tensors standing in for CUDA ones: a
    call they hand back names its reason and launches nothing; a call the route takes (a stand-in
    of `kernel_below_autograd` that records what it is given, or refuses) launches once, on
    tensors holding no autograd record, and the serve writes nothing itself."""
    from tmakit.rows import op as rows_op

    launched, refusing = [], {"max"}

    def kernel_below_autograd(op, table, index, compact):
        if op in refusing:
            return f"the route refuses {op}"
        return lambda: launched.append((op, table, index, compact))

    monkeypatch.setattr(rows_op, "on_cuda", lambda *tensors: True)
    monkeypatch.setattr(rows_op, "kernel_below_autograd", kernel_below_autograd)
    dst, src = torch.zeros(8, 4), torch.ones(3, 4)
    index = torch.tensor([1, 5, 1])

    def handed(result, reason):
        assert isinstance(result, overrides.HandedBack) and result.reason == reason, result
        assert not launched and torch.equal(dst, torch.zeros(8, 4))

    handed(rows_op.serve_index_add_(dst, 0, index, src, alpha=2), rows_op.ALPHA.reason)
    handed(rows_op.serve_index_add_(dst, 0, index, src, alpha=True), rows_op.ALPHA.reason)
    handed(rows_op.serve_index_add_(dst, 1, index, src), rows_op.NOT_ROWS.reason)
    handed(rows_op.serve_index_add_(dst, 0, index.view(3, 1), src), rows_op.NOT_ROWS.reason)
    strided = torch.tensor([1, 0, 5, 0, 1, 0])[::2]
    handed(rows_op.serve_index_add_(dst, 0, strided, src), rows_op.STRIDED_INDEX.reason)
    handed(rows_op.serve_index_add_(dst, 0, index.float(), src), rows_op.NOT_TAKEN.reason)
    handed(rows_op.serve_index_add_(dst, 0, index, src.double()), rows_op.NOT_ITS_SOURCE.reason)
    handed(rows_op.serve_index_add_(dst, 0, index, src[:2]), rows_op.NOT_ITS_SOURCE.reason)
    handed(rows_op.serve_index_add_(dst, 0, index, dst[:3]), rows_op.SHARED_MEMORY.reason)
    handed(rows_op.serve_index_add_(dst[:1].expand(8, 4), 0, index, src), rows_op.SHARED_MEMORY.reason)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        handed(rows_op.serve_index_add_(dst, 0, index, src), rows_op.DETERMINISTIC.reason)
    finally:
        torch.use_deterministic_algorithms(before)
    handed(rows_op.serve_index_copy_(dst, 0, index.int(), src), rows_op.INT32_COPY_INDEX.reason)
    handed(rows_op.serve_index_reduce_(dst, 0, index, src, "prod"), rows_op.REDUCE.reason)
    handed(rows_op.serve_index_reduce_(dst, 0, index, src, "amax", include_self=False), rows_op.REDUCE.reason)
    handed(rows_op.serve_index_reduce_(dst, 0, index, src, "amax"), "the route refuses max")
    handed(rows_op.serve_index_add(dst, 0, index, src, alpha=3), rows_op.ALPHA.reason)
    wide = torch.zeros(8, 4, dtype=torch.uint32)
    handed(rows_op.serve_index_add_(wide, 0, index, src.to(torch.uint32)), rows_op.NOT_TORCHS_DTYPE.reason)

    leaf = torch.zeros(8, 4, requires_grad=True)
    assert rows_op.serve_index_add_(leaf, -2, index, src) is leaf
    assert rows_op.serve_index_copy_(dst, 0, index, src) is dst
    assert rows_op.serve_index_reduce_(dst, 0, index, src, "amin") is dst
    table = torch.arange(32.0).view(8, 4)
    added = rows_op.serve_index_add(table, 0, index, src)  # a new tensor: the table copied, then added into
    gathered = rows_op.serve_index_select(table, 0, index)
    assert [(op, tuple(c.shape)) for op, _, _, c in launched] == [
        ("add", (3, 4)),
        ("scatter", (3, 4)),
        ("min", (3, 4)),
        ("add", (3, 4)),
        ("gather", (3, 4)),
    ]
    assert not launched[0][1].requires_grad and launched[0][1].data_ptr() == leaf.data_ptr()
    assert launched[3][1] is added and torch.equal(added, table) and added.data_ptr() != table.data_ptr()
    assert launched[4][3] is gathered and torch.equal(dst, torch.zeros(8, 4))


def test_a_served_add_that_fails_at_its_launch_is_raised_not_handed_back(monkeypatch):
    """Through the override's kernel (`overrides._kernel`, the kept kernel a stand-in): a copy's
    launch that fails is handed to torch's kernel (it writes the same rows again); an add's is
    raised, for torch's kernel would add the rows a second time."""
    from types import SimpleNamespace

    from tmakit.rows import op as rows_op

    def failing(op, table, index, compact):
        def run():
            raise RuntimeError("the launch failed")

        return run

    monkeypatch.setattr(rows_op, "on_cuda", lambda *tensors: True)
    monkeypatch.setattr(rows_op, "kernel_below_autograd", failing)
    kept_calls = []
    kept = SimpleNamespace(call_boxed=lambda keyset, *args, **kwargs: kept_calls.append(args[0]) or args[0])
    dst, src, index = torch.zeros(8, 4), torch.ones(3, 4), torch.tensor([1, 5, 1])
    copy_kernel = overrides._kernel("index_copy_", rows_op.serve_index_copy_, kept)
    with pytest.warns(RuntimeWarning, match="the launch failed"):
        assert copy_kernel(None, dst, 0, index, src) is dst and kept_calls == [dst]
    add_kernel = overrides._kernel("index_add_", rows_op.serve_index_add_, kept)
    with pytest.raises(rows_op.AddedBeforeRaising, match="the launch failed"):
        add_kernel(None, dst, 0, index, src)
    assert kept_calls == [dst]  # the add was not handed back


def tiny_moe(x, router, experts):
    """An MoE layer in torch expressions: top-2 routing, index_select dispatch, an mm per
    expert, index_add_ combine, a transposing copy for the heads."""
    probs, ids = torch.softmax(x @ router, -1).topk(2, dim=-1)
    out = torch.zeros_like(x)
    for e, weight in enumerate(experts):
        token, slot = (ids == e).nonzero(as_tuple=True)
        rows = x.index_select(0, token) @ weight
        out = out.index_add(0, token, rows * probs[token, slot, None])
    out = out.clone().index_add_(0, torch.arange(x.shape[0] - 1, -1, -1), out.detach())
    return out.view(x.shape[0], 4, -1).transpose(0, 1).contiguous()


def test_a_small_model_is_the_same_with_and_without_the_overrides_forward_and_backward():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 16, generator=generator, requires_grad=True)
    router = torch.randn(16, 4, generator=generator, requires_grad=True)
    experts = [torch.randn(16, 16, generator=generator, requires_grad=True) for _ in range(4)]

    def run():
        out = tiny_moe(x, router, experts)
        grads = torch.autograd.grad(out.square().sum(), (x, router, *experts))
        return out.detach(), grads

    without = run()
    with overrides.enabled(key=CPU):
        with_overrides = run()
    assert torch.equal(without[0], with_overrides[0])
    assert all(torch.equal(a, b) for a, b in zip(without[1], with_overrides[1], strict=True))
    assert sum(tmakit.stats().values()) > 0  # the overrides saw the model's calls


@pytest.mark.gpu
def test_on_a_hopper_the_overrides_serve_transposing_copies_and_gathers_bit_for_bit():
    import tmakit.ops  # noqa: F401  registers the ops

    x = torch.randn(1024, 768, device="cuda")
    table = torch.randn(4096, 128, device="cuda")  # 512-byte rows: bulk copies' span on a Hopper
    index = torch.randint(0, 4096, (2048,), device="cuda")
    expected_t, expected_rows = x.t().contiguous(), table.index_select(0, index)
    with tmakit.enabled() as installed:
        assert {"copy_", "index_select"} <= set(installed)
        out = torch.full((768, 1024), float("nan"), device="cuda").copy_(x.t())
        contiguous = x.t().contiguous()
        rows = table.index_select(0, index)
        strided = table.index_select(0, torch.stack([index, index], 1)[:, 0])  # handed back: not one run
        embedding = torch.nn.Embedding.from_pretrained(table.clone(), freeze=False)
        looked_up = embedding(index)  # a Parameter's rows: served where the route takes them
        param = torch.nn.Parameter(torch.empty(768, 1024, device="cuda"))
        with torch.no_grad():
            param.copy_(x.t())  # a Parameter's copy-in
        leaf = x.clone().requires_grad_()
        y = leaf.t().contiguous()
        (grad,) = torch.autograd.grad((y * 2).sum(), leaf)
        graph = torch.cuda.CUDAGraph()
        captured = torch.empty(768, 1024, device="cuda")
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            captured.copy_(x.t())  # warm: the class compiled outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            captured.copy_(x.t())
        captured.zero_()
        graph.replay()
        counts = tmakit.stats()
    torch.cuda.synchronize()
    assert (
        torch.equal(out, expected_t)
        and torch.equal(contiguous, expected_t)
        and torch.equal(captured, expected_t)
    )
    assert torch.equal(rows, expected_rows) and torch.equal(y.detach(), expected_t)
    assert torch.equal(grad, torch.full_like(x, 2.0))
    assert torch.equal(strided, expected_rows) and torch.equal(looked_up, expected_rows)
    assert torch.equal(param.detach(), expected_t)
    assert counts.get(("index_select", "torch", "an index whose entries are not one run"), 0) == 1
    assert counts.get(("copy_", "tmakit", ""), 0) >= 5
    route = tmakit.rows_path("gather", table, index, rows)  # the route the override read
    key = ("index_select", "tmakit", "") if route.by_tma else ("index_select", "torch", route.reason)
    assert counts.get(key, 0) == 2, (route, counts)  # the plain table's and the embedding's


@pytest.mark.gpu
def test_on_a_hopper_the_rows_overrides_write_what_torchs_kernels_write_and_hand_back_the_rest():
    """index_add_, index_copy_ and index_reduce_ under `enable()`: served where the rows route
    takes the call (each read from `rows_path`), exact against torch's kernels without the
    overrides (integer-valued floats: a repeated row's sums are exact in any order), every other
    call handed back with its reason; index_select's backward (an index_add_) and the out-of-place
    index_add too."""
    import tmakit.ops  # noqa: F401  registers the ops
    from tmakit.rows import op as rows_op

    rows, width = 4096, 128  # 512-byte float rows, 1 KiB int64 rows
    base = torch.arange(rows * width, device="cuda").reshape(rows, width)
    index = torch.randint(0, rows, (3000,), device="cuda")  # repeats
    unique = torch.randperm(rows, device="cuda")[:2500]
    source = (base[:3000] % 97).float()
    ints = (base[:3000] * 7919) % 100003
    grad_rows = (base[:3000] % 13).float()

    def calls():
        added = (base % 31).float().index_add_(0, index, source)
        copied = torch.full((rows, width), -1.0, device="cuda").index_copy_(0, unique, source[:2500])
        maxed = (base % 50000).index_reduce_(0, index, ints, "amax")
        mined = (base % 50000).index_reduce_(0, index, ints, "amin")
        scaled = torch.zeros(rows, width, device="cuda").index_add_(0, index, source, alpha=2)
        produced = (base % 50000).index_reduce_(0, index[:8], ints[:8] % 3 + 1, "prod")
        table = (base % 101).float().requires_grad_()
        (grad,) = torch.autograd.grad(table.index_select(0, index), table, grad_rows)  # an index_add_
        summed = torch.index_add((base % 7).float(), 0, index, source)  # the out-of-place op
        return added, copied, maxed, mined, scaled, produced, grad, summed

    expected = calls()
    torch.cuda.synchronize()
    with tmakit.enabled() as installed:
        assert {"index_add_", "index_copy_", "index_reduce_"} <= set(installed)
        got = calls()
        with _deterministic():
            kept = torch.zeros(rows, width, device="cuda").index_add_(0, index, source)
        with pytest.raises(RuntimeError, match="long tensor for index"):  # torch's refusal stands
            torch.zeros(rows, width, device="cuda").index_copy_(0, unique.int(), source[:2500])
        try:  # uint32 sums: torch's kernel's to take or refuse, never tmakit's
            torch.zeros(rows, width, dtype=torch.uint32, device="cuda").index_add_(
                0, index, ints.to(torch.uint32)
            )
        except (RuntimeError, NotImplementedError):
            pass
        counts = tmakit.stats()
    torch.cuda.synchronize()
    for name, want, have in zip(
        ("add", "copy", "amax", "amin", "alpha", "prod", "grad", "index_add"), expected, got, strict=True
    ):
        assert torch.equal(want, have), name
    assert torch.equal(kept, torch.zeros(rows, width, device="cuda").index_add_(0, index, source))
    for aten, handed in (
        ("index_add_", rows_op.ALPHA),
        ("index_reduce_", rows_op.REDUCE),
        ("index_add_", rows_op.DETERMINISTIC),
        ("index_copy_", rows_op.INT32_COPY_INDEX),
        ("index_add_", rows_op.NOT_TORCHS_DTYPE),
    ):
        assert counts.get((aten, "torch", handed.reason), 0) == 1, (aten, handed, counts)

    def served(op, table, compact, aten, calls):
        route = tmakit.rows_path(op, table, index[: compact.shape[0]], compact)
        key = (aten, "tmakit", "") if route.by_tma else (aten, "torch", route.reason)
        assert counts.get(key, 0) == calls, (aten, route, counts)

    served("add", expected[0], source, "index_add_", 2)  # the call and index_select's backward
    served("add", expected[0], source, "index_add", 1)
    served("scatter", expected[1], source[:2500], "index_copy_", 1)
    served("max", expected[2], ints, "index_reduce_", 2)  # amax and amin


class _deterministic:
    """`torch.use_deterministic_algorithms(True)` for a block, the setting restored after."""

    def __enter__(self):
        self.before = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.before)


def test_the_four_models_small_versions_are_the_same_with_enable_on_the_cpu(tmp_path):
    """benchmarks/probes/enable_models.py --small: each model on the CPU with and without
    `tmakit.enable()` (nothing is overridden there: the overrides sit on the CUDA key), outputs
    and gradients the same bit for bit."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "enable_models.py"
    out = tmp_path / "models.json"
    done = subprocess.run([sys.executable, str(script), "--small", "--rounds", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"moe layer", "transformer block", "embedding bags", "fsdp copy-in/out"}
    assert all(row["same_outputs"] and row["served"] == {} for row in rows.values()), rows
