"""TMA reduce stores on a CPU: the (op, dtype) table and its refusals, the reduce kernels compiled
for sm_90a (every allowed pair, their PTX read back), and the NumPy model of each reduction."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.config import DTYPES, LoadConfig
from tmakit.plan import (
    REDUCE_DTYPES,
    REDUCE_OPS,
    CopyOptions,
    CopyPlan,
    LoadPlan,
    PipelinePlan,
    check_reduce,
    copy_destination,
    reduce_op,
    reduce_pairs,
)
from tmakit.plan.copy_defaults import copy_tile
from tmakit.ptx import expect_tx_byte_counts
from tmakit.reduce.launch import compile_reduce
from tmakit.reduce.plan import ReducePlan, reduce_class

# The PTX ISA's table for cp.reduce.async.bulk.tensor, written out once more by hand: the test
# of the one table in plan.reduce_ops.
ISA_TABLE = {
    "add": {"u32", "s32", "u64", "f32", "f16", "bf16"},
    "min": {"u32", "s32", "u64", "s64", "f16", "bf16"},
    "max": {"u32", "s32", "u64", "s64", "f16", "bf16"},
    "inc": {"u32"},
    "dec": {"u32"},
    "and": {"b32", "b64"},
    "or": {"b32", "b64"},
    "xor": {"b32", "b64"},
}
PTX_NAME = {"uint32": "u32", "int32": "s32", "uint64": "u64", "int64": "s64", "fp32": "f32", "fp16": "f16"}
PTX_NAME["bf16"] = "bf16"


def isa_takes(op: str, dtype: str) -> bool:
    if op in ("and", "or", "xor"):
        return dtype in ("int32", "uint32", "int64", "uint64") and f"b{DTYPES[dtype].bits}" in ISA_TABLE[op]
    return PTX_NAME.get(dtype) in ISA_TABLE[op]


# -- the table ---------------------------------------------------------------------------------
def test_the_table_is_the_isas_less_the_signed_min_max_and_every_dtype_it_names_is_tmakits():
    assert REDUCE_OPS == ("add", "min", "max", "inc", "dec", "and", "or", "xor")
    refused = {("min", "int32"), ("min", "int64"), ("max", "int32"), ("max", "int64")}
    for op in REDUCE_OPS:
        for dtype in DTYPES:
            expected = isa_takes(op, dtype) and (op, dtype) not in refused
            assert (dtype in REDUCE_DTYPES[op]) == expected, (op, dtype)
    assert len(reduce_pairs()) == 28


@pytest.mark.parametrize(
    "op, dtype", [("min", "int32"), ("max", "int32"), ("min", "int64"), ("max", "int64")]
)
def test_signed_min_and_max_are_refused_with_what_the_h200_did(op, dtype):
    """Listed by the ISA, but on the H200 they compared as unsigned: refused, never wrong data."""
    with pytest.raises(
        TmaConfigError, match=rf"reduce op '{op}' with dtype {dtype}: .*compared {dtype} as unsigned"
    ):
        check_reduce(op, dtype)


@pytest.mark.parametrize(
    "op, dtype",
    [("max", "fp32"), ("min", "fp32"), ("add", "int64"), ("add", "fp8e4m3"), ("min", "int8"),
     ("inc", "int32"), ("dec", "uint64"), ("and", "fp16"), ("xor", "fp32"), ("add", "uint8")],
)  # fmt: skip
def test_a_pair_the_isa_does_not_list_is_refused_naming_op_dtype_and_rule(op, dtype):
    with pytest.raises(TmaConfigError) as error:
        check_reduce(op, dtype)
    message = str(error.value)
    assert f"reduce op {op!r} with dtype {dtype}" in message
    assert "cp.reduce.async.bulk.tensor" in message
    for allowed in REDUCE_DTYPES[op]:
        assert allowed in message


def test_an_unknown_op_is_refused_naming_the_ops():
    with pytest.raises(TmaConfigError, match=r"reduce op 'mul' is not one of add, min, max, inc, dec, and"):
        check_reduce("mul", "fp32")


@pytest.mark.parametrize(("alias", "op"), [("sum", "add"), ("amax", "max"), ("amin", "min")])
def test_torchs_names_are_read_as_tmakits(alias, op):
    """scatter_reduce's and index_reduce's names: the same pair table, the same refusals."""
    assert reduce_op(alias) == op and reduce_op(op) == op
    check_reduce(alias, "bf16")
    refused = "int64" if op == "add" else "fp32"
    with pytest.raises(TmaConfigError, match=rf"reduce op '{op}' with dtype {refused}"):
        check_reduce(alias, refused)
    with pytest.raises(TmaConfigError, match=r"or torch's sum \(= add\), amax \(= max\), amin \(= min\)"):
        reduce_op("mean")


def test_an_int64_add_is_pointed_at_uint64():
    with pytest.raises(TmaConfigError, match=r"view\(torch.uint64\)"):
        check_reduce("add", "int64")


def test_a_refused_pair_is_planned_no_further(monkeypatch):
    """The pair is checked before the copy's class is planned (and so before anything compiles)."""
    from tmakit.reduce import plan as reduce_module

    def no_planning(*args, **kwargs):
        raise AssertionError("a refused pair was planned")

    monkeypatch.setattr(reduce_module, "copy_class", no_planning)
    with pytest.raises(TmaConfigError, match="reduce op 'max' with dtype fp32"):
        reduce_class(CopyOptions(), "max", "fp32", 2, "row", False, (16, 128), 132, False)


