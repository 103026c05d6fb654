"""The torch API traced: inside torch.compile(fullgraph=True) and torch.export each public
function hands its call to its torch op with the call's `strict` (False unless asked:
`torch.ops.tmakit.copy_(dst, src, strict=False)`, ...), which the trace records as one op and which
runs the function at run time, so the function's behaviour is kept: TMA where it serves, torch's op
where it does not.

On a CPU, whose tensors every function serves by torch's own op (the first test checks each
function's path), each call compiles with no graph break and gives what the eager call gives,
every element compared: dynamo's graph alone (a recording backend that runs it as it is),
aot_eager (the ops functionalized) and inductor. A call autograd records traces torch's op and
gives its gradients; a strict call traces the strict op, whose fake refuses a CPU tensor. The
non-strict ops pass `torch.library.opcheck`. Nothing here compiles or launches a TMA kernel: the GPU
tests (tests/test_gpu_ops.py) run the same traces on a Hopper GPU."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="tracing the torch API needs torch")

from torch._dynamo.utils import counters  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import tmakit  # noqa: E402
import tmakit.ops  # noqa: E402
from graph_recorder import Recorder  # noqa: E402
from tmakit import TmaConfigError  # noqa: E402
from tmakit.api.tensors import compile_check  # noqa: E402

OPS = torch.ops.tmakit


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test's torch.compile traces anew (no cached graph, no recompile limit carried over)."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def pos(*shape, salt=0, dtype=torch.float32):
    """A tensor whose every element names its position and `salt` (exact small integers), so no
    two tensors of a call share a value and a misplaced element shows."""
    values = torch.arange(math.prod(shape), dtype=torch.float64) + 1000 * salt
    return values.to(dtype).view(shape)


def index():
    return torch.tensor([3, 0, 4, 1])


# Each function's call: (the call on its tensors, what it returns as a tuple of tensors; the
# tensors, made afresh; the op and overload it traces to).
CALLS = {
    "copy_": (
        lambda d, s: (tmakit.copy_(d, s),),
        lambda: (torch.zeros(6, 8), pos(8, 6, salt=1).t()),
        OPS.copy_.default,
    ),
    "copy_ options": (
        lambda d, s: (tmakit.copy_(d, s, tile=(16, 64), stages=2),),
        lambda: (torch.zeros(6, 8), pos(6, 8, salt=1)),
        OPS.copy_.typed,
    ),
    "copy": (
        lambda s: (tmakit.copy(s),),
        lambda: (pos(8, 6, salt=1).t(),),
        OPS.copy.default,
    ),
    "add_": (
        lambda d, s: (tmakit.add_(d, s),),
        lambda: (pos(6, 8), pos(6, 8, salt=1)),
        OPS.reduce_into_.default,
    ),
    "reduce_into_": (
        lambda d, s: (tmakit.reduce_into_(d, s, "max"),),
        lambda: (pos(6, 8).flip(0), pos(6, 8)),
        OPS.reduce_into_.default,
    ),
    "gather_rows": (
        lambda s, i: (tmakit.gather_rows(s, i),),
        lambda: (pos(5, 8, salt=1), index()),
        OPS.gather_rows.default,
    ),
    "gather_rows out": (
        lambda s, i, o: (tmakit.gather_rows(s, i, o),),
        lambda: (pos(5, 8, salt=1), index(), torch.zeros(4, 8)),
        OPS.gather_rows.out,
    ),
    "scatter_rows_": (
        lambda d, i, s: (tmakit.scatter_rows_(d, i, s),),
        lambda: (pos(5, 8), index(), pos(4, 8, salt=1)),
        OPS.scatter_rows_.default,
    ),
    "index_add_": (
        lambda d, i, s: (tmakit.index_add_(d, i, s, alpha=2),),
        lambda: (pos(5, 8), torch.tensor([3, 0, 3, 1]), pos(4, 8, salt=1)),
        OPS.index_add_.default,
    ),
    "index_reduce_": (
        lambda d, i, s: (tmakit.index_reduce_(d, i, s, "amax", include_self=False),),
        lambda: (pos(5, 8, salt=2), torch.tensor([3, 0, 3, 1]), pos(4, 8, salt=1)),
        OPS.index_reduce_.default,
    ),
    "im2col": (
        lambda x: (tmakit.im2col(x, 3, padding=1),),
        lambda: (pos(2, 5, 5, 8),),
        OPS.im2col.default,
    ),
    "im2col out": (
        lambda x, o: (tmakit.im2col(x, (3, 2), stride=(1, 2), out=o),),
        lambda: (pos(2, 5, 5, 8), torch.zeros(2 * 3 * 2, 3 * 2 * 8)),
        OPS.im2col.out,
    ),
    "copy_many_": (
        lambda a, b, c, d: (tmakit.copy_many_([a, b], [c, d]),) and (),
        lambda: (torch.zeros(3, 4), torch.zeros(5), pos(3, 4, salt=1), pos(5, salt=2)),
        OPS.copy_many_.default,
    ),
    "pack": (
        lambda a, b: tmakit.pack([a, b]),
        lambda: (pos(3, 4, salt=1), pos(5, salt=2)),
        OPS.pack.default,
    ),
    "pack out": (
        lambda a, b, o: tmakit.pack([a, b], o),
        lambda: (pos(3, 4, salt=1), pos(5, salt=2), torch.full((20,), -1.0)),
        OPS.pack.out,
    ),
    "unpack_": (
        lambda f, a, b: (tmakit.unpack_(f, [a, b]),) and (),
        lambda: (pos(20, salt=1), torch.zeros(3, 4), torch.zeros(5)),
        OPS.unpack_.default,
    ),
}


def same(a, b) -> bool:
    """Every element, the shape, the strides and the dtype of two results (ints: equal)."""
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.stride() == b.stride() and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture(scope="module")
def inductor():
    """Whether inductor compiles on this machine (it needs a C++ compiler for CPU code)."""
    try:
        torch.compile(lambda x: x + 1, fullgraph=True)(torch.zeros(2))
    except Exception as error:  # no compiler: inductor's own error, whatever its type
        return f"inductor does not compile here: {type(error).__name__}"
    finally:
        torch._dynamo.reset()
    return None


def test_cpu_tensors_take_torchs_path_in_each_function():
    """What the traces below run at run time is each function's torch path: CPU tensors."""
    d, s = torch.zeros(6, 8), pos(8, 6).t()
    assert tmakit.copy_path(d, s).path == "torch"
    assert tmakit.reduce_path(pos(6, 8), pos(6, 8), "add").path == "torch"
    assert tmakit.reduce_path(pos(6, 8), pos(6, 8), "max").path == "torch"
    for op in ("gather", "scatter", "add", "max"):
        assert tmakit.rows_path(op, pos(5, 8), index(), pos(4, 8)).path == "torch", op
    assert tmakit.im2col_path(pos(2, 5, 5, 8), 3, padding=1).path == "torch"
    # the lists' pairs: neither groupable (off a GPU) nor served by copy_ one by one
    assert tmakit.copy_path(torch.zeros(3, 4), pos(3, 4)).path == "torch"
    assert tmakit.copy_path(torch.zeros(12), pos(12)).path == "torch"


