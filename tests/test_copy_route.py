"""Every copy a user makes is routed: TMA where its rules hold, torch's copy_ (named) where not.

The pairs are drawn as a user makes views (dtypes, ranks 0-5, extents 1-1031, permutations,
slices with steps and offsets, padded rows), as pure numbers: the CPU tests need no torch. The GPU
test builds the same pairs as CUDA tensors and holds each copy to torch's, byte for byte, over the
whole buffer the destination is a window of (poisoned first, so the neighbours are checked too).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from route_facts import flat_pair
from tmakit.config import contiguous_index, major_of
from tmakit.copies.plan import BY_THE_DRIVER, copy_route
from tmakit.errors import TmaConfigError
from tmakit.limits import GLOBAL_BASE_ALIGN, GLOBAL_STRIDE_ALIGN, MAX_RANK
from tmakit.plan import CopyOptions, check_copy_shape, copy_class
from tmakit.plan.route import TORCH_FASTER_BEYOND_L2, PairFacts, canonical_pair, moved_dtype

# torch dtype name -> element bytes: every dtype torch's copy_ takes that a user is likely to pass
DTYPE_BYTES = {
    "bool": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int16": 2, "uint16": 2,
    "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "float32": 4, "complex32": 4, "int64": 8,
    "uint64": 8, "float64": 8, "complex64": 8, "complex128": 16,
}  # fmt: skip
EXTENTS = (1, 2, 3, 7, 16, 64, 129, 256, 777, 1031)
MOST_ELEMENTS = 1 << 20  # a drawn view's own elements (its buffer may hold more)
BASE = 1 << 20  # a buffer's (aligned) address in the pure draws


@dataclass(frozen=True)
class ViewSpec:
    """A view of a fresh contiguous buffer: `base` (the buffer's dims, in memory order) viewed
    with a step along `stepped` and starting `offset` elements in, its dims permuted by `order`
    (view dim d is buffer dim order[d])."""

    base: tuple[int, ...]
    steps: tuple[int, ...]
    starts: tuple[int, ...]
    order: tuple[int, ...]
    shape: tuple[int, ...]  # the view's

    def strides(self) -> tuple[int, ...]:
        contiguous = [math.prod(self.base[d + 1 :]) for d in range(len(self.base))]
        return tuple(contiguous[b] * self.steps[b] for b in self.order)

    def offset(self) -> int:
        contiguous = [math.prod(self.base[d + 1 :]) for d in range(len(self.base))]
        return sum(start * stride for start, stride in zip(self.starts, contiguous, strict=True))

    def elements(self) -> int:
        return math.prod(self.base)

    @property
    def plain(self) -> bool:
        """Compact and in order: what `torch.empty(shape)` gives."""
        return (
            self.base == self.shape and not any(self.starts) and self.order == tuple(range(len(self.shape)))
        )


def draw_view(rng: random.Random, shape: tuple[int, ...], plain: bool) -> ViewSpec:
    rank = len(shape)
    if plain or rank == 0:
        return ViewSpec(shape, (1,) * rank, (0,) * rank, tuple(range(rank)), shape)
    order = list(range(rank))
    if rng.random() < 0.5:
        rng.shuffle(order)  # a permuted (transposed) view
    memory = [shape[d] for d in order]
    steps, starts, base = [], [], []
    for b, extent in enumerate(memory):
        step = 2 if rng.random() < 0.15 else 1
        start = rng.choice((0, 0, 1, 3)) if rng.random() < 0.3 else 0
        pad = rng.choice((0, 0, 1, 5, 8, 64)) if b == rank - 1 and rng.random() < 0.4 else 0
        steps.append(step)
        starts.append(start)
        base.append(start + (extent - 1) * step + 1 + pad if extent else start + pad)
    return ViewSpec(tuple(base), tuple(steps), tuple(starts), _inverse(tuple(order)), shape)


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
    """Buffer dim b holds view dim order[b]; the view's dim d then walks buffer dim inverse[d]."""
    inverse = [0] * len(order)
    for b, d in enumerate(order):
        inverse[d] = b
    return tuple(inverse)


def draw_pairs(count: int, seed: int = 2026) -> list[tuple[str, ViewSpec, ViewSpec]]:
    """`count` (dtype, source view, destination view) draws of one shape each."""
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < count:
        rank = rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4, 5))
        shape = tuple(rng.choice(EXTENTS) for _ in range(rank))
        if math.prod(shape) > MOST_ELEMENTS:
            continue
        dtype = rng.choice(list(DTYPE_BYTES))
        src = draw_view(rng, shape, plain=rng.random() < 0.3)
        dst = draw_view(rng, shape, plain=rng.random() < 0.5)
        pairs.append((dtype, src, dst))
    return pairs


