"""Which path serves a reduce (`plan.reduce_route`, pure Python), and `reduce_into_` on each: torch's
own op for the tensors TMA does not serve (CPU tensors route there, so these tests run torch's op
through tmakit and compare every element with torch's own call), TMA on a view of the same memory
(CPU tensors standing in for GPU ones, launches recorded), `strict=True`'s refusals, and the
repeated call's lookup. The GPU tests at the end compare both paths with torch on a Hopper GPU."""

from __future__ import annotations

import numpy as np
import pytest

import tmakit
from route_facts import flat_pair
from tmakit import TmaConfigError
from tmakit.plan import REDUCE_OPS
from tmakit.plan.route import PATHS, TORCH_FASTER_BEYOND_L2, PairFacts
from tmakit.reduce.plan import reduce_route

FP16_BYTES = 2


def facts(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...] | None = None,
    dst_strides: tuple[int, ...] | None = None,
    dtype: str = "float16",
    nbytes: int = FP16_BYTES,
    **changed: object,
) -> PairFacts:
    """The facts of a pair on CUDA device 0, both 16-byte aligned; row-major unless told."""
    row_major = tuple(int(np.prod(shape[d + 1 :])) for d in range(len(shape)))
    src_strides = row_major if src_strides is None else src_strides
    fields = dict(
        shape=shape,
        src_shape=shape,
        src_strides=src_strides,
        dst_strides=src_strides if dst_strides is None else dst_strides,
        src_dtype=dtype,
        dst_dtype=dtype,
        nbytes=nbytes,
        src_address=0x7F0000000000,
        dst_address=0x7F0001000000,
        src_device=0,
        dst_device=0,
    )
    return flat_pair(**{**fields, **changed})


# -- routes, pure Python -----------------------------------------------------------------------------
ROUTES = [
    # (id, facts, op, path, words of the reason, view)
    ("row-major", facts((64, 64)), "add", "tma", "as laid out", None),
    ("transposing", facts((64, 128), (1, 64), (128, 1)), "add", "tma", "as laid out", None),
    ("sliced", facts((64, 63), (64, 1), (64, 1)), "add", "tma", "as laid out", None),
    # (8, 16, 4) fp32 permuted to (4, 8, 16): the stride-1 dim first, so not as laid out; the canonical
    # view merges the two outer dims into 128 rows, column-major into the destination's rows.
    ("permuted", facts((4, 8, 16), (1, 64, 4), (128, 16, 1), "float32", 4), "add", "tma-view",
     "view of the same memory", ((128, 4), (4, 1), (1, 128))),
    ("1-d", facts((1024,)), "add", "tma-view", "compact run as 4 x 256 rows", ((4, 256), (256, 1), (256, 1))),
    ("compact-odd-pitch", facts((64, 63)), "min", "tma-view", "compact run as 63 x 64 rows",
     ((63, 64), (64, 1), (64, 1))),
    # rank 6 padded by 8 elements: the outer dims merge into one, rank 2
    ("rank-6-padded", facts((2, 2, 2, 2, 2, 64), (1152, 576, 288, 144, 72, 1)), "max", "tma-view",
     "view of the same memory", ((32, 64), (72, 1), (72, 1))),
    ("padded-130-bytes", facts((64, 63), (65, 1)), "add", "torch", "stride of dim 0 is 130 bytes", None),
    ("1-d-no-rows", facts((1000,)), "add", "torch", "compact run of 1000 elements is no whole number", None),
    ("1-d-strided", facts((512,), (2,), (2,)), "add", "torch", "rank 1 (TMA takes 2 to 5 dims)", None),
    ("rank-0", facts((), (), ()), "add", "torch", "compact run of 1 elements", None),
    ("bool", facts((64, 64), dtype="bool", nbytes=1), "or", "torch", "reduce op 'or' with dtype bool", None),
    ("float64", facts((64, 64), dtype="float64", nbytes=8), "add", "torch", "with dtype float64", None),
    ("int64-add", facts((64, 64), dtype="int64", nbytes=8), "add", "torch", "view(torch.uint64)", None),
    ("int64-xor", facts((64, 64), dtype="int64", nbytes=8), "xor", "tma", "as laid out", None),
    ("fp32-max", facts((64, 64), dtype="float32", nbytes=4), "max", "torch", "'max' with dtype fp32", None),
    ("signed-min", facts((64, 64), dtype="int32", nbytes=4), "min", "torch", "int32 as unsigned", None),
    ("unaligned-src", facts((64, 64), src_address=0x7F0000000008), "add", "torch",
     "src's base address 0x7f0000000008 is not 16-byte aligned", None),
    ("unaligned-dst", facts((64, 64), dst_address=0x7F0000000004), "add", "torch", "dst's base", None),
    ("cpu", facts((64, 64), src_device=-1, dst_device=-1), "add", "torch", "one CUDA device", None),
    ("two-gpus", facts((64, 64), dst_device=1), "add", "torch", "not both on one CUDA device", None),
    ("dtype-change", facts((64, 64), src_dtype="int32"), "add", "torch", "(int32 to float16)", None),
    ("broadcast", facts((64, 64), src_shape=(64,), src_strides=(1,)), "add", "torch",
     "broadcast source ((64,) to (64, 64))", None),
    ("empty", facts((0, 64)), "add", "empty", "no element", None),
    ("empty-bool", facts((0, 64), dtype="bool", nbytes=1), "add", "torch", "dtype bool", None),
    ("empty-unaligned", facts((0, 64), src_address=3), "add", "empty", "no element", None),
]  # fmt: skip