def test_a_reduce_plan_refuses_a_bad_pair_and_bulk_copies():
    copy = CopyPlan(PipelinePlan(LoadPlan(LoadConfig((64, 64), "fp32", (16, 64))), persistent=True))
    assert ReducePlan(copy, "add").op == "add"
    with pytest.raises(TmaConfigError, match="reduce op 'max' with dtype fp32"):
        ReducePlan(copy, "max")
    bulk = CopyPlan(copy.ring, bulk=True)
    with pytest.raises(TmaConfigError, match="bulk=True"):
        ReducePlan(bulk, "add")


def test_a_reduce_class_is_the_copys_class_with_the_op():
    args = (CopyOptions(), "min", "uint64", 3, "col", False, copy_tile("uint64"), 132, True)
    reduce = reduce_class(*args)
    assert reduce.copy.load.config.dtype == "uint64" and reduce.op == "min"
    assert reduce_class(*args) is reduce  # planned once per class
    assert "reduce            each store .min" in reduce.summary()


@pytest.mark.parametrize(
    ("alias", "op", "dtype"),
    [("sum", "add", "fp32"), ("amax", "max", "fp16"), ("amin", "min", "bf16"), ("amax", "max", "uint64")],
)
def test_a_plan_named_by_torchs_name_holds_tmakits_op(alias, op, dtype):
    """The kernel picks its reduce store by the plan's op: a plan keeps tmakit's name, however it
    was asked for, and is the same plan (one compile) as one asked for by that name."""
    arguments = (2, "row", False, copy_tile(dtype), 132, False)
    reduce = reduce_class(CopyOptions(), alias, dtype, *arguments)
    assert reduce.op == op and reduce is reduce_class(CopyOptions(), op, dtype, *arguments)
    assert ReducePlan(reduce.copy, alias) == reduce and ReducePlan(reduce.copy, alias).op == op
    if op == "add":
        assert reduce_class(CopyOptions(), alias, dtype, *arguments, kernel="ring").op == "add"


@pytest.mark.parametrize("kernel", [["ring"], None, "load-add-store"])
def test_a_reduce_class_refuses_a_kernel_it_has_not(kernel):
    with pytest.raises(TmaConfigError, match="reduce kernel .* is not one of store, ring"):
        reduce_class(CopyOptions(), "add", "fp32", 2, "row", False, (16, 256), 132, False, kernel=kernel)


def test_a_persistent_grid_the_kernels_host_code_cannot_count_is_refused():
    """The shape-generic host code takes the persistent grid's blocks as a 32-bit integer."""
    rule = r"a persistent grid of 4294967294 blocks \(sm_count 2147483647 x blocks_per_sm 2\)"
    with pytest.raises(TmaConfigError, match=rule):
        reduce_class(
            CopyOptions(blocks_per_sm=2), "add", "fp32", 2, "row", False, (16, 256), 2**31 - 1, False
        )
    load = LoadPlan(LoadConfig((64, 64), "fp32", (16, 64)))
    with pytest.raises(TmaConfigError, match=rule):
        ReducePlan(CopyPlan(PipelinePlan(load, persistent=True, sm_count=2**31 - 1, blocks_per_sm=2)))
    reduce_class(CopyOptions(), "add", "fp32", 2, "row", False, (16, 256), 2**31 - 1, False)


