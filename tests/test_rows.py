"""Rows by index on the CPU: the plan of a ring of bulk row copies (`rows.plan`) and its replay on
NumPy arrays (`model.rows`), against NumPy's own gather, scatter and in-place reduces. No kernel
runs the plan yet."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.limits import SMEM_PER_BLOCK
from tmakit.rows.model import replay_rows
from tmakit.rows.plan import STAGE_TARGET_BYTES, RowsPlan, row_rule

RNG = np.random.default_rng(2026)


@pytest.mark.parametrize(
    ("row_bytes", "count", "per_stage"),
    [
        (64, 10_000, STAGE_TARGET_BYTES // 64),
        (2048, 10_000, 16),
        (16384, 100, 2),
        (65536, 100, 1),
        (64, 7, 7),
    ],
)
def test_a_stage_holds_as_many_rows_as_fit_its_target(row_bytes, count, per_stage):
    plan = RowsPlan("gather", 1000, row_bytes, count, stages=2)
    assert plan.rows_per_stage == per_stage
    assert plan.steps == -(-count // per_stage)
    steps = sorted(step for block in range(plan.grid) for step in plan.steps_of_block(block))
    assert steps == list(range(plan.steps))  # every step once, over the persistent grid


def test_rows_too_long_for_the_stages_are_refused_naming_what_fits():
    with pytest.raises(TmaConfigError, match=r"4 stages of 65536 bytes .* do not fit .*; 3 fit"):
        RowsPlan("gather", 10, 65536, 10, stages=4)
    with pytest.raises(TmaConfigError, match="0 fit: rows this long are torch's to move"):
        RowsPlan("gather", 10, SMEM_PER_BLOCK, 10, stages=1)


@pytest.mark.parametrize(
    ("args", "rule"),
    [
        ((24,), "a row is 24 bytes; a bulk copy moves a multiple of 16"),
        ((32, 8), "base address is not 16-byte aligned"),
        ((32, 0, 40), "rows are 40 bytes apart"),
        ((0,), "a whole, positive number"),
    ],
)
def test_the_rows_a_bulk_copy_cannot_move_are_named(args, rule):
    assert rule in row_rule(*args)
    assert row_rule(32, 64, 48) is None


def test_each_barrier_expects_what_its_loads_bring():
    """Counted apart from the moves, over several steps and a partial last one: a gather's
    entries in range, a scatter's whole stage."""
    index = [int(i) for i in RNG.integers(-3, 13, size=2500)]  # some out of range for 10 rows
    gather, scatter = RowsPlan("gather", 10, 32, 2500), RowsPlan("scatter", 10, 32, 2500)
    assert gather.steps == 3 and len(gather.entries(2)) == 2500 - 2 * 1024
    for step in range(gather.steps):
        valid = sum(0 <= index[i] < 10 for i in gather.entries(step))
        assert gather.expected_bytes(step, index) == valid * 32
        assert scatter.expected_bytes(step, index) == len(scatter.entries(step)) * 32


def test_nothing_to_move_plans_no_step_and_replays_to_the_input():
    plan = RowsPlan("gather", 10, 16, 0)
    assert plan.steps == 0
    out = replay_rows(plan, np.array([], np.int64), rows_of(10, 4), np.zeros((0, 4), np.int32)).out
    assert out.shape == (0, 4)


def test_the_replay_refuses_arrays_the_plan_does_not_describe():
    plan = RowsPlan("scatter", 10, 16, 2)
    with pytest.raises(TmaConfigError, match="the index has 3 entries; the plan moves 2"):
        replay_rows(plan, np.array([1, 2, 3]), rows_of(2, 4), rows_of(10, 4))
    with pytest.raises(TmaConfigError, match="dst is .* the plan moves 10 rows of 16 bytes"):
        replay_rows(plan, np.array([1, 2]), rows_of(2, 4), rows_of(10, 8))


@pytest.mark.parametrize(
    ("op", "dtype"), [("min", "fp32"), ("add", "fp8e4m3"), ("max", "uint8"), ("add", None)]
)
def test_a_reduce_the_bulk_form_does_not_take_is_refused(op, dtype):
    with pytest.raises(TmaConfigError, match=f"rows op '{op}' with dtype {dtype}: the bulk reduce"):
        RowsPlan(op, 10, 64, 4, dtype=dtype)


def test_an_int64_add_is_the_bulk_reduces_u64_add():
    """Wrapping adds are the same bits signed or unsigned, so int64 adds as .u64."""
    plan = RowsPlan("add", 10, 64, 4, dtype="int64")
    assert plan.reduce_dtype == "uint64"
    assert "add.u64" in plan.describe_step(0, [1, 2, 3, 4])[-2]


def rows_of(count, width, dtype=np.int32):
    """Position-dependent rows: every element its own value."""
    return (np.arange(count * width, dtype=np.int64).reshape(count, width) * 7 + 1).astype(dtype)


