"""tmakit's torch operators (`tmakit.ops`) on the device: every element through
torch.ops.tmakit.copy_ / copy / load_tiles / im2col, torch.compile with inductor, CUDA-graph capture and
replay, a side stream, autograd (copy's gradient, copy_'s version counter, the eager path's one
Python kernel), torch.library.opcheck and a tensor on a second GPU.

Inputs name their position (`reference.position_hash`, with a salt per use, so no stale output
of another test can pass for this one's), and outputs are poisoned (0xFF bytes, a pattern no input
has) before the op writes them. An op that allocates its output gets poisoned memory from the
caching allocator where it can. Values are compared bit for bit, on every element."""

from __future__ import annotations

import math

import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.check.reference import position_hash
from tmakit.patches.api import torch_im2col

pytestmark = pytest.mark.gpu

SIGNED = {1: "int8", 2: "int16", 4: "int32"}


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    import tmakit.ops  # noqa: F401  # registers torch.ops.tmakit

    return torch


def bits(tensor):
    """The tensor's elements as signed integers of their width: raw bits compare exactly."""
    import torch

    return tensor.view(getattr(torch, SIGNED[tensor.element_size()]))


def hashed(shape, dtype, strides=None, salt=0):
    """A CUDA tensor of `shape` (and `strides`, default compact) whose every element's bits name
    its (batch, row, column) and `salt`."""
    import torch

    out = (
        torch.empty(shape, dtype=dtype, device="cuda")
        if strides is None
        else torch.empty_strided(shape, strides, dtype=dtype, device="cuda")
    )
    nbits = 8 * out.element_size()
    rows, cols = shape[-2:]
    batch = torch.arange(math.prod(shape[:-2]), device="cuda")[:, None, None] + 1009 * salt
    r = torch.arange(rows, device="cuda")[None, :, None]
    c = torch.arange(cols, device="cuda")[None, None, :]
    values = position_hash(r, c, nbits, batch)
    values = values - (((values >> (nbits - 1)) & 1) << nbits)  # into the signed type's range
    bits(out).copy_(values.view(shape).to(bits(out).dtype))  # copy_ follows out's strides
    return out


def poisoned(shape, dtype, strides=None):
    """An output of `shape` and `strides` over memory of 0xFF bytes (padding included)."""
    import torch

    strides = strides or torch.empty(shape, device="meta").stride()
    extent = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))
    itemsize = torch.empty((), dtype=dtype).element_size()
    memory = torch.full((extent * itemsize,), 0xFF, dtype=torch.uint8, device="cuda")
    return memory.view(dtype).as_strided(shape, strides)


def poison_the_allocator(nbytes):
    """Leave a freed block of `nbytes` of 0xFF bytes in the caching allocator, which the next
    allocation of that size most likely gets (best effort: the salted inputs already keep stale
    memory from matching)."""
    import torch

    torch.full((nbytes,), 0xFF, dtype=torch.uint8, device="cuda")


def same_bits(a, b):
    return a.shape == b.shape and bool((bits(a) == bits(b)).all())


# -- every element ---------------------------------------------------------------------------------
COPIES = [
    # (shape, dtype name, source layout, options)
    ((1000, 776), "bfloat16", "row", ""),
    ((1000, 776), "float16", "transposed", ""),  # a column-major source into a row-major destination
    ((3, 999, 777), "float16", "padded", ""),
    ((2048, 4096), "float16", "row", "tile=16x256,stages=8"),
    ((1024, 1024), "int8", "row", "bulk"),
    ((64, 256), "float8_e4m3fn", "row", "default"),
    ((513, 1040), "float32", "row", "store_depth=4,evict_first=true"),
]


def source(torch, shape, dtype, layout, salt=0):
    if layout == "transposed":
        return hashed(shape[::-1], dtype, salt=salt).t()
    if layout == "padded":
        return hashed(shape, dtype, tmakit.padded_empty(shape, dtype).stride(), salt=salt)
    return hashed(shape, dtype, salt=salt)


@pytest.mark.parametrize("shape, dtype, layout, options", COPIES, ids=str)
def test_copy__writes_every_element(torch, shape, dtype, layout, options):
    dtype = getattr(torch, dtype)
    src = source(torch, shape, dtype, layout, salt=1)
    dst = poisoned(shape, dtype, src.stride() if layout == "padded" else None)
    assert torch.ops.tmakit.copy_(dst, src, options) is None
    torch.cuda.synchronize()
    assert same_bits(dst, src)


