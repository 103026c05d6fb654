"""An SM budget (`tmakit.plan.budget`) on the CPU: what `sms=` and `tmakit.sm_budget` plan (a
persistent grid of exactly that many blocks, each taking an SM of its own by shared memory, a
deeper ring), the route of a budgeted compact copy (the copy engine), and the refusals."""

import re

import pytest

import tmakit
from route_facts import flat_pair
from tmakit import CopyOptions, TmaConfigError
from tmakit.copies.plan import BY_THE_DRIVER, ON_THE_COPY_ENGINE, decide_copy
from tmakit.limits import DEFAULT_DEVICE_FACTS, DEFAULT_L2_BYTES, DEFAULT_SM_COUNT, SMEM_PER_SM
from tmakit.plan import copy_class
from tmakit.plan.budget import (
    BUDGET_BYTES_IN_FLIGHT,
    ONE_BLOCK_PER_SM_SMEM,
    budgeted_sm_count,
    call_budget,
    sm_budget,
    with_budget,
)
from tmakit.rows.plan import RowsPlan

RESERVED_PER_BLOCK = 1024  # what each resident block also takes of an SM's shared memory


def one_per_sm(ring) -> bool:
    """Whether two blocks launched as `ring`'s cannot share an SM."""
    return 2 * (ring.launch_smem(ring.smem_bytes) + RESERVED_PER_BLOCK) > SMEM_PER_SM


@pytest.mark.parametrize("sms", [1, 8, 16, 32, DEFAULT_SM_COUNT])
@pytest.mark.parametrize("transpose", [False, True], ids=["same-layout", "transposing"])
def test_a_budgeted_copy_runs_exactly_that_many_blocks_one_per_sm(sms, transpose):
    major, tile = ("col", (128, 128)) if transpose else ("row", (16, 256))
    budgeted = copy_class(CopyOptions(sms=sms), "fp16", 2, major, transpose, tile, DEFAULT_SM_COUNT, False)
    full = copy_class(CopyOptions(), "fp16", 2, major, transpose, tile, DEFAULT_SM_COUNT, False)
    ring = budgeted.ring
    assert ring.persistent_blocks == sms and ring.one_block_per_sm and one_per_sm(ring)
    assert full.ring.persistent_blocks == DEFAULT_SM_COUNT and not full.ring.one_block_per_sm
    assert full.ring.launch_smem(full.smem_bytes) == full.smem_bytes  # a full grid asks what it uses
    # The ring keeps the budget's bytes in flight where shared memory allows, never fewer than a full grid's.
    assert ring.stages >= full.ring.stages
    assert ring.ring_bytes >= BUDGET_BYTES_IN_FLIGHT or ring.stages == budgeted.max_stages
    assert "SM budget" in ring.summary() and "SM budget" not in full.ring.summary()


def test_a_budget_past_the_gpu_or_not_a_whole_number_is_refused_naming_the_rule():
    with pytest.raises(TmaConfigError, match=f"sms=200: this GPU has {DEFAULT_SM_COUNT} SMs"):
        copy_class(CopyOptions(sms=200), "fp16", 2, "row", False, (16, 256), DEFAULT_SM_COUNT, False)
    assert budgeted_sm_count(DEFAULT_SM_COUNT, DEFAULT_SM_COUNT) == DEFAULT_SM_COUNT
    assert budgeted_sm_count(None, 114) == 114
    with pytest.raises(TmaConfigError, match="sms=115: this GPU has 114 SMs"):
        budgeted_sm_count(115, 114)
    for wrong in (0, -4, True, 2.5, "16"):
        with pytest.raises(TmaConfigError, match="sms"):
            CopyOptions(sms=wrong)
        with pytest.raises(TmaConfigError, match="SM budget"):
            with sm_budget(wrong):
                pass
    with pytest.raises(TmaConfigError, match="blocks_per_sm 2 on an SM budget"):
        copy_class(CopyOptions(sms=8, blocks_per_sm=2), "fp16", 2, "row", False, (16, 256), 132, False)


