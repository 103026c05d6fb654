"""tmakit as torch operators (`tmakit.ops`), on a CPU: registration, schemas, the fake
implementations, traces by make_fx and torch.compile, the gradient rule and the errors.

Nothing here compiles or launches a kernel. The traces run on FAKE CUDA tensors: under
`torch._subclasses.fake_tensor.FakeTensorMode`, `torch.empty(..., device="cuda")` makes a tensor
that says it is on cuda:0 and has no memory, which even a CPU-only torch build allows. The traced
programs are `make_fx` graphs and the graphs `torch.compile(fullgraph=True)` hands its backend
(dynamo's graph, and aot_autograd's functionalized graph). A recording backend keeps them, and
every output is a fake tensor whose shape, strides, dtype and device come from the fake
implementations. Autograd on fake CUDA tensors aborts a CPU-only build (torch wants a CUDA
device guard for the gradient's metadata). The gradient rule is therefore tested directly and
end to end on CPU tensors, with CPU stand-ins for the kernels. The real kernels behind the ops
are tests/test_gpu_ops.py's.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="tmakit.ops registers torch operators: needs torch")

from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import tmakit  # noqa: E402
import tmakit.ops  # noqa: E402
from graph_recorder import Recorder  # noqa: E402
from tmakit import TmaConfigError  # noqa: E402
from tmakit.patches.api import torch_im2col  # noqa: E402

ops = tmakit.ops
op_load = tmakit.load.op  # the load family's op (registered by tmakit.ops)
ops_copy = tmakit.copies.op  # the copy family's op (registered by tmakit.ops)
ops_reduce = tmakit.reduce.op  # the reduce family's op (registered by tmakit.ops)
op_im2col = importlib.import_module("tmakit.patches.op")  # tmakit.im2col is the function


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test's torch.compile traces anew (no cached graph, no recompile limit carried over)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def fake():
    """A FakeTensorMode for CUDA tensors without a GPU."""
    with FakeTensorMode() as mode:
        yield mode


def cuda(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="cuda")


# -- registration ---------------------------------------------------------------------------------
OPTIONS = (
    "*, int[2]? tile=None, int? stages=None, int? store_depth=None, int blocks_per_sm=1, "
    "bool as_rows=False, bool? evict_first=None, bool pdl=True, str? load_hint=None, "
    'str? store_hint=None, str tile_order="interleaved", bool bulk=False, int? sms=None'
)


def test_the_ops_are_registered_with_typed_schemas():
    """Each op with options has a small `default` overload (the options text) and a `typed` one:
    each copy option its own keyword-only argument with CopyOptions' default, read off its fields."""
    copy_ = torch.ops.tmakit.copy_.default._schema
    assert str(copy_) == (
        'tmakit::copy_(Tensor(a0!) dst, Tensor src, str options="", *, bool non_blocking=False, '
        "bool strict=True) -> ()"
    )
    assert (
        str(torch.ops.tmakit.copy_.typed._schema)
        == f"tmakit::copy_.typed(Tensor(a0!) dst, Tensor src, {OPTIONS}, bool non_blocking=False, "
        "bool strict=True) -> ()"
    )
    assert (
        str(torch.ops.tmakit.copy.typed._schema)
        == f"tmakit::copy.typed(Tensor src, {OPTIONS}, bool strict=True) -> Tensor"
    )
    assert str(torch.ops.tmakit.reduce_into_.typed._schema) == (
        f'tmakit::reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", {OPTIONS}, '
        "str? reduce_by=None, Scalar alpha=1, bool strict=True) -> ()"
    )  # and the reduce's kernel, `plan.REDUCE_KERNELS`, and add_'s alpha
    assert copy_.arguments[0].alias_info.is_write  # copy_ writes dst ...
    assert copy_.arguments[1].alias_info is None  # ... and only dst
    assert (
        str(torch.ops.tmakit.copy.default._schema)
        == 'tmakit::copy(Tensor src, str options="", *, bool strict=True) -> Tensor'
    )
    assert str(torch.ops.tmakit.load_tiles.default._schema) == (
        "tmakit::load_tiles(Tensor tensor, int tile_rows=64, int tile_cols=256, int swizzle=0) -> Tensor"
    )
    assert tmakit.SEED.tile == (64, 256)  # the defaults are the seed's, as tmakit.load_tiles's
    # the module's names are the ops
    assert (ops.copy_, ops.copy, ops.load_tiles) == (
        torch.ops.tmakit.copy_.default,
        torch.ops.tmakit.copy.default,
        torch.ops.tmakit.load_tiles.default,
    )
    assert str(torch.ops.tmakit.im2col.default._schema) == (
        "tmakit::im2col(Tensor x, int[2] kernel, int[2] stride=1, int[2] padding=0, int[2] dilation=1, "
        "*, str? im2col_by=None, int? sms=None, bool strict=True) -> Tensor"
    )
    assert str(torch.ops.tmakit.im2col.out._schema) == (
        "tmakit::im2col.out(Tensor x, int[2] kernel, int[2] stride=1, int[2] padding=0, int[2] dilation=1, "
        "*, Tensor(a!) out, str? im2col_by=None, int? sms=None, bool strict=True) -> ()"
    )
    typed = (torch.ops.tmakit.copy_.typed, torch.ops.tmakit.copy.typed, torch.ops.tmakit.reduce_into_.typed)
    for op in (ops.copy_, ops.copy, ops.reduce_into_, ops.load_tiles, ops.im2col, *typed):
        assert torch.Tag.pt2_compliant_tag in op.tags
    reduce = torch.ops.tmakit.reduce_into_.default._schema
    assert str(reduce) == (
        'tmakit::reduce_into_(Tensor(a0!) dst, Tensor src, str op="add", *, Scalar alpha=1, '
        "bool strict=True) -> ()"
    )
    assert reduce.arguments[0].alias_info.is_write and reduce.arguments[1].alias_info is None