@pytest.mark.parametrize("row_bytes", [16, 64, 2048, 16384])
def test_a_gather_is_numpys_take_and_skips_what_is_out_of_range(row_bytes):
    width = row_bytes // 4
    src = rows_of(300, width)
    index = RNG.integers(-5, 305, size=1000)
    poison = np.full((len(index), width), -1, np.int32)
    replay = replay_rows(RowsPlan("gather", len(src), row_bytes, len(index)), index, src, poison)
    valid = (index >= 0) & (index < len(src))
    assert np.array_equal(replay.out[valid], src[index[valid]])
    assert np.all(replay.out[~valid] == -1)  # never written
    assert replay.skipped == list(np.flatnonzero(~valid))


def test_a_scatter_with_unique_indices_is_numpys_assignment():
    dst, src = rows_of(500, 8), rows_of(200, 8) + 10**6
    index = RNG.permutation(500)[:200]
    replay = replay_rows(RowsPlan("scatter", len(dst), 32, len(index)), index, src, dst)
    expected = dst.copy()
    expected[index] = src
    assert np.array_equal(replay.out, expected) and replay.skipped == []


@pytest.mark.parametrize(
    ("op", "dtype", "numpy_at"),
    [
        ("add", "int32", np.add.at),
        ("add", "uint64", np.add.at),
        ("min", "uint32", np.minimum.at),
        ("max", "uint32", np.maximum.at),
    ],
)
def test_reduces_with_repeated_indices_reduce_once_per_entry(op, dtype, numpy_at):
    element = np.dtype(dtype)
    width = 64 // element.itemsize
    dst = RNG.integers(0, 1000, size=(50, width)).astype(element)
    src = RNG.integers(0, 1000, size=(400, width)).astype(element)
    index = RNG.zipf(1.5, size=400) % 50  # skewed: many repeats of the small rows
    replay = replay_rows(RowsPlan(op, len(dst), 64, len(index), dtype=dtype), index, src, dst)
    expected = dst.copy()
    numpy_at(expected, index, src)
    assert np.array_equal(replay.out, expected)


def test_signed_min_compares_signed_and_half_adds_round_once_per_entry():
    dst, src = np.array([[5, -5, 0, 7]], np.int32), np.array([[-9, 3, 1, -7]], np.int32)
    plan = RowsPlan("min", 1, 16, 1, dtype="int32")
    assert np.array_equal(replay_rows(plan, np.array([0]), src, dst).out, [[-9, -5, 0, -7]])
    half = np.full((1, 8), 2048, np.float16)  # 2048 + 1 rounds back to 2048 in fp16, each time
    ones = np.ones((3, 8), np.float16)
    plan = RowsPlan("add", 1, 16, 3, dtype="fp16")
    assert np.all(replay_rows(plan, np.zeros(3, np.int64), ones, half).out == 2048)


def test_the_summary_names_the_stage_and_what_each_barrier_expects():
    text = RowsPlan("add", 131072, 8192, 16384, dtype="bf16").summary()
    assert "add: 16384 rows of 8192 bytes by index" in text and "reduce stores .add" in text
    assert "4 x 4 rows (32768 bytes)" in text and "expects the bytes loaded, 32768 for a full stage" in text


def test_each_copy_of_a_fill_is_described_with_its_instruction():
    lines = RowsPlan("add", 100, 64, 10, dtype="bf16").describe_step(0, [(i * 37) % 100 for i in range(10)])
    assert lines[0].startswith("  load   src rows 0-9 -> stage bytes 0-639")
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16, 64 bytes" in lines[1]
    assert lines[-1] == "  the full barrier expects 640 bytes (the loads')"
    gather = RowsPlan("gather", 100, 2048, 16).describe_step(0, [5] * 16)
    assert (
        "store  stage bytes 0-32767 -> out rows 0-15  (cp.async.bulk.global.shared::cta.bulk_group"
        in gather[-2]
    )


