"""Served exactly or refused before compiling: seeded random configurations across every dimension
(ranks 1-6, extents 0 to 2^40, strides compact, padded, negative, zero, huge or misaligned, every
dtype and bad ones, tiles 1-512 and malformed ones, swizzles, stages 0-1000, clusters). Each is
either refused with TmaConfigError or accepted within every documented limit, checked here by
rules written apart from `validate`; accepted ones compile for sm_90a with the plan's expect_tx.

The same for the plans of rows by index (`RowsPlan`), grouped copies (`ManyPlan`) and reduces
(`reduce_class`, `ReducePlan`): counts, stages, row and stage bytes at and past their edges, ops
by tmakit's and torch's names and unknown ones, bad dtypes and wrong types. Rows and grouped copies
are made exactly where the rules here allow; a sample of each family compiles, in a child process,
raising nothing but TmaConfigError.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest

from tmakit import LoadConfig, LoadPlan, MulticastPlan, PipelinePlan, TmaConfigError
from tmakit.check import sweep
from tmakit.cluster.plan import CLUSTER_SHAPES
from tmakit.config import DTYPES, padded_strides
from tmakit.limits import (
    GLOBAL_STRIDE_ALIGN,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_DEVICE_INT,
    MAX_GLOBAL_STRIDE_BYTES,
    MAX_GRID_X,
    MAX_GRID_Y,
    MAX_TX_BYTES,
    MBARRIER_BYTES,
    SMEM_PER_BLOCK,
    SWIZZLE_MODES,
)
from tmakit.load.launch import compile_tile_load
from tmakit.many.plan import ManyPlan
from tmakit.plan import CopyOptions, CopyPlan, copy_destination
from tmakit.plan.copy_defaults import copy_tile
from tmakit.ptx import expect_tx_byte_counts
from tmakit.reduce.plan import ReducePlan, reduce_class
from tmakit.rows.plan import STAGE_TARGET_BYTES, RowsPlan

CONFIGURATIONS = 2000
EXTENTS = (0, 1, 2, 3, 7, 16, 61, 64, 127, 256, 1000, 4099, 2**20, 2**31, 2**31 + 1, 2**32, 2**40)
BAD_DTYPES = ("fp64", "int16", "bool")
BAD_SWIZZLES = (16, 256, -32)


def random_tile(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([None, (64,), (64, 64, 64), (64.0, 64.0), (True, 16)])
    return tuple(rng.choice((1, 2, 8, 16, 32, 64, 128, 256, 300, 512, rng.randint(1, 512))) for _ in range(2))


def random_strides(rng: random.Random, shape: tuple[int, ...], itemsize: int, major: str) -> object:
    roll = rng.random()
    if roll < 0.3 or len(shape) < 2:
        return None  # compact, in `major` order
    strides = list(padded_strides(shape, itemsize, major))
    if roll < 0.55:
        return tuple(strides)
    dim = rng.randrange(len(shape))
    strides[dim] = rng.choice((0, -strides[dim] or -1, strides[dim] + 1, 2**40 // itemsize, 3))
    return tuple(strides)


def random_config(rng: random.Random) -> LoadConfig:
    """Half the time a configuration the sweep knows to be valid, a third of those with one field
    broken; else every field drawn at random."""
    if rng.random() < 0.5:
        valid = sweep.random_config(
            rng, rng.choice(list(DTYPES)), rng.choice(SWIZZLE_MODES), rng.choice(("row", "col"))
        )
        if rng.random() < 2 / 3:
            return valid
        field = rng.choice(("shape", "tile", "strides", "swizzle", "dtype"))
        broken = {
            "shape": (*valid.shape[:-1], rng.choice(EXTENTS)),
            "tile": random_tile(rng),
            "strides": random_strides(rng, valid.shape, valid.element.nbytes, valid.major),
            "swizzle": rng.choice(BAD_SWIZZLES + SWIZZLE_MODES),
            "dtype": rng.choice(BAD_DTYPES + tuple(DTYPES)),
        }[field]
        return dataclasses.replace(valid, **{field: broken})
    rank = rng.randint(1, 6)
    shape = tuple(rng.choice(EXTENTS) if rng.random() < 0.3 else rng.randint(1, 600) for _ in range(rank))
    dtype = rng.choice(BAD_DTYPES) if rng.random() < 0.05 else rng.choice(list(DTYPES))
    itemsize = DTYPES[dtype].nbytes if dtype in DTYPES else 2
    major = rng.choice(("row", "col", "row", "diag") if rng.random() < 0.05 else ("row", "col"))
    swizzle = rng.choice(BAD_SWIZZLES) if rng.random() < 0.05 else rng.choice(SWIZZLE_MODES)
    strides = random_strides(rng, shape, itemsize, major if major in ("row", "col") else "row")
    return LoadConfig(shape, dtype, random_tile(rng), swizzle, major, strides)


def assert_within_limits(plan: LoadPlan) -> None:
    """The documented limits, checked on an accepted plan without calling `validate`."""
    config = plan.config
    nbytes = config.element.nbytes
    assert 2 <= len(config.shape) <= 5, config
    assert all(1 <= extent <= 2**31 for extent in config.shape), config
    assert all(1 <= extent <= MAX_BOX_EXTENT for extent in config.tile), config
    strides = config.element_strides
    contiguous = len(strides) - (2 if plan.rows_contiguous else 1)
    assert strides[contiguous] == 1, config
    for dim, (extent, stride) in enumerate(zip(config.shape, strides, strict=True)):
        if dim != contiguous and extent > 1:
            assert 0 < stride * nbytes < MAX_GLOBAL_STRIDE_BYTES, config
            assert stride * nbytes % GLOBAL_STRIDE_ALIGN == 0, config
    inner = config.tile[contiguous - len(strides) + 2] * nbytes
    assert inner % INNER_BOX_ALIGN == 0 and (not config.swizzle or inner == config.swizzle), config
    assert plan.smem_bytes <= SMEM_PER_BLOCK, config
    assert plan.row_blocks <= MAX_GRID_X and plan.batch_count <= MAX_GRID_Y, config
    assert plan.total_tile_loads <= MAX_DEVICE_INT, config


def accepted_configurations(seed: int, count: int) -> tuple[list[LoadPlan], int]:
    """(the accepted plans, the number refused) of `count` random configurations."""
    rng = random.Random(seed)
    accepted, refused = [], 0
    for _ in range(count):
        config = random_config(rng)
        try:
            plan = LoadPlan(config)
        except TmaConfigError:
            refused += 1
            continue
        except Exception as error:  # noqa: BLE001 - the failure this test exists to find
            pytest.fail(f"{config}: {type(error).__name__}: {error} (not a TmaConfigError)")
        assert_within_limits(plan)
        accepted.append(plan)
    return accepted, refused


def test_random_configurations_are_served_or_refused_with_the_rule():
    accepted, refused = accepted_configurations(seed=19, count=CONFIGURATIONS)
    assert len(accepted) + refused == CONFIGURATIONS
    assert len(accepted) >= 500 and refused >= 500  # both sides of the rules are exercised
    rng = random.Random(20)
    for plan in accepted:
        stages = rng.choice((0, 1, 2, 4, 7, 8, 64, 1000, rng.randint(0, 1000)))
        try:
            ring = PipelinePlan(plan, stages=stages, consumer_warps=rng.randint(0, 33))
        except TmaConfigError:
            continue
        assert 1 <= ring.stages <= ring.max_stages and ring.smem_bytes <= SMEM_PER_BLOCK
        assert 1 <= ring.consumer_warps <= 31
        cluster = rng.choice((*CLUSTER_SHAPES, (3, 3), (1, 8)))
        try:
            multicast = MulticastPlan(plan, cluster, rng.random() < 0.8, stages=ring.stages)
        except TmaConfigError:
            continue
        assert cluster in CLUSTER_SHAPES and len(plan.config.shape) == 2
        assert multicast.launch_grid[0] <= MAX_GRID_X
        if multicast.multicast:
            assert not plan.rows_contiguous and plan.config.tile[0] % multicast.cluster_size == 0


def test_accepted_random_configurations_compile_with_the_plans_byte_count():
    """50 of them (the smaller ones, so that compiling stays quick), for sm_90a on this CPU."""
    accepted, _ = accepted_configurations(seed=21, count=CONFIGURATIONS)
    small = [plan for plan in accepted if math.prod(plan.config.shape) <= 1 << 24][:50]
    assert len(small) == 50
    for plan in small:
        ptx = compile_tile_load(plan, consumer="none", keep_ptx=True).ptx
        assert set(expect_tx_byte_counts(ptx)) == {plan.expected_tx_bytes}, plan.config


def test_random_malformed_command_lines_give_one_line_errors():
    """Seeded malformed and out-of-range values for the CLI's flags, one subprocess each: every one
    ends with exit 2 and one `tmakit: ...` line on stderr, nothing on stdout, no traceback."""
    from entry_point import one_error_line, tmakit

    rng = random.Random(22)
    bad_values = {
        "--shape": ["0x64", "-8x8", "8", "axb", "99999999999999999999x64", "1x2x3x4x5x6x7", "64x64.5", ""],
        "--tile": ["64x999", "0x64", "64", "64x64x64", "x", "-1x16"],
        "--dtype": ["fp64", "float64", "", "int16"],
        "--swizzle": ["16", "-32", "abc"],
        "--highlight": ["99,99", "-1,0", "a,b", "1"],
        "--cluster": ["3x3", "1x8", "0x2", "2"],
    }
    commands = ["plan", "check", "explain", "demo"]
    calls = set()
    while len(calls) < 24:
        flag = rng.choice(list(bad_values))
        command = rng.choice(commands)
        if flag == "--cluster" and command == "check" and rng.random() < 0.5:
            continue
        calls.add((command, flag, rng.choice(bad_values[flag])))
    for command, flag, value in sorted(calls):
        run = tmakit(command, f"{flag}={value}")
        assert run.returncode == 2 and run.stdout == "", (command, flag, value, run.stdout[-300:], run.stderr)
        one_error_line(run)


# -- rows by index, grouped copies and reduces: refused, or within the limits and compiled --------
# The rules below are written apart from `rows.plan`, `many.plan` and `reduce.plan`: from the PTX
# ISA's tables, the hardware limits and how the kernels count (32-bit device integers).
INT32_MAX = 2**31 - 1
ROW_COUNTS = (0, 1, 2, 7, 2048, 2**20, 2**31 - 2048, 2**31 - 2047, 2**31 - 2, 2**31 - 1, 2**31, 2**32)
ROW_COUNTS += (-1, -(2**31), 2**63, 10**30)
LARGEST_ROW = (SMEM_PER_BLOCK - 2 * MBARRIER_BYTES) // 1024 * 1024  # one stage of whole KiB
ROW_BYTES = (0, 1, 15, 16, 17, 32, 48, 256, 1000, 1024, 2048, 16384, 32752, 32768, 32784, 65536)
ROW_BYTES += (LARGEST_ROW - 16, LARGEST_ROW, LARGEST_ROW + 16, SMEM_PER_BLOCK, -16, 2**40)
TABLE_ROWS = (0, 1, 2, 1000, 2**31, 2**40, 2**59, 2**62, -1)
ROW_OPS_DRAWN = (
    "gather",
    "scatter",
    "add",
    "min",
    "max",
    "amax",
    "amin",
    "sum",
    "mean",
    "prod",
    "GATHER",
    "",
)
SM_COUNTS = (0, 1, 2, 132, INT32_MAX, 2**31, 2**40, -1)
STAGES_DRAWN = (0, 1, 2, 4, 7, 8, 31, 1000, -1)
WRONG_TYPES = (None, True, 16.0, "16", (16,))
TORCH_NAMES = {"sum": "add", "amax": "max", "amin": "min"}  # scatter_reduce's and index_reduce's
# cp.reduce.async.bulk (rows: no tensor map, the type in the instruction), as tmakit's dtypes; an
# int64 add is the same bits as the u64 add.
BULK_REDUCE_TYPES = {
    "add": {"uint32", "int32", "uint64", "int64", "fp32", "fp16", "bf16"},
    "min": {"uint32", "int32", "uint64", "int64", "fp16", "bf16"},
    "max": {"uint32", "int32", "uint64", "int64", "fp16", "bf16"},
}
# cp.reduce.async.bulk.tensor, less the signed min/max tmakit refuses (the tensor map makes them
# unsigned); the bitwise ops by width.
_BITS = {"int32", "uint32", "int64", "uint64"}
TENSOR_REDUCE_TYPES = {
    "add": {"uint32", "int32", "uint64", "fp32", "fp16", "bf16"},
    "min": {"uint32", "uint64", "fp16", "bf16"},
    "max": {"uint32", "uint64", "fp16", "bf16"},
    "inc": {"uint32"},
    "dec": {"uint32"},
    "and": _BITS,
    "or": _BITS,
    "xor": _BITS,
}
RING_REDUCE_TYPES = {"add": {"fp32", "fp16", "bf16", "int32"}}  # what the load-add-store ring adds
REDUCE_OPS_DRAWN = (*TENSOR_REDUCE_TYPES, *TORCH_NAMES, "mul", "mean", "SUM", "", None)


def whole(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def ring_stages_fitting(stage_bytes: int) -> int:
    """Stages of a bulk-copy ring: each stage whole KiB (the stand-in tile) and two mbarriers."""
    return SMEM_PER_BLOCK // (-(-stage_bytes // 1024) * 1024 + 2 * MBARRIER_BYTES)


def kernel_stage_rows(row_bytes: int) -> int:
    """Rows of a full stage, the stage the rows kernel is compiled for whatever the count: the
    target's worth (at least one) within an mbarrier phase's transaction count."""
    return max(1, min(STAGE_TARGET_BYTES // row_bytes, MAX_TX_BYTES // row_bytes))


def rows_rule(op, rows, row_bytes, count, stages, sm_count, dtype) -> str | None:
    """Why the rows kernel cannot run a plan of these fields (None: it can)."""
    if not all(whole(value) for value in (rows, row_bytes, count, stages, sm_count)):
        return "a number that is not a whole number"
    if type(op) is not str or not (dtype is None or type(dtype) is str):
        return "a name that is not a str"
    op = TORCH_NAMES.get(op, op)
    if op not in ("gather", "scatter", "add", "min", "max"):
        return "an op the kernel has not"
    if dtype is not None and dtype not in DTYPES:
        return "no such dtype"
    if op in BULK_REDUCE_TYPES and dtype not in BULK_REDUCE_TYPES[op]:
        return "a pair the bulk reduce has not"
    if row_bytes < 16 or row_bytes % 16:
        return "rows a bulk copy cannot move"
    if rows < 1 or rows * row_bytes > 2**63 - 1:
        return "no table torch can hold"
    full = kernel_stage_rows(row_bytes)
    if count < 0 or count + full - 1 > INT32_MAX:  # the kernel rounds the count up to whole stages
        return "a count the kernel cannot count"
    if not 1 <= sm_count <= INT32_MAX:
        return "a grid the host code cannot count"
    if not 1 <= stages <= ring_stages_fitting(full * row_bytes):
        return "stages that do not fit"
    return None


def edge_or(rng: random.Random, edges: tuple, typical: object, share: float = 0.25) -> object:
    """One of `edges` (`share` of the time), else `typical`."""
    return rng.choice(edges) if rng.random() < share else typical


def random_rows_fields(rng: random.Random) -> dict:
    """Each field mostly one the kernel takes, else an edge of its range (now and then a wrong type)."""
    row_bytes = edge_or(rng, ROW_BYTES, 16 * rng.choice((1, 2, 4, rng.randint(1, 4096))), 0.4)
    op = edge_or(rng, ROW_OPS_DRAWN, rng.choice(("gather", "scatter", "add", "min", "max")))
    reduce = TORCH_NAMES.get(op, op) in BULK_REDUCE_TYPES
    if reduce and rng.random() < 0.8:
        dtype = rng.choice(sorted(BULK_REDUCE_TYPES[TORCH_NAMES.get(op, op)]))
    else:
        dtype = rng.choice((None, None, *DTYPES, *BAD_DTYPES))
    stages = edge_or(rng, STAGES_DRAWN, rng.randint(1, 4))
    if whole(row_bytes) and row_bytes >= 16 and rng.random() < 0.3:
        most = ring_stages_fitting(kernel_stage_rows(row_bytes) * row_bytes)
        stages = rng.choice((most, most + 1, max(most - 1, 0)))
    fields = {
        "op": op,
        "rows": edge_or(rng, TABLE_ROWS, rng.randint(1, 10**7), 0.15),
        "row_bytes": row_bytes,
        "count": edge_or(rng, ROW_COUNTS, rng.randint(0, 10**6), 0.4),
        "stages": stages,
        "sm_count": edge_or(rng, SM_COUNTS, 132, 0.15),
        "dtype": dtype,
    }
    if rng.random() < 0.05:
        fields[rng.choice(list(fields))] = rng.choice(WRONG_TYPES)
    if rng.random() < 0.05:
        fields["count"] = np.int64(rng.randint(0, 1000))  # numpy integers are whole numbers too
    return fields


def plans_or_refusals(make, draws: list[dict], rule) -> list:
    """The plan `make(**fields)` of each draw, asserting it is made exactly where `rule` finds
    nothing wrong and refused with TmaConfigError otherwise."""
    plans = []
    for fields in draws:
        reason = rule(**fields)
        try:
            plan = make(**fields)
        except TmaConfigError as error:
            assert reason is not None, f"{fields}: refused ({error}) though within every limit"
            continue
        except Exception as error:  # noqa: BLE001 - the failure this test exists to find
            pytest.fail(f"{fields}: {type(error).__name__}: {error} (not a TmaConfigError)")
        assert reason is None, f"{fields}: accepted with {reason}"
        plans.append(plan)
    return plans


def accepted_rows_plans(seed: int, count: int) -> list[RowsPlan]:
    rng = random.Random(seed)
    plans = plans_or_refusals(RowsPlan, [random_rows_fields(rng) for _ in range(count)], rows_rule)
    for plan in plans:
        stage = kernel_stage_rows(plan.row_bytes) * plan.row_bytes
        assert plan.op in ("gather", "scatter", "add", "min", "max"), plan
        assert plan.smem_bytes == plan.stages * (-(-stage // 1024) * 1024 + 2 * MBARRIER_BYTES), plan
        assert plan.smem_bytes <= SMEM_PER_BLOCK and plan.kernel_plan().smem_bytes == plan.smem_bytes, plan
        assert plan.count + kernel_stage_rows(plan.row_bytes) - 1 <= INT32_MAX, plan
    return plans


def test_random_rows_plans_are_served_within_the_kernels_limits_or_refused():
    plans = accepted_rows_plans(seed=31, count=CONFIGURATIONS)
    assert 500 <= len(plans) <= CONFIGURATIONS - 500  # both sides of the rules are exercised
    assert {plan.op for plan in plans} == {"gather", "scatter", "add", "min", "max"}
    counts = {plan.count for plan in plans}
    assert 0 in counts and any(count > 2**31 - 2**12 for count in counts)
    assert any(plan.stages == ring_stages_fitting(plan.full_stage_rows * plan.row_bytes) for plan in plans)


def many_rule(stages, sm_count, stage_bytes) -> str | None:
    """Why the grouped copy's kernel cannot run a plan of these fields (None: it can)."""
    if not all(whole(value) for value in (stages, sm_count, stage_bytes)):
        return "a number that is not a whole number"
    if stage_bytes < 1024 or stage_bytes % 1024:
        return "a stage that is not whole KiB"
    if not 1 <= sm_count <= INT32_MAX:
        return "a grid the host code cannot count"
    if not 1 <= stages <= ring_stages_fitting(stage_bytes):
        return "stages that do not fit"
    return None