def test_each_op_has_one_python_kernel_on_the_eager_path():
    """torch.library.Library ops, not custom_ops (whose autograd and ADInplaceOrView kernels add
    Python layers to each call): copy_ has its real implementation for every device and torch's
    C++ autograd fallback; copy and load_tiles have an Autograd kernel and the real one below it;
    each has a Meta kernel (the fake implementation)."""

    def has(op, key):
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"tmakit::{op}", key)

    for op in ("copy_", "copy", "reduce_into_", "load_tiles", "im2col", "copy_.typed", "copy.typed"):
        assert has(op, "CompositeExplicitAutograd") and has(op, "Meta")
        assert not has(op, "ADInplaceOrView")
    assert not has("copy_", "Autograd") and not has("reduce_into_", "Autograd")
    assert has("copy", "Autograd") and has("load_tiles", "Autograd") and has("im2col", "Autograd")
    assert "tmakit::copy" not in torch._library.custom_ops.OPDEFS


def test_import_tmakit_registers_nothing_and_import_tmakit_ops_registers_the_ops():
    code = (
        "import sys, tmakit\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "assert not hasattr(torch.ops.tmakit, 'copy_')\n"
        "import tmakit.ops\n"
        "names = ('copy_', 'copy', 'reduce_into_', 'load_tiles', 'im2col')\n"
        "assert all(hasattr(torch.ops.tmakit, name) for name in names)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


# -- options ------------------------------------------------------------------------------------------
def test_options_are_copy_options_text_parsed_once():
    assert ops.copy_kwargs("") == ops.copy_kwargs("default") == {}
    assert ops.copy_kwargs("tile=16x256,stages=8") == {"tile": (16, 256), "stages": 8}
    assert ops.copy_kwargs("bulk,pdl=false") == {"pdl": False, "bulk": True}
    assert ops.copy_kwargs("tile=16x256,stages=8") is ops.copy_kwargs("tile=16x256,stages=8")  # cached
    with pytest.raises(TmaConfigError, match="'stage' is not one of"):
        ops.copy_kwargs("stage=8")


def test_a_malformed_options_text_is_refused_while_tracing(fake):
    with pytest.raises(TmaConfigError, match="'tiles' is not one of"):
        torch.ops.tmakit.copy(cuda(64, 64), "tiles=16x256")
    with pytest.raises(TmaConfigError, match="copy option tile"):
        torch.ops.tmakit.copy_(cuda(64, 64), cuda(64, 64), "tile=16by256")


# -- the fake implementations ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: cuda(1000, 776, dtype=torch.bfloat16),
        lambda: cuda(776, 1000).t(),  # column-major
        lambda: torch.empty_strided(
            (1000, 777), (784, 1), dtype=torch.bfloat16, device="cuda"
        ),  # padded rows
        # a batch of sliced matrices (the strides of [:, :, :300]: slicing a fake CUDA tensor
        # needs a CUDA build)
        lambda: torch.empty_strided((3, 100, 300), (32000, 320, 1), dtype=torch.float32, device="cuda"),
    ],
    ids=["row-major", "transposed", "padded", "batch-slice"],
)
def test_copy_fakes_src_shape_strides_dtype_and_device(fake, make):
    src = make()
    out = torch.ops.tmakit.copy(src)
    assert (out.shape, out.stride(), out.dtype, out.device) == (
        src.shape,
        src.stride(),
        src.dtype,
        src.device,
    )
    # src's own layout (empty_like would make the padded rows compact: 1554-byte rows, refused)
    dst = torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=src.device)
    assert torch.ops.tmakit.copy_(dst, src) is None  # a custom op returns no tensor it writes


@pytest.mark.parametrize(
    "shape, dtype, tile, swizzle, padded",
    [
        ((8448, 1792), torch.float16, (64, 256), 0, (8448, 1792)),  # the seed: tiles divide it
        ((1000, 776), torch.bfloat16, (128, 64), 128, (1024, 832)),
        ((3, 100, 304), torch.float8_e4m3fn, (16, 128), 128, (3, 112, 384)),
        ((2, 2, 100, 208), torch.int8, (1, 32), 32, (2, 2, 100, 224)),
    ],
)
def test_load_tiles_fakes_the_padded_row_major_shape(fake, shape, dtype, tile, swizzle, padded):
    out = torch.ops.tmakit.load_tiles(torch.empty(shape, dtype=dtype, device="cuda"), *tile, swizzle)
    assert tuple(out.shape) == padded and out.is_contiguous()
    assert (out.dtype, out.device) == (dtype, torch.device("cuda", 0))


def test_load_tiles_fake_refuses_what_load_tiles_refuses(fake):
    """A static shape gets LoadPlan's checks while tracing: the configuration could never run."""
    with pytest.raises(TmaConfigError, match="global stride of dim 0 is 1554 bytes"):
        torch.ops.tmakit.load_tiles(cuda(1000, 777, dtype=torch.bfloat16), 64, 64, 0)
    with pytest.raises(TmaConfigError, match="tile columns is 0"):
        torch.ops.tmakit.load_tiles(cuda(128, 256), 64, 0, 0)
    with pytest.raises(TmaConfigError, match="with the 128B swizzle it must be exactly 128 bytes"):
        torch.ops.tmakit.load_tiles(cuda(128, 256), 64, 256, 128)


# -- traces ---------------------------------------------------------------------------------------------
def test_make_fx_records_the_op_with_its_fake_output(fake):
    """make_fx over fake CUDA inputs: the graph calls torch.ops.tmakit.copy, the add follows."""
    x = cuda(128, 256).t()
    graph = make_fx(lambda x: torch.ops.tmakit.copy(x) + 1)(x)
    nodes = [node for node in graph.graph.nodes if node.op == "call_function"]
    assert [node.target for node in nodes] == [torch.ops.tmakit.copy.default, torch.ops.aten.add.Tensor]
    value = nodes[0].meta["val"]
    assert (value.shape, value.stride(), value.dtype) == ((256, 128), (1, 256), torch.float16)