@pytest.mark.parametrize("name, pair, op, path, reason, view", ROUTES, ids=[r[0] for r in ROUTES])
def test_a_reduce_takes_the_route_its_facts_name(name, pair, op, path, reason, view):
    route = reduce_route(pair, op)
    assert (route.path, route.view) == (path, view), route
    assert reason in route.reason
    assert route.op == op and route.path in PATHS
    assert route.moved_as is None  # a reduce does arithmetic: never moved as another dtype
    assert route.by_tma == (path != "torch")
    assert str(route) == f"{op}: {path} ({route.reason})"


@pytest.mark.parametrize(
    "op, dtype, share, l2_bytes, path",
    [
        ("add", "float32", 1.0, 60 << 20, "tma"),  # the table's share exactly: not beyond it
        ("add", "float32", 1.01, 60 << 20, "torch"),  # past it: torch's dst.add_(src)
        ("add", "float32", 4.0, None, "tma"),  # no L2 size (a pure plan, a strict call): TMA wherever it can
        ("add", "uint32", 4.0, 60 << 20, "tma"),  # not measured (torch has no uint32 add): TMA's
        ("min", "uint32", 4.0, 60 << 20, "tma"),  # the table has no row for min: TMA reduce stores
    ],
)
def test_the_rule_table_sends_an_add_beyond_its_share_of_l2_to_torch(op, dtype, share, l2_bytes, path):
    columns = 4096  # 4-byte rows of 16 KiB; 3 streams (dst read, src read, dst written)
    rows = int(share * TORCH_FASTER_BEYOND_L2["add"].share_of_l2 * (60 << 20)) // (3 * columns * 4)
    route = reduce_route(facts((rows, columns), dtype=dtype, nbytes=4), op, l2_bytes)
    assert route.path == path, route
    assert ("measured faster" in route.reason) == (path == "torch")


def test_an_unknown_op_is_refused_whatever_the_tensors():
    for pair in (facts((64, 64)), facts((64, 64), src_device=-1, dst_device=-1)):
        with pytest.raises(TmaConfigError, match=r"reduce op 'mul' is not one of add, min, max"):
            reduce_route(pair, "mul")


def test_the_route_order_is_device_dtype_broadcast_pair_empty_alignment():
    """Each rule is reached only when every earlier one passes: the first broken one is the reason."""
    everything_wrong = facts(
        (0, 64), src_device=-1, src_dtype="bool", src_shape=(64,), src_strides=(1,), src_address=1
    )
    assert "CUDA device" in reduce_route(everything_wrong, "add").reason
    assert "dtype change" in reduce_route(facts((0, 64), src_dtype="bool", src_shape=(64,)), "add").reason
    assert "broadcast" in reduce_route(facts((0, 64), dtype="bool", nbytes=1, src_shape=(64,)), "add").reason
    assert reduce_route(facts((0, 64), dtype="float32", nbytes=4, src_address=1), "max").path == "torch"
    assert reduce_route(facts((0, 64), src_address=1), "max").path == "empty"
    assert "aligned" in reduce_route(facts((64, 65), (65, 1), src_address=8), "add").reason


# -- torch's op on CPU tensors, every element compared -------------------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the torch API needs torch")


def positions(torch, shape, dtype, salt=0):
    """Position-dependent values: each element its flat index (scrambled, with negatives where the
    dtype has them), so that a wrong element or a swapped pair shows."""
    index = torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape)
    values = (index * 7919 + salt * 104729) % 251
    if dtype == torch.bool:
        return values % 3 == 0
    if dtype.is_floating_point:
        return ((values - 125) / 8).to(dtype)
    if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        return values.to(dtype)
    return (values - 125).to(dtype)