# -- the kernels, compiled for sm_90a ------------------------------------------------------------
def reduce_instructions(ptx: str) -> set[str]:
    return set(re.findall(r"cp\.reduce\.async\.bulk\.tensor[\w.:]*", ptx))


@pytest.mark.parametrize("op, dtype", reduce_pairs(), ids=[f"{op}-{dtype}" for op, dtype in reduce_pairs()])
def test_every_allowed_pair_compiles_to_a_tma_reduce_store(op, dtype):
    """The reduction is in the opcode; the element type is not (the instruction takes it from the
    tensor map, encoded from the tensor at launch), so the PTX of every dtype of one op is the same
    instruction - which is why the table is checked before compiling."""
    reduce = reduce_class(CopyOptions(), op, dtype, 2, "row", False, copy_tile(dtype), 132, False)
    ptx = compile_reduce(reduce, keep_ptx=True, shape_generic=True).ptx
    (store,) = reduce_instructions(ptx)
    assert store.startswith(f"cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group")
    assert not re.search(r"^\s*cp\.async\.bulk\.tensor\.\dd\.global", ptx, re.MULTILINE)  # no plain store
    assert "cp.async.bulk.tensor.2d.shared::cta.global.tile" in ptx  # the ring's loads
    assert set(expect_tx_byte_counts(ptx)) == {reduce.load.expected_tx_bytes}


@pytest.mark.parametrize("transpose", [False, True], ids=["same-layout", "transposing"])
def test_rank_3_and_transposing_reduces_compile(transpose):
    tile = copy_tile("bf16", transpose)
    reduce = reduce_class(CopyOptions(), "max", "bf16", 3, "col", transpose, tile, 132, False)
    destination = copy_destination(reduce.copy) if transpose else None
    ptx = compile_reduce(reduce, keep_ptx=True, destination=destination, shape_generic=True).ptx
    assert {s.split(".tile")[0] for s in reduce_instructions(ptx)} == {
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.max"
    }


def test_a_reduce_compiled_for_one_shape_stores_once_per_tile_from_one_thread():
    config = LoadConfig((1000, 776), "fp16", (16, 256))
    pipeline = PipelinePlan(LoadPlan(config), stages=4, persistent=True)
    ptx = compile_reduce(ReducePlan(CopyPlan(pipeline), "add"), keep_ptx=True).ptx
    lines = [line.strip() for line in ptx.splitlines() if not line.strip().startswith("$L__")]  # labels
    stores = [i for i, line in enumerate(lines) if line.startswith("cp.reduce.async.bulk.tensor.2d")]
    assert len(stores) == 1
    assert lines[stores[0] + 1] == "cp.async.bulk.commit_group;"
    assert lines[stores[0] + 2].startswith("cp.async.bulk.wait_group.read")  # stage read before release


@pytest.mark.parametrize("transpose", [False, True], ids=["same-layout", "transposing"])
def test_the_reduce_store_is_elected_once(transpose):
    """The DSL elects the thread that issues a reduce store itself (a plain store it does not):
    electing around it too nested a full-warp `elect.sync` inside one thread, and on the H200 every
    reduce kernel stopped with a launch failure. One election in the store's basic blocks."""
    tile = copy_tile("fp32", transpose)
    reduce = reduce_class(CopyOptions(), "add", "fp32", 2, "row", transpose, tile, 132, True)
    destination = copy_destination(reduce.copy) if transpose else None
    lines = compile_reduce(
        reduce, keep_ptx=True, destination=destination, shape_generic=True
    ).ptx.splitlines()
    store = next(i for i, line in enumerate(lines) if "cp.reduce.async.bulk.tensor" in line)
    block_start = max(i for i in range(store) if lines[i].startswith("$L__"))  # the last label above
    assert sum("elect.sync" in line for line in lines[block_start:store]) == 1


# -- the model -----------------------------------------------------------------------------------
def test_integer_add_wraps_and_unsigned_min_max():
    from tmakit.model import reduce_reference

    big = np.array([2**31 - 1, -5, 7], dtype=np.int32)
    assert reduce_reference("add", "int32", big, np.array([1, 3, -7], dtype=np.int32)).tolist() == [
        -(2**31),
        -2,
        0,
    ]
    top = np.array([2**64 - 1], dtype=np.uint64)
    assert reduce_reference("add", "uint64", top, np.array([2], dtype=np.uint64)).tolist() == [1]
    assert reduce_reference("min", "uint64", np.array([2**63, 5]), np.array([3, 2**62])).tolist() == [3, 5]
    with pytest.raises(TmaConfigError, match="as unsigned"):  # refused, as tmakit refuses it
        reduce_reference("min", "int64", np.array([-1, 5]), np.array([3, -(2**62)]))
    assert reduce_reference("max", "uint32", np.array([0xFFFFFFFF, 1]), np.array([1, 2])).tolist() == [
        0xFFFFFFFF,
        2,
    ]