@pytest.mark.parametrize("backend", ["dynamo", "aot_eager", "inductor"])
@pytest.mark.parametrize("name", CALLS)
def test_each_function_compiles_whole_and_gives_the_eager_result(name, backend, inductor):
    if backend == "inductor" and inductor:
        pytest.skip(inductor)
    call, make, _ = CALLS[name]
    eager_inputs, traced_inputs = make(), make()
    expected = call(*eager_inputs)
    compiler = Recorder() if backend == "dynamo" else backend
    got = torch.compile(call, fullgraph=True, backend=compiler)(*traced_inputs)
    assert dict(counters["graph_break"]) == {}
    assert same(got, expected), name
    assert same(traced_inputs, eager_inputs), name  # what each wrote, every element


@pytest.mark.parametrize("name", CALLS)
def test_the_trace_records_the_functions_op_not_strict(name):
    """Dynamo's one graph holds the function's op, the overload its options choose, strict=False,
    and no graph break (torch._dynamo.explain)."""
    call, make, target = CALLS[name]
    recorder = Recorder()
    torch.compile(call, fullgraph=True, backend=recorder)(*make())
    ops = [node for node in recorder.calls() if str(node.target).startswith("tmakit.")]
    assert [node.target for node in ops] == [target]
    assert ops[0].kwargs["strict"] is False
    explained = torch._dynamo.explain(call)(*make())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