def same(torch, got, expected) -> bool:
    """Every element equal, NaNs included (bits compared for floats)."""
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return False
    if got.dtype.is_floating_point:
        return torch.equal(got.isnan(), expected.isnan()) and torch.equal(
            got.nan_to_num(0.0), expected.nan_to_num(0.0)
        )
    return torch.equal(got, expected)


def torch_own(torch, op):
    """torch's own in-place op for each reduce torch has."""
    return {
        "add": lambda d, s: d.add_(s),
        "min": lambda d, s: torch.minimum(d, s, out=d),
        "max": lambda d, s: torch.maximum(d, s, out=d),
        "and": lambda d, s: d.bitwise_and_(s),
        "or": lambda d, s: d.bitwise_or_(s),
        "xor": lambda d, s: d.bitwise_xor_(s),
    }[op]


LAYOUTS = {
    "contiguous": lambda t, make: (make((6, 10)), make((6, 10), 1)),
    "transposed-dst": lambda t, make: (make((10, 6)).t(), make((6, 10), 1)),
    "permuted": lambda t, make: (make((3, 4, 5)).permute(2, 0, 1), make((5, 3, 4), 1)),
    "sliced": lambda t, make: (make((6, 12))[:, 1:11], make((6, 10), 1)),
    "broadcast": lambda t, make: (make((6, 10)), make((10,), 1)),
    "1-d": lambda t, make: (make((60,)), make((60,), 1)),
    "rank-0": lambda t, make: (make(()), make((), 1)),
}
CPU_CASES = [
    ("add", "float32"), ("add", "float16"), ("add", "bfloat16"), ("add", "int32"), ("add", "int64"),
    ("add", "float64"), ("add", "uint8"), ("min", "float32"), ("max", "float16"), ("min", "int64"),
    ("max", "int8"), ("and", "int64"), ("or", "int32"), ("xor", "bool"), ("and", "uint8"),
]  # fmt: skip


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op, dtype", CPU_CASES, ids=[f"{op}-{dtype}" for op, dtype in CPU_CASES])
def test_cpu_tensors_run_torchs_own_op_with_its_exact_result(torch, op, dtype, layout):
    element = getattr(torch, dtype)
    dst, src = LAYOUTS[layout](torch, lambda shape, salt=0: positions(torch, shape, element, salt))
    expected = dst.clone()
    torch_own(torch, op)(expected, src)
    assert tmakit.reduce_into_(dst, src, op) is dst
    assert same(torch, dst, expected), (op, dtype, layout)
    assert tmakit.reduce_path(dst, src, op).path == "torch"


def test_nans_reach_the_result_as_torch_minimum_gives_them(torch):
    dst = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    src = torch.tensor([float("nan"), 2.0, -1.0, float("nan")])
    expected = torch.minimum(dst, src)
    tmakit.reduce_into_(dst, src, "min")
    assert same(torch, dst, expected)


def test_a_dtype_change_torch_takes_is_served_and_one_it_refuses_is_named(torch):
    dst = torch.zeros(4, 4)
    tmakit.add_(dst, torch.arange(16, dtype=torch.int32).reshape(4, 4))
    assert torch.equal(dst, torch.arange(16.0).reshape(4, 4))
    with pytest.raises(TmaConfigError) as error:
        tmakit.add_(torch.zeros(4, 4, dtype=torch.int32), torch.ones(4, 4))
    message = str(error.value)
    assert "reduce_into_ add runs torch's dst.add_(src)" in message  # the op
    assert "not both on one CUDA device" in message  # why torch runs it
    assert "can't be cast to the desired output type Int" in message  # torch's rule


@pytest.mark.parametrize("op", ["add", "min", "max", "inc", "xor"])
def test_a_source_larger_than_dst_is_refused_and_dst_keeps_its_shape(torch, op):
    """torch's in-place op refuses a source that does not broadcast to dst; an `out=` op would
    resize dst instead, so tmakit's route refuses it for every op, naming both shapes."""
    dtype = torch.int64
    dst = torch.zeros(4, dtype=dtype)
    with pytest.raises(TmaConfigError, match=r"destination is \(4,\), source \(3, 4\): the source does not"):
        tmakit.reduce_into_(dst, torch.ones(3, 4, dtype=dtype), op)
    assert dst.shape == (4,) and not dst.any()