@pytest.mark.parametrize("shape, dtype, layout, options", COPIES, ids=str)
def test_copy_returns_a_new_tensor_with_the_sources_strides_and_values(torch, shape, dtype, layout, options):
    dtype = getattr(torch, dtype)
    src = source(torch, shape, dtype, layout, salt=2)
    poison_the_allocator(src.untyped_storage().nbytes())
    out = torch.ops.tmakit.copy(src, options)
    torch.cuda.synchronize()
    assert (out.shape, out.stride(), out.dtype, out.device) == (
        src.shape,
        src.stride(),
        src.dtype,
        src.device,
    )
    assert out.data_ptr() != src.data_ptr()
    assert same_bits(out, src)


LOADS = [
    # (shape, dtype name, layout, tile, swizzle)
    ((8448, 1792), "float16", "row", (64, 256), 0),  # the seed
    ((1000, 776), "bfloat16", "row", (128, 64), 128),  # partial edge tiles: TMA's zeros past the edge
    ((128, 256), "float32", "transposed", (32, 32), 128),
    ((1000, 777), "bfloat16", "padded", (64, 64), 128),
    ((3, 100, 304), "float8_e4m3fn", "row", (16, 128), 128),
]


@pytest.mark.parametrize("shape, dtype, layout, tile, swizzle", LOADS, ids=str)
def test_load_tiles_loads_every_tile(torch, shape, dtype, layout, tile, swizzle):
    dtype = getattr(torch, dtype)
    x = source(torch, shape, dtype, layout, salt=3)
    padded = tmakit.LoadPlan(tmakit.config_for(x, tile, swizzle)).padded_shape
    poison_the_allocator(math.prod(padded) * x.element_size())
    out = torch.ops.tmakit.load_tiles(x, *tile, swizzle)
    expected = torch.zeros(padded, dtype=bits(x).dtype, device="cuda")
    expected[..., : shape[-2], : shape[-1]] = bits(x)
    torch.cuda.synchronize()
    assert tuple(out.shape) == padded and out.is_contiguous() and out.dtype == dtype
    assert torch.equal(bits(out), expected)


def test_load_tiles_takes_the_seeds_tile_by_default(torch):
    x = hashed((256, 512), torch.float16, salt=4)
    out = torch.ops.tmakit.load_tiles(x)
    assert torch.equal(bits(out), bits(tmakit.load_tiles(x)))


def test_im2col_op_is_tmakits_patch_matrix_bit_for_bit(torch):
    """torch.ops.tmakit.im2col on a ResNet-like layer against tmakit.im2col and torch's expression."""
    x = hashed((4, 28, 28, 64), torch.float16, salt=6)
    out = torch.ops.tmakit.im2col(x, [3, 3], stride=[2, 2], padding=[1, 1])
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(tmakit.im2col(x, 3, 2, 1, strict=True)))
    assert torch.equal(bits(out), bits(torch_im2col(x, 3, 2, 1)))


# -- torch.compile (inductor) ------------------------------------------------------------------------
def test_torch_compile_fullgraph_with_inductor(torch):
    """The default backend: inductor around the tmakit op, values checked. fp32 inputs whose
    bit below the sign is clear lie in (-2, 2), so doubling them is exact."""
    torch._dynamo.reset()
    x = hashed((1000, 776), torch.float32, salt=5)
    compiled = torch.compile(lambda x: torch.ops.tmakit.copy(x) * 2, fullgraph=True)
    assert torch.equal(compiled(x), x * 2)
    assert torch.equal(compiled(x.t()), x.t() * 2)  # a transposed view: another graph, same values

    def copy_into(dst, src):  # a graph input written by the op: functionalized, written back
        torch.ops.tmakit.copy_(dst, src, "tile=16x256,stages=8")
        return dst + 1

    dst = poisoned((1000, 776), torch.float32)
    out = torch.compile(copy_into, fullgraph=True)(dst, x)
    torch.cuda.synchronize()
    assert same_bits(dst, x) and torch.equal(out, x + 1)

    y = hashed((1000, 776), torch.bfloat16, salt=6)
    tiles = torch.compile(lambda y: torch.ops.tmakit.load_tiles(y, 128, 64, 128).float(), fullgraph=True)(y)
    assert tiles.shape == (1024, 832)
    assert torch.equal(tiles[:1000, :776], y.float()) and not tiles[1000:].any() and not tiles[:, 776:].any()