@pytest.mark.parametrize("backend", ["dynamo", "aot"])
def test_torch_compile_fullgraph_traces_copy(fake, backend):
    """torch.compile(fullgraph=True) of `copy(x) + 1` on a fake CUDA tensor: dynamo's graph (the
    "eager" backend's input) and aot_autograd's (what aot_eager and inductor get) both hold the
    tmakit op; the compiled function's output is the fake implementation's."""
    recorder = Recorder()
    compiler = recorder if backend == "dynamo" else aot_autograd(fw_compiler=recorder)
    x = torch.empty_strided((3, 100, 304), (32000, 320, 1), dtype=torch.bfloat16, device="cuda")
    out = torch.compile(lambda x: torch.ops.tmakit.copy(x) + 1, fullgraph=True, backend=compiler)(x)
    op = torch.ops.tmakit.copy if backend == "dynamo" else torch.ops.tmakit.copy.default
    (node,) = [n for n in recorder.graphs[-1].graph.nodes if n.target is op]
    copied = node.meta["example_value" if backend == "dynamo" else "val"]
    assert (copied.shape, copied.stride(), copied.dtype, copied.device) == (
        x.shape,
        x.stride(),
        x.dtype,
        x.device,
    )
    assert (out.shape, out.dtype, out.device) == (x.shape, x.dtype, x.device)  # the add's output is dense


def test_torch_compile_functionalizes_copy_into_a_new_buffer(fake):
    """copy_ mutates dst: aot_autograd wraps it in auto_functionalized (inductor writes in place
    again). The options text reaches the graph as a constant."""
    recorder = Recorder()

    def step(x):
        dst = torch.empty_like(x)
        torch.ops.tmakit.copy_(dst, x, "tile=16x256,stages=8")
        return dst * 2

    out = torch.compile(step, fullgraph=True, backend=aot_autograd(fw_compiler=recorder))(cuda(256, 512))
    assert (out.shape, out.dtype, out.device.type) == ((256, 512), torch.float16, "cuda")
    (call,) = [n for n in recorder.graphs[-1].graph.nodes if "auto_functionalized" in str(n.target)]
    assert call.args[0] is torch.ops.tmakit.copy_.default
    assert call.kwargs["options"] == "tile=16x256,stages=8"


def test_torch_compile_with_dynamic_shapes_pads_symbolically(fake):
    """dynamic=True: the fake load_tiles gets SymInts and rounds them up by ceil_div (no
    specialisation), so one graph serves every shape."""
    recorder = Recorder()
    compiled = torch.compile(
        lambda x: torch.ops.tmakit.load_tiles(x, 64, 64, 128) * 2,
        fullgraph=True,
        dynamic=True,
        backend=recorder,
    )
    for rows in (100, 130, 200):
        out = compiled(cuda(3, rows, 192))
        assert tuple(out.shape) == (3, -(-rows // 64) * 64, 192)
    assert len(recorder.graphs) == 1
    placeholders = [n for n in recorder.graphs[0].graph.nodes if n.op == "placeholder"]
    assert any(isinstance(n.meta.get("example_value"), torch.SymInt) for n in placeholders)


def test_torch_export_keeps_the_three_ops(fake):
    """torch.export of a module calling each op on a fake CUDA input: the exported graph holds
    them as they were called (copy_ into a fresh buffer stays a mutation there)."""

    class Step(torch.nn.Module):
        def forward(self, x):
            dst = torch.empty_like(x)
            torch.ops.tmakit.copy_(dst, x)
            return torch.ops.tmakit.copy(x) + torch.ops.tmakit.load_tiles(x, 64, 64, 0) + dst

    exported = torch.export.export(Step(), (cuda(128, 256),))
    targets = [n.target for n in exported.graph_module.graph.nodes if n.op == "call_function"]
    ours = [t for t in targets if "tmakit" in str(t)]
    assert ours == [
        torch.ops.tmakit.copy_.default,
        torch.ops.tmakit.copy.default,
        torch.ops.tmakit.load_tiles.default,
    ]


# -- the gradient of copy ---------------------------------------------------------------------------
def test_the_gradient_of_copy_is_the_incoming_gradient():
    grad = torch.randn(4, 8)
    # (keyset, src, options, typed): the gradient is src's alone
    assert ops_copy.CopyFunction.backward(None, grad) == (None, grad, None, None)


@pytest.fixture
def cpu_kernels(monkeypatch):
    """CPU stand-ins for tmakit's kernels behind the ops (each does what its kernel does) and
    the fake implementations' device check waived: the registration can then be exercised end
    to end on a CPU. As the kernels, they write memory behind autograd's back (`.data`: no
    version counter bumped, no gradient recorded); the in-place API functions' stand-ins bump dst's
    version as the API does. Returns the calls made."""
    calls = []

    def copy_(dst, src, **options):
        calls.append(("copy_", options))
        return dst.data.copy_(src.data)

    def copy(src, **options):
        calls.append(("copy", options))
        return torch.empty_strided(src.shape, src.stride(), dtype=src.dtype).copy_(src.data)

    def load_tiles(tensor, tile, swizzle):
        calls.append(("load_tiles", tile, swizzle))
        out = torch.zeros(op_load.padded_shape(tensor, tile, swizzle), dtype=tensor.dtype)
        out[..., : tensor.shape[-2], : tensor.shape[-1]] = tensor.data
        return out

    def reduce_into_(dst, src, op, strict=False, **options):
        assert strict  # the op's eager call refuses what its fake refuses
        calls.append(("reduce_into_", op, *([options] if options else [])))
        assert op == "add"  # the stand-in adds only
        return dst.data.add_(src.data)

    class Dispatch:
        """The strict dispatch's stand-in, where an op's repeated call reaches it (no options)."""

        def __init__(self, kernel):
            self.kernel = kernel

        def call(self, dst, src, tile, stages, options):
            assert tile is None and stages is None and not options
            return self.kernel(dst, src)

    def reduce_dispatch(op, strict, options):
        assert strict is True and not options
        return Dispatch(lambda dst, src: reduce_into_(dst, src, op, strict=True))

    def api_call(kernel):
        """The API function around a kernel: it also bumps dst's version, as torch's in-place ops."""

        def call(dst, *args, **options):
            result = kernel(dst, *args, **options)
            tmakit.api.tensors.bump_versions((dst,))
            return result

        return call

    monkeypatch.setattr(ops_reduce, "tma_reduce_into_", api_call(reduce_into_))
    monkeypatch.setattr(ops_reduce, "reduce_dispatch", reduce_dispatch)
    monkeypatch.setattr(ops_copy, "tma_copy_", api_call(copy_))
    monkeypatch.setattr(ops_copy, "STRICT_COPIES", Dispatch(copy_))
    monkeypatch.setattr(ops_copy, "tma_copy", copy)

    def im2col(x, kernel, stride, padding, dilation, strict=False):
        assert strict  # the op's eager call refuses what its fake refuses
        calls.append(("im2col", kernel, stride, padding, dilation))
        return torch_im2col(x.data, kernel, stride, padding, dilation)

    monkeypatch.setattr(op_load, "tma_load_tiles", load_tiles)
    monkeypatch.setattr(op_im2col, "tma_im2col", im2col)
    monkeypatch.setattr(ops_copy, "check_traced", lambda op, **tensors: None)
    monkeypatch.setattr(tmakit.ops_base, "check_traced", lambda op, **tensors: None)  # a pair's fake check
    monkeypatch.setattr(op_load, "check_traced", lambda op, **tensors: None)
    monkeypatch.setattr(op_im2col, "check_traced", lambda op, **tensors: None)
    return calls


def test_copy_backpropagates_the_incoming_gradient(cpu_kernels):
    x = torch.randn(64, 128, requires_grad=True)
    y = torch.ops.tmakit.copy(x, "stages=2")
    assert y.requires_grad and torch.equal(y, x)
    (3 * y).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 3.0))
    assert cpu_kernels == [("copy", {"strict": True, "stages": 2})]


