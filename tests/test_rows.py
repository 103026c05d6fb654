"""Rows by index on the CPU: the plan of a ring of bulk row copies (`plan.rows`) and its replay on
NumPy arrays (`model.rows`), against NumPy's own gather, scatter and in-place reduces. No kernel
runs the plan yet."""

from __future__ import annotations

import numpy as np
import pytest

from tmakit import TmaConfigError
from tmakit.limits import SMEM_PER_BLOCK
from tmakit.model.rows import replay_rows
from tmakit.plan.rows import STAGE_TARGET_BYTES, RowsPlan, row_rule

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
    """Counted apart from the moves: a gather's valid entries, a scatter's whole stage."""
    index = [3, 99, 0, 7, -1, 2, 5]  # 99 and -1 out of range for 10 rows
    gather, scatter = RowsPlan("gather", 10, 32, 7), RowsPlan("scatter", 10, 32, 7)
    for step in range(gather.steps):
        valid = sum(0 <= index[i] < 10 for i in gather.entries(step))
        assert gather.expected_bytes(step, index) == valid * 32
        assert scatter.expected_bytes(step, index) == len(scatter.entries(step)) * 32


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
    replay = replay_rows(RowsPlan(op, len(dst), 64, len(index)), index, src, dst, dtype)
    expected = dst.copy()
    numpy_at(expected, index, src)
    assert np.array_equal(replay.out, expected)


def test_the_summary_names_the_stage_and_what_each_barrier_expects():
    text = RowsPlan("add", 131072, 8192, 16384).summary()
    assert "add: 16384 rows of 8192 bytes by index" in text and "reduce stores .add" in text
    assert "4 x 4 rows (32768 bytes)" in text and "expects the 32768 bytes loaded" in text