def test_torchs_own_refusals_are_raised_as_tmaconfigerror_naming_them(torch):
    with pytest.raises(TmaConfigError, match=r"torch's dst.bitwise_xor_\(src\).*torch refused: .*Float"):
        tmakit.reduce_into_(torch.zeros(4), torch.zeros(4), "xor")
    with pytest.raises(TmaConfigError, match="some elements of the input tensor and the written-to tensor"):
        memory = torch.zeros(65)
        tmakit.add_(memory[1:], memory[:-1])
    with pytest.raises(TmaConfigError, match=r"torch refused: .*not implemented for 'UInt32'"):
        tmakit.add_(torch.zeros(4, dtype=torch.uint32), torch.zeros(4, dtype=torch.uint32))  # torch's CPU


# -- inc and dec: PTX's unsigned red.inc / red.dec, which torch lacks --------------------------------
def inc_reference(d: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.where(d >= s, 0, d + 1).astype(d.dtype)


def dec_reference(d: np.ndarray, s: np.ndarray) -> np.ndarray:
    return np.where((d == 0) | (d > s), s, d - 1).astype(d.dtype)


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "uint16", "int32", "int64", "uint8", "float32"])
@pytest.mark.parametrize("op", ["inc", "dec"])
def test_inc_and_dec_follow_ptx_on_every_dtype(torch, op, dtype):
    """On unsigned types as PTX defines them (the uint64 values above 2^63 order as unsigned),
    on others by the same formula; torch's CPU lacks uint16/32/64 arithmetic, tmakit's does not."""
    big = 2**63 + 5 if dtype == "uint64" else 200 if dtype == "uint8" else 60000
    d = np.array([0, 3, 5, 9, 0, 7, big, big, 1, 2], dtype=dtype)
    s = np.array([5, 5, 5, 5, 0, 0, 1, big + 1, big, 2], dtype=dtype)
    dst = torch.from_numpy(d.copy()) if dtype != "uint64" else torch.from_numpy(d.view(np.int64).copy())
    src = torch.from_numpy(s.copy()) if dtype != "uint64" else torch.from_numpy(s.view(np.int64).copy())
    if dtype == "uint64":
        dst, src = dst.view(torch.uint64), src.view(torch.uint64)
    tmakit.reduce_into_(dst, src, op)
    expected = (inc_reference if op == "inc" else dec_reference)(d, s)
    got = dst.view(torch.int64).numpy().view(np.uint64) if dtype == "uint64" else dst.numpy()
    assert got.tolist() == expected.tolist(), (op, dtype)


def test_inc_and_dec_on_uint32_are_the_models(torch):
    from tmakit.model import reduce_reference

    d = np.array([[0, 3, 5, 9], [0, 7, 2**32 - 1, 1]], dtype=np.uint32)
    s = np.array([[5, 5, 5, 5], [0, 0, 2**32 - 1, 2**32 - 1]], dtype=np.uint32)
    for op in ("inc", "dec"):
        dst = torch.from_numpy(d.copy())
        tmakit.reduce_into_(dst, torch.from_numpy(s), op)
        assert dst.numpy().tolist() == reduce_reference(op, "uint32", d, s).tolist()


def test_inc_and_dec_broadcast_a_source_and_refuse_a_narrowing_one(torch):
    dst = torch.tensor([[0, 3], [5, 9]], dtype=torch.uint32)
    tmakit.reduce_into_(dst, torch.tensor([5], dtype=torch.uint32), "inc")
    assert dst.tolist() == [[1, 4], [0, 0]]
    with pytest.raises(TmaConfigError, match="can't be cast"):
        tmakit.reduce_into_(torch.zeros(2, dtype=torch.int32), torch.ones(2), "dec")


# -- strict, and the arguments' own errors ------------------------------------------------------------
def test_strict_refuses_what_torch_would_serve_naming_the_rule_and_the_way_out(torch):
    with pytest.raises(TmaConfigError, match="dst is on cpu; TMA loads from GPU memory, move it with .cuda"):
        tmakit.add_(torch.zeros(4, 4), torch.zeros(4, 4), strict=True)
    with pytest.raises(TmaConfigError, match="dst is on cpu"):
        tmakit.reduce_path(torch.zeros(4, 4), torch.zeros(4, 4), strict=True)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize(
    "call, rule",
    [
        (
            lambda t, **k: tmakit.reduce_into_(t.zeros(4), t.zeros(4), "mul", **k),
            "reduce op 'mul' is not one of",
        ),
        (lambda t, **k: tmakit.reduce_into_(t.zeros(4), t.zeros(4), 3, **k), r"reduce op 3 \(int\)"),
        (lambda t, **k: tmakit.add_([1.0], t.zeros(4), **k), "reduce_into_ takes torch tensors"),
        (lambda t, **k: tmakit.add_(t.zeros(4), 1.0, **k), "got float as src"),
        (lambda t, **k: tmakit.add_(t.zeros(4), t.zeros(4), stagez=2, **k), "unknown copy option stagez"),
        (lambda t, **k: tmakit.add_(t.zeros(4), t.zeros(4), as_rows=True, **k), "as_rows and bulk"),
        (lambda t, **k: tmakit.add_(t.zeros(4), t.zeros(4), tile=(16.0, 64), **k), "tile"),
        (lambda t, **k: tmakit.add_(t.zeros(4).to_sparse(), t.zeros(4), **k), "layout torch.sparse_coo"),
    ],
    ids=["op", "op-type", "list", "number", "option", "as_rows", "tile-type", "sparse"],
)
def test_wrong_arguments_are_refused_in_both_modes(torch, call, rule, strict):
    with pytest.raises(TmaConfigError, match=rule):
        call(torch, strict=strict)