# -- CUDA graphs and streams -----------------------------------------------------------------------
def test_cuda_graph_capture_and_replay(torch):
    """copy_ and copy captured in CUDA graphs (after a warm-up on a side stream, which compiles),
    replayed over new input values written into the same memory."""
    x = hashed((1024, 768), torch.float16, salt=7)
    xt = hashed((768, 1024), torch.float16, salt=7).t()
    dst, dst_t = poisoned((1024, 768), torch.float16), poisoned((1024, 768), torch.float16)
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(3):
            torch.ops.tmakit.copy_(dst, x)
            torch.ops.tmakit.copy_(dst_t, xt)
            torch.ops.tmakit.copy(x)
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.tmakit.copy_(dst, x)
        torch.ops.tmakit.copy_(dst_t, xt)  # the transposing copy
        y = torch.ops.tmakit.copy(x)  # allocated from the graph's pool
    for salt in (8, 9):
        x.copy_(hashed(x.shape, x.dtype, salt=salt))
        xt.copy_(hashed(xt.shape[::-1], xt.dtype, salt=salt).t())
        for out in (dst, dst_t, y):
            bits(out).fill_(-1)  # poison
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(dst, x) and same_bits(dst_t, xt) and same_bits(y, x)


def test_a_side_stream_is_honoured(torch):
    """On a side stream held up by a 50 ms sleep, the source gets new values and then the op
    runs. Launched on that stream, the op copies the new values. Launched anywhere else, it would
    have run before they were written."""
    old = hashed((1024, 1024), torch.float16, salt=10)
    new = hashed((1024, 1024), torch.float16, salt=11)
    x, dst = old.clone(), poisoned((1024, 1024), torch.float16)
    torch.ops.tmakit.copy_(dst, x)  # compiled (and cached) before the timed part
    torch.ops.tmakit.copy(x)
    torch.cuda.synchronize()
    bits(dst).fill_(-1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # about 50 ms of GPU clock cycles
        x.copy_(new)
        torch.ops.tmakit.copy_(dst, x)
        y = torch.ops.tmakit.copy(x)
    side.synchronize()
    assert same_bits(dst, new) and same_bits(y, new)


# -- autograd ---------------------------------------------------------------------------------------
def test_copy_is_differentiable(torch):
    x = hashed((256, 512), torch.float32, salt=12).requires_grad_()
    y = torch.ops.tmakit.copy(x)
    assert same_bits(y.detach(), x.detach())
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))

    torch._dynamo.reset()
    x.grad = None
    torch.compile(lambda x: (3 * torch.ops.tmakit.copy(x)).sum(), fullgraph=True)(x).backward()
    assert torch.equal(x.grad, torch.full_like(x, 3.0))


def test_copy__bumps_the_version_counter_and_load_tiles_has_no_gradient(torch):
    """The kernel writes dst behind autograd's back; the op bumps dst's version counter, so a
    backward that needs dst's old value raises. A backward through load_tiles raises."""
    weight = torch.ones(256, 512, device="cuda", requires_grad=True)
    dst = hashed((256, 512), torch.float32, salt=16)
    saved = (dst * weight).sum()
    version = dst._version
    torch.ops.tmakit.copy_(dst, hashed((256, 512), torch.float32, salt=17))
    assert dst._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()
    x = hashed((128, 256), torch.float16, salt=18).requires_grad_()
    tiles = torch.ops.tmakit.load_tiles(x, 64, 64, 0)
    with pytest.raises(RuntimeError, match="load_tiles is not differentiable"):
        tiles.float().sum().backward()


def test_the_eager_path_does_not_redispatch(torch, redispatched):
    """On plain CUDA tensors, copy's and load_tiles's Autograd kernel calls the real
    implementation itself: the keyset it is given is exactly {CUDA, AutogradCUDA} (tmakit.ops.PLAIN),
    so no second Python kernel runs. A tensor that requires grad is redispatched."""
    x = hashed((256, 512), torch.float16, salt=19)
    assert same_bits(torch.ops.tmakit.copy(x), x)
    assert same_bits(torch.ops.tmakit.copy(x.t(), "stages=2"), x.t())
    torch.ops.tmakit.load_tiles(x, 64, 64, 0)
    assert redispatched == []
    assert torch.equal(torch.ops.tmakit.copy(x.float().requires_grad_()), x.float())
    assert redispatched == ["copy"]