def random_many_fields(rng: random.Random) -> dict:
    edges = (0, 16, 1000, 1024, 2048, 32768, 65536, LARGEST_ROW, LARGEST_ROW + 1024, 2**20, 2**40, -1024)
    stage_bytes = edge_or(rng, edges, 1024 * rng.choice((32, rng.randint(1, 240))), 0.4)
    stages = edge_or(rng, STAGES_DRAWN, rng.randint(1, 6))
    if whole(stage_bytes) and stage_bytes >= 1024 and rng.random() < 0.3:
        most = ring_stages_fitting(stage_bytes)
        stages = rng.choice((most, most + 1))
    fields = {"stages": stages, "sm_count": edge_or(rng, SM_COUNTS, 132), "stage_bytes": stage_bytes}
    if rng.random() < 0.05:
        fields[rng.choice(list(fields))] = rng.choice(WRONG_TYPES)
    return fields


def accepted_many_plans(seed: int, count: int) -> list[ManyPlan]:
    rng = random.Random(seed)
    plans = plans_or_refusals(ManyPlan, [random_many_fields(rng) for _ in range(count)], many_rule)
    for plan in plans:
        assert plan.smem_bytes == plan.stages * (plan.stage_bytes + 2 * MBARRIER_BYTES) <= SMEM_PER_BLOCK
    return plans