def test_typed_options_reach_the_copy_as_its_keyword_arguments(cpu_kernels):
    """Each typed argument is the CopyOptions field of its name; one left at its default is not
    passed on, and the text and the typed form of one configuration make one call."""
    dst, src = torch.zeros(64, 128), torch.randn(64, 128)
    torch.ops.tmakit.copy_(dst, src, tile=[16, 128], stages=8, evict_first=True, blocks_per_sm=1)
    torch.ops.tmakit.copy_(dst, src, "tile=16x128,stages=8,evict_first=true")
    typed, text = (options for _, options in cpu_kernels)
    assert typed == text == {"strict": True, "tile": (16, 128), "stages": 8, "evict_first": True}
    assert torch.equal(dst, src)
    torch.ops.tmakit.reduce_into_(dst, src, "add", stages=4)
    assert cpu_kernels[-1] == ("reduce_into_", "add", {"stages": 4})
    torch.ops.tmakit.reduce_into_(dst, src, "add", reduce_by="ring")  # the reduce's kernel, typed too
    assert cpu_kernels[-1] == ("reduce_into_", "add", {"reduce_by": "ring"})


@pytest.mark.parametrize(
    "call, rule",
    [
        (lambda d, s: torch.ops.tmakit.copy(s, tile_order="sideways"), "tile_order 'sideways'"),
        (lambda d, s: torch.ops.tmakit.reduce_into_(d, s, "add", bulk=True), "bulk"),
        (lambda d, s: torch.ops.tmakit.copy_(d, s, tile=[16, 0]), "tile"),
        (lambda d, s: torch.ops.tmakit.reduce_into_(d, s, "max", reduce_by="ring"), "computes add on"),
        (lambda d, s: torch.ops.tmakit.reduce_into_(d, s, "add", reduce_by="fast"), "reduce_by 'fast'"),
        (
            lambda d, s: torch.ops.tmakit.reduce_into_(cuda(128, 64).t(), s, "add", reduce_by="ring"),
            "combines tiles of one layout",
        ),
    ],
    ids=["name", "reduce-bulk", "tile", "ring-max", "reduce-by", "ring-layouts"],
)
def test_a_wrong_typed_option_is_refused_while_tracing(fake, call, rule):
    with pytest.raises(TmaConfigError, match=rule):
        call(cuda(64, 128), cuda(64, 128))


def test_an_option_given_as_text_and_keyword_matches_no_overload():
    with pytest.raises(RuntimeError, match="stages"):
        torch.ops.tmakit.copy_(torch.zeros(4, 8), torch.zeros(4, 8), "stages=4", stages=8)


def test_load_tiles_has_no_gradient(cpu_kernels):
    """A tensor that requires grad may be loaded; a backward through the tiles raises, as it did
    when the op was a custom_op without a gradient rule."""
    tiles = torch.ops.tmakit.load_tiles(torch.randn(64, 64, requires_grad=True), 64, 64, 0)
    assert tiles.requires_grad
    with pytest.raises(RuntimeError, match="load_tiles is not differentiable"):
        tiles.sum().backward()
    with torch.no_grad():
        tiles = torch.ops.tmakit.load_tiles(torch.randn(64, 64, requires_grad=True), 64, 64, 0)
    assert not tiles.requires_grad


def test_im2col_is_the_patch_matrix_and_has_no_gradient(cpu_kernels):
    """torch.ops.tmakit.im2col: tmakit.im2col's matrix (an int stands for both of a pair); a
    backward through it raises, as load_tiles's does."""
    x = torch.randn(2, 9, 9, 16, requires_grad=True)
    patches = torch.ops.tmakit.im2col(x, 3, stride=2, padding=1)
    assert torch.equal(patches, torch_im2col(x.detach(), 3, 2, 1)) and patches.shape == (50, 144)
    assert cpu_kernels == [("im2col", (3, 3), (2, 2), (1, 1), (1, 1))]
    with pytest.raises(RuntimeError, match="im2col is not differentiable"):
        patches.sum().backward()