def test_the_context_gives_each_call_its_budget_and_a_calls_own_wins():
    assert call_budget(None) is None and with_budget({}) == {}
    with sm_budget(16) as sms:
        assert sms == 16 and call_budget(None) == 16 and call_budget(8) == 8
        assert with_budget({"tile": (16, 256)}) == {"tile": (16, 256), "sms": 16}
        assert with_budget({"sms": 4}) == {"sms": 4}
        with sm_budget(None):  # lifts the enclosing budget
            assert call_budget(None) is None
        with pytest.raises(RuntimeError):
            with sm_budget(32):
                raise RuntimeError("inside")
        assert call_budget(None) == 16  # restored after an error
    assert call_budget(None) is None


def compact_pair(shape=(4096, 4096), strides=(4096, 1), dst_strides=(4096, 1)):
    return flat_pair(shape, shape, strides, dst_strides, "float16", "float16", 2, 0, 1 << 30, 0, 0)


def test_a_budgeted_compact_copy_takes_the_copy_engine_unless_strict():
    facts = compact_pair()
    budgeted = CopyOptions(sms=16)
    route = decide_copy(facts, budgeted, DEFAULT_DEVICE_FACTS, DEFAULT_L2_BYTES).route
    assert route.path == "torch" and route.reason == ON_THE_COPY_ENGINE
    strict = decide_copy(facts, budgeted, DEFAULT_DEVICE_FACTS, None)  # a strict call: TMA
    assert strict.route.by_tma and strict.pair.copy.ring.persistent_blocks == 16
    # A transposing pair has no engine path: TMA on the budget.
    transposing = decide_copy(
        compact_pair(dst_strides=(1, 4096)), budgeted, DEFAULT_DEVICE_FACTS, DEFAULT_L2_BYTES
    )
    assert transposing.route.by_tma and transposing.pair.copy.ring.persistent_blocks == 16
    # Without a budget the same small pair is TMA's, a large one the driver's.
    assert decide_copy(compact_pair((256, 256), (256, 1), (256, 1)), CopyOptions(), DEFAULT_DEVICE_FACTS,
                       DEFAULT_L2_BYTES).route.by_tma  # fmt: skip
    large = decide_copy(compact_pair((8192, 8192), (8192, 1), (8192, 1)), CopyOptions(), DEFAULT_DEVICE_FACTS,
                        DEFAULT_L2_BYTES).route  # fmt: skip
    assert large.reason == BY_THE_DRIVER


@pytest.mark.parametrize("op", ["gather", "add"])
def test_a_budgeted_rows_ring_takes_one_sm_a_block(op):
    dtype = None if op == "gather" else "fp32"
    plan = RowsPlan(op, 1, 512, 1 << 20, stages=2, sm_count=16, dtype=dtype, one_block_per_sm=True)
    ring = plan.pipeline
    assert ring.persistent_blocks == 16 and one_per_sm(ring)
    assert RowsPlan(op, 1, 512, 1 << 20, sm_count=16, dtype=dtype).pipeline.launch_smem(1) == 1
    assert ONE_BLOCK_PER_SM_SMEM <= 227 * 1024  # what one block may ask for


def test_the_copy_and_rows_functions_take_sms_and_their_ops_carry_it():
    torch = pytest.importorskip("torch")
    from tmakit import ops  # noqa: F401  registers the ops

    x = torch.arange(64 * 64, dtype=torch.float16).reshape(64, 64)
    # CPU tensors: torch's path, after the checks every path makes (a budget past the GPU is refused).
    y = torch.empty_like(x)
    assert torch.equal(tmakit.copy_(y, x.t(), sms=16), x.t())
    with pytest.raises(TmaConfigError, match=f"sms=999: this GPU has {DEFAULT_SM_COUNT} SMs"):
        tmakit.copy_(y, x.t(), sms=999)
    with sm_budget(999), pytest.raises(TmaConfigError, match="sms=999"):
        tmakit.copy_(y, x.t())
    index = torch.tensor([3, 1, 2])
    assert torch.equal(tmakit.gather_rows(x, index, sms=8), x[index])
    assert "int? sms=None" in str(torch.ops.tmakit.copy_.typed._schema)
    for name in ("gather_rows", "scatter_rows_", "index_add_", "index_reduce_"):
        assert "int? sms=None" in str(getattr(torch.ops.tmakit, name).default._schema), name


