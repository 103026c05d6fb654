"""Rows by index: the plan of a ring that gathers rows of a tensor by an index, scatters them, or
reduces them into a tensor, with non-tensor bulk copies (`cp.async.bulk`: an address and a byte
count, no tensor map; `cp.reduce.async.bulk` for the reduces).

A row of a 16-byte-multiple length at a 16-byte-aligned address is one bulk copy, whatever its
length. Each stage of the ring holds `rows_per_stage` rows, the moved tensor's in order:

- gather (`out = src[index]`): one load per row, from `src` row `index[i]`, then one store of
  the whole stage to `out` rows i0 .. i0 + n (contiguous there);
- scatter (`dst[index] = src`): one load of `src` rows i0 .. i0 + n, then one store per row, to
  `dst` row `index[i]`; with repeated entries, which one lands last is not defined (the stores
  of different blocks race), as for torch's `index_copy_`;
- add, min, max (`dst[index] op= src`): the scatter with reduce stores (`ROW_REDUCE_DTYPES`),
  each element reduced once per index entry, repeated entries in turn (float adds: in an order
  the GPU picks, so repeated entries round as that order has it).

The stage's full barrier expects the bytes of its loads (`expected_bytes`). An index entry outside
`[0, rows)`, a negative one included (NumPy and torch would count it from the end), moves nothing
and is reported (`RowsReplay.skipped` in `model.rows`): the kernel
checks each entry before it addresses a row, so no copy reaches outside the tensor. This module
plans and checks; `model.rows` replays the moves on NumPy arrays; `rows.kernel` runs the plan
(one compile per `kernel_plan`: the count and the rows are run-time values).

The kernel's ring is a `PipelinePlan` over a stand-in load plan whose tile is a full stage (the
kernel is compiled for full stages whatever the count): int32, 256 wide, its rows rounded up to
whole KiB (`pipeline`). The stage's bytes are the rows'; the stand-in only sizes the ring's shared
memory and carries its stages, barriers and persistent walk. A plan is refused at construction
where its kernel could not run it (`RowsPlan`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config import DTYPES
from ..errors import TmaConfigError
from ..limits import (
    DEFAULT_SM_COUNT,
    GLOBAL_BASE_ALIGN,
    MAX_DEVICE_INT,
    MAX_TENSOR_BYTES,
    MAX_TX_BYTES,
)
from ..plan.budget import budget_grid, budget_stages
from ..plan.copy_defaults import MAX_DEFAULT_STAGES, MIN_STORES_IN_FLIGHT
from ..plan.reduce_ops import PTX_TYPES, REDUCE_OP_ALIASES
from ..plan.ring import STAGE_TARGET_BYTES, PipelinePlan, check_bulk_ring, stand_in_ring
from ..plan.route import Route, TensorFacts, call_rule, device_rule, torch_route
from ..plan.tuning import TUNING
from ..validate import check_field_types, one_of

ROW_OPS = ("gather", "scatter", "add", "min", "max")
# The (op, dtype) pairs of the non-tensor bulk reduce into global memory, as the PTX ISA lists
# `cp.reduce.async.bulk` (f16/bf16 adds are `.noftz`); signed min/max included, which this form
# types in the instruction. Not yet run on a GPU.
ROW_REDUCE_DTYPES: dict[str, tuple[str, ...]] = {
    "add": ("uint32", "int32", "uint64", "fp32", "fp16", "bf16"),
    "min": ("uint32", "int32", "uint64", "int64", "fp16", "bf16"),
    "max": ("uint32", "int32", "uint64", "int64", "fp16", "bf16"),
}
REDUCE_ROW_OPS = tuple(ROW_REDUCE_DTYPES)
# Wrapping adds are the same bits signed or unsigned: an int64 add is the bulk reduce's u64 add.
ROW_ADD_AS = {"int64": "uint64"}
# The ring's depth (a call takes the deepest up to this that fits: `rows.call`): a choice the
# committed results hold no comparison for, unlike the grouped copy's `DEFAULT_MANY_STAGES`
# (benchmarks/probes/copy_defaults.py measures it).
DEFAULT_ROW_STAGES = 4
MAX_INDEX_ENTRIES = MAX_DEVICE_INT  # the kernel's entry count is a 32-bit integer


def call_plan(op: str, row_bytes: int, dtype: str | None, sm_count: int, sms: int | None = None) -> RowsPlan:
    """The plan a rows call's kernel is compiled for, on a GPU of `sm_count` SMs and a budget of
    `sms` (`plan.budget`): the deepest ring up to `DEFAULT_ROW_STAGES` stages that fits (on a
    budget, up to `budget_stages`' depth), full stages, its count and rows standing in (the
    kernel reads both at each call). TmaConfigError where not even one stage fits."""
    deepest = DEFAULT_ROW_STAGES
    if sms is not None:
        deepest = budget_stages(
            full_stage_rows(row_bytes) * row_bytes, DEFAULT_ROW_STAGES, MAX_DEFAULT_STAGES
        )
    grid = budget_grid(sms, sm_count)
    for stages in range(deepest, 1, -1):
        try:
            return RowsPlan(op, 1, row_bytes, 1 << 20, stages=stages, dtype=dtype, **grid).kernel_plan()
        except TmaConfigError:
            continue
    return RowsPlan(op, 1, row_bytes, 1 << 20, stages=1, dtype=dtype, **grid).kernel_plan()


def full_stage_rows(row_bytes: int) -> int:
    """Rows a full stage holds: as many as fit `STAGE_TARGET_BYTES` (at least one) and an mbarrier
    phase's transaction count. The kernel is compiled for full stages."""
    return max(1, min(STAGE_TARGET_BYTES // row_bytes, MAX_TX_BYTES // row_bytes))


def max_index_entries(row_bytes: int) -> int:
    """The most index entries the kernel takes for rows of `row_bytes`: it rounds the count up to
    whole stages in a 32-bit integer (count + a full stage's rows - 1)."""
    return MAX_INDEX_ENTRIES - (full_stage_rows(row_bytes) - 1)


@dataclass(frozen=True)
class Move:
    """One bulk copy of the ring: `nbytes` from global row `row` of `tensor` ("src", "dst" or
    "out") to the stage at `offset` (a load) or back (a store; `op` its reduce, or None)."""

    load: bool
    tensor: str
    row: int
    offset: int
    nbytes: int
    op: str | None = None


@dataclass(frozen=True)
class RowsPlan:
    """`count` rows of `row_bytes` moved by index between a tensor of `rows` rows and a compact
    one (`op`: one of `ROW_OPS`; torch's `REDUCE_OP_ALIASES` are read as those), `rows_per_stage`
    rows per stage of a `stages`-deep ring, one step per stage fill, steps dealt to a persistent
    grid of at most `sm_count` blocks. Refused (TmaConfigError) where the kernel cannot run it: a
    count past `max_index_entries`, stages of `full_stage_rows` that do not fit, an (op, dtype)
    the bulk reduce has not, more blocks than its 32-bit grid."""

    op: str
    rows: int
    row_bytes: int
    count: int
    stages: int = DEFAULT_ROW_STAGES
    sm_count: int = DEFAULT_SM_COUNT
    dtype: str | None = None  # what a reduce reduces (`ROW_REDUCE_DTYPES`); copies move bytes
    one_block_per_sm: bool = False  # an SM budget's grid (`plan.budget`)

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.op in REDUCE_OP_ALIASES:  # torch's names (index_reduce_'s amax, amin) read as ours
            object.__setattr__(self, "op", REDUCE_OP_ALIASES[self.op])
        one_of(self.op, "rows op", ROW_OPS)
        if self.dtype is not None:
            one_of(self.dtype, "rows dtype", DTYPES)
        rule = row_rule(self.row_bytes)
        if rule is not None:
            raise TmaConfigError(rule)
        if self.op in ROW_REDUCE_DTYPES and self.reduce_dtype not in ROW_REDUCE_DTYPES[self.op]:
            raise TmaConfigError(
                f"rows op {self.op!r} with dtype {self.dtype}: the bulk reduce (cp.reduce.async.bulk) "
                f"takes {self.op} on {', '.join(ROW_REDUCE_DTYPES[self.op])}"
            )
        if self.rows < 1 or self.count < 0:
            raise TmaConfigError(
                f"rows {self.rows}, count {self.count}: a rows plan needs at least one row and a count "
                "of zero or more"
            )
        if self.rows * self.row_bytes > MAX_TENSOR_BYTES:
            raise TmaConfigError(
                f"a table of {self.rows} rows of {self.row_bytes} bytes: more than the {MAX_TENSOR_BYTES} "
                "bytes a tensor can hold"
            )
        most = max_index_entries(self.row_bytes)
        if self.count > most:
            raise TmaConfigError(
                f"count {self.count}: the kernel counts at most {most} index entries of rows of "
                f"{self.row_bytes} bytes (the count rounded up to whole stages of {self.full_stage_rows} "
                "rows, in 32 bits); split the index"
            )
        rows, size = self.full_stage_rows, self.full_stage_rows * self.row_bytes
        full = f" ({rows} rows of {self.row_bytes}: the kernel's stages are full, whatever the count)"
        check_bulk_ring(self.stages, self.sm_count, size, full, "rows this long are torch's to move")

    @property
    def reduce_dtype(self) -> str | None:
        """The type the bulk reduce names: the dtype, or the same-bits type that has the op
        (`ROW_ADD_AS`)."""
        if self.op == "add":
            return ROW_ADD_AS.get(self.dtype, self.dtype)
        return self.dtype

    @property
    def full_stage_rows(self) -> int:
        """Rows a full stage holds (`full_stage_rows`); the kernel's stages are full ones."""
        return full_stage_rows(self.row_bytes)

    @property
    def rows_per_stage(self) -> int:
        """Rows a stage holds: a full stage's, no more than the count."""
        return max(1, min(self.full_stage_rows, self.count))

    @property
    def stage_bytes(self) -> int:
        return self.rows_per_stage * self.row_bytes

    @property
    def smem_bytes(self) -> int:
        """The shared memory the kernel requests: its ring's (`pipeline`)."""
        return self.pipeline.smem_bytes

    def kernel_plan(self) -> RowsPlan:
        """The plan a kernel is compiled for: this one with full stages, its count and rows
        standing in (the kernel reads both at each call)."""
        return replace(self, rows=1, count=self.full_stage_rows)

    @property
    def stores_in_flight(self) -> int:
        """Store groups a consumer lane keeps in flight before the oldest must have read its
        stage (as a copy's: `CopyOptions`)."""
        return min(max(MIN_STORES_IN_FLIGHT, self.stages // 2), self.stages)

    @property
    def pipeline(self) -> PipelinePlan:
        """The ring the kernel runs on, whatever the count: full stages of the stand-in tile
        (int32, 256 wide, whole KiB), a producer and a consumer warp, persistent."""
        return stand_in_ring(
            self.full_stage_rows * self.row_bytes, self.stages, self.sm_count,
            one_block_per_sm=self.one_block_per_sm,
        )  # fmt: skip

    @property
    def steps(self) -> int:
        """Stage fills in all: the index split into runs of `rows_per_stage` entries."""
        return math.ceil(self.count / self.rows_per_stage)

    @property
    def grid(self) -> int:
        return max(1, min(self.steps, self.sm_count))

    def steps_of_block(self, block: int) -> range:
        """The steps block `block` runs: every `grid`-th, from its own."""
        return range(block, self.steps, self.grid)

    def entries(self, step: int) -> range:
        """The index entries step `step` moves."""
        first = step * self.rows_per_stage
        return range(first, min(first + self.rows_per_stage, self.count))

    def moves(self, step: int, index: list[int] | tuple[int, ...]) -> list[Move]:
        """The bulk copies of step `step` for the index values `index` (all of them), loads first.
        A gather loads each entry's row, then stores the stage's rows in one copy (one per row
        where an entry is out of range: its row of `out` is left as it was). A scatter or reduce
        loads the stage's `src` rows in one copy, then stores each entry's row. An entry outside
        [0, rows) addresses nothing."""
        entries, size = self.entries(step), self.row_bytes
        valid = [(slot, i, index[i]) for slot, i in enumerate(entries) if 0 <= index[i] < self.rows]
        whole = len(entries) * size
        if self.op == "gather":
            loads = [Move(True, "src", row, slot * size, size) for slot, _, row in valid]
            if len(valid) == len(entries):
                return [*loads, Move(False, "out", entries.start, 0, whole)]
            return loads + [Move(False, "out", i, slot * size, size) for slot, i, _ in valid]
        op = None if self.op == "scatter" else self.op
        stores = [Move(False, "dst", row, slot * size, size, op) for slot, _, row in valid]
        return [Move(True, "src", entries.start, 0, whole), *stores]

    def expected_bytes(self, step: int, index: list[int] | tuple[int, ...]) -> int:
        """What the step's full barrier expects: the bytes its loads bring (the producer reads the
        step's index entries before it arrives, so an entry out of range is not counted)."""
        return sum(move.nbytes for move in self.moves(step, index) if move.load)

    def describe_step(self, step: int, index: list[int] | tuple[int, ...]) -> list[str]:
        """Each bulk copy of step `step` as a line: what it moves, from where to where, and the
        instruction; then the bytes the step's full barrier expects."""
        lines = []
        for move in self.moves(step, index):
            rows = move.nbytes // self.row_bytes
            where = (
                f"{move.tensor} row {move.row}"
                if rows == 1
                else f"{move.tensor} rows {move.row}-{move.row + rows - 1}"
            )
            stage = f"stage bytes {move.offset}-{move.offset + move.nbytes - 1}"
            if move.load:
                lines.append(f"  load   {where} -> {stage}  ({LOAD_INSTRUCTION}, {move.nbytes} bytes)")
            else:
                instruction = store_instruction(move.op, self.reduce_dtype)
                lines.append(f"  store  {stage} -> {where}  ({instruction}, {move.nbytes} bytes)")
        lines.append(f"  the full barrier expects {self.expected_bytes(step, index)} bytes (the loads')")
        return lines

    def summary(self) -> str:
        reduce = f", reduce stores .{self.op}" if self.op in REDUCE_ROW_OPS else ""
        return "\n".join(
            [
                f"rows              {self.op}: {self.count} rows of {self.row_bytes} bytes by index, "
                f"a tensor of {self.rows} rows{reduce}",
                f"stages            {self.stages} x {self.rows_per_stage} rows ({self.stage_bytes} bytes); "
                f"{self.smem_bytes} bytes of shared memory",
                f"grid              {self.grid} persistent block(s), {self.steps} stage fill(s)"
                + self.pipeline.budget_note,
                f"each fill         up to {self.rows_per_stage} bulk copies of one row "
                + (
                    "in, then one of the stage out"
                    if self.op == "gather"
                    else "out, after one of the stage in"
                )
                + f"; its full barrier expects the bytes loaded, {self.stage_bytes} for a full stage",
            ]
        )


LOAD_INSTRUCTION = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"


def store_instruction(op: str | None, dtype: str | None) -> str:
    """The PTX of a row's store: a bulk copy, or the bulk reduce of `op` on `dtype` (f16 and bf16
    adds are `.noftz`, the form the PTX ISA gives them)."""
    if op is None:
        return "cp.async.bulk.global.shared::cta.bulk_group"
    noftz = ".noftz" if op == "add" and dtype in ("fp16", "bf16") else ""
    return f"cp.reduce.async.bulk.global.shared::cta.bulk_group.{op}{noftz}.{PTX_TYPES[dtype]}"


def row_rule(row_bytes: object, base: int = 0, row_stride_bytes: int | None = None) -> str | None:
    """Why a bulk copy cannot move rows of `row_bytes` from a tensor at address `base` whose rows
    are `row_stride_bytes` apart (None: it can). A bulk copy moves a multiple of 16 bytes between
    16-byte-aligned addresses."""
    if type(row_bytes) is not int or row_bytes < 1:
        return f"row_bytes is {row_bytes!r}; a row has a whole, positive number of bytes"
    if row_bytes % GLOBAL_BASE_ALIGN:
        return f"a row is {row_bytes} bytes; a bulk copy moves a multiple of {GLOBAL_BASE_ALIGN}"
    if base % GLOBAL_BASE_ALIGN:
        return f"the tensor's base address is not {GLOBAL_BASE_ALIGN}-byte aligned (it is {base})"
    if row_stride_bytes is not None and row_stride_bytes % GLOBAL_BASE_ALIGN:
        return f"rows are {row_stride_bytes} bytes apart; each must start {GLOBAL_BASE_ALIGN}-byte aligned"
    return None


# The row lengths (bytes, [from, to)) each op's bulk row copies serve unless a call is strict;
# torch's kernels take the others. Measured, per GPU where it differs (`plan.tuning`); a GPU not
# named takes the default. By the start of torch's device name ("NVIDIA H200 NVL" is an H200 too).
ROWS_TMA_SPANS: dict[str, tuple[int, int | None]] = TUNING["ROWS_TMA_SPANS"].value
ROWS_TMA_SPANS_BY_GPU: dict[str, dict[str, tuple[int, int | None]]] = TUNING["ROWS_TMA_SPANS_BY_GPU"].value


def rows_tma_spans(gpu: str) -> dict[str, tuple[int, int | None]]:
    """Each op's row lengths (bytes, [from, to)) served by bulk row copies on the GPU named `gpu`."""
    for name, spans in ROWS_TMA_SPANS_BY_GPU.items():
        if gpu.startswith(name):
            return {**ROWS_TMA_SPANS, **spans}
    return ROWS_TMA_SPANS


# torch's index_reduce_ names, as the bulk reduce names them.
INDEX_REDUCES = {"amax": "max", "amin": "min"}
# The dtypes whose min/max the rows path takes: integers. f16/bf16 min/max in PTX return the
# number beside a NaN where torch's amax/amin return the NaN.
ROW_MINMAX_TORCH_DTYPES = ("int32", "int64", "uint32", "uint64")
_TMAKIT_BY_TORCH = {element.torch_name: name for name, element in DTYPES.items()}


@dataclass(frozen=True)
class RowsFacts:
    """What a rows call's path is a function of, read off the tensors: the table's (the indexed
    tensor) and the compact one's (a gather's `out`, the others' `src`) facts, and the index's
    dtype and device."""

    op: str
    table: TensorFacts
    compact: TensorFacts
    index_device: int
    index_dtype: str
    lazy: str | None = None
    recorded: bool = False  # autograd records the call
    gpu: str = ""  # the device's name, as torch gives it (the row lengths served depend on it)


def rows_tma_rule(facts: RowsFacts, strict: bool = False) -> str | None:
    """Why bulk row copies cannot serve a rows call (None: they can): the device, a bit torch
    applies lazily, autograd, rows that are not contiguous runs of 16-byte multiples at 16-byte
    aligned addresses, a compact tensor whose rows are not back to back, a reduce the bulk
    reduce has no form for, and (unless `strict`) rows outside the op's span on this GPU
    (`rows_tma_spans`)."""
    table, compact = facts.table, facts.compact
    device = table.device
    unserved = device_rule(device, compact.device, facts.index_device)
    if unserved is not None:
        return unserved
    if device < 0 or device != compact.device or facts.index_device != device:
        return "the tensors and the index are not on one CUDA device"
    applied = call_rule(facts.lazy, facts.recorded)
    if applied is not None:
        return applied
    if len(table.shape) < 2:
        return "a tensor of rank 1: its rows are single elements, which no bulk copy moves"
    row_elements = math.prod(table.shape[1:])
    row_bytes = row_elements * table.nbytes
    if not row_bytes:
        return "rows of no bytes"
    for name, shape, strides in (
        ("the table", table.shape, table.strides),
        ("the compact tensor", compact.shape, compact.strides),
    ):
        if not rows_contiguous(shape, strides):
            return f"{name}'s rows are not contiguous (shape {shape}, strides {strides})"
    if compact.shape[0] > 1 and compact.strides[0] != row_elements:
        return (
            f"the compact tensor's rows are {compact.strides[0]} elements apart, not "
            f"{row_elements}: one bulk copy moves a stage of its rows"
        )
    table_stride = table.strides[0] * table.nbytes if table.shape[0] > 1 else row_bytes
    if table_stride < row_bytes:
        return f"the table's rows overlap ({table_stride} bytes apart, {row_bytes} long)"
    if compact.shape[0] > max_index_entries(row_bytes):
        return (
            f"{compact.shape[0]} index entries; the kernel counts up to {max_index_entries(row_bytes)} "
            f"for rows of {row_bytes} bytes"
        )
    rule = row_rule(row_bytes, table.address, table_stride) or row_rule(row_bytes, compact.address)
    if rule is not None:
        return rule
    rule = row_reduce_rule(facts.op, table.dtype)
    if rule is not None:
        return rule
    try:  # one stage of one row must fit a block's shared memory
        RowsPlan(facts.op, 1, row_bytes, 1, stages=1, dtype=_TMAKIT_BY_TORCH.get(table.dtype))
    except TmaConfigError as error:
        return str(error)
    low, high = rows_tma_spans(facts.gpu)[facts.op]
    if not strict and row_bytes < low:
        return f"rows of {row_bytes} bytes: under {low}, where bulk row copies overtake torch's kernel"
    if not strict and high is not None and row_bytes >= high:
        return f"rows of {row_bytes} bytes: from {high} torch's kernel gathers as fast, for less host time"
    return None


# The reason of a rows call whose index is empty: it moves nothing, whatever its rows.
NO_ROWS = "an empty index: no row to move"


def rows_route(facts: RowsFacts) -> Route:
    """The route of a rows call of `facts`: nothing for an empty index, one bulk copy per row, or
    torch's op with the rule that refused (`rows_tma_rule`). What `rows_path`, the call and
    `tmakit plan`/`explain --kernel rows` read."""
    if facts.compact.shape and facts.compact.shape[0] == 0:
        return Route(facts.op, "empty", NO_ROWS)
    rule = rows_tma_rule(facts)
    if rule is not None:
        return torch_route(facts.op, rule)
    return Route(facts.op, "tma-rows-bulk", "one bulk copy per row")


def row_reduce_rule(op: str, torch_dtype: str) -> str | None:
    """Why the bulk reduce cannot reduce rows of `torch_dtype` (torch's name) with `op` (None:
    it can, or `op` moves rows without reducing)."""
    if op not in REDUCE_ROW_OPS:
        return None
    dtype = _TMAKIT_BY_TORCH.get(torch_dtype)
    if op == "add":
        served = dtype is not None and ROW_ADD_AS.get(dtype, dtype) in ROW_REDUCE_DTYPES["add"]
        takes = "int32, int64, uint32, uint64, float32, float16 and bfloat16"
    else:
        served = torch_dtype in ROW_MINMAX_TORCH_DTYPES
        takes = "the integers int32, int64, uint32 and uint64 (its f16/bf16 forms drop NaNs torch keeps)"
    if served:
        return None
    return f"{op} of {torch_dtype}: the bulk reduce (cp.reduce.async.bulk) takes {op} on {takes}"


def rows_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether each row (every dim but the first) is one contiguous run: row-major strides on
    the dims of extent more than one."""
    step = 1
    for extent, stride in zip(reversed(shape[1:]), reversed(strides[1:]), strict=True):
        if extent != 1:
            if stride != step:
                return False
            step *= extent
    return True