@pytest.mark.parametrize("backend", ["dynamo", "aot_eager"])
def test_an_out_of_other_strides_takes_the_patch_or_rows_copied_in(backend):
    """dynamo takes no `out=` tensor of other strides than a contiguous one's: a traced call into
    such an out records the op that allocates, then a copy into it; the values are the eager call's."""

    def into(x, src, index, patches, rows):
        tmakit.im2col(x, 3, padding=1, out=patches)
        tmakit.gather_rows(src, index, rows)
        return patches * 1, rows * 1

    def make():
        return pos(2, 5, 5, 8), pos(5, 8, salt=1), index(), torch.zeros(72, 50).t(), torch.zeros(8, 4).t()

    eager_inputs, traced_inputs = make(), make()
    want = into(*eager_inputs)
    recorder = Recorder()
    got = torch.compile(into, fullgraph=True, backend=recorder if backend == "dynamo" else backend)(
        *traced_inputs
    )
    assert same(got, want) and same(traced_inputs, eager_inputs)
    if backend == "dynamo":
        ops = {node.target for node in recorder.calls() if str(node.target).startswith("tmakit.")}
        assert ops == {OPS.im2col.default, OPS.gather_rows.default}


def test_the_options_reach_the_op():
    recorder = Recorder()
    torch.compile(CALLS["copy_ options"][0], fullgraph=True, backend=recorder)(*CALLS["copy_ options"][1]())
    (node,) = [n for n in recorder.calls() if n.target == OPS.copy_.typed]
    assert {k: node.kwargs[k] for k in ("tile", "stages", "strict")} == {
        "tile": (16, 64),
        "stages": 2,
        "strict": False,
    }
    recorder = Recorder()
    torch.compile(CALLS["index_add_"][0], fullgraph=True, backend=recorder)(*CALLS["index_add_"][1]())
    (node,) = [n for n in recorder.calls() if n.target == OPS.index_add_.default]
    assert (node.kwargs["alpha"], node.kwargs["check_index"]) == (2, True)


def test_a_strict_call_traces_the_strict_op():
    """On fake CUDA tensors (a trace's, no GPU needed) strict=True records strict=True; on CPU
    tensors the strict op's fake refuses them while tracing, as the strict eager call does."""
    recorder = Recorder()
    with FakeTensorMode():
        d, s = torch.empty(64, 128, device="cuda"), torch.empty(64, 128, device="cuda")
    torch.compile(lambda d, s: tmakit.copy_(d, s, strict=True), fullgraph=True, backend=recorder)(d, s)
    (node,) = [n for n in recorder.calls() if n.target == OPS.copy_.default]
    assert node.kwargs["strict"] is True
    d, s = torch.zeros(4, 8), pos(4, 8)
    with pytest.raises(TmaConfigError):
        tmakit.copy_(d, s, strict=True)
    strict = torch.compile(lambda d, s: tmakit.copy_(d, s, strict=True), fullgraph=True, backend="eager")
    with pytest.raises(
        RuntimeError, match=r"TmaConfigError\('torch.ops.tmakit.copy_ while tracing .*dst is on cpu"
    ):
        strict(d, s)
    assert not d.any()


def test_load_tiles_traces_its_op():
    """load_tiles (TMA's loads alone, as its op) records its op, the tile and swizzle as its
    arguments; on fake CUDA tensors, as no GPU is needed to trace."""
    recorder = Recorder()
    with FakeTensorMode():
        x = torch.empty(100, 296, dtype=torch.float16, device="cuda")
    out = torch.compile(lambda x: tmakit.load_tiles(x, (64, 64), 128), fullgraph=True, backend=recorder)(x)
    (node,) = [n for n in recorder.calls() if n.target == OPS.load_tiles.default]
    assert node.args[1:] == (64, 64, 128) and out.shape == (128, 320)