def test_random_many_plans_are_served_within_the_kernels_limits_or_refused():
    plans = accepted_many_plans(seed=32, count=1000)
    assert 250 <= len(plans) <= 750
    assert any(plan.stages == ring_stages_fitting(plan.stage_bytes) for plan in plans)


def random_reduce(rng: random.Random, dtype: str | None = None) -> tuple[object, object, object]:
    """(op, dtype, kernel): mostly a pair the reduce stores take (`dtype`'s, where given), now and
    then by torch's name; else any op (unknown ones too), dtype and kernel."""
    kernel = edge_or(rng, ("ring", "ring", "bogus", None), "store", 0.3)
    if rng.random() < 0.2:
        return rng.choice(REDUCE_OPS_DRAWN), dtype or rng.choice((*DTYPES, *BAD_DTYPES)), kernel
    if kernel == "ring" and dtype in (None, *RING_REDUCE_TYPES["add"]):
        return rng.choice(("add", "sum")), dtype or rng.choice(sorted(RING_REDUCE_TYPES["add"])), kernel
    ops = [op for op, dtypes in TENSOR_REDUCE_TYPES.items() if dtype is None or dtype in dtypes]
    op = rng.choice(ops or list(TENSOR_REDUCE_TYPES))
    dtype = dtype or rng.choice(sorted(TENSOR_REDUCE_TYPES[op]))
    alias = {name: alias for alias, name in TORCH_NAMES.items()}.get(op)
    return (alias if alias and rng.random() < 0.3 else op), dtype, kernel