# -- torch.library.opcheck on the real kernels -------------------------------------------------------
@pytest.mark.parametrize("op", ["copy_", "copy", "copy-grad", "load_tiles", "reduce_into_", "im2col"])
def test_opcheck(torch, op):
    """Schema (copy_ and reduce_into_ write dst and nothing else), autograd registration, fake
    against real outputs (shape, strides, dtype) and aot_autograd with dynamic shapes. The
    reduce's operands are finite (randn): opcheck compares repeated runs' values."""
    x = hashed((512, 768), torch.bfloat16, salt=13)
    cases = {
        "copy_": (torch.ops.tmakit.copy_.default, (poisoned((512, 768), torch.bfloat16), x)),
        "copy": (torch.ops.tmakit.copy.default, (hashed((768, 512), torch.bfloat16, salt=13).t(),)),
        "copy-grad": (torch.ops.tmakit.copy.default, (x.float().requires_grad_(),)),
        "load_tiles": (torch.ops.tmakit.load_tiles.default, (x[:500], 128, 64, 128)),
        "reduce_into_": (
            torch.ops.tmakit.reduce_into_.default,
            (torch.randn(512, 768, device="cuda", dtype=torch.bfloat16), torch.randn_like(x), "add"),
        ),
        "im2col": (torch.ops.tmakit.im2col.default, (hashed((2, 14, 14, 64), torch.float16, salt=5), [3, 3])),
    }
    target, args = cases[op]
    torch.library.opcheck(target, args)