def test_an_option_the_function_refuses_is_refused_while_tracing():
    d, s = torch.zeros(4, 8), pos(4, 8)
    with pytest.raises(TmaConfigError, match="unknown copy option"):
        tmakit.copy_(d, s, stage_count=2)
    with pytest.raises(Exception, match="stage_count"):
        torch.compile(lambda d, s: tmakit.copy_(d, s, stage_count=2), fullgraph=True, backend="eager")(d, s)
    with pytest.raises(Exception, match="as_rows and bulk"):
        torch.compile(lambda d, s: tmakit.add_(d, s, bulk=True), fullgraph=True, backend="eager")(d, s)
    assert not d.any()


# Calls autograd records: (the call, its inputs that require grad).
RECORDED = {
    "copy_": (lambda s: tmakit.copy_(torch.zeros(6, 8), s.t() * 1) * pos(6, 8), lambda: (pos(8, 6),)),
    "copy": (lambda s: tmakit.copy(s.t()) * pos(6, 8), lambda: (pos(8, 6),)),
    "add_": (lambda d, s: tmakit.add_(d * 1, s) * pos(6, 8), lambda: (pos(6, 8), pos(6, 8, salt=1))),
    "gather_rows": (lambda s: tmakit.gather_rows(s, index()) * pos(4, 8), lambda: (pos(5, 8),)),
    "scatter_rows_": (
        lambda d, s: tmakit.scatter_rows_(d * 1, index(), s) * pos(5, 8),
        lambda: (pos(5, 8), pos(4, 8, salt=1)),
    ),
    "index_add_": (
        lambda d, s: tmakit.index_add_(d * 1, torch.tensor([3, 0, 3, 1]), s, alpha=2) * pos(5, 8),
        lambda: (pos(5, 8), pos(4, 8, salt=1)),
    ),
    "im2col": (lambda x: tmakit.im2col(x, 3, padding=1) * 2, lambda: (pos(2, 5, 5, 8),)),
}


@pytest.mark.parametrize("name", RECORDED)
def test_a_call_autograd_records_traces_torchs_op_and_its_gradients(name):
    """As outside a trace: torch's op (which records the graph) serves it, so the compiled
    gradients are the eager ones, and no tmakit op is in the graph (copy's op has the identity's
    gradient, as torch's copy_)."""
    call, make = RECORDED[name]
    eager_inputs = [t.requires_grad_() for t in make()]
    traced_inputs = [t.requires_grad_() for t in make()]
    call(*eager_inputs).sum().backward()
    recorder = Recorder()
    torch.compile(call, fullgraph=True, backend=recorder)(*traced_inputs).sum().backward()
    for eager, traced in zip(eager_inputs, traced_inputs, strict=True):
        assert torch.equal(eager.grad, traced.grad), name
    in_graph = {str(node.target) for node in recorder.calls() if str(node.target).startswith("tmakit.")}
    assert in_graph == ({"tmakit.copy.default"} if name == "copy" else set())
    torch._dynamo.reset()
    aot = [t.detach().requires_grad_() for t in make()]
    torch.compile(call, fullgraph=True, backend="aot_eager")(*aot).sum().backward()
    assert all(torch.equal(e.grad, a.grad) for e, a in zip(eager_inputs, aot, strict=True))


def test_a_strict_call_autograd_records_is_refused_while_tracing_as_eagerly():
    s = pos(4, 8).requires_grad_()
    with pytest.raises(TmaConfigError, match="requires grad"):
        tmakit.copy_(torch.zeros(4, 8), s, strict=True)
    with pytest.raises(Exception, match="requires grad"):
        torch.compile(lambda s: tmakit.copy_(torch.zeros(4, 8), s, strict=True), fullgraph=True)(s)


@pytest.mark.parametrize("strict_export", [False, True])
def test_torch_export_records_the_ops(strict_export):
    """torch.export (non-strict, its default: the code runs on fake tensors; and strict, dynamo)
    records each function's op, and the exported program gives the eager result."""

    class Layer(torch.nn.Module):
        def forward(self, x, i):
            y = tmakit.copy(x.t())
            tmakit.add_(y, x.t())
            return tmakit.gather_rows(y, i)

    x, i = pos(4, 8), torch.tensor([1, 0, 3])
    program = torch.export.export(Layer(), (x, i), strict=strict_export)
    targets = {str(n.target) for n in program.graph.nodes if str(n.target).startswith("tmakit.")}
    assert targets == {"tmakit.copy.default", "tmakit.reduce_into_.default", "tmakit.gather_rows.default"}
    assert torch.equal(program.module()(x, i), Layer()(x, i))