def test_the_im2col_fake_is_the_patch_matrix_and_refuses_what_tma_does_not_serve(fake):
    assert torch.ops.tmakit.im2col(cuda(32, 56, 56, 64), [3, 3], padding=[1, 1]).shape == (32 * 56 * 56, 576)
    with pytest.raises(TmaConfigError, match="im2col while tracing.*16 bytes"):
        torch.ops.tmakit.im2col(cuda(2, 8, 8, 3), [3, 3])  # 6-byte pixels
    with pytest.raises(TmaConfigError, match="float64"):
        torch.ops.tmakit.im2col(cuda(2, 8, 8, 16, dtype=torch.float64), [3, 3])


def test_copy__bumps_the_destinations_version_counter(cpu_kernels):
    """copy_ writes dst behind autograd's back, so it bumps dst's version counter (once a call): a
    backward that needs dst's old value raises, as after an in-place torch op."""
    weight = torch.randn(64, 128, requires_grad=True)
    dst = torch.randn(64, 128)
    saved = (dst * weight).sum()  # saves dst for the gradient of weight
    version = dst._version
    torch.ops.tmakit.copy_(dst, torch.randn(64, 128))
    assert dst._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()
    source = torch.randn(64, 128, requires_grad=True)
    torch.ops.tmakit.copy_(dst, source)  # no gradient flows through copy_ (as before: custom_op's)
    assert not dst.requires_grad and torch.equal(dst, source.detach())