def assert_reduce_within_limits(plan: ReducePlan, op: object, kernel: object) -> None:
    """An accepted reduce's documented limits, checked without `reduce.plan`."""
    config, ring = plan.copy.load.config, plan.copy.ring
    assert plan.op == TORCH_NAMES.get(op, op) and plan.kernel == kernel, (plan.op, op, kernel)
    assert config.dtype in TENSOR_REDUCE_TYPES[plan.op], (plan.op, config.dtype)
    if kernel == "ring":
        assert config.dtype in RING_REDUCE_TYPES.get(plan.op, ()) and not plan.copy.transpose
    assert not plan.copy.bulk and 2 <= len(config.shape) <= 5
    assert all(1 <= extent <= MAX_BOX_EXTENT for extent in config.tile)
    assert ring.stages >= 1 and plan.smem_bytes <= SMEM_PER_BLOCK
    assert not ring.persistent or ring.sm_count * ring.blocks_per_sm <= INT32_MAX
    tile_bytes = math.prod(config.tile) * config.element.nbytes
    assert plan.expected_tx_bytes == (2 if kernel == "ring" else 1) * tile_bytes


def random_copy_options(rng: random.Random) -> CopyOptions:
    return CopyOptions(
        tile=edge_or(rng, ((16, 256), (64, 64), (128, 128), (8, 32), (256, 256), (1, 16)), None),
        stages=edge_or(rng, (0, 1, 2, 4, 8, 1000), None),
        store_depth=edge_or(rng, (0, 1, 3), None, 0.15),
        blocks_per_sm=edge_or(rng, (2, 0), 1, 0.15),
        pdl=rng.random() < 0.5,
        tile_order=rng.choice(("interleaved", "columns", "blocked")),
        load_hint=edge_or(rng, ("evict_last",), None),
        store_hint=edge_or(rng, ("evict_first",), None),
        bulk=rng.random() < 0.05,
    )