def test_inc_and_dec_as_the_isa_defines_them():
    from tmakit.model import reduce_reference

    d = np.array([0, 3, 5, 9, 0, 7], dtype=np.uint32)
    s = np.array([5, 5, 5, 5, 0, 0], dtype=np.uint32)
    # inc: (d >= s) ? 0 : d + 1
    assert reduce_reference("inc", "uint32", d, s).tolist() == [1, 4, 0, 0, 0, 0]
    # dec: (d == 0 || d > s) ? s : d - 1
    assert reduce_reference("dec", "uint32", d, s).tolist() == [5, 2, 4, 5, 0, 0]


def test_bitwise_ops_on_both_widths():
    from tmakit.model import reduce_reference

    d, s = np.array([0b1100, -1], dtype=np.int64), np.array([0b1010, 2**40], dtype=np.int64)
    assert reduce_reference("and", "int64", d, s).tolist() == [0b1000, 2**40]
    assert reduce_reference("or", "int64", d, s).tolist() == [0b1110, -1]
    assert reduce_reference("xor", "uint32", np.uint32([0xF0F0]), np.uint32([0xFFFF])).tolist() == [0x0F0F]


def test_float_add_rounds_once_to_nearest_even():
    from tmakit.model import reduce_reference
    from tmakit.model.reduce_ops import bf16_to_float, float_to_bf16

    # fp16: 2048 + 1 is a tie between 2048 and 2050: even mantissa, 2048; 2048 + 3 -> 2052.
    d, s = np.float16([2048, 2048]), np.float16([1, 3])
    assert reduce_reference("add", "fp16", d, s).tolist() == [2048, 2052]
    # fp32 agrees with NumPy's own float32 add (one rounding of the exact sum).
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    assert np.array_equal(reduce_reference("add", "fp32", a, b), a + b)
    # bf16: 256 + 1 ties to 256 (8 bits of mantissa), 256 + 3 -> 260; an overflow rounds to inf.
    d = float_to_bf16(np.float32([256, 256, 3.3e38]))
    s = float_to_bf16(np.float32([1, 3, 3.3e38]))
    assert bf16_to_float(reduce_reference("add", "bf16", d, s)).tolist() == [256, 260, np.inf]


def test_float_min_max_take_the_number_over_a_nan():
    from tmakit.model import reduce_reference
    from tmakit.model.reduce_ops import bf16_to_float, float_to_bf16

    nan = np.nan
    d, s = np.float16([1, nan, nan, -2]), np.float16([nan, 3, nan, 5])
    got = reduce_reference("min", "fp16", d, s)
    assert got[:2].tolist() == [1, 3] and np.isnan(got[2]) and got[3] == -2
    assert reduce_reference("max", "fp16", d, s)[3] == 5
    b = reduce_reference(
        "max", "bf16", float_to_bf16(np.float32([nan, 1.5])), float_to_bf16(np.float32([2, nan]))
    )
    assert bf16_to_float(b).tolist() == [2, 1.5]