def test_every_familys_budgeted_ring_takes_its_sms_one_block_each():
    from tmakit.many.plan import ManyPlan
    from tmakit.moe.plan import CombinePlan, DispatchPlan, QuantizePlan
    from tmakit.patches.plan import Im2colPlan

    budgeted = {
        "many": ManyPlan(sm_count=16, one_block_per_sm=True).pipeline,
        "dispatch": DispatchPlan(14336, 2, sm_count=16, one_block_per_sm=True).pipeline,
        "combine": CombinePlan(14336, 2, "bf16", sm_count=16, one_block_per_sm=True).pipeline,
        "quantize": QuantizePlan(7168, 8, sm_count=16, one_block_per_sm=True).pipeline,
        "im2col": Im2colPlan(
            (8, 56, 56, 64), "fp16", 3, padding=1, sm_count=16, one_block_per_sm=True
        ).copy.ring,
    }
    for name, ring in budgeted.items():
        assert ring.persistent_blocks == 16 and one_per_sm(ring), name
    full = Im2colPlan((8, 56, 56, 64), "fp16", 3, padding=1)
    im2col = Im2colPlan((8, 56, 56, 64), "fp16", 3, padding=1, sm_count=16, one_block_per_sm=True)
    assert im2col.stages >= full.stages and not full.copy.ring.one_block_per_sm


def test_the_list_im2col_and_moe_functions_take_sms_and_their_ops_carry_it():
    torch = pytest.importorskip("torch")
    from tmakit import ops  # noqa: F401  registers the ops

    srcs = [torch.arange(n, dtype=torch.float32) for n in (3, 100, 7)]
    dsts = [torch.empty_like(t) for t in srcs]
    tmakit.copy_many_(dsts, srcs, sms=8)
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    flat, offsets = tmakit.pack(srcs, sms=8)
    back = [torch.empty_like(t) for t in srcs]
    tmakit.unpack_(flat, back, sms=8)
    assert all(torch.equal(b, s) for b, s in zip(back, srcs, strict=True))
    x = torch.arange(2 * 8 * 8 * 16, dtype=torch.float32).reshape(2, 8, 8, 16)
    assert torch.equal(tmakit.im2col(x, 3, padding=1, sms=8), tmakit.im2col(x, 3, padding=1))
    ids = torch.tensor([[0, 1], [1, 2], [2, 0]])
    tokens = torch.arange(3 * 16, dtype=torch.float32).reshape(3, 16)
    routed = tmakit.moe_dispatch(tokens, ids, num_experts=3, sms=8)
    assert torch.equal(tmakit.moe_combine(routed.out, routed.row_map, sms=8), 2 * tokens)
    for wrong in (0, 2.5, True):
        with pytest.raises(TmaConfigError, match="sms"):
            tmakit.copy_many_(dsts, srcs, sms=wrong)
    schemas = {
        "copy_many_": "default",
        "pack": "default",
        "unpack_": "default",
        "im2col": "default",
        "moe_permute": "default",
        "moe_permute_fp8": "default",
        "moe_combine": "default",
        "moe_combine_grad": "default",
    }
    for name, overload in schemas.items():
        assert "int? sms=None" in str(getattr(getattr(torch.ops.tmakit, name), overload)._schema), name


