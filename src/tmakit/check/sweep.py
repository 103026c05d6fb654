"""Random valid load configurations for `tmakit verify --sweep`. Pure Python.

Every dtype x swizzle x layout cell comes first (so a sweep of 56 or more covers them all), then
random draws. Shapes lean towards the awkward: partial edge tiles, prime extents, extents of 1,
batches up to rank 5; strides are compact where TMA allows it and padded where it does not.
"""

from __future__ import annotations

import itertools
import math
import random

from ..config import DTYPES, LoadConfig, padded_strides
from ..errors import TmaConfigError
from ..limits import BANK_ROW_BYTES, INNER_BOX_ALIGN, MAX_BOX_EXTENT, SWIZZLE_MODES
from ..plan import LoadPlan
from ..plan.copy_defaults import TRANSPOSE_TILE_BYTES

LAYOUTS = ("row", "col")
PRIMES = (2, 3, 5, 7, 13, 31, 61, 127, 251, 509, 769, 1021, 1531, 2039)
MAX_ELEMENTS = 3 << 20  # per configuration, so a sweep of hundreds stays fast


def _extent(rng: random.Random, tile_extent: int) -> int:
    roll = rng.random()
    if roll < 0.1:
        return 1
    if roll < 0.3:
        return rng.choice(PRIMES)
    if roll < 0.5:
        return tile_extent * rng.randint(1, 8)  # whole tiles
    return rng.randint(1, 9 * tile_extent)


def random_config(rng: random.Random, dtype: str, swizzle: int, major: str) -> LoadConfig:
    """One random configuration TMA can serve in the given cell."""
    itemsize = DTYPES[dtype].nbytes
    while True:
        # The contiguous tile extent: a multiple of 16 bytes, within the swizzle span and box limit.
        if swizzle:
            inner = swizzle // itemsize  # a swizzled box is exactly one span wide (validate.py)
        else:
            inner = rng.randrange(INNER_BOX_ALIGN, MAX_BOX_EXTENT * itemsize + 1, INNER_BOX_ALIGN) // itemsize
        outer = rng.choice((1, 2, 8, 16, 32, 64, 128, 256, rng.randint(1, 256)))
        tile = (outer, inner) if major == "row" else (inner, outer)
        rank = rng.choices((2, 3, 4, 5), weights=(6, 2, 1, 1))[0]
        batch = tuple(rng.randint(1, 3) for _ in range(rank - 2))
        shape = (*batch, _extent(rng, tile[0]), _extent(rng, tile[1]))
        if shape[-2] == 1 and major == "row" or shape[-1] == 1 and major == "col":
            tile = (1, inner) if major == "row" else (inner, 1)  # an extent of 1 needs a tile extent of 1
        elements = 1
        for extent in shape:
            elements *= extent
        if elements > MAX_ELEMENTS:
            continue  # (a tile over the shared memory is refused by LoadPlan below)
        config = LoadConfig(
            shape, dtype, tile, swizzle, major, strides=padded_strides(shape, itemsize, major)
        )
        try:
            LoadPlan(config)
        except TmaConfigError:
            continue
        return config


def sweep_configs(count: int, seed: int) -> list[LoadConfig]:
    """`count` configurations: each dtype x swizzle x layout cell once, then random cells."""
    rng = random.Random(seed)
    cells = list(itertools.product(DTYPES, SWIZZLE_MODES, LAYOUTS))
    rng.shuffle(cells)
    while len(cells) < count:
        cells.append((rng.choice(list(DTYPES)), rng.choice(SWIZZLE_MODES), rng.choice(LAYOUTS)))
    return [random_config(rng, *cell) for cell in cells[:count]]


def transpose_configs(count: int, seed: int) -> list[LoadConfig]:
    """`count` source configurations for layout-changing copies (each copied into the other
    contiguous layout): each dtype x source layout first, then random; unswizzled tiles whose
    extents are whole multiples of 128 bytes (what `CopyPlan(..., transpose=True)` accepts), at
    most 32 KiB; shapes with partial tiles, primes and batches as in `random_config`."""
    rng = random.Random(seed)
    cells = list(itertools.product(DTYPES, LAYOUTS))
    rng.shuffle(cells)
    while len(cells) < count:
        cells.append((rng.choice(list(DTYPES)), rng.choice(LAYOUTS)))
    configs = []
    for dtype, major in cells[:count]:
        itemsize = DTYPES[dtype].nbytes
        unit = BANK_ROW_BYTES // itemsize
        while True:
            extents = [unit * rng.randint(1, MAX_BOX_EXTENT // unit) for _ in range(2)]
            while extents[0] * extents[1] * itemsize > TRANSPOSE_TILE_BYTES:
                halve = rng.randrange(2)
                extents[halve] = unit * max(1, extents[halve] // unit // 2)
            tile = (extents[0], extents[1])
            rank = rng.choices((2, 3, 4), weights=(6, 2, 1))[0]
            batch = tuple(rng.randint(1, 3) for _ in range(rank - 2))
            shape = (*batch, _extent(rng, tile[0]), _extent(rng, tile[1]))
            if math.prod(shape) > MAX_ELEMENTS:
                continue
            config = LoadConfig(shape, dtype, tile, 0, major, strides=padded_strides(shape, itemsize, major))
            try:
                LoadPlan(config)
            except TmaConfigError:
                continue  # e.g. an extent of 1 under a tile extent > 1
            configs.append(config)
            break
    return configs


def is_prime_or_one(n: int) -> bool:
    return n == 1 or (n > 1 and all(n % d for d in range(2, int(n**0.5) + 1)))


def summarize(configs: list[LoadConfig], results: list[dict], seed: int) -> dict:
    """The sweep's JSON report: every configuration with its result, and counts per cell."""
    cells: dict[str, dict[str, int]] = {}
    for config, result in zip(configs, results, strict=True):
        key = f"{config.dtype}/swizzle{config.swizzle}/{config.major}"
        cell = cells.setdefault(key, {})
        cell[result["status"]] = cell.get(result["status"], 0) + 1
    statuses = [r["status"] for r in results]
    return {
        "seed": seed,
        "configurations": len(configs),
        "ok": statuses.count("ok"),
        "mismatches": statuses.count("mismatch"),
        "hangs": statuses.count("hang"),
        "errors": statuses.count("error"),
        "with_partial_tiles": sum(LoadPlan(c).has_partial_tiles for c in configs),
        "with_prime_or_unit_extent": sum(any(is_prime_or_one(e) for e in c.shape[-2:]) for c in configs),
        "ranks": {str(r): sum(len(c.shape) == r for c in configs) for r in range(2, 6)},
        "cells": dict(sorted(cells.items())),
        "cells_expected": len(DTYPES) * len(SWIZZLE_MODES) * len(LAYOUTS),
        "runs": [{"config": {**c.__dict__}, **r} for c, r in zip(configs, results, strict=True)],
    }