def test_float_adds_keep_subnormals_as_the_h200_did_and_the_flushing_rule_is_there_to_compare(monkeypatch):
    from tmakit.model import reduce_ops as model
    from tmakit.model import reduce_reference
    from tmakit.model.reduce_ops import ELEMENT_RULES, bf16_to_float, float_to_bf16

    assert model.FLUSHES_SUBNORMALS == {"fp32": False, "fp16": False, "bf16": False}
    assert "subnormals kept" in ELEMENT_RULES["add"]
    tiny, normal = np.float32(2.0**-140), np.float32(2.0**-126)  # a subnormal, the smallest normal
    d = np.float32([tiny, tiny, -tiny, 1.5 * normal, -1.5 * normal, 1.0])
    s = np.float32([0.0, tiny, 0.0, -normal, normal, tiny])
    kept = reduce_reference("add", "fp32", d, s)
    assert kept.tolist() == [tiny, 2 * tiny, -tiny, 0.5 * normal, -0.5 * normal, 1.0]
    # The ISA's rule for the non-tensor f32 reduce, which the GPU test names when the hardware
    # follows it: subnormal inputs and results flushed to a zero of their sign.
    monkeypatch.setitem(model.FLUSHES_SUBNORMALS, "fp32", True)
    flushed = reduce_reference("add", "fp32", d, s)
    assert flushed.tolist() == [0.0, 0.0, 0.0, 0.0, -0.0, 1.0]
    assert np.signbit(flushed).tolist() == [False, False, False, False, True, False]
    half = np.float16(2.0**-24)  # f16's smallest subnormal: kept, and sums of them too
    assert reduce_reference(
        "add", "fp16", np.float16([half, 2.0**-14]), np.float16([half, -half])
    ).tolist() == [
        2.0**-23,
        np.float16(2.0**-14 - 2.0**-24),
    ]
    tiny_bf16 = float_to_bf16(np.float32([2.0**-133, 2.0**-130]))  # bf16 subnormals
    summed = bf16_to_float(reduce_reference("add", "bf16", tiny_bf16, tiny_bf16))
    assert summed.tolist() == [2.0**-132, 2.0**-129]


def test_float_add_of_infinities_and_nans():
    from tmakit.model import reduce_reference
    from tmakit.model.reduce_ops import bf16_to_float, float_to_bf16

    inf, nan = np.inf, np.nan
    for dtype, cast in [("fp32", np.float32), ("fp16", np.float16)]:
        got = reduce_reference(
            "add", dtype, cast([inf, inf, -inf, nan, 1.0]), cast([1.0, -inf, -inf, 2.0, nan])
        )
        assert got[0] == inf and np.isnan(got[1]) and got[2] == -inf and np.isnan(got[3]) and np.isnan(got[4])
    assert reduce_reference("add", "fp16", np.float16([65504]), np.float16([65504]))[0] == inf  # overflow
    got = bf16_to_float(
        reduce_reference(
            "add", "bf16", float_to_bf16(np.float32([inf, nan])), float_to_bf16(np.float32([-inf, 1]))
        )
    )
    assert np.isnan(got).all()


def test_float_min_max_order_negative_zero_below_positive_and_keep_subnormals():
    from tmakit.model import reduce_reference

    d, s = (
        np.float16([0.0, -0.0, 2.0**-24, -(2.0**-24), np.inf]),
        np.float16([-0.0, 0.0, 2.0**-23, 0.0, -np.inf]),
    )
    low, high = reduce_reference("min", "fp16", d, s), reduce_reference("max", "fp16", d, s)
    assert np.signbit(low[:2]).all() and not np.signbit(high[:2]).any()
    assert low[2:].tolist() == [2.0**-24, -(2.0**-24), -np.inf]
    assert high[2:].tolist() == [2.0**-23, 0.0, np.inf]


def test_the_model_refuses_what_tma_refuses():
    from tmakit.model import reduce_reference

    with pytest.raises(TmaConfigError, match="reduce op 'max' with dtype fp32"):
        reduce_reference("max", "fp32", np.float32([1]), np.float32([2]))


# -- the API's refusals, before anything compiles -------------------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the torch API needs torch (pip install 'tmakit[gpu]')")


@pytest.fixture
def launches(reduces_as_gpu, torch):
    """CPU tensors pass as GPU ones on an H200 with TVM-FFI; compiles and launches are recorded."""
    return reduces_as_gpu


def test_a_reduce_launches_its_class_and_new_shapes_compile_nothing(launches, torch):
    import tmakit

    compiled, launched = launches
    for rows, cols in [(64, 64), (1000, 776), (3, 8)]:
        dst, src = torch.empty(rows, cols), torch.empty(rows, cols)
        assert tmakit.add_(dst, src) is dst
    counters = torch.empty(5, 8, dtype=torch.uint32)
    assert tmakit.reduce_into_(counters, torch.empty(5, 8, dtype=torch.uint32), "inc") is counters
    assert [reduce.op for reduce, _, _ in compiled] == ["add", "inc"]
    assert all(generic for _, _, generic in compiled)
    assert [shape for _, shape, _, _ in launched] == [(64, 64), (1000, 776), (3, 8), (5, 8)]