def test_strict_must_be_a_flag(torch):
    with pytest.raises(TmaConfigError, match=r"strict is 'yes' \(str\); it must be True or False"):
        tmakit.add_(torch.zeros(4), torch.zeros(4), strict="yes")


# -- TMA routes, CPU tensors standing in for GPU ones ------------------------------------------------
@pytest.fixture
def as_gpu(reduces_as_gpu, torch):
    """CPU tensors route as tensors on CUDA device 0 of an H200 with TVM-FFI; compiles and launches
    are recorded (each launch: the op, and the shape and strides the kernel was given)."""
    return reduces_as_gpu


def test_a_tma_view_reduce_launches_on_views_of_the_same_memory(as_gpu, torch):
    compiled, launched = as_gpu
    src = torch.zeros(8, 16, 4).permute(2, 0, 1)  # (4, 8, 16), the stride-1 dim first
    dst = torch.zeros(4, 8, 16)
    route = tmakit.reduce_path(dst, src)
    assert route.path == "tma-view" and compiled == []  # reduce_path plans, compiles nothing
    tmakit.add_(dst, src)
    shape, src_strides, dst_strides = route.view
    assert launched == [("add", shape, src_strides, dst_strides)]
    assert compiled[0][0].copy.transpose  # the view is column-major into row-major

    tmakit.reduce_into_(torch.zeros(1024, dtype=torch.float16), torch.zeros(1024, dtype=torch.float16), "min")
    assert launched[-1] == ("min", (4, 256), (256, 1), (256, 1))  # a compact run as rows


def test_a_tma_route_as_laid_out_launches_the_tensors_themselves(as_gpu, torch):
    _, launched = as_gpu
    dst, src = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.float16)
    assert tmakit.reduce_path(dst, src).path == "tma"
    tmakit.add_(dst, src)
    assert launched == [("add", (64, 64), (64, 1), (64, 1))]


def test_every_call_checks_its_addresses_the_key_does_not_hold_them(as_gpu, torch):
    """Aligned, then one element off (the same shape, strides, dtype and device: the same key):
    the second runs torch's op, or is refused with strict=True, and launches nothing."""
    _, launched = as_gpu
    memory, other = torch.zeros(65, 64), torch.zeros(65, 64)
    aligned_dst, aligned_src = memory[:64], other[:64]
    offset_dst = memory.view(-1)[1 : 1 + 64 * 64].view(64, 64)
    tmakit.add_(aligned_dst, aligned_src)
    assert len(launched) == 1
    src = positions(torch, (64, 64), torch.float32, 1)
    expected = offset_dst.clone().add_(src)
    route = tmakit.reduce_path(offset_dst, src)
    assert (
        route.path == "torch" and "dst's base address" in route.reason and "16-byte aligned" in route.reason
    )
    tmakit.add_(offset_dst, src)
    assert len(launched) == 1 and torch.equal(offset_dst, expected)
    with pytest.raises(TmaConfigError, match=r"strict=True: .*dst's base address 0x[0-9a-f]+ is not 16-byte"):
        tmakit.add_(offset_dst, src, strict=True)
    tmakit.add_(aligned_dst, aligned_src, strict=True)
    assert len(launched) == 2


def test_layouts_whose_overlap_only_an_element_check_tells_run_torchs_op_unless_strict(as_gpu, torch):
    _, launched = as_gpu
    memory = torch.arange(64 * 2 * 64, dtype=torch.float32).view(64, 2, 64)
    dst, src = memory[:, 0, :], memory[:, 1, :].t()  # interleaved rows: disjoint, their spans meet
    expected = dst + src
    tmakit.add_(dst, src)
    assert torch.equal(dst, expected) and launched == []  # torch's add_: it checks each element
    with pytest.raises(TmaConfigError, match="partly overlaps"):
        tmakit.add_(dst, src, strict=True)
    assert launched == []