def facts_of(dtype: str, src: ViewSpec, dst: ViewSpec, device: int = 0) -> PairFacts:
    nbytes = DTYPE_BYTES[dtype]
    addresses = BASE + src.offset() * nbytes, 2 * BASE + dst.offset() * nbytes
    return flat_pair(
        src.shape, src.shape, src.strides(), dst.strides(), dtype, dtype, nbytes, *addresses, device, device
    )


def meets_tma_rules(facts: PairFacts) -> bool:
    """The rules as a user reads them: one CUDA device, one dtype with a same-size TMA type, 16-byte
    bases, and either one compact run of 16 elements or more (rows, and a tail of fewer than a
    row), or - with the dims taken in a suitable order and runs merged - rank 2 to 5 with a
    stride-1 dim among the last two of each tensor and every other stepped stride a positive
    multiple of 16 bytes."""
    if facts.src.device < 0 or moved_dtype(facts.src.dtype) is None:
        return False
    if 0 in facts.dst.shape:
        return True
    if facts.src.address % GLOBAL_BASE_ALIGN or facts.dst.address % GLOBAL_BASE_ALIGN:
        return False
    for shape, src_strides, dst_strides in (
        (facts.dst.shape, facts.src.strides, facts.dst.strides),
        canonical_pair(facts.dst.shape, facts.src.strides, facts.dst.strides),
    ):
        if len(shape) == 1 and src_strides == dst_strides == (1,):
            if shape[0] >= 16:  # rows of 16 elements or more, any tail after them
                return True
        elif 2 <= len(shape) <= MAX_RANK and all(
            fine_strides(shape, strides, facts.src.nbytes) for strides in (src_strides, dst_strides)
        ):
            return True
    return False


def fine_strides(shape: tuple[int, ...], strides: tuple[int, ...], nbytes: int) -> bool:
    for unit in (len(shape) - 1, len(shape) - 2):
        if strides[unit] != 1 and shape[unit] != 1:
            continue
        if all(
            shape[d] == 1 or (strides[d] > 0 and strides[d] * nbytes % GLOBAL_STRIDE_ALIGN == 0)
            for d in range(len(shape))
            if d != unit
        ):
            return True
    return False


def planner_takes(facts: PairFacts, route) -> None:
    """The copy class planner's checks of a TMA route (what `copies.call.plan_copy` runs on its views)."""
    shape, src_strides, dst_strides = route.view or (facts.dst.shape, facts.src.strides, facts.dst.strides)
    dtype = route.moved_as or moved_dtype(facts.src.dtype)
    options = CopyOptions()
    src_major, dst_major = major_of(src_strides, shape), major_of(dst_strides, shape)
    transpose = src_major != dst_major
    tile = options.default_tile(dtype, transpose, None, 132)
    copy = copy_class(options, dtype, len(shape), src_major, transpose, tile, 132, False)
    contiguous = (contiguous_index(src_major, len(shape)), contiguous_index(dst_major, len(shape)))
    check_copy_shape(copy, shape, (src_strides, dst_strides), contiguous, facts.src.nbytes)


PAIRS = draw_pairs(2000)


def test_every_drawn_pair_is_routed_by_the_rules_and_tma_serves_what_they_allow(capsys):
    served = non_contiguous = 0
    for dtype, src, dst in PAIRS:
        facts = facts_of(dtype, src, dst)
        route = copy_route(facts)
        assert route.by_tma == meets_tma_rules(facts), (dtype, src, dst, route)
        if route.path in ("tma", "tma-view", "tma-rows"):
            planner_takes(facts, route)  # the planner agrees: nothing routed to TMA is refused there
        else:
            assert route.path == "empty" or route.reason
        served += route.by_tma
        non_contiguous += not (src.plain and dst.plain)
    assert non_contiguous >= len(PAIRS) / 3
    with capsys.disabled():
        print(f"\n{served} of {len(PAIRS)} drawn view pairs ({served / len(PAIRS):.0%}) served by TMA")
    assert served > len(PAIRS) / 3  # the population is mostly addressable


def test_a_canonical_view_walks_the_same_elements_in_the_same_correspondence():
    """Every (src offset, dst offset) pair the canonical view visits is one the original visits."""
    for dtype, src, dst in PAIRS[:300]:
        if math.prod(src.shape) > 4096 or 0 in src.shape:
            continue
        shape, src_strides, dst_strides = canonical_pair(src.shape, src.strides(), dst.strides())
        assert math.prod(shape) == math.prod(src.shape)
        original = set(offsets(src.shape, src.strides(), dst.strides()))
        assert set(offsets(shape, src_strides, dst_strides)) == original, (dtype, src, dst)


def offsets(shape, src_strides, dst_strides):
    for index in range(math.prod(shape)):
        src_offset = dst_offset = 0
        for extent, s, d in zip(reversed(shape), reversed(src_strides), reversed(dst_strides), strict=True):
            index, i = divmod(index, extent)
            src_offset += i * s
            dst_offset += i * d
        yield src_offset, dst_offset