def test_a_reduce_takes_the_copys_options_but_rows_views(launches, torch):
    import tmakit

    compiled, launched = launches
    dst, src = torch.empty(1000, 776), torch.empty(1000, 776)
    tmakit.add_(dst, src, stages=6, store_depth=3)
    tmakit.reduce_into_(dst, src, "add", tile=(32, 64), evict_first=True)
    tmakit.add_(dst, src)  # the defaults: a class of their own
    (first, _, _), (second, _, _), (default, _, _) = compiled
    assert first.copy.ring.stages == 6 and first.copy.store_depth == 3
    assert second.load.config.tile == (32, 64) and second.copy.ring.evict_first
    assert default.copy.ring.stages != 6 and default.copy.store_depth != 3
    for wrong, rule in [({"bulk": True}, "as_rows and bulk"), ({"as_rows": True}, "as_rows and bulk"),
                        ({"stagez": 4}, "unknown copy option stagez")]:  # fmt: skip
        with pytest.raises(TmaConfigError, match=rule):
            tmakit.add_(dst, src, **wrong)
    assert len(launched) == 3


def test_a_transposing_reduce_gets_the_other_layout(launches, torch):
    import tmakit

    compiled, launched = launches
    src = torch.empty(256, 128, dtype=torch.bfloat16)
    dst = torch.empty(128, 256, dtype=torch.bfloat16).t()
    tmakit.reduce_into_(dst, src, "max")
    reduce, destination, _ = compiled[0]
    assert reduce.copy.transpose and destination.major == "col"


@pytest.mark.parametrize(
    "make, rule",
    [
        (lambda t: (t.empty(8, 8), t.empty(8, 8), "max"), "reduce op 'max' with dtype fp32"),
        (lambda t: (t.empty(8, 8, dtype=t.int64),) * 2 + ("add",), "reduce op 'add' with dtype int64"),
        (lambda t: (t.empty(8, 8), t.empty(8, 8), "mul"), "reduce op 'mul' is not one of"),
        (lambda t: (t.empty(8, 16), t.empty(8, 8), "add"), r"destination is \(8, 16\).*one shape and dtype"),
        (lambda t: (t.empty(8, 8), t.empty(8, 8, dtype=t.float16), "add"), "one shape and dtype"),
        (lambda t: (t.empty(64, 65, dtype=t.float16)[:, :63],) * 2 + ("add",), "dim 0 is 130 bytes"),
        (lambda t: ([1.0], t.empty(8, 8), "add"), "reduce_into_ takes torch tensors"),
    ],
    ids=["pair", "int64-add", "op", "shape", "dtype", "stride", "list"],
)
def test_bad_input_is_refused_before_compiling_when_strict(launches, torch, make, rule):
    """strict=True: what TMA does not serve is refused, nothing falls back to torch's op."""
    import tmakit

    compiled, launched = launches
    dst, src, op = make(torch)
    with pytest.raises(TmaConfigError, match=rule):
        tmakit.reduce_into_(dst, src, op, strict=True)
    assert compiled == [] and launched == []


def test_a_call_by_torchs_name_launches_tmakits_op(launches, torch):
    import tmakit

    compiled, launched = launches
    dst, src = torch.empty(128, 256, dtype=torch.bfloat16), torch.empty(128, 256, dtype=torch.bfloat16)
    for _ in range(2):  # the second call finds the dispatch by torch's name
        tmakit.reduce_into_(dst, src, "amax")
    assert [plan.op for plan, _, _ in compiled] == ["max"] and len(launched) == 2
    assert tmakit.reduce_path(dst, src, "sum").op == "add"


def test_partly_overlapping_tensors_are_refused_the_same_view_is_not(launches, torch):
    import tmakit

    compiled, launched = launches
    memory = torch.empty(65, 64)
    with pytest.raises(TmaConfigError, match=r"dst \(strides \(64, 1\)\) partly overlaps src"):
        tmakit.add_(memory[1:], memory[:-1])
    tmakit.add_(memory, memory)  # dst += dst: each tile is loaded before its own store
    assert len(launched) == 1


def test_cpu_tensors_are_refused_when_strict_and_added_by_torch_otherwise(torch):
    import tmakit

    with pytest.raises(TmaConfigError, match="dst is on cpu; TMA loads from GPU memory"):
        tmakit.add_(torch.empty(8, 8), torch.empty(8, 8), strict=True)
    dst = torch.arange(64.0).reshape(8, 8)
    assert torch.equal(tmakit.add_(dst, torch.ones(8, 8)), torch.arange(1.0, 65.0).reshape(8, 8))