def test_the_cli_plans_and_explains_rows_by_index():
    from entry_point import one_error_line, tmakit

    plan = tmakit(
        "plan", "--kernel", "rows", "--rows", "gather:16384", "--shape", "131072x512", "--dtype", "bf16"
    )
    assert plan.returncode == 0 and "4 x 32 rows (32768 bytes)" in plan.stdout, plan.stdout
    assert plan.stdout.startswith("route             tma-rows-bulk (one bulk copy per row)")
    past = tmakit(
        "plan", "--kernel", "rows", "--rows", "gather:16384", "--shape", "131072x4096", "--gpu", "h100"
    )
    assert "route             torch (rows of 8192 bytes: from 1024 torch's kernel" in past.stdout, past.stdout
    explain = tmakit(
        "explain", "--kernel", "rows", "--rows", "add:100", "--shape", "1000x64", "--dtype", "fp32"
    )
    assert "the full barrier expects 25600 bytes" in explain.stdout and "... 92 more" in explain.stdout
    batched = json.loads(
        tmakit(
            "plan",
            "--kernel",
            "rows",
            "--rows",
            "gather:64",
            "--shape",
            "100x4x8",
            "--dtype",
            "fp32",
            "--json",
        ).stdout
    )
    summary = batched["kernel"]["summary"]
    assert "gather: 64 rows of 128 bytes by index, a tensor of 100 rows" in summary[3]
    assert batched["kernel"]["route"]["path"] == "tma-rows-bulk"
    for args, refusal in (
        (["--rows", "gather"], "give OP:COUNT"),
        (["--rows", "mean:3"], "rows op 'mean' is not one of"),
        (["--rows", "gather:3", "--tile", "8x8"], "--tile does not apply to --kernel rows"),
        (["--rows", "gather:\u00b2"], "give OP:COUNT"),
    ):
        run = tmakit("plan", "--kernel", "rows", *args)
        assert run.returncode == 2 and refusal in one_error_line(run), run.stderr
    for args, reason in (  # what the call hands torch's op, it plans as torch's, with the rule's words
        (["--rows", "gather:3", "--shape", "10x3"], "a row is 6 bytes"),
        (["--rows", "min:3", "--dtype", "fp32"], "the bulk reduce (cp.reduce.async.bulk) takes min on"),
    ):
        run = tmakit("plan", "--kernel", "rows", *args)
        assert (
            run.returncode == 0
            and run.stdout.startswith("route             torch (")
            and reason in run.stdout
        )


# -- what the kernel can take, refused at construction --------------------------------------------
@pytest.mark.parametrize(("row_bytes", "per_stage"), [(16, 2048), (256, 128), (65536, 1)])
def test_a_count_the_kernel_cannot_count_is_refused(row_bytes, per_stage):
    """The kernel rounds the count up to whole stages in a 32-bit device integer: the largest it
    takes is 2^31 - 1 less a full stage's rows but one."""
    most = 2**31 - 1 - (per_stage - 1)
    assert RowsPlan("gather", 10, row_bytes, most, stages=1).count == most
    for count in (most + 1, 2**31, 2**32):
        with pytest.raises(TmaConfigError, match=rf"count {count}: .* at most {most} index entries"):
            RowsPlan("gather", 10, row_bytes, count, stages=1)


def test_the_stages_are_sized_as_the_kernel_compiles_them():
    """The kernel is compiled for full stages whatever the count (`kernel_plan`): a short count
    does not make room for more stages than it holds."""
    with pytest.raises(TmaConfigError, match=r"31 stages of 32768 bytes \(128 rows of 256: .*\) .*; 7 fit"):
        RowsPlan("gather", 10, 256, 5, stages=31)
    plan = RowsPlan("gather", 10, 256, 5, stages=7)
    assert plan.rows_per_stage == 5 and plan.smem_bytes == plan.kernel_plan().pipeline.smem_bytes
    assert plan.pipeline == plan.kernel_plan().pipeline and plan.smem_bytes <= SMEM_PER_BLOCK


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"sm_count": 2**31}, "sm_count 2147483648: .* 32-bit"),
        ({"rows": 2**62}, "a table of 4611686018427387904 rows of 16 bytes"),
        ({"dtype": "fp64"}, "rows dtype 'fp64' is not one of"),
        ({"op": "mean"}, "rows op 'mean' is not one of"),
    ],
)
def test_fields_the_kernel_cannot_take_are_refused(kwargs, rule):
    with pytest.raises(TmaConfigError, match=rule):
        RowsPlan(**{"op": "gather", "rows": 10, "row_bytes": 16, "count": 4, **kwargs})


@pytest.mark.parametrize(("alias", "op"), [("amax", "max"), ("amin", "min"), ("sum", "add")])
def test_torchs_reduce_names_are_read_as_the_bulk_reduces(alias, op):
    plan = RowsPlan(alias, 10, 64, 4, dtype="uint32")
    assert plan.op == op and plan == RowsPlan(op, 10, 64, 4, dtype="uint32")


def test_the_route_refuses_a_count_the_kernel_cannot_count():
    from tmakit.plan.route import TensorFacts
    from tmakit.rows.plan import RowsFacts, rows_tma_rule

    def facts(count):
        table = TensorFacts((100, 4), (4, 1), "int32", 4, 0, 0)
        compact = TensorFacts((count, 4), (4, 1), "int32", 4, 0, 0)
        return RowsFacts("gather", table, compact, 0, "int64")

    assert rows_tma_rule(facts(2**31 - 2048), strict=True) is None
    rule = rows_tma_rule(facts(2**31 - 2047), strict=True)
    assert rule == "2147481601 index entries; the kernel counts up to 2147481600 for rows of 16 bytes"


@pytest.mark.parametrize("index_dtype", ["fp32", "uint8", None])
def test_an_index_the_kernel_cannot_read_is_refused_before_compiling(index_dtype):
    pytest.importorskip("cutlass")
    from tmakit.rows.launch import compile_rows

    with pytest.raises(TmaConfigError, match=r"rows index dtype .* is not one of int32, int64"):
        compile_rows(RowsPlan("gather", 10, 16, 4).kernel_plan(), index_dtype)