@pytest.mark.parametrize(
    "shape, src_strides, dst_strides, dtype, nbytes, path, why",
    [
        ((1 << 20,), (1,), (1,), "float16", 2, "tma-rows", "4096 x 256 rows"),
        ((1000, 777), (777, 1), (777, 1), "float16", 2, "tma-rows", "3035 x 256 rows, its last 40 elements"),
        ((64, 128, 32), (1, 2048, 64), (4096, 32, 1), "float16", 2, "tma-view", "view"),
        ((256, 256), (1, 256), (256, 1), "float32", 4, "tma", "as laid out"),
        ((4, 8, 128), (1024, 128, 1), (1024, 128, 1), "bool", 1, "tma", "as laid out"),
        ((), (), (), "float32", 4, "torch", "a compact run of 1 elements, shorter than a row"),
        ((64, 64), (128, 2), (64, 1), "float32", 4, "torch", "src walks its memory 2 elements apart"),
        ((64, 0), (1, 64), (64, 1), "float32", 4, "empty", "no element"),
        ((64, 64), (64, 1), (64, 1), "complex128", 16, "torch", "no 16-byte type"),
        ((2, 2, 2, 2, 2, 16), (16, 32, 64, 128, 256, 1), (256, 128, 64, 32, 16, 1), "uint8", 1, "torch",
         "rank 6"),
        ((2, 2, 2, 2, 2, 16), (256, 128, 64, 32, 16, 1), (256, 128, 64, 32, 16, 1), "uint8", 1, "tma-rows",
         "compact run"),
    ],
)  # fmt: skip
def test_routes_name_their_path_and_reason(shape, src_strides, dst_strides, dtype, nbytes, path, why):
    facts = flat_pair(shape, shape, src_strides, dst_strides, dtype, dtype, nbytes, BASE, BASE * 2, 0, 0)
    route = copy_route(facts)
    assert route.path == path and why in str(route), route


@pytest.mark.parametrize(
    "change, why",
    [
        ({"src_device": -1, "dst_device": -1}, "not both on one CUDA device"),
        ({"dst_device": 1}, "not both on one CUDA device"),
        ({"src_device": -2, "dst_device": -2}, "not a Hopper (compute capability 9.0)"),
        ({"dst_dtype": "float32"}, "a dtype change"),
        ({"src_shape": (1, 64)}, "a broadcast source"),
        ({"src_address": BASE + 8}, "src's base address is not 16-byte aligned"),
        ({"dst_address": BASE + 2}, "dst's base address is not 16-byte aligned"),
    ],
)
def test_what_no_tma_path_takes_goes_to_torch_with_its_reason(change, why):
    values = dict(shape=(64, 64), src_shape=(64, 64), src_strides=(64, 1), dst_strides=(64, 1),
                  src_dtype="float16", dst_dtype="float16", nbytes=2, src_address=BASE,
                  dst_address=2 * BASE, src_device=0, dst_device=0)  # fmt: skip
    route = copy_route(flat_pair(**{**values, **change}))
    assert route.path == "torch" and why in route.reason and not route.by_tma


# -- the API on CPU tensors: torch's copy_ serves them (not strict), strict refuses ------------------


def test_the_api_copies_cpu_tensors_through_torch_and_strict_refuses():
    torch = pytest.importorskip("torch")
    import tmakit

    src = torch.arange(6 * 7, dtype=torch.float64).reshape(6, 7).t()
    dst = torch.zeros(7, 6, dtype=torch.float64)
    assert tmakit.copy_(dst, src) is dst and torch.equal(dst, src)
    route = tmakit.copy_path(dst, src)
    assert route.path == "torch" and "not both on one CUDA device" in route.reason
    with pytest.raises(
        TmaConfigError, match="strict=True: no TMA path, the tensors are not both on one CUDA"
    ):
        tmakit.copy_(dst, src, strict=True)  # float64 moves as int64: the route names the rule
    with pytest.raises(TmaConfigError, match="cpu"):  # a dtype the planner loads: its own words
        tmakit.copy_(dst.float(), src.float(), strict=True)
    broadcast = torch.zeros(5, 7, dtype=torch.int16)
    tmakit.copy_(broadcast, torch.arange(7, dtype=torch.int16))
    assert torch.equal(broadcast, torch.arange(7, dtype=torch.int16).expand(5, 7))
    assert torch.equal(tmakit.copy(src.expand(2, 7, 6)), src.expand(2, 7, 6))  # an expanded source
    with pytest.raises(
        TmaConfigError, match="does not broadcast to the destination's shape; they must match"
    ):
        tmakit.copy_(torch.zeros(3, 3), torch.zeros(4, 4))
    with pytest.raises(TmaConfigError, match="torch's copy_, the fallback for this pair, refused it"):
        tmakit.copy_(
            torch.zeros(3, 3).expand(2, 3, 3), torch.zeros(3)
        )  # torch's refusal (dst overlaps itself)
    with pytest.raises(TmaConfigError, match="unknown copy option colour"):
        tmakit.copy_(dst, src, colour="red")  # the options are checked in either mode