@pytest.mark.parametrize("strict", [False, True])
def test_partly_overlapping_tensors_on_a_tma_route_are_refused_in_both_modes(as_gpu, torch, strict):
    _, launched = as_gpu
    memory = torch.zeros(129, 64)
    tmakit.add_(memory[1:65], memory[65:129], strict=strict)  # disjoint slices of one tensor
    with pytest.raises(TmaConfigError, match=r"dst \(strides \(64, 1\)\) partly overlaps src"):
        tmakit.add_(memory[1:65], memory[:64], strict=strict)  # the same key, another address
    tmakit.add_(memory[:64], memory[:64], strict=strict)  # the very same view
    assert len(launched) == 2


def test_strict_refuses_a_layout_tma_cannot_address_naming_the_rule(as_gpu, torch):
    padded = torch.zeros(64, 65, dtype=torch.float16)[:, :63]
    with pytest.raises(TmaConfigError) as error:
        tmakit.add_(padded, torch.zeros(64, 65, dtype=torch.float16)[:, :63], strict=True)
    message = str(error.value)
    assert "global stride of dim 0 is 130 bytes; TMA needs a multiple of 16" in message  # value, rule
    assert "tmakit.padded_empty allocates padded rows" in message  # the layout's fix
    assert "without strict=True torch's dst.add_(src) serves them" in message
    dst = positions(torch, (64, 65), torch.float16)[:, :63]
    src = positions(torch, (64, 63), torch.float16, 1)
    expected = dst.clone().add_(src)
    tmakit.add_(dst, src)  # not strict: torch's op, every element
    assert torch.equal(dst, expected) and as_gpu[1] == []


def test_options_tma_refuses_for_tensors_it_serves_by_default_are_raised(as_gpu, torch):
    _, launched = as_gpu
    dst, src = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(
        TmaConfigError, match=r"tile's contiguous extent is 4 fp16 = 8 bytes.*leave the options"
    ):
        tmakit.add_(dst, src, tile=(16, 4))
    with pytest.raises(TmaConfigError, match="tile's contiguous extent is 4 fp16"):
        tmakit.reduce_path(dst, src, tile=(16, 4))
    tmakit.add_(dst, src, tile=(16, 8))
    assert launched == [("add", (64, 64), (64, 1), (64, 1))]


def test_a_shape_the_planner_refuses_with_its_defaults_goes_to_torch_with_its_reason(
    as_gpu, torch, monkeypatch
):
    from tmakit.reduce import call as reduce_call

    def refuse(*args, **kwargs):
        raise TmaConfigError("dim 0 has 2^33 elements; TMA coordinates reach 2^32")

    monkeypatch.setattr(reduce_call, "check_copy_shape", refuse)
    dst, src = torch.zeros(64, 64), positions(torch, (64, 64), torch.float32)
    route = tmakit.reduce_path(dst, src)
    assert (route.path, route.reason) == ("torch", "dim 0 has 2^33 elements; TMA coordinates reach 2^32")
    tmakit.add_(dst, src)
    assert torch.equal(dst, src) and as_gpu[1] == []
    with pytest.raises(TmaConfigError, match="2\\^33 elements"):
        tmakit.add_(dst, src, strict=True)
    with pytest.raises(TmaConfigError, match="2\\^33 elements"):  # defaults refused too: the options' error
        tmakit.add_(dst, src, stages=3, strict=True)
    tmakit.add_(dst, src, stages=3)  # defaults refused as well: torch, not the options' fault
    assert torch.equal(dst, 2 * src)


def test_an_empty_reduce_launches_nothing_wherever_it_lies(as_gpu, torch):
    _, launched = as_gpu
    empty = torch.zeros(0, 64, dtype=torch.float16)
    assert tmakit.reduce_path(empty, empty).path == "empty"
    assert tmakit.add_(empty, empty, strict=True) is empty
    assert launched == []


# -- a repeated call: its plan looked up ---------------------------------------------------------------
def test_a_repeated_call_is_planned_once_and_a_changed_one_again(torch, monkeypatch):
    from tmakit.reduce import call as reduce_call

    planned = []
    plan = reduce_call.reduce_decision

    def counted(*args, **kwargs):
        if "on" not in kwargs:  # the call's own planning, not its options' check
            planned.append(args[2:])
        return plan(*args, **kwargs)

    monkeypatch.setattr(reduce_call, "reduce_decision", counted)
    dst, src = torch.zeros(8, 8), torch.ones(8, 8)
    for _ in range(3):
        tmakit.add_(dst, src)
    assert len(planned) == 1 and torch.equal(dst, torch.full((8, 8), 3.0))
    tmakit.add_(dst.t(), src)  # other strides
    tmakit.add_(dst, src.double())  # another dtype
    tmakit.reduce_into_(dst, src, "max")  # another op
    tmakit.add_(dst, src, stages=4)
    assert len(planned) == 5
    with pytest.raises(TmaConfigError):
        tmakit.add_(dst, src, strict=True)  # strict: a key of its own, refused every time
    with pytest.raises(TmaConfigError):
        tmakit.add_(dst, src, strict=True)
    assert len(planned) == 7
    assert [call[0] for call in planned] == ["add", "add", "add", "max", "add", "add", "add"]