def test_a_call_traced_inside_a_budget_records_it_and_one_outside_does_not():
    torch = pytest.importorskip("torch")
    from graph_recorder import Recorder

    x = torch.arange(64 * 64, dtype=torch.float16).reshape(64, 64)
    recorder = Recorder()

    @torch.compile(backend=recorder, fullgraph=True, dynamic=False)
    def transpose(dst, src):
        return tmakit.copy_(dst, src.t())

    dst = torch.empty_like(x)
    with sm_budget(16):
        transpose(dst, x)
    assert torch.equal(dst, x.t())
    recorded = [node.kwargs.get("sms") for node in recorder.calls() if "tmakit" in str(node.target)]
    assert recorded == [16], recorder.calls()
    transpose(dst, x)  # outside the budget: traced again, without it (the budget is guarded)
    recorded = [node.kwargs.get("sms") for node in recorder.calls() if "tmakit" in str(node.target)]
    assert recorded == [16, None], recorded


def test_the_curves_plot_draws_each_case_from_its_file(tmp_path, monkeypatch):
    import importlib.util
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "plot_sm_budget.py"
    spec = importlib.util.spec_from_file_location("plot_sm_budget", path)
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    rows = [{"sms": k, "tmakit_gbs": 100.0 * k, "torch_green_gbs": 10.0 * k} for k in (1, 8, 16)]
    study = {
        "rows": [{"part": "curve", "case": "transpose", **row} for row in rows]
        + [{"part": "curve", "case": "gather512", **row} for row in rows[:2]]
        + [{"part": "full", "case": "transpose", "torch_full_gbs": 1600.0}, {"part": "gemm", "gib": 1}]
    }
    source, target = tmp_path / "sm-budget.json", tmp_path / "sm-budget.svg"
    source.write_text(json.dumps(study))
    monkeypatch.setattr("sys.argv", ["plot", str(source), str(target)])
    plot.main()
    svg = target.read_text()
    assert svg.count("<polyline") == 4 and ">transpose<" in svg and ">gather512<" in svg
    # tmakit's line rises with the SMs: each point higher on the page (a smaller y) than the last
    first = svg.split('points="')[1].split('"')[0]
    heights = [float(point.split(",")[1]) for point in first.split()]
    assert heights == sorted(heights, reverse=True) and len(heights) == 3


def test_a_budget_is_its_threads_whatever_order_the_blocks_end_in():
    import threading

    entered, leave_a, seen = threading.Event(), threading.Event(), {}

    def a():
        with sm_budget(16):
            entered.set()
            leave_a.wait()
        seen["a after"] = call_budget(None)

    def b():
        entered.wait()
        with sm_budget(32):
            leave_a.set()
            thread_a.join()  # a's block ends inside b's
            seen["b inside"] = call_budget(None)
        seen["b after"] = call_budget(None)

    thread_a, thread_b = threading.Thread(target=a), threading.Thread(target=b)
    thread_a.start()
    thread_b.start()
    thread_b.join()
    assert seen == {"a after": None, "b inside": 32, "b after": None}
    assert call_budget(None) is None


def test_a_budget_past_the_gpu_is_refused_on_torchs_paths_too():
    torch = pytest.importorskip("torch")
    from tmakit import ops  # noqa: F401  registers the ops

    count = DEFAULT_SM_COUNT
    x16, x32 = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 64)
    table, index = torch.zeros(64, 64), torch.arange(8)
    leaf = torch.zeros(64, 64, requires_grad=True)
    calls = {
        "copy_ with a dtype change": lambda: tmakit.copy_(x32, x16, sms=count + 1),
        "add_ with alpha": lambda: tmakit.add_(x32, x32, alpha=2, sms=count + 1),
        "index_add_ with alpha": lambda: tmakit.index_add_(table, index, table[:8], alpha=2, sms=count + 1),
        "index_reduce_ mean": lambda: tmakit.index_reduce_(table, index, table[:8], "mean", sms=count + 1),
        "gather_rows recorded": lambda: tmakit.gather_rows(leaf, index, sms=count + 1),
        "im2col of int32": lambda: tmakit.im2col(
            torch.zeros(1, 8, 8, 16, dtype=torch.int32), 3, sms=count + 1
        ),
        "copy_many_": lambda: tmakit.copy_many_([x32], [x32.clone()], sms=count + 1),
        "moe_combine": lambda: tmakit.moe_combine(table, torch.zeros(4, 2, dtype=torch.int32), sms=count + 1),
    }
    for name, call in calls.items():
        with pytest.raises(TmaConfigError, match=f"this GPU has {count} SMs"):
            call()
        assert not table.any() and not x32.any(), name  # nothing written
    with sm_budget(count + 1), pytest.raises(TmaConfigError, match=f"this GPU has {count} SMs"):
        torch.ops.tmakit.moe_combine(table, torch.zeros(4, 2, dtype=torch.int32), None, False)