def test_the_views_a_route_moves_copy_the_right_elements():
    """The launcher on a route's views (dtype as a same-size one, the canonical view) writes what
    torch's copy_ writes, on CPU tensors with a copy standing in for the kernel."""
    torch = pytest.importorskip("torch")
    from tmakit.copies.views import viewed_launcher
    from tmakit.runtime.launch import Launcher

    moved = 0
    for dtype, src_spec, dst_spec in PAIRS[:400]:
        if dtype in ("complex32", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
            continue  # CPU torch has few ops for these
        route = copy_route(facts_of(dtype, src_spec, dst_spec))
        if route.path not in ("tma", "tma-view", "tma-rows"):
            continue
        src_buffer, src = cpu_view(torch, dtype, src_spec, fill=True)
        dst_buffer, dst = cpu_view(torch, dtype, dst_spec, fill=False)
        expected = dst_buffer.clone()
        cpu_view(torch, dtype, dst_spec, buffer=expected)[1].copy_(src)
        element = None if route.moved_as is None else getattr(torch, tmakit_torch_name(route.moved_as))
        kernel = Launcher(lambda d, s: d.copy_(s), checks_arguments=True, shape_generic=True)
        launcher = viewed_launcher(kernel, element, route.view, route.tail)
        # a pair's own views: never tried first or pinned (`Dispatch`), whatever the kernel claims
        assert not (launcher.checks_arguments or launcher.shape_generic or launcher.any_address)
        launcher(dst, src)
        assert torch.equal(dst_buffer.view(torch.uint8), expected.view(torch.uint8)), (
            dtype,
            src_spec,
            dst_spec,
        )
        moved += 1
    assert moved > 50


def tmakit_torch_name(name: str) -> str:
    from tmakit.config import DTYPES

    return DTYPES[name].torch_name


def cpu_view(torch, dtype, spec, fill=False, buffer=None, device="cpu"):
    """(buffer, the view) of `spec` on `buffer`, else a fresh one: position-dependent bytes (bools
    0 or 1) when `fill`, else poison (0xA5 bytes)."""
    if buffer is None:
        count = spec.elements() * DTYPE_BYTES[dtype]
        if fill:
            raw = (torch.arange(count, device=device) % (2 if dtype == "bool" else 251)).to(torch.uint8)
        else:
            raw = torch.full((count,), 0xA5, dtype=torch.uint8, device=device)
        buffer = raw.view(getattr(torch, dtype))
    return buffer, buffer.as_strided(spec.shape, spec.strides(), spec.offset())


@pytest.mark.gpu
def test_gpu_drawn_pairs_copy_exactly_as_torch_does():
    """300 drawn pairs as CUDA tensors, each through tmakit.copy_ (whatever its route) and
    torch's copy_ into poisoned twin buffers: the whole buffers equal, byte for byte."""
    import torch

    import tmakit

    checked, by_path = 0, {}
    for dtype, src_spec, dst_spec in PAIRS:
        if checked == 300:
            break
        src_buffer, src = cpu_view(torch, dtype, src_spec, fill=True, device="cuda")
        dst_buffer, dst = cpu_view(torch, dtype, dst_spec, fill=False, device="cuda")
        expected = dst_buffer.clone()
        cpu_view(torch, dtype, dst_spec, buffer=expected)[1].copy_(src)
        path = tmakit.copy_path(dst, src).path
        tmakit.copy_(dst, src)
        torch.cuda.synchronize()
        assert torch.equal(dst_buffer.view(torch.uint8), expected.view(torch.uint8)), (
            dtype,
            src_spec,
            dst_spec,
            path,
        )
        by_path[path] = by_path.get(path, 0) + 1
        checked += 1
    planned = {}  # the paths the pure route names for the same pairs: the GPU took those
    for dtype, src_spec, dst_spec in PAIRS[:300]:
        path = copy_route(facts_of(dtype, src_spec, dst_spec)).path
        planned[path] = planned.get(path, 0) + 1
    assert checked == 300 and by_path == planned, (by_path, planned)
    assert min(by_path.get(path, 0) for path in ("tma", "tma-view", "tma-rows")) > 0, by_path


# -- the rule table: a large row-major copy of one layout is the driver's -----------------------
def test_a_large_same_layout_copy_takes_the_drivers_memcpy_past_the_l2():
    """Past the L2 (both streams) a row-major copy of one layout is torch's copy_ (the driver's
    memcpy, measured faster there); within it, transposing, of other strides, strict (no L2 given)
    or a pure plan: TMA."""
    l2 = 50 * 2**20
    rule = TORCH_FASTER_BEYOND_L2["copy"]
    fits = int(rule.share_of_l2 * l2) // (2 * 4 * 4096)  # rows of fp32 whose two streams fit
    for rows, path in ((fits, "tma"), (fits + 1, "torch"), (65536, "torch")):
        facts = flat_pair((rows, 4096), (rows, 4096), (4096, 1), (4096, 1), "float32", "float32", 4,
                          BASE, 1 << 44, 0, 0)  # fmt: skip
        route = copy_route(facts, l2_bytes=l2)
        assert route.path == path, (rows, route)
        assert (route.reason == BY_THE_DRIVER) == (path == "torch")
        assert copy_route(facts).path == "tma"  # no L2 given: strict, or a pure plan
    rows = 65536
    transposed = flat_pair((rows, 4096), (rows, 4096), (1, rows), (4096, 1), "float32", "float32", 4,
                           BASE, 1 << 44, 0, 0)  # fmt: skip
    assert copy_route(transposed, l2_bytes=l2).path == "tma"  # transposed as laid out
    padded = flat_pair((rows, 4096), (rows, 4096), (4104, 1), (4104, 1), "float32", "float32", 4,
                       BASE, 1 << 44, 0, 0)  # fmt: skip
    assert copy_route(padded, l2_bytes=l2).path == "tma"


def test_the_drivers_launcher_is_torchs_copy_but_its_element_wise_kernel_in_a_large_capture(monkeypatch):
    """Up to GRAPH_MEMCPY_MOST_BYTES torch's copy_ serves eagerly and captured (a memcpy node);
    past it, torch's copy_ eagerly and its element-wise kernel on the same bits inside a capture,
    as the widest integer the bytes and both addresses allow; a conjugate view, torch's copy_."""
    torch = pytest.importorskip("torch")
    from tmakit.copies import views as copy_views
    from tmakit.copies.plan import GRAPH_MEMCPY_MOST_BYTES

    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    widths = []
    bitwise_or = torch.bitwise_or
    monkeypatch.setattr(
        torch, "bitwise_or", lambda a, b, out: widths.append(a.dtype) or bitwise_or(a, b, out=out)
    )
    assert copy_views.driver_launcher(GRAPH_MEMCPY_MOST_BYTES) is copy_views.TORCH_COPY
    launch = copy_views.driver_launcher(GRAPH_MEMCPY_MOST_BYTES + 16)
    assert launch.any_address
    memory = torch.arange(-40.0, 40.0).half()
    for src, dst, width in (
        (memory[:64].view(8, 8), torch.zeros(8, 8).half(), torch.int64),
        (memory[1:65].view(8, 8), torch.zeros(8, 8).half(), torch.int16),  # a 2-byte base
        (memory[4:60].view(8, 7), torch.zeros(8, 7).half(), torch.int64),  # 112 bytes, an 8-byte base
        (memory[4:39].view(5, 7), torch.zeros(5, 7).half(), torch.int16),  # 70 bytes
    ):
        for capturing[0] in (False, True):
            widths.clear()
            dst.fill_(0)
            launch(dst, src)
            assert torch.equal(dst.view(torch.int16), src.view(torch.int16))
            assert widths == ([width] if capturing[0] else [])
    z = torch.arange(16.0).view(4, 4) * (1 + 1j)
    out = torch.zeros_like(z)
    widths.clear()
    launch(out, z.conj())  # capturing: a lazily applied bit is torch's copy_'s
    assert torch.equal(out, z.conj().resolve_conj()) and not widths


# -- a bit torch applies lazily (a conjugate view): torch's copy_, on every call -------------------
def test_route_of_a_conjugate_or_negative_view_is_torchs():
    values = dict(shape=(64, 64), src_shape=(64, 64), src_strides=(64, 1), dst_strides=(64, 1),
                  src_dtype="complex64", dst_dtype="complex64", nbytes=8, src_address=BASE,
                  dst_address=2 * BASE, src_device=0, dst_device=0)  # fmt: skip
    assert copy_route(flat_pair(**values)).path == "tma"  # moved as int64
    for lazy in ("conjugate", "negative"):
        route = copy_route(flat_pair(**values, lazy=lazy))
        assert route.path == "torch" and f"a {lazy} view" in route.reason and "resolve_conj()" in route.reason


@pytest.fixture
def gpu_copies(monkeypatch):
    """copy_, add_ and copy_path with CPU tensors taken as on CUDA device 0 of an H200 with
    TVM-FFI, and the real routed dispatches: each launch records (op, dtype moved) and does on
    the views it is given what the kernel would (a copy, or the reduce's add). Returns the
    records and the patched `tmakit.copies.call` module."""
    pytest.importorskip("torch")
    from tmakit.api import tensors as api_tensors
    from tmakit.copies import api as copies_api
    from tmakit.copies import call as copies_call
    from tmakit.reduce import call as api_reduce
    from tmakit.reduce import launch as reduce_launch
    from tmakit.runtime.dispatch import CallTable, Dispatch
    from tmakit.runtime.launch import Launcher

    launched = []

    def copy_launcher(plan, destination, tensor_shape, device, shape_generic=False):
        op = getattr(plan, "op", None)

        def launch(dst, src):
            launched.append((op or "copy", src.dtype))
            # as the kernel, behind autograd's back: .data has a version counter of its own
            dst.data.copy_(src.data) if op is None else dst.data.add_(src.data)

        return Launcher(launch, checks_arguments=True)

    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(api_tensors, "cuda_index", lambda tensor: 0)

    def reduce_launcher(plan, destination, device, shape_generic=False):
        return copy_launcher(plan, destination, None, device, shape_generic)

    for module in (copies_call, api_reduce):
        monkeypatch.setattr(module, "device_facts", lambda device: (132, 60 << 20))
        monkeypatch.setattr(module, "tvm_ffi_available", lambda: True)
    monkeypatch.setattr(copies_call, "copy_launcher", copy_launcher)
    for module in (api_reduce, reduce_launch):  # a shape's compile and the class's
        monkeypatch.setattr(module, "reduce_launcher", reduce_launcher)
    monkeypatch.setattr(copies_call, "_CLASSES", CallTable())
    monkeypatch.setattr(copies_call, "l2_of", lambda src: 60 << 20)
    plan, check = copies_call.routed_copy_launcher, copies_call.check_copy_tensors
    copies = Dispatch(plan, check, fallback=copies_call.TORCH_COPY, guard_of=copies_api.pair_guard)
    monkeypatch.setattr(copies_api, "_COPIES", copies)
    monkeypatch.setattr(copies_api, "_STRICT_COPIES", Dispatch(lambda *a: plan(*a, strict=True), check))
    reduce_launch.class_launcher.cache_clear()
    yield launched, copies_call
    reduce_launch.class_launcher.cache_clear()


@pytest.mark.parametrize("call", ["copy_", "add_"])
def test_a_destination_saved_for_backward_and_then_written_is_caught_at_backward(gpu_copies, call):
    """As after torch's in-place ops: the plain path bumps dst's version counter, so a backward
    that needs dst's old value raises instead of using the new one."""
    torch = pytest.importorskip("torch")
    import tmakit

    weight = torch.ones(64, 64, requires_grad=True)
    dst, src = torch.randn(64, 64), torch.randn(64, 64)
    saved = (dst * weight).sum()  # saves dst for weight's gradient
    for _ in range(4):  # planned, then found, tried first, then guarded: every path bumps once a call
        version = dst._version
        getattr(tmakit, call)(dst, src)
        assert dst._version == version + 1
    assert len(gpu_copies[0]) == 4  # the kernel's stand-in ran each time
    dispatch = (
        tmakit.copies.api.copy_dispatch()
        if call == "copy_"
        else tmakit.reduce.api.reduce_dispatch("add", False, {})
    )
    assert dispatch._guarded is not None  # the last call took the guarded path
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


def test_a_copy_past_the_l2_runs_the_drivers_launcher(gpu_copies, monkeypatch):
    """The route's BY_THE_DRIVER reason takes the driver's launcher: torch's copy_ eagerly and, in
    a capture of a copy past GRAPH_MEMCPY_MOST_BYTES (here lowered), its element-wise kernel; no
    TMA launch either way, any base address taken; strict is TMA's always."""
    torch = pytest.importorskip("torch")
    import tmakit
    from tmakit.copies import views as copy_views

    launched, _ = gpu_copies
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(copy_views, "GRAPH_MEMCPY_MOST_BYTES", 16 << 20)
    memory = torch.randn(4097 * 4096).half()  # 32 MiB of fp16: two streams past the stood-in 60 MiB L2
    src, dst = memory[: 4096 * 4096].view(4096, 4096), torch.empty(4096, 4096).half()
    assert tmakit.copy_path(dst, src).reason == BY_THE_DRIVER
    for capturing[0] in (False, True, True, False):
        launched.clear()
        dst.fill_(0)
        tmakit.copy_(dst, src)
        assert torch.equal(dst, src) and not launched, (capturing[0], launched)
    launched.clear()
    tmakit.copy_(dst, src, strict=True)
    assert torch.equal(dst, src) and len(launched) == 1
    capturing[0] = True
    shifted = memory[1 : 1 + 4096 * 4096].view(4096, 4096)  # the same signature, an unaligned base
    launched.clear()
    tmakit.copy_(dst, shifted)  # the same launcher: the element-wise kernel takes any base
    assert torch.equal(dst, shifted) and not launched


def test_a_conjugate_view_is_copied_by_torch_even_where_its_plain_pair_was_tmas(gpu_copies):
    """The dispatch's signature does not hold the conjugate bit: the launcher a plain complex pair
    planned checks it on every call, and hands a conjugate view to torch's copy_ (strict refuses)."""
    torch = pytest.importorskip("torch")
    import tmakit

    launched, _ = gpu_copies
    x = torch.randn(64, 64, dtype=torch.complex64)
    dst = torch.zeros_like(x)
    for _ in range(3):  # planned, then found, then tried first
        tmakit.copy_(dst, x)
    assert torch.equal(dst, x) and launched == [("copy", torch.int64)] * 3  # moved as int64 by "TMA"
    tmakit.copy_(dst, x.conj())
    assert torch.equal(dst, x.conj().resolve_conj()) and len(launched) == 3  # torch's copy_
    for _ in range(3):
        tmakit.copy_(dst, x, strict=True)
    with pytest.raises(TmaConfigError, match="strict=True: no TMA path, a conjugate view"):
        tmakit.copy_(dst, x.conj(), strict=True)
    assert tmakit.copy_path(dst, x.conj()).path == "torch"


@pytest.mark.parametrize("strict", [False, True])
def test_a_sparse_tensor_is_named_by_the_real_dispatch_in_both_modes(strict):
    torch = pytest.importorskip("torch")
    import tmakit

    dense, sparse = torch.zeros(64, 64), torch.ones(64, 64).to_sparse()
    for dst, src, name in ((dense, sparse, "src"), (sparse, dense, "dst")):
        with pytest.raises(TmaConfigError, match=rf"{name} has layout torch.sparse_coo; .*\.to_dense\(\)"):
            tmakit.copy_(dst, src, strict=strict)
        with pytest.raises(TmaConfigError, match=rf"{name} has layout torch.sparse_coo"):
            tmakit.add_(dst, src, strict=strict)


def test_tensors_that_require_grad_take_torchs_op_where_autograd_records_it():
    """With grad mode on, torch's copy_/add_ record the graph (and refuse a leaf) where a TMA
    kernel would record nothing; under torch.no_grad() (an optimizer's update) the call is the
    plain one, on detached views of the same memory."""
    torch = pytest.importorskip("torch")
    import tmakit

    src = torch.arange(64 * 64, dtype=torch.float32).view(64, 64).requires_grad_()
    dst = torch.zeros(64, 64)
    assert tmakit.copy_path(dst, src).reason.startswith("a tensor requires grad with grad mode on")
    tmakit.copy_(dst, src)
    assert torch.equal(dst, src) and dst.grad_fn is not None  # torch's copy_ recorded it
    dst.sum().backward()
    assert torch.equal(src.grad, torch.ones(64, 64))
    with pytest.raises(TmaConfigError, match="strict=True: no TMA path, a tensor requires grad"):
        tmakit.copy_(torch.zeros(64, 64), src, strict=True)
    with pytest.raises(TmaConfigError, match="a leaf Variable that requires grad"):  # torch's rule
        tmakit.copy_(src, dst.detach())
    with pytest.raises(TmaConfigError, match="a leaf Variable that requires grad"):
        tmakit.add_(src, dst.detach())
    with pytest.raises(
        TmaConfigError, match="strict=True: TMA cannot serve these tensors: a tensor requires grad"
    ):
        tmakit.add_(src, dst.detach(), strict=True)
    assert tmakit.reduce_path(src, dst.detach()).reason.startswith("a tensor requires grad")
    with torch.no_grad():  # an optimizer's update: the plain call, which is torch's on CPU tensors
        tmakit.copy_(src, torch.ones(64, 64))
        tmakit.add_(src, torch.ones(64, 64))
        assert "requires grad" not in tmakit.copy_path(src, dst).reason
        assert "requires grad" not in tmakit.reduce_path(src, dst).reason
    assert torch.equal(src.detach(), torch.full((64, 64), 2.0)) and src.grad_fn is None


@pytest.mark.parametrize("dst_strides", [(4, 1), (0, 1), (64, 0)])
def test_a_destination_that_may_overlap_itself_is_torchs_to_check(dst_strides):
    facts = flat_pair((64, 64), (64, 64), (64, 1), dst_strides, "float32", "float32", 4, BASE, 1 << 40, 0, 0)
    route = copy_route(facts)
    assert route.path == "torch" and "may map several of its elements to one address" in route.reason
    from tmakit.reduce.plan import reduce_route

    assert reduce_route(facts, "add").path == "torch"
    torch = pytest.importorskip("torch")
    import tmakit

    dst = torch.zeros(64 * 64 + 64).as_strided((64, 64), dst_strides)
    src = torch.arange(64 * 64, dtype=torch.float32).view(64, 64)
    if 0 in dst_strides:
        with pytest.raises(TmaConfigError, match="more than one element of the written-to tensor"):
            tmakit.copy_(dst, src)  # torch's own refusal, named
    else:  # torch cannot tell cheaply and copies in its own order: what the user gets from torch
        expected = torch.zeros(64 * 64 + 64).as_strided((64, 64), dst_strides).copy_(src)
        assert torch.equal(tmakit.copy_(dst, src), expected)


@pytest.mark.parametrize("tvm_ffi", [True, False])
def test_copy_path_checks_a_new_pair_and_compiles_nothing(gpu_copies, monkeypatch, tvm_ffi):
    torch = pytest.importorskip("torch")
    import tmakit

    _, copies_call = gpu_copies
    monkeypatch.setattr(copies_call, "tvm_ffi_available", lambda: tvm_ffi)
    monkeypatch.setattr(copies_call, "copy_launcher", lambda *a, **k: pytest.fail("compiled"))
    x = torch.zeros(64, 128, dtype=torch.float16)
    for dst, src, path in [
        (torch.zeros(128, 64, dtype=torch.float16), x.t(), "tma"),  # transposing, as laid out
        (torch.zeros(64, 128, dtype=torch.bool), x.bool(), "tma"),  # bool moved as uint8
        (torch.zeros(1000, dtype=torch.float16), torch.zeros(1000, dtype=torch.float16), "tma-rows"),
    ]:
        assert tmakit.copy_path(dst, src).path == path
    with pytest.raises(TmaConfigError, match="tile"):  # the planner's checks still run
        tmakit.copy_path(torch.zeros(128, 64, dtype=torch.float16), x.t(), tile=(64, 300))


def test_a_negative_view_of_a_real_dtype_is_torchs_even_where_its_key_was_tmas(gpu_copies):
    """A negative view (`c.conj().imag`, or `torch._neg_view`) is a float32 view whose bit torch
    applies as it reads: no call key holds it, so each call checks it, and torch's copy_/add_
    negate where a plain launch would not."""
    torch = pytest.importorskip("torch")
    import tmakit

    launched, _ = gpu_copies
    base = torch.randn(64, 64)
    negative = torch._neg_view(base)  # what conj().imag gives, on a TMA-addressable layout
    plain = torch.randn(64, 64)  # the same shape, strides and dtype, no bit
    assert negative.is_neg() and negative.stride() == plain.stride()
    dst = torch.zeros(64, 64)
    for _ in range(3):
        tmakit.copy_(dst, plain)
    assert len(launched) == 3
    tmakit.copy_(dst, negative)
    assert torch.equal(dst, -base) and len(launched) == 3  # torch's copy_ negated it
    assert "a negative view" in tmakit.copy_path(dst, negative).reason
    with pytest.raises(TmaConfigError, match="strict=True: no TMA path, a negative view"):
        tmakit.copy_(dst, negative, strict=True)
    for _ in range(2):
        tmakit.add_(dst, plain)
    before = dst.clone()
    tmakit.add_(dst, negative)
    assert torch.equal(dst, before - base) and launched[-1][0] == "add" and len(launched) == 5


def test_a_non_tensor_beside_one_that_requires_grad_is_named():
    torch = pytest.importorskip("torch")
    import numpy as np

    import tmakit

    weights = torch.zeros(4, 4, requires_grad=True)
    for grad_mode in (True, False):
        with torch.set_grad_enabled(grad_mode):
            with pytest.raises(TmaConfigError, match="numpy.ndarray"):
                tmakit.add_(np.zeros((4, 4)), weights)
            with pytest.raises(TmaConfigError, match="got None as dst"):
                tmakit.copy_(None, weights)
            with pytest.raises(TmaConfigError, match="got None as dst"):
                tmakit.copy_path(None, weights)


def test_a_write_under_no_grad_bumps_the_version_as_torchs_in_place_ops_do():
    torch = pytest.importorskip("torch")
    import tmakit

    weights = torch.zeros(4, 4, requires_grad=True)
    saved = weights * 1.0  # autograd saves nothing of weights here; its version is what is read
    version = weights._version
    with torch.no_grad():
        tmakit.copy_(weights, torch.ones(4, 4))
        tmakit.add_(weights, torch.ones(4, 4))
    assert weights._version >= version + 2 and torch.equal(weights.detach(), torch.full((4, 4), 2.0))
    assert saved.requires_grad


def test_strict_refuses_a_rows_copy_whose_tail_torch_would_move(gpu_copies):
    torch = pytest.importorskip("torch")
    import tmakit

    src, dst = torch.arange(777, dtype=torch.float16), torch.zeros(777, dtype=torch.float16)
    route = tmakit.copy_path(dst, src)
    assert route.path == "tma-rows" and route.tail == 9
    assert torch.equal(tmakit.copy_(dst, src), src)
    with pytest.raises(TmaConfigError, match="strict=True: TMA moves all but the last 9 elements"):
        tmakit.copy_(torch.zeros(777, dtype=torch.float16), src, strict=True)
    even = torch.arange(768, dtype=torch.float16)  # 3 x 256 rows, no tail: strict serves it
    assert torch.equal(tmakit.copy_(torch.zeros(768, dtype=torch.float16), even, strict=True), even)
