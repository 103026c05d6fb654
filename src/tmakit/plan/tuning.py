"""The measured thresholds: every number a measurement chose that decides which kernel, or torch's
op, serves a call, or how a default kernel is shaped. Pure Python. Each is a record (`Tuned`) of
its value, what it decides, why this value, the module that reads it, and the committed results
(`benchmarks/results/FILE`, a key path inside it) that justify it; tests/test_tuning.py resolves
every key path and checks that each module reads its value from here.

A new run of a study that moves a threshold changes its entry here, and nothing else. A default
that no committed results compare stays in its module, saying so, until a run does
(benchmarks/probes/copy_defaults.py measures the copy's and the rows ring's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BeyondL2:
    """A row of the measured rule tables: calls that move more than `share_of_l2` of the L2 in
    bytes, for the torch dtypes measured (`dtypes`; None: every dtype)."""

    share_of_l2: float
    dtypes: tuple[str, ...] | None = None

    def covers(self, dtype: str, moved_bytes: int, l2_bytes: int | None) -> bool:
        """Whether a call on `dtype` (torch's name) moving `moved_bytes` falls under the row (never
        without an L2 size: a pure plan, a strict call)."""
        if l2_bytes is None or (self.dtypes is not None and dtype not in self.dtypes):
            return False
        return moved_bytes > self.share_of_l2 * l2_bytes


@dataclass(frozen=True)
class Results:
    """Where a threshold's measurement lies: a file under benchmarks/results/ and the key path of
    the part inside it (dict keys, outermost first)."""

    file: str
    key: tuple[str, ...]


@dataclass(frozen=True)
class Tuned:
    """One measured threshold: its `value`, what it `decides`, `why` the measurement chose this
    value, the module that reads it (`used_by`, under the same name as the table's) and the
    results that justify it (`results`)."""

    value: Any
    decides: str
    why: str
    used_by: str
    results: tuple[Results, ...]


_ADDED_DTYPES = ("float32", "float16", "bfloat16", "int32")  # the dtypes the reduce study measured

TUNING: dict[str, Tuned] = {
    "TORCH_FASTER_BEYOND_L2": Tuned(
        value={"add": BeyondL2(0.4, _ADDED_DTYPES), "copy": BeyondL2(1.0)},
        decides="past this share of the L2, a non-strict add or row-major copy of one layout is torch's",
        why=(
            "H100: past 40% of the L2 (three streams) torch's add_ outran reduce stores and the ring "
            "(4-6% from 16 MiB), eagerly and in graphs; past the L2 the driver's memcpy led TMA's copy "
            "2-4% eagerly from 64 MiB (16 MiB: TMA 10% ahead). Dtypes not measured stay with TMA."
        ),
        used_by="tmakit.plan.route",
        results=(
            Results("reduce.json", ("summary", "ratios", "torch add_")),
            Results("copy.json", ("parts", "rows")),
            Results("copy.json", ("parts", "sizes")),
        ),
    ),
    "GRAPH_MEMCPY_MOST_BYTES": Tuned(
        value=256 * 2**20,
        decides="a copy past the L2 captured in a graph, past these bytes, takes torch's element-wise kernel",
        why=(
            "H100: a graph's memcpy node led the ring up to 256 MiB and was 1.2-1.5x behind it from 512 MiB, "
            "where the element-wise kernel ran 2.5% ahead of the ring and within 1.1% of inductor's copy."
        ),
        used_by="tmakit.copies.plan",
        results=(Results("copy.json", ("parts", "route", "rows")),),
    ),
    "ROWS_BEYOND_L2": Tuned(
        value=True,
        decides="a compact copy of one layout past the L2, given no options, is copied as rows of its memory",
        why=(
            "H100: 2.0-2.4% faster than the tensors' own tiles for fp16 of 64 MiB to 1 GiB, in graphs and "
            "eagerly; at 16 MiB, within the L2, the same in graphs and 3% slower eagerly."
        ),
        used_by="tmakit.plan.copy_defaults",
        results=(Results("copy.json", ("parts", "rows")),),
    ),
    "SMALL_TRANSPOSE_TILES": Tuned(
        value={2: (64, 64)},
        decides="a layout-changing copy smaller than a default tile per SM takes this tile, by element size",
        why=(
            "H100: 1 MiB fp16 in 2.30 us with 64x64 tiles against 2.84 with the default 128x128; from 16 MiB "
            "the default stays fastest. Other element sizes were not measured."
        ),
        used_by="tmakit.plan.copy_defaults",
        results=(Results("transpose.json", ("parts", "small-tiles")),),
    ),
    "COPY_TILE_ROWS": Tuned(
        value=16,
        decides="the rows of a same-layout copy's default tile (rows of `COPY_TILE_ROW_BYTES`)",
        why=(
            "H100, fp16 past the L2: 16 x 256 tiles 188.5 and 737.5 us at 256 MiB and 1 GiB, 32 x 256 188.9 "
            "and 739.8 (eagerly 189.1, 738.2 against 189.4, 740.2): level, at half the bytes a stage. Fewer "
            "rows, and copies within the L2, not measured."
        ),
        used_by="tmakit.plan.copy_defaults",
        results=(Results("copy.json", ("parts", "options")),),
    ),
    "TRANSPOSE_TILE_BYTES": Tuned(
        value=32 * 1024,
        decides="the bytes of a layout-changing copy's default tile (its rows by element size)",
        why=(
            "H100, fp16: 128 x 128 tiles (32 KiB) 12.51 us at 16 MiB against 13.08-13.32 with 16 and 8 KiB "
            "tiles; 190.7 and 750.9 us at 256 MiB and 1 GiB against 200.3 and 790.8 with 64 x 128. Larger "
            "tiles and other element sizes not measured."
        ),
        used_by="tmakit.plan.copy_defaults",
        results=(
            Results("transpose.json", ("parts", "small-tiles")),
            Results("copy.json", ("parts", "route", "rows")),
        ),
    ),
    "STAGE_TARGET_BYTES": Tuned(
        value=32 * 1024,
        decides="the bytes a stage of a bulk-copy ring (rows by index, a grouped copy) aims at",
        why=(
            "H100, a layer's parameters packed: 32 KiB stages 273.1 us, level with torch.cat; 48 and 64 KiB "
            "stages 279.9-283.1 us."
        ),
        used_by="tmakit.plan.ring",
        results=(Results("many.json", ("parts", "stages", "rows")),),
    ),
    "DEFAULT_MANY_STAGES": Tuned(
        value=6,
        decides="the grouped copy's default ring depth",
        why="H100: 6 stages of 32 KiB 273.1 us (7: 273.0); fewer, larger stages or two blocks an SM slower.",
        used_by="tmakit.many.plan",
        results=(Results("many.json", ("parts", "stages", "rows")),),
    ),
    "ROWS_TMA_SPANS": Tuned(
        value={
            "gather": (16, 1024),
            "scatter": (256, None),
            "add": (256, None),
            "min": (256, None),
            "max": (256, None),
        },
        decides="the row lengths (bytes, [from, to)) each op's bulk row copies serve unless a call is strict",
        why=(
            "scatters and reduces lost to torch's kernels below 256-byte rows, on the H100 and the H200; on "
            "the H100 gathers led from 16 bytes (2.2x) and torch's index_select from 1 KiB rows (0.91x)."
        ),
        used_by="tmakit.rows.plan",
        results=(
            Results("rows.json", ("parts", "rule")),
            Results("rows.json", ("parts", "index-reduce")),
            Results("rows.json", ("parts", "ops")),
        ),
    ),
    "ROWS_TMA_SPANS_BY_GPU": Tuned(
        value={"NVIDIA H200": {"gather": (16, 2048)}},
        decides="`ROWS_TMA_SPANS`' rows on the GPUs whose torch device name starts with the key",
        why="H200: torch's index_select led gathers from 2 KiB rows (1 KiB: the bulk copies 1.11x).",
        used_by="tmakit.rows.plan",
        results=(Results("rows.json", ("parts", "ops")),),
    ),
    "RING_BEYOND_L2": Tuned(
        value={"add": BeyondL2(0.4, _ADDED_DTYPES)},
        decides="past this share of the L2, a reduce runs on the load-add-store ring, not reduce stores",
        why=(
            "H100: the ring took 0.94-0.96x the stores' time for fp32, fp16 and int32 adds of 8 MiB and "
            "0.88-0.91x from 256 MiB; the stores led from 4 MiB down."
        ),
        used_by="tmakit.reduce.plan",
        results=(Results("reduce.json", ("summary", "ratios", "torch add_")),),
    ),
    "WINDOWS_MAX_CHANNEL_BYTES": Tuned(
        value=32,
        decides="an im2col of pixels whose channels span at most these bytes may copy the input's windows",
        why="H100: im2col loads of 16 fp16 channels (32 bytes) move narrow columns; the windows copy, runs.",
        used_by="tmakit.im2col.route",
        results=(Results("im2col.json", ("context", "parts", "12a8c87-h100")),),
    ),
    "WINDOWS_MIN_RUN_BYTES": Tuned(
        value=224,
        decides="the windows copy serves an im2col whose runs (a filter row's taps) reach these bytes",
        why=(
            "H100, 16 fp16 channels: the 7x7 stem's 224-byte runs 326.5 us by windows against 447.1 by "
            "loads; a 3x3 layer's 96-byte runs 22.1 against 21.4."
        ),
        used_by="tmakit.im2col.route",
        results=(Results("im2col.json", ("context", "parts", "12a8c87-h100")),),
    ),
}