def test_copy_traced_inside_a_budget_records_it():
    torch = pytest.importorskip("torch")
    from graph_recorder import Recorder

    recorder = Recorder()
    compiled = torch.compile(
        lambda src: tmakit.copy(src.t()), backend=recorder, fullgraph=True, dynamic=False
    )
    x = torch.arange(64 * 64, dtype=torch.float16).reshape(64, 64)
    with sm_budget(8):
        assert torch.equal(compiled(x), x.t())
    assert [node.kwargs.get("sms") for node in recorder.calls() if "tmakit" in str(node.target)] == [8]


@pytest.mark.parametrize(
    "kernel",
    [
        ["--kernel", "transpose", "--shape", "4096x4096"],
        ["--kernel", "reduce", "--reduce", "add", "--shape", "4096x4096", "--dtype", "fp32"],
        ["--kernel", "rows", "--rows", "gather:16384", "--shape", "100000x256"],
        ["--kernel", "many", "--many", "4096x1000"],
        ["--kernel", "moe", "--moe", "dispatch:2:8", "--shape", "4096x4096"],
        ["--kernel", "im2col", "--im2col", "kernel=3,padding=1", "--shape", "8x56x56x64"],
    ],
    ids=lambda argv: argv[1],
)
def test_plan_prints_the_calls_budgeted_grid_and_refuses_one_past_the_gpu(kernel, capsys):
    from tmakit import cli

    assert cli.main(["plan", *kernel, "--sms", "16"]) == 0
    text = capsys.readouterr().out
    assert "persistent grid   16 blocks" in text or "16 persistent block(s)" in text, text
    assert "SM budget" in text, text
    assert cli.main(["plan", *kernel]) == 0
    assert "SM budget" not in capsys.readouterr().out
    assert cli.main(["plan", *kernel, "--sms", str(DEFAULT_SM_COUNT + 1)]) == 2
    assert f"this GPU has {DEFAULT_SM_COUNT} SMs" in capsys.readouterr().err


def test_a_budgeted_copy_class_compiles_for_sm90a():
    pytest.importorskip("cutlass")
    from tmakit.plan import copy_destination
    from tmakit.ptx import expect_tx_byte_counts
    from tmakit.runtime.launch import compile_copy

    copy = copy_class(CopyOptions(sms=16), "fp16", 2, "col", True, (128, 128), DEFAULT_SM_COUNT, False)
    compiled = compile_copy(copy, keep_ptx=True, destination=copy_destination(copy), shape_generic=True)
    assert set(expect_tx_byte_counts(compiled.ptx)) == {copy.load.expected_tx_bytes}
    # the deeper ring's stages are in the kernel: its barriers sit past them in shared memory
    assert re.search(rf"\[%r\d+\+{copy.ring.ring_bytes}\]", compiled.ptx)


@pytest.mark.parametrize(
    "kernel",
    [
        ["--kernel", "rows", "--rows", "scatter:1000", "--shape", "1000x64"],
        ["--kernel", "moe", "--moe", "combine:2:8", "--shape", "16x7"],
    ],
    ids=["rows", "moe"],
)
def test_plan_refuses_a_budget_past_the_gpu_on_torchs_route_too(kernel, capsys):
    from tmakit import cli

    assert cli.main(["plan", *kernel]) == 0
    assert "route             torch" in capsys.readouterr().out  # torch's route: no kernel to budget
    assert cli.main(["plan", *kernel, "--sms", str(DEFAULT_SM_COUNT + 1)]) == 2
    assert f"this GPU has {DEFAULT_SM_COUNT} SMs" in capsys.readouterr().err