def accepted_reduce_classes(seed: int, count: int) -> list[tuple[ReducePlan, bool]]:
    """(plan, transpose) of the accepted of `count` random `reduce_class` calls."""
    rng = random.Random(seed)
    accepted = []
    for _ in range(count):
        op, dtype, kernel = random_reduce(rng)
        rank, transpose = edge_or(rng, (1, 4, 5, 6), rng.choice((2, 3))), rng.random() < 0.25
        major = edge_or(rng, ("diag",), rng.choice(("row", "col")), 0.05)
        typical_tile = copy_tile(dtype, transpose) if dtype in DTYPES else (16, 256)
        tile = edge_or(rng, (random_tile(rng),), typical_tile, 0.3)
        rows_width = edge_or(rng, (256, 1024, 0), None, 0.15)
        sm_count = edge_or(rng, SM_COUNTS, 132, 0.15)
        arguments = (rank, major, transpose, tile, sm_count, rng.random() < 0.5, rows_width)
        try:
            plan = reduce_class(random_copy_options(rng), op, dtype, *arguments, kernel=kernel)
        except TmaConfigError:
            continue
        except Exception as error:  # noqa: BLE001 - the failure this test exists to find
            pytest.fail(
                f"{op, dtype, arguments, kernel}: {type(error).__name__}: {error} (not a TmaConfigError)"
            )
        assert_reduce_within_limits(plan, op, kernel)
        accepted.append((plan, transpose))
    return accepted