# -- devices and errors -------------------------------------------------------------------------------
def test_a_tensor_on_another_gpu_than_the_current_one(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    with torch.cuda.device(0):
        x = hashed((1000, 776), torch.bfloat16, salt=14).to("cuda:1")
        dst = poisoned((1000, 776), torch.bfloat16).to("cuda:1")
        torch.ops.tmakit.copy_(dst, x)
        y = torch.ops.tmakit.copy(x)
        tiles = torch.ops.tmakit.load_tiles(x, 128, 64, 128)
        torch.cuda.synchronize(1)
    assert y.device == tiles.device == torch.device("cuda", 1)
    assert same_bits(dst, x) and same_bits(y, x) and torch.equal(bits(tiles[:1000, :776]), bits(x))


def test_the_ops_raise_tmakit_apis_errors(torch):
    x = hashed((128, 256), torch.float16, salt=15)
    with pytest.raises(TmaConfigError, match="they must match"):
        torch.ops.tmakit.copy_(torch.empty(64, 256, dtype=torch.float16, device="cuda"), x)
    with pytest.raises(TmaConfigError, match="src is on cpu"):
        torch.ops.tmakit.copy_(x, x.cpu())
    with pytest.raises(TmaConfigError, match="'tiles' is not one of"):
        torch.ops.tmakit.copy(x, "tiles=16x256")
    with pytest.raises(TmaConfigError, match="1554 bytes"):
        torch.ops.tmakit.load_tiles(torch.empty(1000, 777, dtype=torch.bfloat16, device="cuda"), 64, 64, 0)


def test_a_lazily_negated_source_is_resolved_and_a_negated_destination_refused(torch):
    """torch's fallback resolves a negative view into a new tensor: right for a source (the op
    copies -x), but a destination resolved so would be written in a copy: refused before any
    launch, the destination's memory untouched, for every op that writes a tensor."""
    x = hashed((128, 256), torch.float16, salt=16)
    out = poisoned((128, 256), torch.float16)
    torch.ops.tmakit.copy_(out, x._neg_view())
    assert same_bits(out, -x)
    before = out.clone()
    calls = {
        "copy_": lambda: torch.ops.tmakit.copy_(out._neg_view(), x),
        "reduce_into_": lambda: torch.ops.tmakit.reduce_into_(out._neg_view(), x),
        "copy_many_": lambda: torch.ops.tmakit.copy_many_([out, out._neg_view()], [x, x]),
        "index_add_": lambda: torch.ops.tmakit.index_add_(
            out._neg_view(), torch.arange(128, device="cuda"), x
        ),
    }
    for op, call in calls.items():
        with pytest.raises(TmaConfigError, match=rf"tmakit\.{op}: dsts?(\[1\])? is a negative view"):
            call()
        torch.cuda.synchronize()
        assert same_bits(out, before), op


def test_reduce_into__adds_every_element_and_compiles(torch):
    """torch.ops.tmakit.reduce_into_ eagerly and under torch.compile(fullgraph=True): dst + src,
    each element rounded once, bit for bit against torch's fp32 add (one rounding too); version
    counter bumped once (the op's own `increment_version`, as copy_'s); src untouched. Compiled,
    the reduce into a fresh `ones_like` is functionalized (the op returns None) and `* 2` is exact."""
    src = torch.randn(1000, 776, device="cuda")
    dst = torch.randn(1000, 776, device="cuda")
    want, src_before = dst + src, src.clone()
    version = dst._version
    assert torch.ops.tmakit.reduce_into_(dst, src, "add") is None
    torch.cuda.synchronize()
    assert torch.equal(bits(dst), bits(want)) and dst._version == version + 1
    assert torch.equal(bits(src), bits(src_before))

    def accumulate(partial):
        total = torch.ones_like(partial)
        torch.ops.tmakit.reduce_into_(total, partial)
        return total * 2

    out = torch.compile(accumulate, fullgraph=True)(src)
    assert torch.equal(bits(out), bits((1 + src) * 2))


def test_the_functions_compile_whole_and_run_tmas_path(torch):
    """tmakit.copy_, add_, gather_rows, im2col and copy_many_ inside torch.compile(fullgraph=True)
    (inductor) on a Hopper GPU: each records its op with strict=False, whose kernel runs the
    function (TMA's path here, as `*_path` says) when the compiled program runs; every element
    equals torch's."""
    torch._dynamo.reset()
    x = hashed((1000, 776), torch.float32, salt=21)
    rows = hashed((4096, 256), torch.bfloat16, salt=22)
    act = hashed((2, 28, 28, 64), torch.float16, salt=23)
    index = torch.randperm(4096, device="cuda")[:1000]
    total = torch.arange(776 * 1000, device="cuda", dtype=torch.float32).view(776, 1000)
    partial = torch.arange(776 * 1000, device="cuda", dtype=torch.float32).flip(0).view(776, 1000)
    many = [hashed((64, 128), torch.bfloat16, salt=24 + i) for i in range(3)]
    dst, into = poisoned((776, 1000), torch.float32), [poisoned((64, 128), torch.bfloat16) for _ in many]
    assert tmakit.copy_path(dst, x.t()).by_tma and tmakit.reduce_path(total, partial).by_tma
    assert tmakit.im2col_path(act, 3, padding=1).by_tma
    assert tmakit.rows_path("gather", rows, index, torch.empty_like(rows[:1000])).by_tma

    def step(dst, x, total, partial, rows, index, act, into, many):
        tmakit.copy_(dst, x.t())
        tmakit.add_(total, partial)
        tmakit.copy_many_(into, many)
        return tmakit.gather_rows(rows, index), tmakit.im2col(act, 3, padding=1)

    want_total = total + partial
    gathered, patches = torch.compile(step, fullgraph=True)(
        dst, x, total, partial, rows, index, act, into, many
    )
    torch.cuda.synchronize()
    assert same_bits(dst, x.t()) and same_bits(total, want_total)
    assert same_bits(gathered, rows.index_select(0, index))
    assert same_bits(patches, torch_im2col(act, 3, 1, 1))
    assert all(same_bits(d, s) for d, s in zip(into, many, strict=True))


def test_add_with_alpha_is_torchs_add_and_traces(torch):
    """`add_(dst, src, alpha=a)`: with a = 1 TMA's add (bit for bit torch's), another a torch's
    `add_`, eagerly and compiled (the op's `alpha`)."""
    torch._dynamo.reset()
    src = torch.randn(1000, 776, device="cuda")
    dst = torch.randn(1000, 776, device="cuda")
    for alpha in (1, 2, -0.5):
        want, got = dst.clone().add_(src, alpha=alpha), dst.clone()
        tmakit.add_(got, src, alpha=alpha)
        torch.cuda.synchronize()
        assert torch.equal(bits(got), bits(want)), alpha
    with pytest.raises(TmaConfigError, match="TMA's adds take src as it is"):
        tmakit.add_(dst.clone(), src, alpha=2, strict=True)
    got = torch.compile(lambda d, s: tmakit.add_(d, s, alpha=2) * 1, fullgraph=True)(dst.clone(), src)
    assert torch.equal(bits(got), bits(dst.clone().add_(src, alpha=2)))