# The non-strict ops, their arguments: `torch.library.opcheck` (schema, fake against real, the
# autograd registration, aot_autograd with static and dynamic shapes) on CPU tensors.
OPCHECKS = {
    "copy_": (OPS.copy_.default, lambda: (torch.zeros(6, 8), pos(8, 6).t()), {}),
    "copy_.typed": (OPS.copy_.typed, lambda: (torch.zeros(6, 8), pos(6, 8)), {"stages": 2}),
    "copy": (OPS.copy.default, lambda: (pos(8, 6).t(),), {}),
    "reduce_into_": (OPS.reduce_into_.default, lambda: (pos(6, 8), pos(6, 8).flip(0), "max"), {}),
    "gather_rows": (OPS.gather_rows.default, lambda: (pos(5, 8), index()), {}),
    "gather_rows.out": (OPS.gather_rows.out, lambda: (pos(5, 8), index()), {"out": torch.zeros(4, 8)}),
    "scatter_rows_": (OPS.scatter_rows_.default, lambda: (pos(5, 8), index(), pos(4, 8, salt=1)), {}),
    "index_add_": (OPS.index_add_.default, lambda: (pos(5, 8), index(), pos(4, 8, salt=1)), {"alpha": 2}),
    "index_reduce_": (
        OPS.index_reduce_.default,
        lambda: (pos(5, 8), index(), pos(4, 8, salt=1), "amax"),
        {"include_self": False},
    ),
    "im2col": (OPS.im2col.default, lambda: (pos(1, 5, 5, 8), [3, 3], [1, 1], [1, 1]), {}),
    "im2col.out": (
        OPS.im2col.out,
        lambda: (pos(1, 5, 5, 8), [3, 3], [1, 1], [1, 1]),
        {"out": torch.zeros(25, 72)},
    ),
    "copy_many_": (
        OPS.copy_many_.default,
        lambda: ([torch.zeros(3, 4), torch.zeros(5)], [pos(3, 4), pos(5)]),
        {},
    ),
    "pack": (OPS.pack.default, lambda: ([pos(3, 4), pos(5)],), {}),
    "pack.out": (OPS.pack.out, lambda: ([pos(3, 4), pos(5)],), {"out": torch.zeros(20)}),
    "unpack_": (OPS.unpack_.default, lambda: (pos(20), [torch.zeros(3, 4), torch.zeros(5)]), {}),
}


@pytest.mark.parametrize("name", OPCHECKS)
def test_the_non_strict_ops_pass_opcheck(name):
    op, make, kwargs = OPCHECKS[name]
    torch.library.opcheck(op, make(), {**kwargs, "strict": False})


def test_a_written_lazy_view_reaches_the_non_strict_function():
    """A negative view written by the non-strict op is handed to the function, which gives it
    to torch's copy_ (the strict op refuses it: tests/test_ops.py)."""
    base = torch.zeros(4, 8)
    OPS.copy_(base._neg_view(), pos(4, 8), strict=False)
    assert torch.equal(base, -pos(4, 8))


def test_the_compile_check_is_torchs_own_or_puts_it_in_place():
    """With torch loaded the check is torch.compiler.is_compiling itself (one call a function
    call); a stand-in (torch not yet loaded when the module was) puts it in its own place at its
    first call outside a trace, and reads False while torch is not loaded."""
    assert compile_check({}, "is_compiling") is torch.compiler.is_compiling
    namespace = {}
    import sys

    loaded = sys.modules.pop("torch")
    try:
        namespace["is_compiling"] = stand_in = compile_check(namespace, "is_compiling")
        assert stand_in is not torch.compiler.is_compiling and stand_in() is False
        assert namespace["is_compiling"] is stand_in  # nothing to bind yet
    finally:
        sys.modules["torch"] = loaded
    assert stand_in() is False and namespace["is_compiling"] is torch.compiler.is_compiling
    import tmakit.copies.api as copies_api

    assert copies_api.is_compiling is torch.compiler.is_compiling  # torch was loaded before tmakit here