def test_random_reduce_classes_are_served_within_the_limits_or_refused():
    accepted = accepted_reduce_classes(seed=33, count=CONFIGURATIONS)
    assert 400 <= len(accepted) <= CONFIGURATIONS - 400
    assert {plan.op for plan, _ in accepted} == set(TENSOR_REDUCE_TYPES)
    assert {plan.kernel for plan, _ in accepted} == {"store", "ring"}


def accepted_reduce_plans(seed: int, count: int) -> list[ReducePlan]:
    """Reduce plans built directly on accepted random load plans (small ones, compiled for their
    shape), with random rings, copies, ops and kernels."""
    loads, _ = accepted_configurations(seed=seed, count=count)
    rng = random.Random(seed)
    accepted = []
    for load in loads:
        if math.prod(load.config.shape) > 1 << 24:
            continue
        op, _, kernel = random_reduce(rng, load.config.dtype)
        try:
            ring = PipelinePlan(
                load,
                stages=edge_or(rng, (0, 8), rng.randint(1, 4)),
                consumer_warps=edge_or(rng, (0, 2, 4), 1),
                persistent=rng.random() < 0.7,
                sm_count=edge_or(rng, SM_COUNTS, 132, 0.15),
                blocks_per_sm=rng.choice((1, 2)),
            )
            copy = CopyPlan(ring, rng.random() < 0.2, rng.choice((1, 2, 3)), bulk=rng.random() < 0.05)
            plan = ReducePlan(copy, op, kernel)
        except TmaConfigError:
            continue
        except Exception as error:  # noqa: BLE001 - the failure this test exists to find
            pytest.fail(f"{load.config}, {op}, {kernel}: {type(error).__name__}: {error}")
        assert_reduce_within_limits(plan, op, kernel)
        accepted.append(plan)
    return accepted