def test_a_repeated_tma_call_reads_no_route_and_no_device_again(as_gpu, torch, monkeypatch):
    """The host cost of a call seen before: its key, two address reads, the launch."""
    from tmakit.reduce import api as api_reduce
    from tmakit.reduce import call as reduce_call

    _, launched = as_gpu
    dst, src = torch.zeros(64, 64), torch.zeros(64, 64)
    tmakit.add_(dst, src)

    def not_again(*args, **kwargs):
        raise AssertionError("a repeated call planned again")

    for module in (api_reduce, reduce_call):  # each reads its own
        for name in ("reduce_route", "pair_facts"):
            monkeypatch.setattr(module, name, not_again)
    for name in ("device_facts", "decide_reduce", "class_launcher"):  # the planner's
        monkeypatch.setattr(reduce_call, name, not_again)
    for _ in range(3):
        tmakit.add_(dst, src)
    assert len(launched) == 4
    # The copy's dispatch: a launcher that checks its arguments is tried first, nothing read.
    assert list(api_reduce._DISPATCHES[("add", False, None)].tried_first()) == [(None, None)]


# -- on a Hopper GPU: both paths against torch --------------------------------------------------------
GPU_VIEWS = {
    "permuted": lambda t, make: (
        make((8, 16, 8)).permute(2, 0, 1).contiguous(),
        make((8, 16, 8), 1).permute(2, 0, 1),  # 8 elements contiguous: 16 bytes of bf16
    ),
    "1-d": lambda t, make: (make((4096,)), make((4096,), 1)),
    "compact-odd-pitch": lambda t, make: (make((1024, 63)), make((1024, 63), 1)),
    "rank-6-padded": lambda t, make: (
        make((2, 2, 2, 2, 2, 72))[..., :64],
        make((2, 2, 2, 2, 2, 72), 1)[..., :64],
    ),
}  # fmt: skip
GPU_FALLBACKS = {
    "bool-or": ("or", "bool", lambda t, make: (make((64, 64)), make((64, 64), 1))),
    "float64-add": ("add", "float64", lambda t, make: (make((64, 64)), make((64, 64), 1))),
    "fp32-max": ("max", "float32", lambda t, make: (make((64, 64)), make((64, 64), 1))),
    "padded-130-bytes": ("add", "float16", lambda t, make: (make((64, 65))[:, :63], make((64, 63), 1))),
    "unaligned": ("add", "float32", lambda t, make: (make((4097,))[1:].view(64, 64), make((64, 64), 1))),
    "broadcast": ("add", "bfloat16", lambda t, make: (make((64, 64)), make((64,), 1))),
    "dtype-change": ("add", "float32", lambda t, make: (make((64, 64)), make((64, 64), 1).half())),
}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(GPU_VIEWS))
@pytest.mark.parametrize("op, dtype", [("add", "float32"), ("max", "bfloat16"), ("xor", "int64")])
def test_gpu_a_tma_view_reduce_is_torchs_every_element(layout, op, dtype):
    import torch

    element = getattr(torch, dtype)
    make = lambda shape, salt=0: positions(torch, shape, element, salt).cuda()  # noqa: E731
    dst, src = GPU_VIEWS[layout](torch, make)
    assert tmakit.reduce_path(dst, src, op).path == "tma-view"
    expected = dst.clone()
    torch_own(torch, op)(expected, src)
    tmakit.reduce_into_(dst, src, op, strict=True)
    torch.cuda.synchronize()
    wrong = (dst != expected).nonzero()
    assert len(wrong) == 0, f"first wrong element at {tuple(wrong[0].tolist())}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_FALLBACKS))
def test_gpu_a_pair_tma_does_not_serve_runs_torchs_op(case):
    import torch

    op, dtype, build = GPU_FALLBACKS[case]
    element = getattr(torch, dtype)
    make = lambda shape, salt=0: positions(torch, shape, element, salt).cuda()  # noqa: E731
    dst, src = build(torch, make)
    assert tmakit.reduce_path(dst, src, op).path == "torch"
    expected = dst.clone()
    torch_own(torch, op)(expected, src)
    tmakit.reduce_into_(dst, src, op)
    assert same(torch, dst, expected), case
    with pytest.raises(TmaConfigError):
        tmakit.reduce_into_(dst, src, op, strict=True)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["inc", "dec"])
