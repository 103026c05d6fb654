"""Rows by index on the CPU: when bulk row copies serve a call (`plan.rows.rows_tma_rule`), what
the API refuses before anything launches, torch's op serving CPU tensors, the torch ops' fakes,
and the sm_90a compiles with the instruction each op's PTX carries."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tmakit import TmaConfigError
from tmakit.plan.route import NOT_SM90, TensorFacts
from tmakit.rows.plan import RowsFacts, RowsPlan, rows_tma_rule


def rows_facts(
    op: str = "gather",
    table_shape: tuple[int, ...] = (1000, 256),
    table_strides: tuple[int, ...] = (256, 1),
    compact_shape: tuple[int, ...] = (64, 256),
    compact_strides: tuple[int, ...] = (256, 1),
    dtype: str = "float32",
    nbytes: int = 4,
    table_address: int = 1 << 20,
    compact_address: int = 2 << 20,
    device: int = 0,
    **rest: object,
) -> RowsFacts:
    """A rows call's facts by flat fields: `dtype`, `nbytes` and `device` both tensors'. By
    default a gather of float32 rows of 1 KiB, where bulk copies gather them on the H200."""
    table = TensorFacts(table_shape, table_strides, dtype, nbytes, table_address, device)
    compact = TensorFacts(compact_shape, compact_strides, dtype, nbytes, compact_address, device)
    fields = {"index_device": 0, "index_dtype": "int64", "gpu": "NVIDIA H200", **rest}
    return RowsFacts(op, table, compact, **fields)  # type: ignore[arg-type]


FACTS = rows_facts()


def test_rows_of_contiguous_16_byte_multiples_are_served():
    assert rows_tma_rule(FACTS) is None
    wider = rows_facts(table_shape=(1000, 4, 64), table_strides=(512, 64, 1), compact_shape=(64, 4, 64),
                    compact_strides=(256, 64, 1))  # fmt: skip
    assert rows_tma_rule(wider) is None  # table rows 2 KiB apart: a strided table is served


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"device": -1}, "not on one CUDA device"),
        ({"device": NOT_SM90}, "not a Hopper"),
        ({"index_device": -1}, "not on one CUDA device"),
        ({"lazy": "conjugate"}, "conjugate"),
        ({"recorded": True}, "requires grad"),
        ({"table_shape": (1000,), "table_strides": (1,)}, "rank 1"),
        ({"table_strides": (256, 2)}, "the table's rows are not contiguous"),
        ({"compact_strides": (512, 1)}, "rows are 512 elements apart, not 256"),
        ({"table_strides": (257, 1)}, "rows are 1028 bytes apart"),
        ({"table_address": (1 << 20) + 4}, "base address is not 16-byte aligned"),
        (
            {
                "table_shape": (1000, 3),
                "compact_shape": (64, 3),
                "table_strides": (3, 1),
                "compact_strides": (3, 1),
            },
            "a row is 12 bytes",
        ),  # fmt: skip
        ({"op": "max", "dtype": "float32"}, "max of float32: the bulk reduce .* takes max on the integers"),
        ({"op": "add", "dtype": "float64", "nbytes": 8}, "add of float64"),
        ({"op": "min", "dtype": "bfloat16", "nbytes": 2}, "drop NaNs"),
    ],
)
def test_what_bulk_row_copies_cannot_serve_is_named(change, reason):
    assert re.search(reason, rows_tma_rule(rows_facts(**change)))


@pytest.mark.parametrize(
    ("op", "width", "gpu", "served"),
    [("gather", 4, "", True), ("gather", 8, "", True), ("gather", 128, "", True),
     ("gather", 256, "NVIDIA H100 80GB HBM3", False), ("gather", 256, "NVIDIA H200", True),
     ("gather", 256, "NVIDIA H200 NVL", True),
     ("gather", 512, "NVIDIA H200", False), ("scatter", 32, "NVIDIA H200", False), ("scatter", 64, "", True),
     ("add", 32, "", False), ("add", 4096, "NVIDIA H200", True)],
)  # fmt: skip
def test_each_op_takes_the_row_lengths_where_it_measured_faster_unless_strict(op, width, gpu, served):
    """float32 rows of `width` (4 x width bytes): gathers from 16 bytes to 1 KiB (to 2 KiB on the
    H200), scatters and adds from 256 bytes (the rows study)."""
    facts = rows_facts(op=op, table_shape=(1000, width), table_strides=(width, 1),
                    compact_shape=(64, width), compact_strides=(width, 1), gpu=gpu)  # fmt: skip
    assert (rows_tma_rule(facts) is None) == served
    assert rows_tma_rule(facts, strict=True) is None


@pytest.mark.parametrize(
    ("op", "dtype", "instruction"),
    [
        ("gather", None, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"),
        ("scatter", None, "cp.async.bulk.global.shared::cta.bulk_group"),
        ("add", "bf16", "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16"),
        ("add", "int64", "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64"),
        ("min", "int32", "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.s32"),
        ("max", "int64", "cp.reduce.async.bulk.global.shared::cta.bulk_group.max.s64"),
    ],
)
def test_the_rows_kernel_compiles_for_sm90a_with_its_instruction(op, dtype, instruction):
    pytest.importorskip("cutlass")
    from tmakit.rows.launch import compile_rows

    plan = RowsPlan(op, 1, 512, 64, dtype=dtype).kernel_plan()
    ptx = compile_rows(plan, "int64", keep_ptx=True).ptx
    assert instruction in ptx
    loads_by_lane = "mbarrier.expect_tx" in ptx  # a gather's lanes declare their own rows' bytes
    assert loads_by_lane == (op == "gather")


def torch_or_skip():
    return pytest.importorskip("torch")


def test_the_api_refuses_bad_input_before_anything_runs():
    torch = torch_or_skip()
    import tmakit

    table = torch.zeros(10, 8)
    with pytest.raises(TmaConfigError, match="index is torch.float32; gather_rows takes an int32 or int64"):
        tmakit.gather_rows(table, torch.tensor([1.0]))
    with pytest.raises(TmaConfigError, match="index has shape"):
        tmakit.gather_rows(table, torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TmaConfigError, match=r"src has shape \(3, 8\); .* it must be \(2, 8\)"):
        tmakit.index_add_(table, torch.tensor([1, 2]), torch.ones(3, 8))
    with pytest.raises(TmaConfigError, match="src is torch.float64 and the table torch.float32"):
        tmakit.index_add_(table, torch.tensor([1, 2]), torch.ones(2, 8, dtype=torch.float64))
    with pytest.raises(TmaConfigError, match="share memory"):
        tmakit.gather_rows(table, torch.tensor([1, 2]), out=table[3:5])
    with pytest.raises(TmaConfigError, match="reduce='sum': torch's index_reduce_ takes"):
        tmakit.index_reduce_(table, torch.tensor([1]), torch.ones(1, 8), "sum")
    with pytest.raises(TmaConfigError, match="bulk row copies cannot serve this call: the tensors"):
        tmakit.gather_rows(table, torch.tensor([1]), strict=True)


def test_cpu_tensors_take_torchs_op_and_match_it():
    torch = torch_or_skip()
    import tmakit

    table = torch.arange(60.0).reshape(10, 6)
    index = torch.tensor([9, 0, 9, 3])
    assert torch.equal(tmakit.gather_rows(table, index), table.index_select(0, index))
    route = tmakit.rows_path("gather", table, index, torch.empty(4, 6))
    assert route.path == "torch" and not route.by_tma
    added = tmakit.index_add_(table.clone(), index, torch.ones(4, 6), alpha=2)
    assert torch.equal(added, table.clone().index_add_(0, index, torch.ones(4, 6), alpha=2))
    reduced = tmakit.index_reduce_(table.clone(), index, torch.full((4, 6), 100.0), "amax")
    assert torch.equal(reduced, table.clone().index_reduce_(0, index, torch.full((4, 6), 100.0), "amax"))
    scattered = tmakit.scatter_rows_(table.clone(), torch.tensor([2, 5]), torch.zeros(2, 6))
    assert not scattered[[2, 5]].any() and torch.equal(scattered[0], table[0])


@pytest.fixture
def rows_ops_on_cpu(monkeypatch):
    """The rows ops exercised end to end on a CPU: their device check waived, and each strict
    API call they make served by the function's own path for CPU tensors (torch's op, which does
    what the kernel does)."""
    torch_or_skip()
    from stand_ins import strictly
    from tmakit.rows import api as api_rows
    from tmakit.rows import op as ops_rows

    monkeypatch.setattr(ops_rows, "check_traced", lambda op, **tensors: None)
    names = ("gather_rows", "scatter_rows_", "index_add_", "index_reduce_")
    served_api = {name: strictly(getattr(api_rows, name)) for name in names}
    monkeypatch.setattr(
        ops_rows, "api_rows", SimpleNamespace(**served_api, TORCH_REDUCES=api_rows.TORCH_REDUCES)
    )


def test_the_ops_refuse_a_cpu_tensor_eagerly_and_while_tracing():
    """Every op is strict: a CPU tensor gets TmaConfigError naming it, from the eager call and
    from the fake, never torch's op."""
    torch = torch_or_skip()
    import tmakit.ops  # noqa: F401  registers the ops

    table, index = torch.arange(40.0).reshape(10, 4), torch.tensor([3, 1, 9])
    before = table.clone()
    with pytest.raises(TmaConfigError, match="called eagerly: src is on cpu"):
        torch.ops.tmakit.gather_rows(table, index)
    for op in (torch.ops.tmakit.index_add_, torch.ops.tmakit.scatter_rows_):
        with pytest.raises(TmaConfigError, match="called eagerly: dst is on cpu"):
            op(table, index, torch.ones(3, 4))
    assert torch.equal(table, before)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(TmaConfigError, match="while tracing.*dst is on cpu"):
        torch.ops.tmakit.index_add_(torch.empty(10, 4), torch.empty(5, dtype=torch.long), torch.empty(5, 4))