def test_random_reduce_plans_are_served_within_the_limits_or_refused():
    accepted = accepted_reduce_plans(seed=34, count=CONFIGURATIONS)
    assert len(accepted) >= 150
    assert {plan.kernel for plan in accepted} == {"store", "ring"}


# Compiles each (family, plan, arguments) of a pickle in a fresh interpreter: a compile that
# crashes, or leaves state behind, does so there. Writes what each compile raised, or its PTX's
# expect_tx byte counts, as JSON.
COMPILE_CHILD = """
import json, pickle, sys
from tmakit import TmaConfigError
from tmakit.ptx import expect_tx_byte_counts
from tmakit.many.launch import compile_many
from tmakit.reduce.launch import compile_reduce
from tmakit.rows.launch import compile_rows

compile_family = {"rows": compile_rows, "many": compile_many, "reduce": compile_reduce}
results = []
for family, plan, arguments in pickle.load(open(sys.argv[1], "rb")):
    try:
        ptx = compile_family[family](plan, keep_ptx=True, **arguments).ptx
        results.append({"tx": sorted(set(expect_tx_byte_counts(ptx)))})
    except TmaConfigError as error:
        results.append({"refused": str(error)})
    except BaseException as error:
        results.append({"error": f"{type(error).__name__}: {error}"})
json.dump(results, open(sys.argv[2], "w"))
"""


