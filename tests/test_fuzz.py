"""Served exactly or refused before compiling: seeded random configurations across every dimension
(ranks 1-6, extents 0 to 2^40, strides compact, padded, negative, zero, huge or misaligned, every
dtype and bad ones, tiles 1-512 and malformed ones, swizzles, stages 0-1000, clusters). Each is
either refused with TmaConfigError or accepted within every documented limit, checked here by
rules written apart from `validate`; accepted ones compile for sm_90a with the plan's expect_tx.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from tmakit import LoadConfig, LoadPlan, MulticastPlan, PipelinePlan, TmaConfigError
from tmakit.check import sweep
from tmakit.config import DTYPES, padded_strides
from tmakit.limits import (
    GLOBAL_STRIDE_ALIGN,
    INNER_BOX_ALIGN,
    MAX_BOX_EXTENT,
    MAX_DEVICE_INT,
    MAX_GLOBAL_STRIDE_BYTES,
    MAX_GRID_X,
    MAX_GRID_Y,
    SMEM_PER_BLOCK,
    SWIZZLE_MODES,
)
from tmakit.plan import CLUSTER_SHAPES
from tmakit.ptx import expect_tx_byte_counts
from tmakit.runtime.launch import compile_tile_load

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