def test_the_ops_trace_with_their_fakes_and_pass_opcheck(rows_ops_on_cpu):
    torch = torch_or_skip()
    import tmakit.ops  # noqa: F401  registers the ops

    table, index = torch.arange(40.0).reshape(10, 4), torch.tensor([3, 1, 9])
    torch.library.opcheck(torch.ops.tmakit.gather_rows.default, (table, index))
    torch.library.opcheck(torch.ops.tmakit.index_add_.default, (torch.zeros(10, 4), index, torch.ones(3, 4)))
    torch.library.opcheck(
        torch.ops.tmakit.scatter_rows_.default, (torch.zeros(10, 4), index, torch.ones(3, 4))
    )
    torch.library.opcheck(
        torch.ops.tmakit.index_reduce_.default, (torch.zeros(10, 4), index, torch.ones(3, 4), "amax")
    )
    compiled = torch.compile(
        lambda t, i: torch.ops.tmakit.gather_rows(t, i) * 2, backend="aot_eager", fullgraph=True
    )
    assert torch.equal(compiled(table, index), table[index] * 2)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = torch.ops.tmakit.gather_rows(
            torch.empty(10, 4, device="cuda"), torch.empty(5, dtype=torch.long, device="cuda")
        )
        assert out.shape == (5, 4) and out.device.type == "cuda"
        with pytest.raises(TmaConfigError, match="it must be"):
            torch.ops.tmakit.index_add_(
                torch.empty(10, 4, device="cuda"),
                torch.empty(5, dtype=torch.long, device="cuda"),
                torch.empty(4, 4, device="cuda"),
            )