def compile_in_child(tmp_path, cases: list[tuple[str, object, dict]]) -> list[dict]:
    """What compiling each case for sm_90a gave (`COMPILE_CHILD`), in a child process whose
    compile cache is under `tmp_path` (never the user's)."""
    pytest.importorskip("cutlass")
    cases_path, results_path = tmp_path / "cases.pickle", tmp_path / "results.json"
    cases_path.write_bytes(pickle.dumps(cases))
    env = {**os.environ, "TMAKIT_CACHE_DIR": str(tmp_path / "cache"), "CUTE_DSL_ARCH": "sm_90a"}
    command = [sys.executable, "-c", COMPILE_CHILD, str(cases_path), str(results_path)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(results_path.read_text())
    assert len(results) == len(cases)
    errors = [
        (case[:2], result["error"]) for case, result in zip(cases, results, strict=True) if "error" in result
    ]
    assert errors == [], errors
    return results


def distinct(items: list, key, count: int, seed: int) -> list:
    """Up to `count` of `items`, no two with the same `key`, picked at random (seeded)."""
    by_key = {}
    for item in items:
        by_key.setdefault(key(item), item)
    picked = list(by_key.values())
    random.Random(seed).shuffle(picked)
    return picked[:count]


def test_accepted_rows_and_many_plans_compile_with_their_byte_counts(tmp_path):
    """A gather's lanes each declare one row's bytes; a scatter's or reduce's stage and a grouped
    copy's chunks are counted at run time (no constant to compare)."""
    rng = random.Random(35)
    rows = distinct(accepted_rows_plans(seed=31, count=CONFIGURATIONS), RowsPlan.kernel_plan, 40, 35)
    many = distinct(accepted_many_plans(seed=32, count=1000), lambda plan: plan, 16, 36)
    cases = [("rows", plan, {"index_dtype": rng.choice(("int32", "int64"))}) for plan in rows]
    cases += [("many", plan, {"relative": rng.choice((None, "source", "destination"))}) for plan in many]
    results = compile_in_child(tmp_path, cases)
    for (family, plan, _), result in zip(cases, results, strict=True):
        assert "refused" not in result, (plan, result)
        gather = family == "rows" and plan.op == "gather"
        assert result["tx"] == ([plan.row_bytes] if gather else []), (plan, result)


def test_accepted_reduce_plans_compile_with_their_byte_counts(tmp_path):
    """Classes (shape-generic; some asked for by torch's op names) and plans built directly
    (compiled for their shape): each stage's full barrier expects the plan's bytes."""
    classes = distinct(accepted_reduce_classes(seed=33, count=CONFIGURATIONS), lambda case: case, 30, 37)
    plans = distinct(accepted_reduce_plans(seed=34, count=CONFIGURATIONS), lambda plan: plan, 20, 38)
    cases = [
        (
            "reduce",
            plan,
            {"shape_generic": True, "destination": copy_destination(plan.copy) if transpose else None},
        )
        for plan, transpose in classes
    ]
    cases += [
        ("reduce", plan, {"destination": copy_destination(plan.copy) if plan.copy.transpose else None})
        for plan in plans
    ]
    results = compile_in_child(tmp_path, cases)
    for (_, plan, _), result in zip(cases, results, strict=True):
        assert "refused" not in result, (plan, result)
        assert result["tx"] == [plan.expected_tx_bytes], (plan, result)