def test_gpu_inc_and_dec_on_both_paths_are_the_models(op):
    import torch

    from tmakit.model import reduce_reference

    d = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 2654435761) % 13
    s = (np.arange(64 * 64, dtype=np.uint32).reshape(64, 64) * 40503) % 11
    expected = reduce_reference(op, "uint32", d, s)
    tma_dst = torch.from_numpy(d.copy()).cuda()
    tmakit.reduce_into_(tma_dst, torch.from_numpy(s).cuda(), op, strict=True)
    memory = torch.zeros(64 * 64 + 1, dtype=torch.uint32, device="cuda")
    torch_dst = memory[1:].view(64, 64)  # 4 bytes off: torch's path
    torch_dst.copy_(torch.from_numpy(d).cuda())
    assert tmakit.reduce_path(torch_dst, torch_dst, op).path == "torch"
    tmakit.reduce_into_(torch_dst, torch.from_numpy(s).cuda(), op)
    assert tma_dst.cpu().numpy().tolist() == expected.tolist()
    assert torch_dst.cpu().numpy().tolist() == expected.tolist()


def test_every_op_has_a_torch_op():
    from tmakit.reduce.call import TORCH_OPS

    assert tuple(TORCH_OPS) == REDUCE_OPS


def test_a_reduce_autograd_records_is_torchs_under_no_grad_tmas_on_detached_views(as_gpu, torch):
    _, launched = as_gpu
    weights = torch.zeros(64, 64).requires_grad_()
    update = torch.ones(64, 64)
    with pytest.raises(TmaConfigError, match="a leaf Variable that requires grad"):  # torch's own rule
        tmakit.add_(weights, update)
    with pytest.raises(
        TmaConfigError, match="strict=True: TMA cannot serve these tensors: a tensor requires grad"
    ):
        tmakit.add_(weights, update, strict=True)
    assert launched == []
    with torch.no_grad():
        assert tmakit.reduce_path(weights, update).path == "tma"
        for _ in range(2):
            tmakit.add_(weights, update, strict=True)
    assert len(launched) == 2  # the stand-in launches record, they add nothing


@pytest.fixture
def plain_gpu(torch, monkeypatch):
    """CPU tensors as CUDA device 0 without TVM-FFI: the plain launcher, which checks nothing of
    its arguments. Each launch records the dtype planned and the tensors' dtype and alignment."""
    from tmakit.api import tensors as api_tensors
    from tmakit.reduce import call as api_reduce
    from tmakit.runtime.launch import Launcher

    launched = []

    def reduce_launcher(reduce, destination, device, shape_generic=False):
        def launch(dst, src):
            launched.append(
                (reduce.copy.load.config.dtype, src.dtype, src.data_ptr() % 16, dst.data_ptr() % 16)
            )

        return Launcher(launch)

    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(api_tensors, "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_reduce, "device_facts", lambda device: (132, 60 * 2**20))
    monkeypatch.setattr(api_reduce, "tvm_ffi_available", lambda: False)
    monkeypatch.setattr(api_reduce, "reduce_launcher", reduce_launcher)
    return launched


def test_a_plain_launcher_on_a_view_is_never_tried_first(plain_gpu, torch):
    """Without TVM-FFI the kernel checks nothing of its tensors: a repeated view reduce (a 1-D
    compact run) still checks each call's bases and finds its own dtype's kernel."""
    memory_dst, memory_src = torch.zeros(1032, dtype=torch.float16), torch.ones(1032, dtype=torch.float16)
    dst, src = memory_dst[:1024], memory_src[:1024]
    assert tmakit.reduce_path(dst, src).path == "tma-view"
    for _ in range(3):
        tmakit.add_(dst, src)
    assert len(plain_gpu) == 3
    offset_dst, offset_src = memory_dst[1:1025], memory_src[1:1025]  # same shape and strides, 2 bytes off
    expected = offset_dst.clone().add_(offset_src)
    tmakit.add_(offset_dst, offset_src)
    assert len(plain_gpu) == 3 and torch.equal(offset_dst, expected)  # torch's add_ served it
    tmakit.add_(torch.zeros(1024, dtype=torch.bfloat16), torch.ones(1024, dtype=torch.bfloat16))
    assert plain_gpu[-1][:2] == ("bf16", torch.bfloat16)  # the kernel planned for bf16