# -- lazily negated or conjugated views ------------------------------------------------------------
def written_arguments(overload):
    return [a.name for a in overload._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def tmakit_overloads():
    import tmakit.many.op  # noqa: F401
    import tmakit.rows.op  # noqa: F401

    for name in torch.ops.tmakit:
        packet = getattr(torch.ops.tmakit, name)
        yield from (getattr(packet, overload) for overload in packet.overloads())


def test_every_op_that_writes_a_tensor_has_kernels_for_lazy_bits_and_no_other_op_has():
    """torch's fallback for a negative or conjugate view resolves it into a new tensor, which for
    a written argument means the op writes a copy (and, returning nothing, fails after its launch
    with "Expected Tensor but got None"): the ops that write a tensor have their own kernels."""
    writers = set()
    for overload in tmakit_overloads():
        schema = overload._schema
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        writes = bool(written_arguments(overload))
        for key in ("Negative", "Conjugate"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(name, key) == writes, (name, key)
        if writes:
            writers.add(name.removeprefix("tmakit::"))
    assert writers == {
        "copy_", "copy_.typed", "reduce_into_", "reduce_into_.typed", "copy_many_", "unpack_",
        "scatter_rows_", "index_add_", "index_reduce_", "gather_rows.out", "pack.out", "im2col.out",
    }  # fmt: skip


LAZY_DESTINATIONS = {
    "copy_": lambda d, s: torch.ops.tmakit.copy_(d, s),
    "copy_.typed": lambda d, s: torch.ops.tmakit.copy_(d, s, tile=[16, 64]),
    "reduce_into_": lambda d, s: torch.ops.tmakit.reduce_into_(d, s),
    "copy_many_": lambda d, s: torch.ops.tmakit.copy_many_([s, d], [s, s]),
    "unpack_": lambda d, s: torch.ops.tmakit.unpack_(torch.zeros(64, dtype=d.dtype), [s, d]),
    "scatter_rows_": lambda d, s: torch.ops.tmakit.scatter_rows_(d, torch.tensor([0]), s[:1]),
    "index_add_": lambda d, s: torch.ops.tmakit.index_add_(d, torch.tensor([0]), s[:1]),
    "index_reduce_": lambda d, s: torch.ops.tmakit.index_reduce_(d, torch.tensor([0]), s[:1], "amax"),
    "gather_rows.out": lambda d, s: torch.ops.tmakit.gather_rows.out(s, torch.tensor([0, 1, 2, 3]), out=d),
    "pack.out": lambda d, s: torch.ops.tmakit.pack.out([s[0]], out=d.view(-1)),
    "im2col.out": lambda d, s: torch.ops.tmakit.im2col.out(s.view(1, 1, 4, 8), [1, 1], out=d),
}


@pytest.mark.parametrize("bit", ["negative", "conjugate"])
@pytest.mark.parametrize("op", LAZY_DESTINATIONS)
def test_a_written_tensor_with_a_lazy_bit_is_refused_before_anything_runs(op, bit):
    import tmakit.many.op  # noqa: F401
    import tmakit.rows.op  # noqa: F401

    dtype = torch.complex64 if bit == "conjugate" else torch.float32
    src = torch.randn(4, 8, dtype=dtype)
    base = torch.randn(4, 8, dtype=dtype)
    dst = base.conj() if bit == "conjugate" else base._neg_view()
    before = base.clone()
    where = r"\[1\]" if op in ("copy_many_", "unpack_") else ""
    fix = "resolve_conj" if bit == "conjugate" else "resolve_neg"
    op_name = op.split(".")[0]
    with pytest.raises(TmaConfigError, match=rf"tmakit\.{op_name}: \w+{where} is a {bit} view .*{fix}\(\)"):
        LAZY_DESTINATIONS[op](dst, src)
    assert torch.equal(base, before)


def test_the_lazy_bit_kernel_calls_the_overload_again_with_its_typed_options(cpu_kernels, monkeypatch):
    """A negated source in a `typed` call: the op's Negative kernel (not torch's fallback, which
    resolves in C++) resolves it through `Tensor.resolve_neg` and calls the typed overload again,
    keyword-only options intact."""
    resolved = []
    original = torch.Tensor.resolve_neg
    monkeypatch.setattr(torch.Tensor, "resolve_neg", lambda t: resolved.append(t.is_neg()) or original(t))
    dst, src = torch.zeros(4, 8), torch.randn(4, 8)
    torch.ops.tmakit.copy_(dst, src._neg_view(), tile=[16, 128], stages=8)
    assert resolved.count(True) == 1 and torch.equal(dst, -src)
    assert cpu_kernels[-1] == ("copy_", {"strict": True, "tile": (16, 128), "stages": 8})


def test_a_source_with_a_lazy_bit_reaches_the_kernel_resolved(cpu_kernels):
    dst, src = torch.zeros(4, 8), torch.randn(4, 8)
    torch.ops.tmakit.copy_(dst, src._neg_view())
    assert torch.equal(dst, -src)
    torch.ops.tmakit.reduce_into_(dst, src._neg_view())
    assert torch.equal(dst, -2 * src)
    complex_dst, complex_src = (
        torch.zeros(4, 8, dtype=torch.complex64),
        torch.randn(4, 8, dtype=torch.complex64),
    )
    torch.ops.tmakit.copy_(complex_dst, complex_src.conj())
    assert torch.equal(complex_dst, complex_src.conj().resolve_conj())


def test_the_eager_path_calls_the_real_implementation_from_the_autograd_kernel(cpu_kernels, redispatched):
    """copy and load_tiles on a plain tensor: the Autograd kernel calls the real implementation
    itself, with no redispatch below autograd (a second Python kernel). A conjugate view, a meta
    tensor, a trace's tensors or a tensor that requires grad are redispatched."""
    x = torch.randn(64, 128)
    assert torch.equal(torch.ops.tmakit.copy(x), x)
    assert torch.equal(torch.ops.tmakit.copy(x, "stages=2"), x)
    torch.ops.tmakit.load_tiles(x, 64, 64, 0)
    with torch.no_grad():
        torch.ops.tmakit.copy(x.clone().requires_grad_())
    assert len(cpu_kernels) == 4 and redispatched == []
    z = torch.randn(8, 16, dtype=torch.complex64).conj()
    assert torch.equal(torch.ops.tmakit.copy(z), z.resolve_conj())
    assert torch.equal(torch.ops.tmakit.copy(x.clone().requires_grad_()), x)  # the autograd.Function
    torch.ops.tmakit.load_tiles(x.clone().requires_grad_(), 64, 64, 0)
    assert redispatched == ["copy", "copy", "load_tiles"]
    assert torch.ops.tmakit.copy(torch.empty(64, 64, device="meta")).is_meta  # the fake (its check waived)
    assert redispatched[3:] == ["copy"] and len(cpu_kernels) == 7


def test_torch_compile_runs_copy_and_its_gradient_and_writes_back_copy_(cpu_kernels):
    """torch.compile(fullgraph=True) with aot_autograd (aot_eager) on CPU tensors, the stand-in
    kernels behind the ops: copy's forward and backward graphs run, and copy_ of a graph input
    is functionalized and written back into it."""
    x = torch.randn(64, 128, requires_grad=True)
    step = torch.compile(lambda x: (3 * torch.ops.tmakit.copy(x)).sum(), fullgraph=True, backend="aot_eager")
    step(x).backward()
    assert torch.equal(x.grad, torch.full_like(x, 3.0))

    def copy_into(dst, src):
        torch.ops.tmakit.copy_(dst, src, "tile=16x256,stages=8")
        return dst + 1

    dst, src = torch.zeros(64, 128), torch.randn(64, 128)
    out = torch.compile(copy_into, fullgraph=True, backend="aot_eager")(dst, src)
    assert torch.equal(dst, src) and torch.equal(out, src + 1)
    assert ("copy_", {"strict": True, "tile": (16, 256), "stages": 8}) in cpu_kernels


def test_make_fx_traces_the_backward_of_copy(cpu_kernels):
    """The joint graph of copy's forward and backward: the forward calls the op, the gradient
    flows back through no op at all (the identity)."""

    def grad_of_copy(x):
        return torch.autograd.grad(torch.ops.tmakit.copy(x).sum(), x)[0]

    graph = make_fx(grad_of_copy)(torch.randn(8, 16, requires_grad=True))
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.tmakit.copy.default) == 1
    assert all(
        "tmakit" not in str(target) for target in targets[targets.index(torch.ops.tmakit.copy.default) + 1 :]
    )
    assert torch.equal(graph(torch.randn(8, 16, requires_grad=True)), torch.ones(8, 16))


@pytest.mark.parametrize(
    "op, args",
    [
        (torch.ops.tmakit.copy_.default, lambda: (torch.zeros(64, 128), torch.randn(64, 128))),
        (torch.ops.tmakit.copy.default, lambda: (torch.randn(128, 64).t(),)),
        (torch.ops.tmakit.copy.default, lambda: (torch.randn(64, 128, requires_grad=True),)),
        (torch.ops.tmakit.load_tiles.default, lambda: (torch.randn(2, 100, 132), 64, 64, 0)),
        (torch.ops.tmakit.reduce_into_.default, lambda: (torch.zeros(64, 128), torch.randn(64, 128), "add")),
        (
            torch.ops.tmakit.im2col.default,
            lambda: (torch.randn(2, 12, 12, 16), [3, 3], [1, 1], [1, 1], [1, 1]),
        ),
    ],
    ids=["copy_", "copy", "copy-grad", "load_tiles", "reduce_into_", "im2col"],
)
def test_opcheck_passes_with_cpu_kernels(cpu_kernels, op, args):
    """torch.library.opcheck (schema, autograd registration, fake against real, aot_autograd with
    dynamic shapes) on the registrations, with CPU stand-ins for the kernels: every output's
    shape, strides and dtype as the fake implementations say. test_gpu_ops.py runs it on the
    real kernels."""
    torch.library.opcheck(op, args())


@pytest.mark.parametrize(
    "op, args",
    [
        (torch.ops.tmakit.copy_.typed, lambda: (torch.zeros(64, 128), torch.randn(64, 128))),
        (torch.ops.tmakit.copy.typed, lambda: (torch.randn(64, 128, requires_grad=True),)),
        (torch.ops.tmakit.reduce_into_.typed, lambda: (torch.zeros(64, 128), torch.randn(64, 128), "add")),
    ],
    ids=["copy_", "copy-grad", "reduce_into_"],
)
def test_opcheck_passes_with_typed_options(cpu_kernels, op, args):
    torch.library.opcheck(op, args(), {"tile": [16, 128], "stages": 4, "evict_first": True})


def test_a_call_with_option_keywords_takes_the_typed_overload(fake):
    """torch.compile records the overload the keywords chose, the options as constants."""
    recorder = Recorder()

    def step(x):
        dst = torch.empty_like(x)
        torch.ops.tmakit.copy_(dst, x, tile=[16, 256], stages=8)
        return torch.ops.tmakit.copy(dst) * 2

    torch.compile(step, fullgraph=True, backend=aot_autograd(fw_compiler=recorder))(cuda(256, 512))
    (call,) = [n for n in recorder.graphs[-1].graph.nodes if "auto_functionalized" in str(n.target)]
    assert call.args[0] is torch.ops.tmakit.copy_.typed
    assert call.kwargs["tile"] == [16, 256] and call.kwargs["stages"] == 8
    assert torch.ops.tmakit.copy.default in recorder.targets()


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda m: torch.ops.tmakit.copy_(m, m), "dst"),
        (lambda m: torch.ops.tmakit.copy(m), "src"),
        (lambda m: torch.ops.tmakit.load_tiles(m, 64, 64, 0), "tensor"),
        (lambda m: torch.ops.tmakit.im2col(m.view(2, 8, 8, 256), [3, 3]), "x"),
    ],
    ids=["copy_", "copy", "load_tiles", "im2col"],
)
def test_a_meta_tensor_into_an_eager_op_is_refused(call, name):
    meta = torch.empty(128, 256, dtype=torch.float16, device="meta")
    with pytest.raises(TmaConfigError, match=f"called eagerly: {name} is on the meta device .*CUDA device"):
        call(meta)