def test_a_repeated_call_on_torchs_path_skips_the_route_and_still_checks_its_index(monkeypatch):
    torch = torch_or_skip()
    import tmakit
    from tmakit.rows import call as rows_call

    table, index = torch.arange(60.0).reshape(10, 6), torch.tensor([9, 0, 9, 3])
    routed = []
    rule = rows_call.rows_tma_rule
    monkeypatch.setattr(rows_call, "rows_tma_rule", lambda *args: routed.append(args) or rule(*args))
    for _ in range(3):
        assert torch.equal(tmakit.gather_rows(table, index), table.index_select(0, index))
    assert len(routed) == 1  # the first call routed (CPU tensors: torch's op), the others found it
    with pytest.raises(TmaConfigError, match=r"index\[1\] is 10; the table has 10 rows"):
        tmakit.gather_rows(table, torch.tensor([9, 10, 0, 1]))
    added = tmakit.index_add_(table.clone(), index, torch.ones(4, 6))
    again = tmakit.index_add_(table.clone(), index, torch.ones(4, 6))
    assert torch.equal(added, again)
    assert torch.equal(added, table.clone().index_add_(0, index, torch.ones(4, 6)))
    assert len(routed) == 2


def test_a_call_torch_serves_for_autograd_or_a_lazy_bit_is_not_kept_for_plain_calls(monkeypatch):
    """Whether autograd records a call and a conjugate or negative bit are not in the repeated
    call's key: a call torch's op served for them must not send a plain call of the same key
    there too."""
    torch = torch_or_skip()
    import tmakit
    from tmakit.rows import call as rows_call

    launched = []
    from tmakit.api import tensors

    for module in (rows_call, tensors):  # the tensors' and the index's device: CUDA 0
        monkeypatch.setattr(module, "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(rows_call, "device_name", lambda index: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(rows_call, "_launcher", lambda *args: lambda *tensors: launched.append(args[0]))
    table, index = torch.randn(16, 64), torch.tensor([3, 1])  # rows of 256 bytes: the kernel's
    tmakit.gather_rows(torch._neg_view(table), index)  # a negative view: torch's op
    assert launched == []
    tmakit.gather_rows(table, index)
    assert launched == ["gather"]
    weights = torch.zeros(16, 64, requires_grad=True)
    tmakit.index_add_(weights * 1, index, torch.ones(2, 64))  # autograd records it: torch's op
    assert launched == ["gather"]
    tmakit.index_add_(torch.zeros(16, 64), index, torch.ones(2, 64))
    assert launched == ["gather", "add"]


def test_a_gather_autograd_records_returns_torchs_differentiable_result():
    torch = torch_or_skip()
    import tmakit

    table = torch.randn(10, 6, requires_grad=True)
    index = torch.tensor([9, 0, 9])
    rows = tmakit.gather_rows(table, index)
    assert rows.grad_fn is not None and torch.equal(rows, table.index_select(0, index))
    rows.sum().backward()
    assert torch.equal(table.grad[9], torch.full((6,), 2.0)) and not table.grad[1].any()
    with pytest.raises(TmaConfigError, match="requires grad"):
        tmakit.gather_rows(table, index, strict=True)


def test_a_compact_tensor_on_another_device_than_the_table_is_named():
    elsewhere = replace(FACTS, compact=replace(FACTS.compact, device=1))
    assert "not on one CUDA device" in rows_tma_rule(elsewhere)