def test_a_fake_or_meta_tensor_in_the_real_implementation_is_refused(fake):
    x = cuda(128, 256)
    with pytest.raises(TmaConfigError, match="src is a fake tensor .*on cuda:0.*real CUDA tensors"):
        ops_copy.copy_impl(x)
    with pytest.raises(TmaConfigError, match="dst is a fake tensor"):
        ops_copy.copy__impl(x, x)
    with pytest.raises(TmaConfigError, match="dst is a fake tensor"):
        ops_reduce.reduce_into__impl(x, x)
    with pytest.raises(TmaConfigError, match="tensor is a fake tensor"):
        op_load.load_tiles_impl(x)


def test_a_meta_tensor_in_the_real_implementation_is_refused():
    """Through the dispatcher a meta tensor reaches the fake implementation; a direct call of
    the real one is refused too, with tmakit.api's message."""
    meta = torch.empty(64, 64, device="meta")
    with pytest.raises(TmaConfigError, match="src is on the meta device"):
        ops_copy.copy__impl(torch.empty(64, 64), meta)
    with pytest.raises(TmaConfigError, match="src is on the meta device"):
        ops_reduce.reduce_into__impl(torch.empty(64, 64), meta)
    with pytest.raises(TmaConfigError, match="tensor is on the meta device"):
        op_load.load_tiles_impl(meta)


def test_a_cpu_tensor_while_tracing_is_refused(fake):
    with pytest.raises(TmaConfigError, match=r"while tracing .*: dst is on cpu; .*\.cuda\(\)"):
        torch.ops.tmakit.copy_(torch.empty(128, 256, dtype=torch.float16), cuda(128, 256))
    with pytest.raises(TmaConfigError, match="while tracing .*: src is on cpu"):
        torch.ops.tmakit.copy_(cuda(128, 256), torch.empty(128, 256, dtype=torch.float16))
    with pytest.raises(TmaConfigError, match="while tracing .*: tensor is on cpu"):
        torch.ops.tmakit.load_tiles(torch.empty(128, 256, dtype=torch.float16))


def test_torch_compile_reports_a_cpu_destination_as_the_ops_error(fake):
    """Dynamo wraps what a fake implementation raises in its TorchRuntimeError; the message is
    tmakit's."""

    def step(dst, src):
        torch.ops.tmakit.copy_(dst, src)

    with pytest.raises(RuntimeError, match=r"TmaConfigError.*dst is on cpu; .*\.cuda\(\)"):
        torch.compile(step, fullgraph=True, backend=Recorder())(
            torch.empty(64, 64, dtype=torch.float16), cuda(64, 64)
        )


def test_a_cpu_tensor_in_eager_mode_gets_tmakit_apis_error():
    """The ops are registered for every device, so tmakit.api refuses a CPU tensor (not torch's
    'no kernel for CPU')."""
    cpu = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(TmaConfigError, match="cpu"):
        torch.ops.tmakit.copy_(cpu, cpu)
    with pytest.raises(TmaConfigError, match="src is on cpu"):
        torch.ops.tmakit.copy(cpu)


# -- the device guard -----------------------------------------------------------------------------
class OnDevice:
    def __init__(self, index):
        self.index = index

    def get_device(self):
        return self.index


def test_a_tensor_off_the_current_gpu_is_launched_under_its_guard(monkeypatch):
    from tmakit import ops_base

    monkeypatch.setattr(ops_base, "gpu_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert ops_base.foreign_device(OnDevice(1)) == 1
    assert ops_base.foreign_device(OnDevice(0)) is None
    assert ops_base.foreign_device(OnDevice(-1)) is None  # a CPU tensor: tmakit.api's to refuse
    monkeypatch.setattr(ops_base, "gpu_count", lambda: 1)
    assert ops_base.foreign_device(OnDevice(1)) is None  # one GPU: never a guard


# -- reduce_into_ ---------------------------------------------------------------------------------
def test_reduce_into__traces_as_one_mutating_op_and_refuses_a_bad_pair_while_tracing(fake):
    """reduce_into_ mutates dst: aot_autograd wraps it in auto_functionalized, with the op a
    constant. A pair TMA does not reduce is refused while tracing, by the same table."""
    recorder = Recorder()

    def accumulate(partial):
        total = torch.ones_like(partial)
        torch.ops.tmakit.reduce_into_(total, partial, "add")
        return total * 2

    partial = cuda(64, 128, dtype=torch.float32)
    out = torch.compile(accumulate, fullgraph=True, backend=aot_autograd(fw_compiler=recorder))(partial)
    assert (out.shape, out.dtype, out.device.type) == ((64, 128), torch.float32, "cuda")
    (call,) = [n for n in recorder.graphs[-1].graph.nodes if "auto_functionalized" in str(n.target)]
    assert call.args[0] is torch.ops.tmakit.reduce_into_.default and call.kwargs["op"] == "add"
    with pytest.raises(TmaConfigError, match="reduce op 'max' with dtype fp32"):
        torch.ops.tmakit.reduce_into_(cuda(8, 8, dtype=torch.float32), cuda(8, 8, dtype=torch.float32), "max")
    with pytest.raises(TmaConfigError, match="reduce op 'min' with dtype int32: .*as unsigned"):
        torch.ops.tmakit.reduce_into_(cuda(8, 8, dtype=torch.int32), cuda(8, 8, dtype=torch.int32), "min")


def test_an_op_with_options_bumps_the_version_once(cpu_kernels):
    """The options' path hands the call to tmakit's API function, which bumps dst's version: the
    op adds no second bump."""
    dst = torch.zeros(64, 128)
    for call in (
        lambda: torch.ops.tmakit.copy_(dst, torch.ones(64, 128), stages=8),
        lambda: torch.ops.tmakit.copy_(dst, torch.ones(64, 128), "stages=8"),
        lambda: torch.ops.tmakit.reduce_into_(dst, torch.ones(64, 128), "add", stages=8),
    ):
        version = dst._version
        call()
        assert dst._version == version + 1


def test_reduce_into__adds_and_bumps_the_destinations_version(cpu_kernels):
    dst, src = torch.ones(64, 128), torch.full((64, 128), 2.0)
    version = dst._version
    assert torch.ops.tmakit.reduce_into_(dst, src) is None  # op="add" by default
    assert torch.equal(dst, torch.full((64, 128), 3.0)) and dst._version == version + 1
    assert cpu_kernels == [("reduce_into_", "add")]


@pytest.mark.parametrize(
    "args, message",
    [
        (([3, 3, 3],), "kernel .* has 3 values"),
        (([3, 3], [0, 0]), "stride"),
        (([0, 0],), "kernel"),
        (([3, 3], 1, [-1, -1]), "padding"),
        (([20, 20],), "no output pixel"),
    ],
    ids=["three-values", "stride-0", "kernel-0", "negative-padding", "filter-too-large"],
)
def test_the_symbolic_im2col_fake_refuses_what_the_static_one_does(cpu_kernels, args, message):
    """Traced with symbolic extents (dynamic shapes), the fake checks every rule that does not read
    them, and that an output pixel exists, before its arithmetic."""
    from torch.fx.experimental.proxy_tensor import make_fx

    trace = make_fx(lambda x: torch.ops.tmakit.im2col(x, *args), tracing_mode="symbolic")
    with pytest.raises(TmaConfigError, match=message):
        trace(torch.randn(2, 9, 9, 16))
    with pytest.raises(TmaConfigError, match="TMA im2col loads fp16, bf16, fp32"):
        make_fx(lambda x: torch.ops.tmakit.im2col(x, [3, 3]), tracing_mode="symbolic")(
            torch.randn(2, 9, 9, 16).int()
        )
    x = torch.randn(2, 9, 9, 16)
    graph = make_fx(lambda x: torch.ops.tmakit.im2col(x, [3, 3], [2, 2], [1, 1]), tracing_mode="symbolic")(x)
    assert graph(x).shape == (50, 144) and graph(torch.randn(3, 11, 13, 16)).shape == (126, 144)


def test_any_typed_options_are_served_or_refused_in_one_of_two_ways():
    """Drawn typed options, good and bad, traced on fake CUDA tensors: the fake plans them or
    raises TmaConfigError naming the rule; a value torch's schema cannot convert is torch's
    no-overload RuntimeError. Nothing else escapes."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    whole = st.one_of(st.integers(-4, 300), st.sampled_from([2**31, 2**40, -(2**40)]))
    drawn = st.fixed_dictionaries(
        {},
        optional={
            "tile": st.lists(whole, min_size=1, max_size=3),
            "stages": whole,
            "store_depth": whole,
            "blocks_per_sm": whole,
            "as_rows": st.booleans(),
            "evict_first": st.sampled_from([True, False, None]),
            "pdl": st.booleans(),
            "load_hint": st.sampled_from(["", "evict_first", "evict_last", "nope", None]),
            "store_hint": st.sampled_from(["evict_normal", "x", None]),
            "tile_order": st.sampled_from(["interleaved", "columns", "blocked", "diagonal"]),
            "bulk": st.booleans(),
            "stagez": st.integers(0, 4),  # a misspelt option
        },
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(options=drawn, op=st.sampled_from(["copy_", "copy", "reduce_into_"]))
    def check(options, op):
        with FakeTensorMode():
            dst, src = cuda(256, 512), cuda(256, 512)
            call = {
                "copy_": lambda: torch.ops.tmakit.copy_(dst, src, **options),
                "copy": lambda: torch.ops.tmakit.copy(src, **options),
                "reduce_into_": lambda: torch.ops.tmakit.reduce_into_(dst, src, "add", **options),
            }[op]
            try:
                call()
            except TmaConfigError:
                pass
            except RuntimeError as error:
                assert "failed to match any schema" in str(error), error

    check()
